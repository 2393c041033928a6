"""``QuiverDataSource``: Spark's ``quiver`` format, a batch read of topics from a store
directory (``path``) that every executor can open.

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
from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition
from pyspark.sql.types import StructType

from localstore.errors import StoreDirectoryError
from localstore.read_only import ReadOnlyStore
from quiver_errors import IllegalStateError, InvalidArgumentError
from sdk.spark.batches import records_to_batch
from sdk.spark.commitlog_scan import LogRangePartition, plan_log_ranges, read_log_partition
from sdk.spark.options import SCAN_COMMITLOG, ReadOptions, parse_read_options
from sdk.spark.ranges import QueueOffsets, QueueRange, plan_ranges
from sdk.spark.row_filters import keep_tags
from sdk.spark.schema import schema_ddl

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

    def reader(self, schema: StructType) -> QuiverBatchReader:
        return QuiverBatchReader(parse_read_options(self.options))


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
            ranges = self.plan(store)
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
                store, partition.queue_range, options.include_body, options.include_properties
            )
            yield from keep_tags(batches, options.tags)


def open_store(path: str) -> ReadOnlyStore:
    """The store at ``path`` opened read-only; :class:`InvalidArgumentError` naming the
    ``path`` option when there is none."""
    try:
        return ReadOnlyStore(path)
    except StoreDirectoryError as exc:
        raise InvalidArgumentError(f"path: {exc}") from exc


def read_range(
    store: ReadOnlyStore, queue_range: QueueRange, include_body: bool, include_properties: bool
) -> Iterator[pa.RecordBatch]:
    """The records of ``queue_range``, a batch per chunk of at most :data:`CHUNK_RECORDS`
    records and :data:`CHUNK_BYTES` bytes (one record at least).
    :class:`IllegalStateError` when the store no longer serves an offset of the range (removed
    by retention, or a topic deleted, since the planner looked)."""
    topic, queue_id = queue_range.topic, queue_range.queue_id
    offset = queue_range.start_offset
    while offset < queue_range.end_offset:
        count = min(CHUNK_RECORDS, queue_range.end_offset - offset)
        got = store.get_message_bytes(
            topic, queue_id, offset, max_count=count, max_bytes=CHUNK_BYTES
        )
        if not got.count or got.next_offset <= offset:
            raise IllegalStateError(
                f"{topic!r} queue {queue_id} offset {offset} is no longer served by the store "
                f"({got.status.name}; readable [{got.min_offset}, {got.max_offset}))"
            )
        yield records_to_batch(got.raw, include_body, include_properties)
        offset = got.next_offset
