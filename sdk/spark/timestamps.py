"""The ``quiver`` source's bounds by store time: parsed options and their resolution through
the store's seek by time. Plain data, no pyspark.

Options (Spark's Kafka source's names; times are epoch milliseconds):

* ``startingTimestamp``: one time for every queue read.
* ``startingOffsetsByTimestamp``: JSON ``{"orders": {"0": 1700000000000}}``, a time per topic
  and queue; a queue not named starts at its earliest offset.
* ``endingTimestamp`` / ``endingOffsetsByTimestamp``: the same for the (exclusive) end; a queue
  not named ends at its latest offset.

Resolution, as Kafka's ``offsetsForTimes``: a time resolves to the first queue offset whose
store time is >= it (:meth:`localstore.read_only.ReadOnlyStore.offset_for_timestamp`); a time
older than the queue's earliest readable message resolves to that message, a time past its
newest to the queue's end (so a start past the end reads nothing). Exact when a queue's store
times do not decrease (they only do when the broker's clock stepped back; the store's seek then
finds one crossing of the time, as RocketMQ's does).

Each bound is given one way only: ``startingOffsets``, ``startingTimestamp`` and
``startingOffsetsByTimestamp`` exclude each other, as do ``endingOffsets``, ``endingTimestamp``
and ``endingOffsetsByTimestamp``; a read that names two of one group is refused with
:class:`InvalidArgumentError` naming both (Kafka's source would silently rank them).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Protocol

import orjson

from quiver_errors import InvalidArgumentError
from sdk.spark.queue_tables import queue_table

# One bound by time: a time for every queue, or {topic: {queue id: time ms}}.
TimeSpec = int | dict[str, dict[int, int]]

STARTING_GROUP = ("startingOffsets", "startingTimestamp", "startingOffsetsByTimestamp")
ENDING_GROUP = ("endingOffsets", "endingTimestamp", "endingOffsetsByTimestamp")
TIMESTAMP_OPTIONS = (*STARTING_GROUP[1:], *ENDING_GROUP[1:])


class SeeksByTime(Protocol):
    """What resolving a time needs of a store (``ReadOnlyStore`` has it)."""

    def offset_for_timestamp(self, topic: str, queue_id: int, timestamp_ms: int) -> int: ...


@dataclass(frozen=True)
class TimeBound:
    """A bound given by time, and the option that gave it (for messages)."""

    option: str
    spec: TimeSpec

    def time_for(self, topic: str, queue_id: int) -> int | None:
        """The time this bound gives ``topic``/``queue_id``; None for a queue it leaves to the
        default (not named in the JSON form)."""
        if isinstance(self.spec, int):
            return self.spec
        return self.spec.get(topic, {}).get(queue_id)


@dataclass(frozen=True)
class TimestampOptions:
    """The read's bounds by time; None where the bound is not given by time."""

    starting: TimeBound | None = None
    ending: TimeBound | None = None


NO_TIMESTAMPS = TimestampOptions()


def parse_timestamp_options(
    options: Mapping[str, str], is_read_topic: Callable[[str], bool]
) -> TimestampOptions:
    """The time bounds of ``options`` (keys lower-cased), checked: a malformed value, a topic
    the read does not cover, or two options for one bound raise :class:`InvalidArgumentError`
    naming the option(s)."""
    for group in (STARTING_GROUP, ENDING_GROUP):
        given = [name for name in group if name.lower() in options]
        if len(given) > 1:
            raise InvalidArgumentError(
                f"{given[0]}: conflicts with {given[1]}; give the bound one way only"
            )
    bounds = TimestampOptions(
        starting=_bound(options, STARTING_GROUP, is_read_topic),
        ending=_bound(options, ENDING_GROUP, is_read_topic),
    )
    if bounds.starting is not None and bounds.ending is not None:
        start, end = bounds.starting.spec, bounds.ending.spec
        if isinstance(start, int) and isinstance(end, int) and end < start:
            raise InvalidArgumentError(
                f"{bounds.ending.option}: {end} is before {bounds.starting.option} {start}"
            )
    return bounds


def _bound(
    options: Mapping[str, str], group: tuple[str, ...], is_read_topic: Callable[[str], bool]
) -> TimeBound | None:
    _, one_time, per_queue = group
    if one_time.lower() in options:
        return TimeBound(one_time, _time(options[one_time.lower()], one_time))
    if per_queue.lower() in options:
        return TimeBound(
            per_queue, _time_table(options[per_queue.lower()], per_queue, is_read_topic)
        )
    return None


def _time(text: str, name: str) -> int:
    stripped = text.strip()
    if not stripped.isdigit():
        raise InvalidArgumentError(
            f"{name}: expected a time in epoch milliseconds (an integer >= 0), got {text!r}"
        )
    return int(stripped)


def _time_table(
    text: str, name: str, is_read_topic: Callable[[str], bool]
) -> dict[str, dict[int, int]]:
    try:
        parsed = orjson.loads(text)
    except orjson.JSONDecodeError:
        parsed = None
    if not isinstance(parsed, dict):
        raise InvalidArgumentError(
            f'{name}: expected JSON such as {{"topic": {{"0": 1700000000000}}}}, got {text!r}'
        )
    return queue_table(parsed, name, is_read_topic, _queue_time)


def _queue_time(value: object, name: str, where: str) -> int:
    if type(value) is not int or value < 0:
        raise InvalidArgumentError(
            f"{name}: {where} has time {value!r}; a time is an integer >= 0 (epoch milliseconds)"
        )
    return value


def resolve_time_bound(
    store: SeeksByTime, bound: TimeBound | None, topic: str, queue_id: int, default: int
) -> int:
    """The queue offset ``bound`` gives ``topic``/``queue_id``: the first offset stored at or
    after its time (the queue's end when every message is older); ``default`` when the bound is
    not by time or leaves this queue out."""
    time_ms = None if bound is None else bound.time_for(topic, queue_id)
    if time_ms is None:
        return default
    return store.offset_for_timestamp(topic, queue_id, time_ms)


def named_queues(bound: TimeBound | None) -> dict[str, list[int]]:
    """The queues a per-queue bound names, by topic (empty for a single time or no bound)."""
    if bound is None or isinstance(bound.spec, int):
        return {}
    return {topic: sorted(per_queue) for topic, per_queue in bound.spec.items()}
