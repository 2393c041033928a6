"""What crosses the transport seam: requests and answers between clients and a broker service.

These shapes are transport-neutral. The in-process transport hands them over as they are; the
HTTP transports (remote mode) encode them, message batches as stored record bytes and control
messages as JSON. Statuses are the store's own names (``PUT_OK``, ``FOUND``, ...), strings so that
a client never needs the store's enums.

A pull is batched across queues: one :class:`PullBatch` names every queue a consumer wants
messages from, and the broker answers as soon as *any* of them has something (long polling),
or when ``wait_ms`` runs out. So a consumer holds one request open, however many queues it owns.
A queue's answer carries the stored records' bytes (``raw``), which the client decodes with the
store's codec (:func:`decode_records`): nothing is re-encoded on the way.

Each queue is answered on its own: a damaged record (one that does not decode, or fails its CRC
under ``check_crc_on_read``) is named in its queue's answer (:class:`DamagedRecord`, after the
records before it) and fails no other queue. The broker copies records without decoding them,
so a consumer whose decode fails asks again with ``QueuePull.check``: the broker then decodes
each record before answering, and names the damaged one.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar, overload

from localstore.record.codec import RecordError, StoredMessage, decode_record, format_offset_msg_id
from localstore.record.validation import RETRY_PREFIX
from offsetstore import MessageQueue

__all__ = [
    "BROADCASTING",
    "CLUSTERING",
    "CONSUME_FROM_FIRST_OFFSET",
    "CONSUME_FROM_LAST_OFFSET",
    "CONSUME_FROM_RULES",
    "CONSUME_FROM_TIMESTAMP",
    "MAX_QUERY_COUNT",
    "NO_END_MS",
    "RECORD_DAMAGED",
    "DamagedRecord",
    "GroupView",
    "ProducerStamp",
    "PullBatch",
    "PullBatchResult",
    "QueuePull",
    "QueuePullResult",
    "QueueStart",
    "SendResult",
    "StoredRecords",
    "decode_records",
    "decode_records_before_damage",
]

NO_END_MS = 2**63 - 1
"""A query by key's default ``end_ms``: no bound on the store time."""
MAX_QUERY_COUNT = 64
"""The most messages one query by key answers (the store's cap, as RocketMQ's)."""

CLUSTERING = "CLUSTERING"
BROADCASTING = "BROADCASTING"

# Where a group starts a queue it never committed (RocketMQ's ConsumeFromWhere names).
CONSUME_FROM_LAST_OFFSET = "CONSUME_FROM_LAST_OFFSET"
CONSUME_FROM_FIRST_OFFSET = "CONSUME_FROM_FIRST_OFFSET"
CONSUME_FROM_TIMESTAMP = "CONSUME_FROM_TIMESTAMP"
CONSUME_FROM_RULES = frozenset(
    {CONSUME_FROM_LAST_OFFSET, CONSUME_FROM_FIRST_OFFSET, CONSUME_FROM_TIMESTAMP}
)


def start_bound(topic: str, consume_from: str) -> str:
    """Where the ``consume_from`` rule starts a queue of ``topic`` never committed, as the name
    of the broker's call that reads it: ``min_offset`` (FIRST_OFFSET, and a retry topic whatever
    the rule: its messages were meant for the group), ``max_offset`` (LAST_OFFSET) or
    ``offset_for_timestamp`` (TIMESTAMP, with the rule's timestamp)."""
    if topic.startswith(RETRY_PREFIX) or consume_from == CONSUME_FROM_FIRST_OFFSET:
        return "min_offset"
    if consume_from == CONSUME_FROM_LAST_OFFSET:
        return "max_offset"
    return "offset_for_timestamp"


# Statuses of a queue's pull that mean "nothing new yet" (the request may be parked).
NOTHING_NEW = frozenset({"OFFSET_OVERFLOW_ONE", "NO_MESSAGE_IN_QUEUE", "NO_MATCHED_LOGIC_QUEUE"})
# A queue's status when the first record its pull met is damaged (the answer's ``damaged``
# names it; the store raised DamagedRecordError, it has no GetStatus for this).
RECORD_DAMAGED = "RECORD_DAMAGED"


@dataclass(slots=True)
class SendResult:
    """The broker's answer to one send (a single message or a batch to one queue).

    ``status`` is the store's put status; ``queue_offset`` is that of the first message (the
    others follow); ``phys_offsets`` (and ``offset_msg_ids``) have one entry per stored
    message. For a delayed message ``topic``/``queue_id`` are where it waits
    (``SCHEDULE_TOPIC_XXXX``) until it is due.
    """

    status: str
    detail: str = ""
    topic: str = ""
    queue_id: int = 0
    queue_offset: int = -1
    phys_offsets: list[int] = field(default_factory=list)  # commitlog offset of each message
    store_host: str = ""  # the broker's packed address and port, upper-case hex
    store_timestamp: int = 0

    @property
    def offset_msg_ids(self) -> list[str]:
        """The broker-side id of each message: store host and commitlog offset in hex."""
        host = self.store_host
        return [format_offset_msg_id(host, phys) for phys in self.phys_offsets]

    @property
    def stored(self) -> bool:
        """The messages are in the broker's log (``PUT_OK`` or ``FLUSH_DISK_TIMEOUT``)."""
        return self.status in ("PUT_OK", "FLUSH_DISK_TIMEOUT")


@dataclass(frozen=True, slots=True)
class ProducerStamp:
    """What makes a send idempotent: the producer's id and the batch's number among that
    producer's batches to one queue. The broker stores a batch once per stamp and answers a
    stamp it stored already with the first answer (see :mod:`sdk.broker.idempotence`); a
    client resending a batch after a lost answer resends its stamp."""

    producer_id: str
    sequence: int


@dataclass(frozen=True, slots=True)
class QueuePull:
    """Pull ``topic``/``queue_id`` from ``queue_offset``; ``tags`` is a tag expression.
    ``check``: decode every record before answering, so that a damaged one is named (a
    consumer asks this after its own decode of the queue's records failed)."""

    topic: str
    queue_id: int
    queue_offset: int
    tags: str | None = None
    check: bool = False


@dataclass(frozen=True, slots=True)
class PullBatch:
    """One long-polling pull over several queues on behalf of ``group``.

    ``generation`` is the group's membership generation the consumer last saw (-1: no group
    membership, assigned queues): once the group moved past it (a member joined or left), the
    pull is answered at once with the new generation and no record, so the member rebalances
    before it reads.
    ``max_count``/``max_bytes`` bound each queue's answer. ``wait_ms`` is how long the broker may
    hold the request when no queue has anything new (0: answer at once).
    """

    group: str
    pulls: tuple[QueuePull, ...]
    max_count: int = 32
    max_bytes: int = 4 * 1024 * 1024
    wait_ms: int = 0
    generation: int = -1  # the group generation the consumer knows (-1: none)

    def asked_offsets(self) -> dict[tuple[str, int], int]:
        """(topic, queue id) -> the queue offset this batch pulls from: an answer is taken only
        by a queue still at that offset (one sought, or let go and taken back elsewhere, while
        the pull was out ignores it)."""
        return {(p.topic, p.queue_id): p.queue_offset for p in self.pulls}


# Statuses whose next_offset is where the queue's consumer must move (its offset fell out of
# the queue's range): RocketMQ's consumers correct their offset on these.
OFFSET_MOVED = frozenset(
    {"OFFSET_TOO_SMALL", "OFFSET_OVERFLOW_BADLY", "OFFSET_FOUND_NULL", "MESSAGE_WAS_REMOVING"}
)


@dataclass(frozen=True, slots=True)
class DamagedRecord:
    """A record of the pulled queue that cannot be handed out: its queue offset, its commitlog
    offset and what is wrong with it. The queue goes on at ``queue_offset + 1``."""

    queue_offset: int
    phys_offset: int
    reason: str


@dataclass(slots=True)
class QueuePullResult:
    """One queue's answer: its status (the store's ``GetStatus`` name, or
    :data:`RECORD_DAMAGED`), where to pull next (``next_offset``), the queue's bounds, the stored
    records' bytes (``count`` of them) and, when the read stopped at a damaged record,
    ``damaged`` (``next_offset`` is then that record's queue offset: the answer does not step
    over it, its reader does)."""

    topic: str
    queue_id: int
    status: str
    next_offset: int
    min_offset: int
    max_offset: int
    raw: bytes | memoryview = b""  # a memoryview when decoded from a remote pull answer
    count: int = 0
    damaged: DamagedRecord | None = None

    @property
    def found(self) -> bool:
        return self.status == "FOUND"


@dataclass(slots=True)
class PullBatchResult:
    """The queues' answers, and the group's membership generation: a consumer that sees it
    change rebalances at once. After a long-polling wait only the queues that got messages
    are answered; a queue left out has nothing new, except in the answer to a member whose
    generation was behind, which holds no queue at all (nothing was read)."""

    results: list[QueuePullResult]
    generation: int = 0


@dataclass(slots=True)
class StoredRecords:
    """Messages found by a query (by key or by id): their stored records laid end to end, as
    they lie in the commitlog, ``count`` of them (decode with :func:`decode_records`)."""

    raw: bytes = b""
    count: int = 0

    def messages(self) -> list[StoredMessage]:
        """The records, decoded."""
        return decode_records(self.raw)


@dataclass(frozen=True, slots=True)
class GroupView:
    """A consumer group's live members (sorted client ids) at membership ``generation``, their
    subscriptions, and who holds each queue's lease now (``owners``). A rebalance view
    (``rebalance_view``) also holds ``queue_counts``: how many queues each topic it was asked
    about has (empty in a plain ``group_view``)."""

    generation: int
    members: tuple[str, ...]
    subscriptions: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    owners: Mapping[MessageQueue, str] = field(default_factory=dict)
    queue_counts: Mapping[str, int] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class QueueStart:
    """Where a consumer group starts ``queue`` (``start_offsets``): its committed offset, or
    ``committed`` None when it had none and ``start`` is the consume-from rule's offset, which
    the broker recorded as the group's committed offset in the same call."""

    queue: MessageQueue
    committed: int | None
    start: int


_Decoded = TypeVar("_Decoded")


def decode_records(raw: bytes | memoryview) -> list[StoredMessage]:
    """The stored records laid end to end in ``raw``, decoded."""
    messages = []
    position, end = 0, len(raw)
    while position < end:
        message = decode_record(raw, position)
        messages.append(message)
        position += message.store_size
    return messages


@overload
def decode_records_before_damage(
    raw: bytes | memoryview, *, start: int = 0
) -> tuple[list[StoredMessage], RecordError | None]: ...


@overload
def decode_records_before_damage(
    raw: bytes | memoryview, make: Callable[..., _Decoded], *, start: int = 0
) -> tuple[list[_Decoded], RecordError | None]: ...


def decode_records_before_damage(
    raw: bytes | memoryview, make: Callable[..., Any] = StoredMessage, *, start: int = 0
) -> tuple[list[Any], RecordError | None]:
    """:func:`decode_records` from the record at ``start`` on, stopping at the first record
    that does not decode: the records before it, and the error (None when every record
    decoded). ``make`` builds each message (see :func:`localstore.record.codec.decode_record`)."""
    messages: list[Any] = []
    position, end = start, len(raw)
    while position < end:
        try:
            message = decode_record(raw, position, make=make)
        except RecordError as exc:
            return messages, exc
        messages.append(message)
        position += message.store_size
    return messages, None
