"""The queue ranges a batch read covers: ``[start, end)`` queue offsets per topic and queue,
resolved from the options against a store's offsets (bounds by time through its seek by time,
:mod:`sdk.spark.timestamps`), then cut into at least ``minPartitions`` pieces. Plain data, no
pyspark.

Invariants: the ranges of one topic and queue are disjoint and adjacent, so every queue offset
of the read is in exactly one range; an empty range is left out; a bound the store cannot
serve (beyond its latest, or an end before its start) is refused with
:class:`InvalidArgumentError` naming the option, never clamped; a start below the queue's
earliest readable offset is data loss (:mod:`sdk.spark.dataloss`, ``failOnDataLoss``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from quiver_errors import InvalidArgumentError
from sdk.spark.dataloss import start_within
from sdk.spark.options import (
    EARLIEST,
    EARLIEST_SENTINEL,
    LATEST,
    LATEST_SENTINEL,
    OffsetSpec,
    ReadOptions,
)
from sdk.spark.selection import TopicSelection
from sdk.spark.timestamps import named_queues, resolve_time_bound


class QueueOffsets(Protocol):
    """What planning reads of a store (``localstore.ReadOnlyStore`` has it)."""

    def queue_ids(self, topic: str) -> list[int]: ...
    def min_offset(self, topic: str, queue_id: int) -> int: ...
    def max_offset(self, topic: str, queue_id: int) -> int: ...
    def offset_for_timestamp(self, topic: str, queue_id: int, timestamp_ms: int) -> int: ...
    def topic_names(self) -> list[str]: ...


@dataclass(frozen=True)
class QueueRange:
    """Queue offsets ``[start_offset, end_offset)`` of ``topic``/``queue_id``."""

    topic: str
    queue_id: int
    start_offset: int
    end_offset: int

    @property
    def count(self) -> int:
        return self.end_offset - self.start_offset


def plan_ranges(store: QueueOffsets, options: ReadOptions) -> list[QueueRange]:
    """The non-empty ranges the read covers, split to honour ``minPartitions``."""
    return split_ranges(whole_ranges(store, options), options.min_partitions)


def whole_ranges(store: QueueOffsets, options: ReadOptions) -> list[QueueRange]:
    """The non-empty ranges the read covers, one per queue (not split)."""
    ranges = []
    for topic in read_topics(store, options):
        for queue_id in _selected_queues(store, topic, options):
            found = _queue_range(store, topic, queue_id, options)
            if found.count:
                ranges.append(found)
    check_json_queues(options, store)
    return ranges


def read_topics(store: QueueOffsets, options: ReadOptions) -> tuple[str, ...]:
    """The topics the read covers: ``topics``, or the store's topics ``topicPattern``
    matches (sorted; none is no error: the read is empty)."""
    selection = TopicSelection(options.topics, options.topic_pattern)
    return selection.resolve(store.topic_names() if options.topic_pattern else ())


def _selected_queues(store: QueueOffsets, topic: str, options: ReadOptions) -> list[int]:
    existing = store.queue_ids(topic)
    if not existing:
        source = options.path or ", ".join(options.brokers)
        raise InvalidArgumentError(f"topics: topic {topic!r} has no queue in {source}")
    if options.queues is None:
        return existing
    missing = [queue_id for queue_id in options.queues if queue_id not in existing]
    if missing:
        raise InvalidArgumentError(
            f"queues: topic {topic!r} has no queue {missing[0]} (its queues: {existing})"
        )
    return list(options.queues)


def _queue_range(
    store: QueueOffsets, topic: str, queue_id: int, options: ReadOptions
) -> QueueRange:
    earliest = store.min_offset(topic, queue_id)
    latest = store.max_offset(topic, queue_id)
    where = f"{topic!r} queue {queue_id}"
    start = _bound(options.starting_offsets, topic, queue_id, earliest, latest, EARLIEST)
    end = _bound(options.ending_offsets, topic, queue_id, earliest, latest, LATEST)
    times = options.timestamps
    start = resolve_time_bound(store, times.starting, topic, queue_id, start)
    end = resolve_time_bound(store, times.ending, topic, queue_id, end)
    if start > latest:
        raise InvalidArgumentError(
            f"startingOffsets: {where} offset {start} is beyond the latest, {latest}"
        )
    if not start <= end <= latest:
        named = "endingOffsets" if times.ending is None else times.ending.option
        raise InvalidArgumentError(
            f"{named}: {where} offset {end} is outside [{start} (the start), {latest}]"
        )
    if start < end:
        start = start_within(topic, queue_id, start, earliest, options.fail_on_data_loss)
    return QueueRange(topic, queue_id, start, max(start, end))


def _bound(
    spec: OffsetSpec, topic: str, queue_id: int, earliest: int, latest: int, default: str
) -> int:
    """One bound for one queue: a queue the JSON does not name takes the option's default."""
    if isinstance(spec, str):
        return earliest if spec == EARLIEST else latest
    offset = spec.get(topic, {}).get(queue_id)
    if offset is None:
        return earliest if default == EARLIEST else latest
    return {EARLIEST_SENTINEL: earliest, LATEST_SENTINEL: latest}.get(offset, offset)


def check_json_queues(options: ReadOptions, store: QueueOffsets) -> None:
    """Refuse JSON offsets that name a queue the read does not cover (a typo would otherwise
    read the whole queue from its default bound)."""
    times = options.timestamps
    for name, spec in (
        ("startingOffsets", options.starting_offsets),
        ("endingOffsets", options.ending_offsets),
        *((bound.option, named_queues(bound)) for bound in (times.starting, times.ending) if bound),
    ):
        if isinstance(spec, str):
            continue
        for topic, per_queue in spec.items():
            covered = set(store.queue_ids(topic))
            if options.queues is not None:
                covered &= set(options.queues)
            for queue_id in per_queue:
                if queue_id not in covered:
                    raise InvalidArgumentError(
                        f"{name}: {topic!r} queue {queue_id} is not read "
                        f"(queues read: {sorted(covered)})"
                    )


def split_ranges(ranges: Sequence[QueueRange], min_partitions: int | None) -> list[QueueRange]:
    """``ranges`` cut into at least ``min_partitions`` pieces when they hold that many
    offsets: each range into pieces in proportion to its share of the offsets (as Kafka's
    source does), pieces of one range differing by at most one offset."""
    total = sum(r.count for r in ranges)
    if min_partitions is None or len(ranges) >= min_partitions or total == 0:
        return list(ranges)
    pieces = []
    for whole in ranges:
        parts = min(whole.count, math.ceil(whole.count * min_partitions / total))
        for index in range(parts):
            start = whole.start_offset + whole.count * index // parts
            end = whole.start_offset + whole.count * (index + 1) // parts
            pieces.append(QueueRange(whole.topic, whole.queue_id, start, end))
    return pieces
