"""Streaming offsets of the ``quiver`` source and the micro-batch ranges between two of them:
plain data, no pyspark.

An offset is Spark's JSON object ``{"topic/queue": next_offset}``: for each queue read, the
queue offset the next micro-batch starts at (every offset below it is read). Spark writes it
to the checkpoint and hands it back as start and end of each micro-batch; a micro-batch
reads ``[start, end)`` of every queue, so consecutive micro-batches read adjacent, disjoint
ranges, and a restart from the checkpoint neither loses nor repeats an offset.

Queues and topics appear while a stream runs: a queue absent from the start offset starts at
its earliest readable offset, and joins the end offset once it holds a record. A queue of the
start offset is never dropped from an end offset, nor moved back.

``maxOffsetsPerTrigger`` shares its budget across the queues in proportion to their backlog
(as Kafka's source does), by largest remainder, so a micro-batch holds at most the budget
and, the remainders' ties going to the larger backlog, no queue waits forever.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from quiver_errors import IllegalStateError, InvalidArgumentError
from sdk.spark.dataloss import start_within
from sdk.spark.options import EARLIEST, ReadOptions
from sdk.spark.ranges import (
    QueueOffsets,
    QueueRange,
    _bound,
    check_json_queues,
    read_topics,
    split_ranges,
)
from sdk.spark.timestamps import resolve_time_bound

# A queue read: (topic, queue id).
QueueKey = tuple[str, int]


def to_json(offsets: Mapping[QueueKey, int]) -> dict[str, int]:
    """``offsets`` as Spark's offset object ``{"topic/queue": next_offset}``, sorted."""
    return {f"{topic}/{queue_id}": offsets[topic, queue_id] for topic, queue_id in sorted(offsets)}


def from_json(offset: Mapping[str, object]) -> dict[QueueKey, int]:
    """Spark's offset object back as ``{(topic, queue id): next_offset}``;
    :class:`IllegalStateError` for one that is not this source's (a checkpoint of another)."""
    parsed = {}
    for key, next_offset in offset.items():
        topic, _, queue = key.rpartition("/")
        if not topic or not queue.isdigit() or type(next_offset) is not int or next_offset < 0:
            raise IllegalStateError(
                f"offset {key!r}: {next_offset!r} is not a quiver stream offset "
                f'({{"topic/queue": next_offset}}): a checkpoint of another source?'
            )
        parsed[topic, int(queue)] = next_offset
    return parsed


def read_queues(store: QueueOffsets, options: ReadOptions) -> list[QueueKey]:
    """The queues the stream reads now: every queue of each topic (those of ``queues`` when
    given, of the topics ``topicPattern`` matches now when given) the store has; a topic not
    created yet has none."""
    return [
        (topic, queue_id)
        for topic in read_topics(store, options)
        for queue_id in store.queue_ids(topic)
        if options.queues is None or queue_id in options.queues
    ]


def latest_offsets(store: QueueOffsets, options: ReadOptions) -> dict[QueueKey, int]:
    """One past the last readable offset of every queue read."""
    return {key: store.max_offset(*key) for key in read_queues(store, options)}


def initial_offsets(store: QueueOffsets, options: ReadOptions) -> dict[QueueKey, int]:
    """Where a new stream starts (``startingOffsets``, or a start by time):
    :class:`InvalidArgumentError` for a JSON offset beyond a queue's latest or naming a queue
    not read. A start below a queue's earliest is judged when read (``failOnDataLoss``)."""
    check_json_queues(options, store)
    offsets = {}
    for key in read_queues(store, options):
        earliest, latest = store.min_offset(*key), store.max_offset(*key)
        start = _bound(options.starting_offsets, *key, earliest, latest, EARLIEST)
        start = resolve_time_bound(store, options.timestamps.starting, *key, start)
        if start > latest:
            raise InvalidArgumentError(
                f"startingOffsets: {key[0]!r} queue {key[1]} offset {start} is beyond the "
                f"latest, {latest}"
            )
        offsets[key] = start
    return offsets


def next_end(
    store: QueueOffsets,
    options: ReadOptions,
    start: Mapping[QueueKey, int],
    max_rows: int | None,
    target: Mapping[QueueKey, int] | None = None,
) -> dict[QueueKey, int]:
    """The end offset of the micro-batch that begins at ``start``: every queue's latest, at
    most ``max_rows`` records past ``start`` in all, and no further than ``target`` (the end
    that ``Trigger.AvailableNow`` fixed, where a queue it does not name is not read).
    ``start`` itself when there is nothing new."""
    latest = latest_offsets(store, options)
    if target is not None:
        latest = {key: min(last, target[key]) for key, last in latest.items() if key in target}
    begins = {}
    for key in latest:
        earliest = store.min_offset(*key)
        begins[key] = max(start.get(key, earliest), earliest)  # removed offsets: partitions()
    ends = cap_offsets(begins, latest, max_rows)
    end = dict(start)
    for key, queue_end in ends.items():
        if key in start or queue_end > begins[key]:
            end[key] = max(queue_end, start.get(key, queue_end))
    return end


def cap_offsets(
    begins: Mapping[QueueKey, int], latest: Mapping[QueueKey, int], max_rows: int | None
) -> dict[QueueKey, int]:
    """Per queue, an end in ``[begin, max(begin, latest)]``, the ends together at most
    ``max_rows`` past the begins (no cap when None): each queue's share is proportional to
    its backlog, rounded down, and the offsets left over go one each to the queues with the
    largest remainders (ties to the larger backlog, then to the queue first in order)."""
    backlog = {key: max(0, latest[key] - begin) for key, begin in begins.items()}
    total = sum(backlog.values())
    if max_rows is None or total <= max_rows:
        return {key: begins[key] + backlog[key] for key in begins}
    exact = {key: backlog[key] * max_rows / total for key in begins}
    share = {key: math.floor(exact[key]) for key in begins}
    left = max_rows - sum(share.values())
    by_remainder = sorted(begins, key=lambda key: (share[key] - exact[key], -backlog[key], key))
    for key in by_remainder[:left]:
        share[key] += 1
    return {key: begins[key] + share[key] for key in begins}


def micro_batch_ranges(
    store: QueueOffsets,
    options: ReadOptions,
    start: Mapping[QueueKey, int],
    end: Mapping[QueueKey, int],
) -> list[QueueRange]:
    """The ranges ``[start, end)`` of a micro-batch, cut into at least ``minPartitions``
    pieces. A queue absent from ``start`` starts at its earliest readable offset; a start
    below a queue's earliest is data loss (:func:`~sdk.spark.dataloss.start_within`)."""
    ranges = []
    for (topic, queue_id), end_offset in sorted(end.items()):
        earliest = store.min_offset(topic, queue_id)
        begin = start.get((topic, queue_id), earliest)
        if begin >= end_offset:
            continue
        begin = start_within(topic, queue_id, begin, earliest, options.fail_on_data_loss)
        if begin < end_offset:
            ranges.append(QueueRange(topic, queue_id, begin, end_offset))
    return split_ranges(ranges, options.min_partitions)
