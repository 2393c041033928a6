"""A pull answer's body: the answers of several queues (a
:class:`~sdk.transport.models.PullBatchResult`), each a fixed binary header followed by the
queue's stored records exactly as they lie in the commitlog (nothing is re-encoded; the client
decodes them with the store's codec, :func:`sdk.transport.models.decode_records`).

Every integer is big-endian; strings are UTF-8 after their length. The answer:

    off  size  field
      0     1  VERSION       1 (a reader refuses a version it does not know)
      1     8  GENERATION    the group's membership generation (signed)
      9     4  QUEUECOUNT    Q, then Q queue answers end to end, nothing after them

A queue answer:

    size   field
    2+T    TOPIC         unsigned short length T, then the topic
      4    QUEUEID
      1    STATUS        a code of :data:`STATUS_CODES` (the store's GetStatus or RECORD_DAMAGED)
      8    NEXTOFFSET    queue offset to pull from next
      8    MINOFFSET     the queue's bounds
      8    MAXOFFSET
      4    COUNT         how many records RAW holds
      4    RAWLENGTH     R
      1    DAMAGED       0: no damaged record; 1: the three fields below follow
     (8    DAMAGEDQUEUEOFFSET
      8    DAMAGEDPHYSOFFSET
    4+N    REASON)       int length N, then the text
      R    RAW           the records' bytes as stored

Statuses travel as the small codes of :data:`STATUS_CODES`, the one table of them; a code a
reader does not know (a newer broker's) is refused, naming it. :func:`decode_pull_answer`
gives each queue's ``raw`` as a ``memoryview`` slice of the body (no copy). A body that does not
follow the layout (truncated, a length running past the end, a negative count or length, bytes
after the last queue, an unknown version or status code, text that is not UTF-8) is refused with
:class:`sdk.errors.MalformedBodyError`, naming the byte offset and the problem.
"""

from __future__ import annotations

import struct

from sdk.errors import InvalidArgumentError, MalformedBodyError
from sdk.transport.models import (
    RECORD_DAMAGED,
    DamagedRecord,
    PullBatchResult,
    QueuePullResult,
)

__all__ = [
    "PULL_ANSWER_VERSION",
    "STATUS_CODES",
    "decode_pull_answer",
    "encode_pull_answer",
]

PULL_ANSWER_VERSION = 1

# The one table of a queue answer's status codes. Append only: a code keeps its meaning.
STATUS_CODES: dict[str, int] = {
    "FOUND": 0,
    "NO_MATCHED_MESSAGE": 1,
    "MESSAGE_WAS_REMOVING": 2,
    "OFFSET_FOUND_NULL": 3,
    "OFFSET_OVERFLOW_BADLY": 4,
    "OFFSET_OVERFLOW_ONE": 5,
    "OFFSET_TOO_SMALL": 6,
    "NO_MATCHED_LOGIC_QUEUE": 7,
    "NO_MESSAGE_IN_QUEUE": 8,
    RECORD_DAMAGED: 9,
}
_STATUS_NAMES = {code: name for name, code in STATUS_CODES.items()}

_ANSWER_HEAD = struct.Struct(">Bqi")  # VERSION, GENERATION, QUEUECOUNT
_TOPIC_LENGTH = struct.Struct(">H")
# QUEUEID, STATUS, NEXTOFFSET, MINOFFSET, MAXOFFSET, COUNT, RAWLENGTH, DAMAGED
_QUEUE_HEAD = struct.Struct(">iBqqqiiB")
_DAMAGED_HEAD = struct.Struct(">qqi")  # DAMAGEDQUEUEOFFSET, DAMAGEDPHYSOFFSET, REASON length
_STATUS_AT, _COUNT_AT, _RAW_LENGTH_AT = 4, 29, 33  # their offsets in the queue head


def encode_pull_answer(result: PullBatchResult) -> bytes:
    """The body answering a pull with ``result``: each queue's records copied as they are.

    Raises InvalidArgumentError for a status without a code or a value its field cannot hold
    (naming the queue)."""
    parts: list[bytes | memoryview] = [
        _ANSWER_HEAD.pack(PULL_ANSWER_VERSION, result.generation, len(result.results))
    ]
    for answer in result.results:
        parts.extend(_encode_queue(answer))
    return b"".join(parts)


def _encode_queue(answer: QueuePullResult) -> list[bytes | memoryview]:
    code = STATUS_CODES.get(answer.status)
    if code is None:
        raise InvalidArgumentError(
            f"{answer.topic}:{answer.queue_id}: status {answer.status!r} has no wire code"
        )
    topic = answer.topic.encode()
    damaged = answer.damaged
    try:
        parts: list[bytes | memoryview] = [
            _TOPIC_LENGTH.pack(len(topic)),
            topic,
            _QUEUE_HEAD.pack(
                answer.queue_id,
                code,
                answer.next_offset,
                answer.min_offset,
                answer.max_offset,
                answer.count,
                len(answer.raw),
                damaged is not None,
            ),
        ]
        if damaged is not None:
            reason = damaged.reason.encode()
            parts += (
                _DAMAGED_HEAD.pack(damaged.queue_offset, damaged.phys_offset, len(reason)),
                reason,
            )
    except struct.error as exc:
        raise InvalidArgumentError(
            f"{answer.topic}:{answer.queue_id}: a field does not fit the pull answer's layout "
            f"({exc})"
        ) from exc
    parts.append(answer.raw)
    return parts


def decode_pull_answer(body: bytes | bytearray | memoryview) -> PullBatchResult:
    """The :class:`PullBatchResult` a pull answer's body carries; each queue's ``raw`` is a
    ``memoryview`` slice of ``body``. Raises MalformedBodyError (see the module docstring)."""
    view = memoryview(body)
    reader = _Reader(view)
    version, generation, queue_count = reader.unpack(_ANSWER_HEAD)
    if version != PULL_ANSWER_VERSION:
        raise MalformedBodyError(0, f"pull answer version {version} is not known here")
    if queue_count < 0:
        raise MalformedBodyError(9, f"queue count {queue_count} is negative")
    results = [_decode_queue(reader) for _ in range(queue_count)]
    if reader.position != len(view):
        raise MalformedBodyError(
            reader.position,
            f"{len(view) - reader.position} bytes after the last of {queue_count} queue answers",
        )
    return PullBatchResult(results, generation)


def _decode_queue(reader: _Reader) -> QueuePullResult:
    (topic_bytes,) = reader.unpack(_TOPIC_LENGTH)
    topic = reader.text(topic_bytes, "topic")
    head_at = reader.position
    queue_id, code, next_offset, min_offset, max_offset, count, raw_bytes, has_damaged = (
        reader.unpack(_QUEUE_HEAD)
    )
    status = _STATUS_NAMES.get(code)
    if status is None:
        raise MalformedBodyError(
            head_at + _STATUS_AT,
            f"status code {code} of {topic}:{queue_id} is not known here (a newer broker's?)",
        )
    if count < 0:
        raise MalformedBodyError(
            head_at + _COUNT_AT, f"record count {count} of {topic}:{queue_id} is negative"
        )
    if raw_bytes < 0:
        raise MalformedBodyError(
            head_at + _RAW_LENGTH_AT,
            f"records length {raw_bytes} of {topic}:{queue_id} is negative",
        )
    if has_damaged > 1:
        raise MalformedBodyError(
            reader.position - 1, f"damaged-record flag {has_damaged} is neither 0 nor 1"
        )
    damaged = None
    if has_damaged:
        queue_offset, phys_offset, reason_bytes = reader.unpack(_DAMAGED_HEAD)
        damaged = DamagedRecord(queue_offset, phys_offset, reader.text(reason_bytes, "reason"))
    raw = reader.take(raw_bytes, "records")
    return QueuePullResult(
        topic, queue_id, status, next_offset, min_offset, max_offset, raw, count, damaged
    )


class _Reader:
    """Reads a body front to back, refusing what runs past its end."""

    __slots__ = ("position", "view")

    def __init__(self, view: memoryview):
        self.view = view
        self.position = 0

    def unpack(self, shape: struct.Struct) -> tuple[int, ...]:
        at = self.position
        self._need(shape.size, "a fixed header")
        self.position = at + shape.size
        return shape.unpack_from(self.view, at)

    def take(self, size: int, what: str) -> memoryview:
        at = self.position
        if size < 0:
            raise MalformedBodyError(at, f"the length of the {what}, {size}, is negative")
        self._need(size, f"the {what}")
        self.position = at + size
        return self.view[at : at + size]

    def text(self, size: int, what: str) -> str:
        at = self.position
        data = self.take(size, what)
        try:
            return str(data, "utf-8")
        except UnicodeDecodeError as exc:
            raise MalformedBodyError(at, f"the {what} is not UTF-8 ({exc})") from exc

    def _need(self, size: int, what: str) -> None:
        left = len(self.view) - self.position
        if size > left:
            raise MalformedBodyError(
                self.position, f"truncated: {what} takes {size} bytes, {left} are left"
            )
