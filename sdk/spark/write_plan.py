"""What a write task sends, decided from its rows alone: the queue of each row, the batches per
queue, each message's id and each batch's producer stamp. Plain data and pyarrow, no pyspark
and no I/O, so a task run again over the same rows sends the very same batches with the very
same stamps, and the broker's idempotent produce stores none of them twice.

Identity. A write has a *write key* (a batch write's ``writeId`` option, else an id drawn once
by the driver; a streaming write's query id and micro-batch id), a task its partition id, a
row its position in the task. From them:

* the message id (``UNIQ_KEY``) of row ``r`` of partition ``p``: 32 upper-case hex digits,
  ``H(write key)[:12] + p (8 digits) + r (12 digits)``, so a message keeps its id in every
  attempt;
* the stamp of the ``b``-th batch a task sends to a topic-queue: producer id
  ``spark.<H(write key)[:24]>.<p>.<b // CHUNK_BATCHES>``, sequence ``b % CHUNK_BATCHES``.

Why chunked producer ids: the broker keeps the newest ``idempotence_window_per_queue`` (32)
sequences per (producer id, topic, queue) and forgets older ones, and a retried task resends
all its batches from the first. With :data:`CHUNK_BATCHES` = 32 batches per producer id, no
producer key ever holds more sequences than its window keeps, so a task of any size is answered
from the windows batch for batch: what bounds the protection is only how many stamps the broker
keeps in all (``idempotence_max_stamps``, the keys used longest ago leave first) and, after a
broker restart, how far back its rebuild reads the log (``idempotence_rebuild_bytes``).

Routing, per row: a ``queue_id`` column wins; else a ``sharding_key`` picks the queue as the
SDK's producer does (:func:`sdk.outgoing.select_by_key`, so rows of one key keep one queue);
else rows fill one queue's batch after another, starting at ``p % queue count`` (whole batches
per queue, as Kafka's sticky partitioner does, deterministic by row position).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field

import pyarrow as pa

from quiver_errors import InvalidArgumentError
from sdk.message import Message
from sdk.outgoing import MessageBuilder, select_by_key
from sdk.transport.models import ProducerStamp

CHUNK_BATCHES = 32  # batches per producer id: the broker's default window per queue
WRITE_COLUMNS = ("body", "value", "topic", "tags", "keys", "properties", "queue_id", "sharding_key")


def write_hash(write_key: str) -> str:
    """The hex digest naming a write in its producer ids and message ids."""
    return hashlib.sha256(write_key.encode()).hexdigest()


def message_id(hashed: str, partition_id: int, row: int) -> str:
    """The ``UNIQ_KEY`` of row ``row`` of partition ``partition_id`` (see the module doc)."""
    return f"{hashed[:12]}{partition_id & 0xFFFFFFFF:08X}{row & 0xFFFFFFFFFFFF:012X}".upper()


def batch_stamp(hashed: str, partition_id: int, batch_index: int) -> ProducerStamp:
    """The stamp of a task's ``batch_index``-th batch to one topic-queue."""
    chunk, sequence = divmod(batch_index, CHUNK_BATCHES)
    return ProducerStamp(f"spark.{hashed[:24]}.{partition_id}.{chunk}", sequence)


def check_write_columns(names: Sequence[str]) -> None:
    """Refuse a frame the sink cannot write: no ``body``/``value``, both, or a column it does
    not know (a misspelt one would otherwise be dropped silently)."""
    unknown = [name for name in names if name not in WRITE_COLUMNS]
    if unknown:
        raise InvalidArgumentError(
            f"column {unknown[0]!r}: the quiver sink writes only {', '.join(WRITE_COLUMNS)}"
        )
    bodies = [name for name in names if name in ("body", "value")]
    if len(bodies) != 1:
        raise InvalidArgumentError(
            "columns: the quiver sink needs exactly one of body or value (binary or string), "
            f"got {bodies or 'neither'}"
        )


@dataclass(frozen=True)
class PlannedBatch:
    """One send: ``messages`` to ``topic``/``queue_id`` with their ids and its stamp."""

    topic: str
    queue_id: int
    messages: list[Message]
    msg_ids: list[str]
    stamp: ProducerStamp


@dataclass
class _Pending:
    messages: list[Message] = field(default_factory=list)
    msg_ids: list[str] = field(default_factory=list)
    body_bytes: int = 0
    sent_batches: int = 0


class WritePlan:
    """The batches of one task (see the module docstring). Feed it Arrow record batches with
    :meth:`add`, then :meth:`finish`; each yields the batches that became full.

    ``queue_count(topic)`` answers a topic's queue count (asked once per topic).
    ``default_topic``: the ``topic`` option, for rows without a ``topic`` column or value."""

    def __init__(
        self,
        write_key: str,
        partition_id: int,
        queue_count: Callable[[str], int],
        *,
        default_topic: str | None,
        batch_rows: int,
        batch_bytes: int,
    ) -> None:
        self.hashed = write_hash(write_key)
        self.partition_id = partition_id
        self.default_topic = default_topic
        self.batch_rows = batch_rows
        self.batch_bytes = batch_bytes
        self._queue_count = queue_count
        self._counts: dict[str, int] = {}
        self._pending: dict[tuple[str, int], _Pending] = {}
        self._unkeyed: dict[str, int] = {}  # rows sent round-robin so far, per topic
        self._builder = MessageBuilder()
        self.rows = 0

    def add(self, batch: pa.RecordBatch) -> Iterator[PlannedBatch]:
        """Route the rows of ``batch``; yields each batch that became full meanwhile."""
        columns = {name: batch.column(name).to_pylist() for name in batch.schema.names}
        body_name = "body" if "body" in columns else "value"
        bodies = columns[body_name]
        none = [None] * batch.num_rows
        topics = columns.get("topic", none)
        tags = columns.get("tags", none)
        keys = columns.get("keys", none)
        properties = columns.get("properties", none)
        queue_ids = columns.get("queue_id", none)
        sharding = columns.get("sharding_key", none)
        for index in range(batch.num_rows):
            row = self.rows
            self.rows += 1
            topic = topics[index] or self.default_topic
            if not topic:
                raise InvalidArgumentError(
                    f"topic: row {row} of partition {self.partition_id} has no topic "
                    "(give a topic column value or the topic option)"
                )
            message = _message(topic, bodies[index], tags[index], keys[index], properties[index])
            queue_id = self._queue_of(topic, queue_ids[index], sharding[index], row)
            full = self._append(topic, queue_id, message, row)
            if full is not None:
                yield full

    def finish(self) -> Iterator[PlannedBatch]:
        """The batches still open, in a fixed order (topic, then queue id)."""
        for topic, queue_id in sorted(self._pending):
            pending = self._pending[topic, queue_id]
            if pending.messages:
                yield self._close(topic, queue_id, pending)

    def build(self, planned: PlannedBatch) -> object:
        """``planned`` as what a transport's ``send`` takes (a checked UniformBatch);
        :class:`~sdk.errors.InvalidMessageError` names a row the broker would refuse."""
        return self._builder.build_batch(planned.messages, planned.queue_id, planned.msg_ids)

    # -- routing and batching ----------------------------------------------------------------
    def _queue_of(
        self, topic: str, queue_id: int | None, sharding_key: str | None, row: int
    ) -> int:
        count = self._counts.get(topic)
        if count is None:
            count = self._counts[topic] = self._queue_count(topic)
            if count < 1:
                raise InvalidArgumentError(f"topic: {topic!r} has no writable queue")
        if queue_id is not None:
            if not 0 <= queue_id < count:
                raise InvalidArgumentError(
                    f"queue_id: row {row} of partition {self.partition_id} names queue "
                    f"{queue_id}, but {topic!r} has queues 0-{count - 1}"
                )
            return int(queue_id)
        if sharding_key is not None:
            return select_by_key(sharding_key, count)
        sent = self._unkeyed.get(topic, 0)
        self._unkeyed[topic] = sent + 1
        return (self.partition_id + sent // self.batch_rows) % count

    def _append(self, topic: str, queue_id: int, message: Message, row: int) -> PlannedBatch | None:
        pending = self._pending.get((topic, queue_id))
        if pending is None:
            pending = self._pending[topic, queue_id] = _Pending()
        size = len(message.body)
        if pending.messages and pending.body_bytes + size > self.batch_bytes:
            closed = self._close(topic, queue_id, pending)
            self._add_to(pending, message, row, size)
            return closed
        self._add_to(pending, message, row, size)
        if len(pending.messages) >= self.batch_rows:
            return self._close(topic, queue_id, pending)
        return None

    def _add_to(self, pending: _Pending, message: Message, row: int, size: int) -> None:
        pending.messages.append(message)
        pending.msg_ids.append(message_id(self.hashed, self.partition_id, row))
        pending.body_bytes += size

    def _close(self, topic: str, queue_id: int, pending: _Pending) -> PlannedBatch:
        stamp = batch_stamp(self.hashed, self.partition_id, pending.sent_batches)
        planned = PlannedBatch(topic, queue_id, pending.messages, pending.msg_ids, stamp)
        pending.sent_batches += 1
        pending.messages, pending.msg_ids, pending.body_bytes = [], [], 0
        return planned


def _message(
    topic: str,
    body: bytes | str | None,
    tags: str | None,
    keys: Sequence[str] | str | None,
    properties: Sequence[tuple[str, str]] | dict[str, str] | None,
) -> Message:
    if body is None:
        raise InvalidArgumentError(f"body: a row for {topic!r} has a null body")
    return Message(
        topic,
        body.encode() if isinstance(body, str) else body,
        tags=tags,
        keys=() if keys is None else keys,
        properties={} if properties is None else dict(properties),
    )
