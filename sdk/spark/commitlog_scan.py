"""``scan=commitlog``: every record of a store's log, in log order, read in parallel ranges (a
full-log export, the source's usual schema).

Planning cuts the visible log ``[min offset, visible end)`` at record starts with the
commitlog's sparse offset index (:meth:`localstore.read_only.ReadOnlyStore.split_points`, the
holder's index files read as they lie): ``minPartitions`` ranges, else one per
:data:`DEFAULT_PARTITION_BYTES` of log (fewer when the index has fewer record starts). A task
walks its range segment by segment: the records of a segment run from the range's start (a
record start) to the range's end or to the blank record that ends the segment, and are checked
as recovery's walk checks them (frame rules, PHYSICALOFFSET at its place; not the body CRC),
then decoded in chunks of at most :data:`CHUNK_RECORDS` records and :data:`CHUNK_BYTES` bytes by
the columnar decoder. A position that holds
no valid record inside the visible log raises :class:`~localstore.errors.RecordError`: the log
is damaged there, and nothing after it in the range is skipped silently.

Every record is a row: every topic's, system topics' (retry, schedule, transaction half) and
those of topics deleted since, as the log holds them. ``topics`` / ``topicPattern`` and
``tags``, when given, filter the rows (:mod:`sdk.spark.row_filters`).
"""

from __future__ import annotations

import math
from bisect import bisect_right
from collections.abc import Iterator
from dataclasses import dataclass
from itertools import pairwise

import pyarrow as pa
from pyspark.sql.datasource import InputPartition

from localstore.read_only import ReadOnlyStore
from localstore.record.arrow.records import record_starts
from localstore.record.codec import RecordError
from localstore.record.walk import WALK_INVALID, WALK_SEGMENT_END, walk_segment
from quiver_errors import IllegalStateError
from sdk.spark.batches import records_to_batch
from sdk.spark.options import ReadOptions
from sdk.spark.row_filters import keep_tags, keep_topics
from sdk.spark.selection import TopicSelection

DEFAULT_PARTITION_BYTES = 64 * 1024 * 1024
CHUNK_RECORDS = 4096  # records per record batch
CHUNK_BYTES = 64 * 1024 * 1024  # bytes of records per record batch (one record at least)


@dataclass(frozen=True)
class LogRange:
    """Commitlog offsets ``[start_offset, end_offset)``; ``start_offset`` is a record start."""

    start_offset: int
    end_offset: int


class LogRangePartition(InputPartition):
    """One Spark task of a commitlog scan."""

    def __init__(self, log_range: LogRange) -> None:
        super().__init__(log_range)
        self.log_range = log_range


def plan_log_ranges(store: ReadOnlyStore, min_partitions: int | None) -> list[LogRange]:
    """The visible log cut into ranges at record starts (see the module docstring)."""
    low, high = store.commitlog.min_offset, store.visible_end
    parts = min_partitions or max(1, math.ceil((high - low) / DEFAULT_PARTITION_BYTES))
    return [LogRange(a, b) for a, b in pairwise(store.split_points(parts))]


def read_log_partition(
    store: ReadOnlyStore, log_range: LogRange, options: ReadOptions
) -> Iterator[pa.RecordBatch]:
    """The rows of ``log_range`` the options keep."""
    batches = read_log_range(store, log_range, options.include_body, options.include_properties)
    named = options.topics or options.topic_pattern
    selection = TopicSelection(options.topics, options.topic_pattern) if named else None
    return keep_tags(keep_topics(batches, selection), options.tags)


def read_log_range(
    store: ReadOnlyStore, log_range: LogRange, include_body: bool, include_properties: bool
) -> Iterator[pa.RecordBatch]:
    """Every record of ``log_range``, a batch per chunk (:data:`CHUNK_RECORDS` records and
    :data:`CHUNK_BYTES` bytes at most)."""
    position = log_range.start_offset
    while position < log_range.end_offset:
        located = store.commitlog.segment_view(position)
        if located is None:
            raise IllegalStateError(
                f"commitlog offset {position} is no longer in the store (removed by retention "
                "since the scan was planned)"
            )
        view, start = located
        base = position - start
        limit = min(len(view), log_range.end_offset - base)
        end, _, how = walk_segment(view, base, len(view), start, limit, False)
        if how == WALK_INVALID and end < limit:
            raise RecordError(f"no valid record at commitlog offset {base + end} (damaged log)")
        yield from _decoded(view[start:end], include_body, include_properties)
        position = base + len(view) if how == WALK_SEGMENT_END else base + end


def _decoded(
    records: memoryview, include_body: bool, include_properties: bool
) -> Iterator[pa.RecordBatch]:
    """Whole records laid end to end, decoded a chunk at a time (each chunk copied out of the
    mapping, so no batch holds on to the store's files)."""
    starts = record_starts(records, None).tolist()
    starts.append(len(records))
    first = 0
    while first < len(starts) - 1:
        last = min(first + CHUNK_RECORDS, len(starts) - 1)
        # at most CHUNK_BYTES (one record at least): a batch's values fit Arrow's 32-bit offsets
        within = bisect_right(starts, starts[first] + CHUNK_BYTES, first, last + 1) - 1
        last = max(first + 1, within)
        chunk = bytes(records[starts[first] : starts[last]])
        yield records_to_batch(chunk, include_body, include_properties)
        first = last
