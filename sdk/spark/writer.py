"""The ``quiver`` sink: Spark rows sent to a broker, each executor task an ordinary producer
client of it (``broker`` option): a store has one writer, so Spark never writes store files.

    (frame.write.format("quiver").option("broker", "http://h:8080")
        .option("topic", "orders").mode("append").save())

Write options (any key case, as Spark hands them over):

* ``broker`` (required): the broker's URL.
* ``topic``: the topic of rows without a ``topic`` column value.
* ``writeId``: the identity of a batch write (default: one drawn by the driver per write). Give
  the same one to run a write again without storing its rows twice (a replay).
* ``batchRows`` (1000) and ``batchBytes`` (262144 body bytes): a batch per queue closes at
  either.
* ``maxInFlight`` (4): the batches a task has sent and not yet had answered.

Columns: see :mod:`sdk.spark.write_plan` (``body`` or ``value``, optional ``topic``,
``tags``, ``keys``, ``properties``, ``queue_id``, ``sharding_key``). Only ``append`` is a
write mode: ``overwrite`` (and any other) is refused, a topic is a log and is never replaced.

Exactly once per row within the broker's idempotence bounds: every batch carries a stamp
derived from the write's identity, the task's partition and the batch's place
(:mod:`sdk.spark.write_plan`), so a task Spark runs again (a failure, a speculative copy, a
replayed micro-batch) sends the same batches with the same stamps and the broker answers the
copies from its windows instead of storing them. A streaming write's identity is its query id
and micro-batch id, both the same when a query restarted from its checkpoint runs a
micro-batch again. A batch the broker refuses fails the task (Spark retries it).

What that asks of the input: a task's rows must be the same, in the same order, in every
attempt (a read of a source, a sorted or cached frame; not the rows right after a shuffle,
an aggregation's or a join's, whose order may change between attempts), as Kafka's sink asks:
a batch whose stamp the broker holds is answered as stored whatever rows it carries now (a
task fails when the broker's answer is for a batch of another size, the one difference it can
see). The bounds (:mod:`sdk.spark.write_plan`): a retry's stamps must still be among the
broker's newest ``idempotence_max_stamps``, and after a broker restart within its last
``idempotence_rebuild_bytes`` of log.
"""

from __future__ import annotations

import uuid
from collections import deque
from collections.abc import Iterator, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from pyspark import TaskContext
from pyspark.sql.datasource import DataSourceArrowWriter, WriterCommitMessage
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import StructType

from quiver_errors import IllegalStateError, InvalidArgumentError
from sdk.spark.options import positive_option
from sdk.spark.pyspark_api import STREAM_SINK_TAKES_ARROW, StreamWriterBase
from sdk.spark.write_plan import PlannedBatch, WritePlan, check_write_columns
from sdk.transport.http_sync import HttpTransport
from sdk.transport.models import SendResult

_KNOWN = ("broker", "topic", "writeid", "batchrows", "batchbytes", "maxinflight", "path")
_SPARKS_OWN = ("checkpointlocation",)  # a streaming query's option, handed to sinks too
QUERY_ID_PROPERTY = "sql.streaming.queryId"  # Spark's task-local properties of a micro-batch
BATCH_ID_PROPERTY = "streaming.sql.batchId"


@dataclass(frozen=True)
class WriteOptions:
    """The sink's options, parsed (see the module docstring)."""

    broker: str
    topic: str | None
    write_id: str | None
    batch_rows: int
    batch_bytes: int
    max_in_flight: int


def parse_write_options(options: Mapping[str, str], overwrite: bool) -> WriteOptions:
    """``options`` checked; :class:`InvalidArgumentError` naming the option, or the mode."""
    if overwrite:
        raise InvalidArgumentError(
            "mode: the quiver sink only appends (a topic is a log; nothing of it is replaced): "
            "use mode('append')"
        )
    lowered = {key.lower(): value for key, value in options.items()}
    unknown = sorted(key for key in lowered if key not in _KNOWN + _SPARKS_OWN)
    if unknown:
        raise InvalidArgumentError(
            f"{unknown[0]}: unknown option of the quiver sink (known: broker, topic, writeId, "
            "batchRows, batchBytes, maxInFlight)"
        )
    if lowered.get("path"):
        raise InvalidArgumentError(
            "path: the quiver sink writes through a broker (option broker), never store files"
        )
    broker = lowered.get("broker", "").strip()
    if not broker:
        raise InvalidArgumentError("broker: the option is required (the broker's URL)")
    if "," in broker:
        raise InvalidArgumentError(f"broker: the sink writes to one broker, got {broker!r}")
    topic = lowered.get("topic", "").strip() or None
    return WriteOptions(
        broker=broker,
        topic=topic,
        write_id=lowered.get("writeid") or None,
        batch_rows=positive_option(lowered, "batchRows") or 1000,
        batch_bytes=positive_option(lowered, "batchBytes") or 256 * 1024,
        max_in_flight=positive_option(lowered, "maxInFlight") or 4,
    )


@dataclass(frozen=True)
class WriteReport(WriterCommitMessage):
    """What a task sent: its partition, rows and batches."""

    partition_id: int
    rows: int
    batches: int


class QuiverBatchWriter(DataSourceArrowWriter):
    """A batch write (plain data: pickled to the tasks)."""

    def __init__(self, options: WriteOptions, schema_names: list[str]) -> None:
        check_write_columns(schema_names)
        self.write_options = options
        self.write_key = options.write_id or f"write-{uuid.uuid4().hex}"

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriteReport:
        return send_partition(self.write_options, self.write_key, _partition_id(), iterator)


class QuiverStreamWriter(StreamWriterBase):
    """A streaming write: each micro-batch's identity is the query id and the batch id."""

    def __init__(self, options: WriteOptions, schema: StructType) -> None:
        check_write_columns(schema.fieldNames())
        self.write_options = options
        self.row_schema: pa.Schema = to_arrow_schema(schema)  # the batches of pyspark 4.0's Rows

    def write(self, iterator: Iterator[Any]) -> WriteReport:
        context = TaskContext.get()
        query_id = context.getLocalProperty(QUERY_ID_PROPERTY) if context else None
        batch_id = context.getLocalProperty(BATCH_ID_PROPERTY) if context else None
        if not query_id or batch_id is None:
            raise IllegalStateError(
                "the quiver stream sink found no streaming query id or micro-batch id in the "
                "task's properties"
            )
        batches = (
            iterator if STREAM_SINK_TAKES_ARROW else rows_to_batches(iterator, self.row_schema)
        )
        write_key = f"stream-{query_id}-{batch_id}"
        return send_partition(self.write_options, write_key, _partition_id(), batches)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:  # noqa: N803
        """Nothing to do: each batch was stored when its send was answered."""

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:  # noqa: N803
        """Nothing to undo: the micro-batch runs again under the same identity, and the
        batches its failed run stored are answered from the broker's windows."""


def _partition_id() -> int:
    context = TaskContext.get()
    if context is None:
        raise IllegalStateError("the quiver sink's write runs in a Spark task only")
    return context.partitionId()


def rows_to_batches(
    rows: Iterator[Any], schema: pa.Schema, batch_rows: int = 1000
) -> Iterator[pa.RecordBatch]:
    """pyspark 4.0's stream sink gets Rows: ``batch_rows`` at a time as record batches of the
    frame's own types (``schema``: a map stays a map, a column of nulls keeps its type)."""
    chunk: list[dict[str, Any]] = []
    for row in rows:
        chunk.append(row.asDict(recursive=True))
        if len(chunk) == batch_rows:
            yield pa.RecordBatch.from_pylist(chunk, schema=schema)
            chunk = []
    if chunk:
        yield pa.RecordBatch.from_pylist(chunk, schema=schema)


def send_partition(
    options: WriteOptions,
    write_key: str,
    partition_id: int,
    batches: Iterator[pa.RecordBatch],
) -> WriteReport:
    """Send one task's rows (every batch answered as stored, or an error that fails the task).
    Usable outside Spark: the same ``write_key``, ``partition_id`` and rows send the same
    batches with the same stamps."""
    with HttpTransport(options.broker) as transport:
        plan = WritePlan(
            write_key,
            partition_id,
            transport.queue_count,
            default_topic=options.topic,
            batch_rows=options.batch_rows,
            batch_bytes=options.batch_bytes,
        )
        sent = 0
        in_flight: deque[tuple[PlannedBatch, Future[SendResult]]] = deque()
        with ThreadPoolExecutor(options.max_in_flight, "quiver-sink") as pool:

            def submit(planned: PlannedBatch) -> None:
                nonlocal sent
                while len(in_flight) >= options.max_in_flight:
                    _check_stored(*in_flight.popleft())
                in_flight.append((planned, pool.submit(send_planned, transport, planned)))
                sent += 1

            for batch in batches:
                for planned in plan.add(batch):
                    submit(planned)
            for planned in plan.finish():
                submit(planned)
            while in_flight:
                _check_stored(*in_flight.popleft())
    return WriteReport(partition_id, plan.rows, sent)


def send_planned(transport: HttpTransport, planned: PlannedBatch) -> SendResult:
    """Send a planned batch (its body already encoded, its stamp given) with the transport's
    retry policy (a stamped send may be resent: the broker stores it once)."""
    return transport.send_encoded(
        planned.topic, planned.queue_id, planned.body, planned.count, planned.stamp
    )


def _check_stored(planned: PlannedBatch, answer: Future[SendResult]) -> None:
    """Raise unless the broker stored ``planned``: refused, or answered from its window for a
    batch of another size under the same stamp (the rows differ from the attempt that stored
    it, so this batch's rows would be dropped silently)."""
    result = answer.result()
    if not result.stored:
        raise IllegalStateError(
            f"the broker refused a batch for {result.topic!r} queue {result.queue_id}: "
            f"{result.status} {result.detail}"
        )
    if len(result.phys_offsets) != planned.count:
        raise IllegalStateError(
            f"the broker holds stamp {planned.stamp.producer_id}:{planned.stamp.sequence} "
            f"for a batch of {len(result.phys_offsets)} messages to {planned.topic!r} queue "
            f"{planned.queue_id}, but this batch holds {planned.count}: the write's rows differ "
            "from an earlier attempt's under the same identity (a writeId given to other rows, "
            "or input that is not the same in every attempt), and would not be stored"
        )
