"""``QuiverStreamReader``: the streaming read of the ``quiver`` format
(``spark.readStream.format("quiver")``), of a store directory (``path``) or of brokers
(``broker``): one reader, two sources of queue bounds and tasks.

Offsets are ``{"topic/queue": next_offset}`` (:mod:`sdk.spark.offsets`; with several brokers
the topic carries the broker's URL, ``"<url>#topic/queue"``); Spark keeps them in the query's
checkpoint, so a restart goes on from the last committed end: no offset is lost or read
twice. Each call reads the queues' bounds afresh through a :class:`QueueBounds` (the store
opened read-only, or each broker asked over HTTP), so queues, topics and records written
since are seen; a micro-batch ``[start, end)`` is cut into the batch read's queue ranges
(``minPartitions`` splitting them) and its tasks are the batch read's tasks (:class:`RangeTasks`).
``commit`` hands each committed end to the bounds (a broker read advances ``consumerGroup``).

Across pyspark versions (:mod:`sdk.spark.pyspark_api`; the Python worker picks the style from
``latestOffset``'s signature, which has parameters here):

* 4.2 and later: admission control. ``getDefaultReadLimit`` is ``maxOffsetsPerTrigger`` as a
  row limit; ``latestOffset(start, limit)`` caps the micro-batch at the limit Spark passes;
  ``prepareForTriggerAvailableNow`` fixes the end that ``Trigger.AvailableNow`` reads to;
  ``reportLatestOffset`` reports the store's latest offsets.
* 4.0 and 4.1: Spark calls ``latestOffset()`` without arguments and knows no read limit, so
  it answers every queue's latest (``Trigger.AvailableNow`` reads that, in one micro-batch);
  ``maxOffsetsPerTrigger`` cannot be honoured and is refused, never ignored.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextlib import AbstractContextManager
from typing import Any, Protocol

import pyarrow as pa
from pyspark.sql.datasource import DataSourceStreamReader, InputPartition

from quiver_errors import IllegalStateError
from sdk.spark.offsets import (
    QueueKey,
    from_json,
    initial_offsets,
    latest_offsets,
    micro_batch_ranges,
    next_end,
    to_json,
)
from sdk.spark.options import ReadOptions
from sdk.spark.pyspark_api import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
    require_admission_control,
)
from sdk.spark.ranges import QueueOffsets, QueueRange


class RangeTasks(Protocol):
    """The batch read's tasks, which a micro-batch's ranges run as (a store's
    :class:`sdk.spark.source.QuiverBatchReader`, brokers'
    :class:`sdk.spark.broker_source.QuiverBrokerReader`)."""

    def partitions_of(self, ranges: list[QueueRange]) -> Sequence[InputPartition]: ...
    def read(self, partition: Any) -> Iterator[pa.RecordBatch]: ...


class QueueBounds(Protocol):
    """Where a stream reads its queues' bounds (:class:`sdk.spark.store_access.StoreBounds`,
    :class:`sdk.spark.broker_source.BrokerBounds`): plain data, pickled with the reader."""

    def open(self) -> AbstractContextManager[QueueOffsets]:
        """The queues' current ids and offsets, valid inside the ``with``."""
        ...

    def commit(self, end: Mapping[str, int]) -> None:
        """Spark committed the micro-batch that ends at ``end`` (Spark's offset object)."""
        ...


class QuiverStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """The streaming read ``options`` ask for (parsed with ``streaming=True``; their topics
    named as ``bounds`` names them); ``tasks`` plans and reads a micro-batch's ranges,
    ``bounds`` gives the queues' offsets. Plain data until ``Trigger.AvailableNow`` fixes
    its end: Spark pickles it."""

    def __init__(self, options: ReadOptions, tasks: RangeTasks, bounds: QueueBounds) -> None:
        if options.max_offsets_per_trigger is not None:
            require_admission_control("maxOffsetsPerTrigger")
        self.read_options = options
        self.tasks = tasks
        self.bounds = bounds
        self.available_now_end: dict[QueueKey, int] | None = None

    def initialOffset(self) -> dict[str, int]:  # noqa: N802 (pyspark names it)
        """Where a new query starts: ``startingOffsets`` (default ``latest``) per queue."""
        with self.bounds.open() as store:
            return to_json(initial_offsets(store, self.read_options))

    def getDefaultReadLimit(self) -> ReadLimit:  # noqa: N802 (pyspark names it)
        """``maxOffsetsPerTrigger`` as a row limit, else every available record."""
        most = self.read_options.max_offsets_per_trigger
        return ReadAllAvailable() if most is None else ReadMaxRows(most)

    def prepareForTriggerAvailableNow(self) -> None:  # noqa: N802 (pyspark names it)
        """Fix the end ``Trigger.AvailableNow`` reads to: every queue's latest offset now
        (a queue created later is not read)."""
        with self.bounds.open() as store:
            self.available_now_end = latest_offsets(store, self.read_options)

    def latestOffset(  # noqa: N802 (pyspark names it)
        self, start: dict[str, int] | None = None, limit: ReadLimit | None = None
    ) -> dict[str, int]:
        """The end of the next micro-batch from ``start`` within ``limit`` (4.2+); every
        queue's latest when Spark passes neither (4.0, 4.1). ``start`` when nothing is new."""
        with self.bounds.open() as store:
            if start is None:
                return to_json(latest_offsets(store, self.read_options))
            end = next_end(
                store,
                self.read_options,
                from_json(start),
                _max_rows(limit),
                self.available_now_end,
            )
        return to_json(end)

    def reportLatestOffset(self) -> dict[str, int]:  # noqa: N802 (pyspark names it)
        """The queues' latest offsets, for the query's progress (how far behind it is)."""
        with self.bounds.open() as store:
            return to_json(latest_offsets(store, self.read_options))

    def partitions(self, start: dict[str, int], end: dict[str, int]) -> Sequence[InputPartition]:
        """The tasks of the micro-batch ``[start, end)``: the batch read's, a queue range
        each. Raises :class:`~sdk.spark.dataloss.DataLossError` when retention removed
        offsets of ``start`` (``failOnDataLoss``)."""
        with self.bounds.open() as store:
            ranges = micro_batch_ranges(store, self.read_options, from_json(start), from_json(end))
        return self.tasks.partitions_of(ranges)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        """A task's records, as the batch read yields them."""
        return self.tasks.read(partition)

    def commit(self, end: dict[str, int]) -> None:
        """Spark committed ``end``: the checkpoint holds it; the bounds are told (a broker
        read's ``consumerGroup`` advances to it; a store, only read, needs nothing)."""
        self.bounds.commit(end)


def _max_rows(limit: ReadLimit | None) -> int | None:
    """The row cap ``limit`` sets; None for every available record."""
    if limit is None or isinstance(limit, ReadAllAvailable):
        return None
    if isinstance(limit, ReadMaxRows):
        return limit.max_rows
    raise IllegalStateError(
        f"read limit {limit!r}: the quiver source honours a row limit (maxOffsetsPerTrigger) "
        "or reads every available record"
    )
