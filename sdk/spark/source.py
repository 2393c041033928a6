"""``QuiverDataSource``: Spark's ``quiver`` format, a batch read of topics from a store
directory (``path``) that every executor can open, or from brokers over HTTP (``broker``:
:mod:`sdk.spark.broker_source`), in batch and streaming (the streaming read of either, whose
tasks are the batch read's, is :mod:`sdk.spark.stream`), and a sink that sends rows to a broker
(:mod:`sdk.spark.writer`, batch and streaming).

The planner opens the store read-only once (no lock, no recovery, nothing created: safe while
an application writes it), resolves the offset options to queue ranges and returns one
:class:`QueueRangePartition` per range; each executor task opens the store read-only itself
and yields the range's records as Arrow record batches, in chunks. Only complete records are
ever served (the read-only open's rule), and a range ends where the planner fixed it, so a
read of a store being written sees each planned offset exactly once. With ``scan=commitlog``
the partitions are ranges of the log instead (:mod:`sdk.spark.commitlog_scan`).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    InputPartition,
)
from pyspark.sql.types import StructType

from localstore.read_only import ReadOnlyStore
from localstore.results import GetResult, GetStatus
from quiver_errors import IllegalStateError
from sdk.spark.batches import records_to_batch
from sdk.spark.broker_source import BrokerBounds, QuiverBrokerReader, qualified_options
from sdk.spark.commitlog_scan import LogRangePartition, plan_log_ranges, read_log_partition
from sdk.spark.dataloss import start_within
from sdk.spark.options import SCAN_COMMITLOG, ReadOptions, parse_read_options
from sdk.spark.ranges import QueueOffsets, QueueRange, plan_ranges
from sdk.spark.row_filters import keep_tags
from sdk.spark.schema import schema_ddl
from sdk.spark.store_access import StoreBounds, open_store
from sdk.spark.stream import QuiverStreamReader
from sdk.spark.writer import QuiverBatchWriter, QuiverStreamWriter, parse_write_options

CHUNK_RECORDS = 16384  # records per get, and so per record batch
# Bytes per get at most: the count limits a chunk of common records, this one a chunk of large
# ones. Above the store's default, so that a chunk's records are copied in one piece when they
# lie back to back, not walked unit by unit.
CHUNK_BYTES = 64 * 1024 * 1024


class QuiverDataSource(DataSource):
    """The ``quiver`` format. Register it with ``spark.dataSource.register(QuiverDataSource)``,
    then ``spark.read.format("quiver").option("path", DIR).option("topics", "orders").load()``.
    Options: see :mod:`sdk.spark.options`."""

    @classmethod
    def name(cls) -> str:
        return "quiver"

    def schema(self) -> str:
        read = parse_read_options(self.options)
        return schema_ddl(read.include_body, read.include_properties)

    def reader(self, schema: StructType) -> DataSourceReader:
        options = parse_read_options(self.options)
        if options.brokers:
            return QuiverBrokerReader(options)
        return QuiverBatchReader(options)

    def writer(self, schema: StructType, overwrite: bool) -> QuiverBatchWriter:
        return QuiverBatchWriter(parse_write_options(self.options, overwrite), schema.fieldNames())

    def streamWriter(self, schema: StructType, overwrite: bool) -> QuiverStreamWriter:  # noqa: N802
        return QuiverStreamWriter(parse_write_options(self.options, overwrite), schema)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:  # noqa: N802 (pyspark names it)
        """The streaming read (``spark.readStream.format("quiver")``,
        :mod:`sdk.spark.stream`) of a store directory or of brokers, whose tasks are the batch
        read's."""
        options = parse_read_options(self.options, streaming=True)
        if options.brokers:
            bounds = BrokerBounds(options.brokers, options.consumer_group)
            tasks = QuiverBrokerReader(options)
            return QuiverStreamReader(qualified_options(options), tasks, bounds)
        return QuiverStreamReader(options, QuiverBatchReader(options), StoreBounds(options.path))


class QueueRangePartition(InputPartition):
    """One Spark task: queue offsets ``[start_offset, end_offset)`` of ``topic``/``queue_id``."""

    def __init__(self, queue_range: QueueRange) -> None:
        super().__init__(queue_range)
        self.queue_range = queue_range


class QuiverBatchReader(DataSourceReader):
    """The batch read of the ranges ``options`` name (plain data: it is pickled to tasks)."""

    def __init__(self, options: ReadOptions) -> None:
        self.read_options = options

    def partitions(self) -> list[InputPartition]:
        with open_store(self.read_options.path) as store:
            if self.read_options.scan == SCAN_COMMITLOG:
                log_ranges = plan_log_ranges(store, self.read_options.min_partitions)
                return [LogRangePartition(log_range) for log_range in log_ranges]
            return list(self.partitions_of(self.plan(store)))

    @staticmethod
    def partitions_of(ranges: list[QueueRange]) -> list[QueueRangePartition]:
        """A task per range."""
        return [QueueRangePartition(queue_range) for queue_range in ranges]

    def plan(self, store: QueueOffsets) -> list[QueueRange]:
        """The ranges the read's tasks cover (a subclass may narrow them)."""
        return plan_ranges(store, self.read_options)

    def read(self, partition: Any) -> Iterator[pa.RecordBatch]:
        options = self.read_options
        if isinstance(partition, LogRangePartition):
            with open_store(options.path) as store:
                yield from read_log_partition(store, partition.log_range, options)
            return
        if not isinstance(partition, QueueRangePartition):
            return  # Spark's stand-in partition when partitions() planned none: nothing to read
        with open_store(options.path) as store:
            batches = read_range(
                store,
                partition.queue_range,
                options.include_body,
                options.include_properties,
                options.fail_on_data_loss,
            )
            yield from keep_tags(batches, options.tags)


def read_range(
    store: ReadOnlyStore,
    queue_range: QueueRange,
    include_body: bool,
    include_properties: bool,
    fail_on_data_loss: bool = True,
) -> Iterator[pa.RecordBatch]:
    """The records of ``queue_range``, a batch per chunk of at most :data:`CHUNK_RECORDS`
    records and :data:`CHUNK_BYTES` bytes (one record at least). Offsets retention removed
    since the planner looked are data loss (:func:`~sdk.spark.dataloss.start_within`: an
    error, or with ``fail_on_data_loss`` false a warning and the rest of the range);
    :class:`IllegalStateError` when the store serves no offset of the rest (a topic deleted)."""
    topic, queue_id = queue_range.topic, queue_range.queue_id
    offset = queue_range.start_offset
    while offset < queue_range.end_offset:
        count = min(CHUNK_RECORDS, queue_range.end_offset - offset)
        got = store.get_message_bytes(
            topic, queue_id, offset, max_count=count, max_bytes=CHUNK_BYTES
        )
        removed_until = _removed_until(got, offset)
        if removed_until is not None:
            offset = start_within(topic, queue_id, offset, removed_until, fail_on_data_loss)
            continue
        if not got.count or got.next_offset <= offset:
            raise IllegalStateError(
                f"{topic!r} queue {queue_id} offset {offset} is no longer served by the store "
                f"({got.status.name}; readable [{got.min_offset}, {got.max_offset}))"
            )
        yield records_to_batch(got.raw, include_body, include_properties)
        offset = got.next_offset


def _removed_until(got: GetResult, offset: int) -> int | None:
    """When retention removed the records a get from ``offset`` asked for: the first offset
    past them (the queue's min offset, or past the units whose segment went since the
    snapshot); otherwise None."""
    if got.count:
        return None
    if offset < got.min_offset:
        return got.min_offset
    if got.status is GetStatus.MESSAGE_WAS_REMOVING and got.next_offset > offset:
        return got.next_offset
    return None
