"""What puts and gets answer: RocketMQ's PutMessageStatus and GetMessageStatus, with data."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

from localstore.errors import DamagedRecordError
from localstore.record.codec import StoredMessage, format_offset_msg_id


class PutStatus(enum.Enum):
    """Outcome of a put (RocketMQ's ``PutMessageStatus``; only PUT_OK stored the message)."""

    PUT_OK = "PUT_OK"
    FLUSH_DISK_TIMEOUT = "FLUSH_DISK_TIMEOUT"  # stored, but not known durable in time
    SERVICE_NOT_AVAILABLE = "SERVICE_NOT_AVAILABLE"  # the store is closed or not writable
    CREATE_MAPPED_FILE_FAILED = "CREATE_MAPPED_FILE_FAILED"
    MESSAGE_ILLEGAL = "MESSAGE_ILLEGAL"
    PROPERTIES_SIZE_EXCEEDED = "PROPERTIES_SIZE_EXCEEDED"
    UNKNOWN_ERROR = "UNKNOWN_ERROR"

    @property
    def stored(self) -> bool:
        """The message is in the log (it may still be lost on a machine crash if not PUT_OK)."""
        return self is PUT_OK or self is FLUSH_DISK_TIMEOUT


class GetStatus(enum.Enum):
    """Outcome of a get (RocketMQ's ``GetMessageStatus``)."""

    FOUND = "FOUND"
    NO_MATCHED_MESSAGE = "NO_MATCHED_MESSAGE"  # entries examined, none matched the tags
    MESSAGE_WAS_REMOVING = "MESSAGE_WAS_REMOVING"  # the record's segment was deleted
    OFFSET_FOUND_NULL = "OFFSET_FOUND_NULL"
    OFFSET_OVERFLOW_BADLY = "OFFSET_OVERFLOW_BADLY"  # asked past the end
    OFFSET_OVERFLOW_ONE = "OFFSET_OVERFLOW_ONE"  # asked exactly the end: nothing new yet
    OFFSET_TOO_SMALL = "OFFSET_TOO_SMALL"  # asked below the minimum (deleted)
    NO_MATCHED_LOGIC_QUEUE = "NO_MATCHED_LOGIC_QUEUE"  # no such topic-queue
    NO_MESSAGE_IN_QUEUE = "NO_MESSAGE_IN_QUEUE"  # the queue is empty


# The members the hot paths name, as module constants: Python 3.11's ``EnumType`` defines
# ``__getattr__``, which turns every ``PutStatus.PUT_OK`` into a slow attribute lookup, many
# times a global's.
PUT_OK = PutStatus.PUT_OK
FLUSH_DISK_TIMEOUT = PutStatus.FLUSH_DISK_TIMEOUT
FOUND = GetStatus.FOUND


@dataclass(slots=True)
class PutResult:
    """The answer to a put of one message or one batch (all to one topic-queue)."""

    status: PutStatus
    detail: str = ""
    topic: str = ""
    queue_id: int = 0
    queue_offset: int = -1  # of the first message; later ones follow (transactions excepted)
    phys_offsets: list[int] = field(default_factory=list)
    store_timestamp: int = 0
    store_host_raw: bytes = b""

    @property
    def ok(self) -> bool:
        return self.status is PUT_OK

    @property
    def phys_offset(self) -> int:
        """Commitlog offset of the first (for a single put: the) message."""
        return self.phys_offsets[0] if self.phys_offsets else -1

    @property
    def offset_msg_ids(self) -> list[str]:
        """Server-side ids: store host + port + commitlog offset, upper-case hex."""
        host = self.store_host_raw.hex().upper()
        return [format_offset_msg_id(host, phys) for phys in self.phys_offsets]

    @property
    def offset_msg_id(self) -> str:
        return self.offset_msg_ids[0] if self.phys_offsets else ""


_new_object = object.__new__


def stored_result(
    topic: str,
    queue_id: int,
    queue_offset: int,
    phys_offsets: list[int],
    store_timestamp: int,
    store_host_raw: bytes,
) -> PutResult:
    """The PUT_OK answer to a stored put, the same as ``PutResult(PUT_OK, "", ...)``.

    Both put paths answer every put with one, so it is built without the dataclass
    ``__init__``: Python 3.11 runs a class's ``__init__`` in a fresh interpreter frame, a cost
    every put would pay. A test compares the two field for field."""
    result = _new_object(PutResult)
    result.status = PUT_OK
    result.detail = ""
    result.topic = topic
    result.queue_id = queue_id
    result.queue_offset = queue_offset
    result.phys_offsets = phys_offsets
    result.store_timestamp = store_timestamp
    result.store_host_raw = store_host_raw
    return result


@dataclass(slots=True)
class GetResult:
    """The answer to a get: messages (decoded) or their stored bytes (``raw``), and where to go
    next. ``next_offset`` is RocketMQ's nextBeginOffset.

    ``damaged``: a get that met a record it cannot hand out stops before it, answering the
    records before it (``next_offset`` is then the damaged record's queue offset) and naming
    it here; a reader that moves on goes to ``damaged.queue_offset + 1``. (A get whose first
    record is damaged has nothing to answer: it raises the same error.)"""

    status: GetStatus
    next_offset: int
    min_offset: int
    max_offset: int
    messages: list[StoredMessage] = field(default_factory=list)
    raw: bytes = b""
    count: int = 0
    damaged: DamagedRecordError | None = None

    @property
    def found(self) -> bool:
        return self.status is FOUND
