"""What a write task sends, decided from its rows alone: the queue of each row, the batches per
queue, each message's id and each batch's producer stamp, and each batch's produce body
(:mod:`sdk.spark.produce_rows`, column at a time). Plain data and pyarrow, no pyspark and no
I/O, so a task run again over the same rows sends the very same batches with the very same
stamps, and the broker's idempotent produce stores none of them twice.

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
SDK's producer does (``abs(java_hash(key)) % queue count``, :func:`sdk.outgoing.select_by_key`,
so rows of one key keep one queue);
else rows fill one queue's batch after another, starting at ``p % queue count`` (whole batches
per queue, as Kafka's sticky partitioner does, deterministic by row position).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from quiver_errors import InvalidArgumentError
from sdk.outgoing import select_by_key
from sdk.spark.produce_rows import (
    bodies,
    concatenated,
    encode_records,
    message_ids,
    properties_texts,
)
from sdk.transport.models import ProducerStamp

CHUNK_BATCHES = 32  # batches per producer id: the broker's default window per queue
WRITE_COLUMNS = ("body", "value", "topic", "tags", "keys", "properties", "queue_id", "sharding_key")


def write_hash(write_key: str) -> str:
    """The hex digest naming a write in its producer ids and message ids."""
    return hashlib.sha256(write_key.encode()).hexdigest()


def id_prefix(hashed: str, partition_id: int) -> str:
    """The first 20 hex digits of every message id of a partition (see the module doc)."""
    return f"{hashed[:12]}{partition_id & 0xFFFFFFFF:08X}".upper()


def message_id(hashed: str, partition_id: int, row: int) -> str:
    """The ``UNIQ_KEY`` of row ``row`` of partition ``partition_id`` (see the module doc)."""
    return f"{id_prefix(hashed, partition_id)}{row & 0xFFFFFFFFFFFF:012X}"


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
    """One send: ``count`` messages to ``topic``/``queue_id``, their produce ``body`` (magic
    0 records end to end), the first message's id and the batch's stamp."""

    topic: str
    queue_id: int
    count: int
    body: bytes
    first_msg_id: str
    stamp: ProducerStamp


@dataclass
class _Pending:
    """Rows routed to one topic-queue and not yet sent."""

    records: list[pa.Array] = field(default_factory=list)
    body_lengths: list[np.ndarray] = field(default_factory=list)
    first_ids: list[pa.Array] = field(default_factory=list)
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
        self._prefix = id_prefix(self.hashed, partition_id)
        self.rows = 0

    def add(self, batch: pa.RecordBatch) -> Iterator[PlannedBatch]:
        """Route the rows of ``batch``; yields each batch that became full meanwhile."""
        first_row, count = self.rows, batch.num_rows
        self.rows += count
        if not count:
            return
        names = batch.schema.names
        column = {name: batch.column(name) for name in names}
        ids = message_ids(self._prefix, first_row, count)
        body = bodies(column["body" if "body" in column else "value"], first_row)
        text = properties_texts(
            ids, column.get("tags"), column.get("keys"), column.get("properties"), first_row
        )
        encoded, body_lengths = encode_records(body, text)
        for topic, rows in self._topics(column.get("topic"), first_row, count):
            queues = self._queues_of(topic, rows, column, first_row)
            for queue_id in np.unique(queues).tolist():
                chosen = rows[queues == queue_id]
                taken = pa.array(chosen)
                pending = self._pending.setdefault((topic, queue_id), _Pending())
                pending.records.append(encoded.take(taken))
                pending.body_lengths.append(body_lengths[chosen])
                pending.first_ids.append(ids.take(taken))
                yield from self._cut(topic, queue_id, pending, final=False)

    def finish(self) -> Iterator[PlannedBatch]:
        """The batches still open, in a fixed order (topic, then queue id)."""
        for topic, queue_id in sorted(self._pending):
            yield from self._cut(topic, queue_id, self._pending[topic, queue_id], final=True)

    # -- routing -------------------------------------------------------------------------------
    def _topics(
        self, topics: pa.Array | None, first_row: int, count: int
    ) -> Iterator[tuple[str, np.ndarray]]:
        """``(topic, positions of its rows in the batch)``, topics in order of first row."""
        everything = np.arange(count)
        if topics is None or topics.null_count == count:
            yield self._topic_or_refuse(self.default_topic, first_row), everything
            return
        if topics.null_count:
            topics = pc.fill_null(topics, self.default_topic or "")
        encoded = pc.dictionary_encode(topics)
        codes = encoded.indices.to_numpy(zero_copy_only=False)
        for code, name in enumerate(encoded.dictionary.to_pylist()):
            rows = everything[codes == code]
            if len(rows):
                yield self._topic_or_refuse(name, first_row + int(rows[0])), rows

    def _topic_or_refuse(self, topic: str | None, row: int) -> str:
        if not topic:
            raise InvalidArgumentError(
                f"topic: row {row} of partition {self.partition_id} has no topic "
                "(give a topic column value or the topic option)"
            )
        return topic

    def _queues_of(
        self, topic: str, rows: np.ndarray, column: dict[str, pa.Array], first_row: int
    ) -> np.ndarray:
        """The queue of each of ``rows``: queue_id, else sharding_key, else round-robin."""
        count = self._counts.get(topic)
        if count is None:
            count = self._counts[topic] = self._queue_count(topic)
            if count < 1:
                raise InvalidArgumentError(f"topic: {topic!r} has no writable queue")
        chosen = np.full(len(rows), -1, np.int64)
        explicit = column.get("queue_id")
        if explicit is not None:
            given = explicit.take(pa.array(rows))
            values = pc.fill_null(given, -1).to_numpy(zero_copy_only=False).astype(np.int64)
            wrong = (values >= count) | (values < -1)
            if wrong.any():
                row = first_row + int(rows[np.argmax(wrong)])
                raise InvalidArgumentError(
                    f"queue_id: row {row} of partition {self.partition_id} names queue "
                    f"{values[np.argmax(wrong)]}, but {topic!r} has queues 0-{count - 1}"
                )
            chosen = values
        keys = column.get("sharding_key")
        if keys is not None:
            chosen = np.where(chosen >= 0, chosen, _by_key(keys.take(pa.array(rows)), count))
        unkeyed = chosen < 0
        if unkeyed.any():
            sent = self._unkeyed.get(topic, 0)
            order = sent + np.arange(int(unkeyed.sum()))
            self._unkeyed[topic] = sent + int(unkeyed.sum())
            chosen[unkeyed] = (self.partition_id + order // self.batch_rows) % count
        return chosen

    # -- batching ------------------------------------------------------------------------------
    def _cut(
        self, topic: str, queue_id: int, pending: _Pending, *, final: bool
    ) -> Iterator[PlannedBatch]:
        """The full batches of ``pending`` (all of it when ``final``): a batch ends at
        ``batch_rows`` rows or before the row that would take its bodies past
        ``batch_bytes`` (a longer row alone), whatever record batches the rows came in."""
        if not pending.records:
            return
        records = pa.concat_arrays(pending.records)
        lengths = np.concatenate(pending.body_lengths)
        ids = pa.concat_arrays(pending.first_ids)
        before = np.concatenate(([0], np.cumsum(lengths)))
        total, start = len(lengths), 0
        while start < total:
            fit = int(np.searchsorted(before, before[start] + self.batch_bytes, side="right")) - 1
            end = min(start + self.batch_rows, total, max(fit, start + 1))
            if end == total and end - start < self.batch_rows and not final:
                break  # not full yet: more rows may join it
            yield self._planned(topic, queue_id, pending, records, ids, start, end)
            start = end
        pending.records = [records.slice(start)] if start < total else []
        pending.body_lengths = [lengths[start:]] if start < total else []
        pending.first_ids = [ids.slice(start)] if start < total else []

    def _planned(
        self,
        topic: str,
        queue_id: int,
        pending: _Pending,
        records: pa.Array,
        ids: pa.Array,
        start: int,
        end: int,
    ) -> PlannedBatch:
        stamp = batch_stamp(self.hashed, self.partition_id, pending.sent_batches)
        pending.sent_batches += 1
        body = concatenated(records.slice(start, end - start))
        return PlannedBatch(topic, queue_id, end - start, body, ids[start].as_py(), stamp)


def _by_key(keys: pa.Array, count: int) -> np.ndarray:
    """The queue of each sharding key (-1 for a null one), as the SDK's producer picks it
    (:func:`sdk.outgoing.select_by_key`), once per distinct key."""
    encoded = pc.dictionary_encode(keys)
    queues = np.array(
        [select_by_key(key, count) for key in encoded.dictionary.to_pylist()] + [-1], np.int64
    )
    codes = pc.fill_null(encoded.indices, len(encoded.dictionary)).to_numpy(zero_copy_only=False)
    chosen: np.ndarray = queues[codes]
    return chosen
