"""Filter pushdown for the ``quiver`` source (pyspark 4.1+): Spark's filters on ``topic``,
``queue_id``, ``queue_offset`` and ``store_timestamp`` narrow the queue ranges a read plans.

Spark hands :meth:`QuiverPushdownReader.pushFilters` the conjuncts of a query's filter; each
one this module understands narrows :class:`PushedBounds`, and the planner then drops queues
and cuts offset ranges (:func:`prune_ranges`):

=====================  =====================================  ==============================
column                 filters                                returned to Spark
=====================  =====================================  ==============================
``topic``              ``=``, ``IN``                          no (applied exactly)
``queue_id``           ``=``, ``IN``, ``<``, ``<=``, ``>``,   no
                       ``>=``
``queue_offset``       ``=``, ``<``, ``<=``, ``>``, ``>=``;   ``IN`` with gaps (its span is
                       ``IN`` (its span)                      read)
``store_timestamp``    ``=``, ``IN`` (its span), ``<``,       yes: cut through the store's
                       ``<=``, ``>``, ``>=``                  seek by time
any never-null column  ``IS NOT NULL``                        no (always true)
=====================  =====================================  ==============================

Everything else is returned untouched, and Spark applies what is returned to every row. A
filter on ``store_timestamp`` cuts each queue at the first offset stored at or after a time
(:meth:`~localstore.read_only.ReadOnlyStore.offset_for_timestamp`), which is exact while a
queue's store times do not decrease; Spark re-checks each row, so a row outside the time range
that a cut keeps is never returned. A row inside it is missed only when the broker's clock
stepped back while it wrote the queue (as with Kafka's seek by time).

Spark calls ``pushFilters`` only when ``spark.sql.python.filterPushdown.enabled`` is true, and
refuses a reader that defines it while the setting is false: :func:`sdk.spark.register` picks
:class:`QuiverPushdownDataSource` or the plain :class:`~sdk.spark.source.QuiverDataSource` by
the session's setting. This module imports pyspark 4.1's filter classes: on 4.0 importing it
raises ImportError naming the version (:mod:`sdk.spark.pyspark_api`).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from typing import Any

from pyspark.sql.datasource import DataSourceReader
from pyspark.sql.types import StructType

from sdk.spark.broker_source import QuiverBrokerReader
from sdk.spark.options import SCAN_QUEUES, ReadOptions, parse_read_options
from sdk.spark.pyspark_api import require_filter_pushdown
from sdk.spark.ranges import QueueOffsets, QueueRange, split_ranges, whole_ranges
from sdk.spark.source import QuiverBatchReader, QuiverDataSource

try:  # pyspark 4.1 and later
    from pyspark.sql.datasource import (
        EqualNullSafe,
        EqualTo,
        Filter,
        GreaterThan,
        GreaterThanOrEqual,
        In,
        IsNotNull,
        LessThan,
        LessThanOrEqual,
    )
except ImportError:  # pyspark 4.0
    require_filter_pushdown(__name__)  # raises, naming the version
    raise

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MICROSECOND = timedelta(microseconds=1)
_NEVER_NULL = frozenset(
    ("topic", "queue_id", "queue_offset", "msg_id", "offset_msg_id", "keys", "body",
     "born_timestamp", "store_timestamp", "reconsume_times", "properties")
)  # fmt: skip
_ORDERINGS = (GreaterThan, GreaterThanOrEqual, LessThan, LessThanOrEqual)


@dataclass(frozen=True)
class PushedBounds:
    """What the pushed filters allow: topics and queue ids (None: any), queue offsets
    ``[offset_start, offset_end)``, store times ``[time_start_ms, time_end_ms)`` (None: open)."""

    topics: frozenset[str] | None = None
    queue_ids: frozenset[int] | None = None
    queue_id_start: int = 0
    queue_id_end: int | None = None
    offset_start: int = 0
    offset_end: int | None = None
    time_start_ms: int | None = None
    time_end_ms: int | None = None

    def admits_queue(self, topic: str, queue_id: int) -> bool:
        return (
            (self.topics is None or topic in self.topics)
            and (self.queue_ids is None or queue_id in self.queue_ids)
            and self.queue_id_start <= queue_id
            and (self.queue_id_end is None or queue_id < self.queue_id_end)
        )


NOTHING_PUSHED = PushedBounds()


def push_filters(filters: Iterable[Filter]) -> tuple[PushedBounds, list[Filter]]:
    """The bounds ``filters`` (a conjunction) set, and those of them Spark must still apply
    (the very objects it passed)."""
    bounds = NOTHING_PUSHED
    left: list[Filter] = []
    for pushed in filters:
        narrowed = _narrow(bounds, pushed)
        if narrowed is None:
            left.append(pushed)
            continue
        bounds, exact = narrowed
        if not exact:
            left.append(pushed)
    return bounds, left


def _narrow(bounds: PushedBounds, pushed: Filter) -> tuple[PushedBounds, bool] | None:
    """``bounds`` narrowed by ``pushed`` and whether that applies it exactly; None when this
    module does not take it."""
    attribute: tuple[str, ...] = getattr(pushed, "attribute", ())
    if len(attribute) != 1:
        return None
    column = attribute[0]
    if isinstance(pushed, IsNotNull):
        return (bounds, True) if column in _NEVER_NULL else None
    value = getattr(pushed, "value", None)
    if isinstance(pushed, EqualTo | EqualNullSafe):
        values: tuple[Any, ...] = (value,)
    elif isinstance(pushed, In):
        values = tuple(pushed.value)
    elif isinstance(pushed, _ORDERINGS):
        return _narrow_order(bounds, column, pushed, value)
    else:
        return None
    return _narrow_values(bounds, column, values) if values else None


def _narrow_values(
    bounds: PushedBounds, column: str, values: tuple[Any, ...]
) -> tuple[PushedBounds, bool] | None:
    if column == "topic" and all(isinstance(v, str) for v in values):
        topics = frozenset(values)
        return replace(bounds, topics=_both(topics, bounds.topics)), True
    if column == "queue_id" and all(_is_int(v) for v in values):
        queue_ids = frozenset(values)
        return replace(bounds, queue_ids=_both(queue_ids, bounds.queue_ids)), True
    if column == "queue_offset" and all(_is_int(v) for v in values):
        low, high = min(values), max(values) + 1
        narrowed = _offsets(bounds, low, high)
        return narrowed, len(set(values)) == high - low
    if column == "store_timestamp" and all(_is_time(v) for v in values):
        micros = [_micros(v) for v in values]
        return _times(bounds, _ceil_ms(min(micros)), max(micros) // 1000 + 1), False
    return None


def _narrow_order(
    bounds: PushedBounds, column: str, pushed: Filter, value: Any
) -> tuple[PushedBounds, bool] | None:
    """``column > value`` and the like, as a half-open range of integers."""
    if column in ("queue_id", "queue_offset") and _is_int(value):
        low, high = _integer_range(pushed, value)
        if column == "queue_id":
            start = max(low, bounds.queue_id_start)
            end = _min_end(high, bounds.queue_id_end)
            return replace(bounds, queue_id_start=start, queue_id_end=end), True
        return _offsets(bounds, low, high), True
    if column == "store_timestamp" and _is_time(value):
        micros = _micros(value)
        # store times are whole ms: t > v  <=>  t_ms > v_us / 1000  <=>  t_ms >= v_us // 1000 + 1
        low_ms, high_ms = {
            GreaterThan: (micros // 1000 + 1, None),
            GreaterThanOrEqual: (_ceil_ms(micros), None),
            LessThan: (0, _ceil_ms(micros)),
            LessThanOrEqual: (0, micros // 1000 + 1),
        }[type(pushed)]
        return _times(bounds, low_ms, high_ms), False
    return None


def _integer_range(pushed: Filter, value: int) -> tuple[int, int | None]:
    return {
        GreaterThan: (value + 1, None),
        GreaterThanOrEqual: (value, None),
        LessThan: (0, value),
        LessThanOrEqual: (0, value + 1),
    }[type(pushed)]


def _offsets(bounds: PushedBounds, low: int, high: int | None) -> PushedBounds:
    start = max(low, bounds.offset_start)
    return replace(bounds, offset_start=start, offset_end=_min_end(high, bounds.offset_end))


def _times(bounds: PushedBounds, low_ms: int, high_ms: int | None) -> PushedBounds:
    start = low_ms if bounds.time_start_ms is None else max(low_ms, bounds.time_start_ms)
    return replace(bounds, time_start_ms=start, time_end_ms=_min_end(high_ms, bounds.time_end_ms))


def _min_end(one: int | None, other: int | None) -> int | None:
    """The nearer of two exclusive ends (None: no end)."""
    if one is None or other is None:
        return other if one is None else one
    return min(one, other)


def _both(one: frozenset[Any], other: frozenset[Any] | None) -> frozenset[Any]:
    """The values both sets allow (``other`` None: any)."""
    return one if other is None else one & other


def _is_int(value: Any) -> bool:
    return type(value) is int


def _is_time(value: Any) -> bool:
    return isinstance(value, datetime) and value.tzinfo is not None


def _micros(value: datetime) -> int:
    return (value - _EPOCH) // _MICROSECOND


def _ceil_ms(micros: int) -> int:
    return -(-micros // 1000)


def prune_ranges(
    store: QueueOffsets, ranges: Iterable[QueueRange], bounds: PushedBounds
) -> Iterator[QueueRange]:
    """``ranges`` cut to ``bounds``: queues it excludes dropped, offsets and times cut (times
    through the store's seek by time), empty ranges left out."""
    for whole in ranges:
        topic, queue_id = whole.topic, whole.queue_id
        if not bounds.admits_queue(topic, queue_id):
            continue
        start = max(whole.start_offset, bounds.offset_start)
        end = (
            whole.end_offset
            if bounds.offset_end is None
            else min(whole.end_offset, bounds.offset_end)
        )
        if bounds.time_start_ms is not None and start < end:
            start = max(start, store.offset_for_timestamp(topic, queue_id, bounds.time_start_ms))
        if bounds.time_end_ms is not None and start < end:
            end = min(end, store.offset_for_timestamp(topic, queue_id, bounds.time_end_ms))
        if start < end:
            yield QueueRange(topic, queue_id, start, end)


class QuiverPushdownReader(QuiverBatchReader):
    """The batch reader with :meth:`pushFilters` (see the module docstring)."""

    def __init__(self, options: ReadOptions) -> None:
        super().__init__(options)
        self.pushed = NOTHING_PUSHED

    def pushFilters(self, filters: list[Filter]) -> Iterable[Filter]:  # noqa: N802 (Spark's name)
        if self.read_options.scan != SCAN_QUEUES:
            return filters  # a commitlog scan reads the whole log: Spark filters its rows
        self.pushed, left = push_filters(filters)
        return left

    def plan(self, store: QueueOffsets) -> list[QueueRange]:
        ranges = prune_ranges(store, whole_ranges(store, self.read_options), self.pushed)
        return split_ranges(list(ranges), self.read_options.min_partitions)


class QuiverPushdownDataSource(QuiverDataSource):
    """The ``quiver`` format with filter pushdown (pyspark 4.1+, with
    ``spark.sql.python.filterPushdown.enabled`` true): register it instead of
    :class:`~sdk.spark.source.QuiverDataSource`, or let :func:`sdk.spark.register` choose."""

    def reader(self, schema: StructType) -> DataSourceReader:
        """Pushdown for a store directory; a read of brokers prunes nothing (Spark filters)."""
        options = parse_read_options(self.options)
        if options.brokers:
            return QuiverBrokerReader(options)
        return QuiverPushdownReader(options)
