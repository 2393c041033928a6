"""The ``quiver`` source reading brokers over HTTP (``broker`` option), for clusters whose
executors share no disk with the store.

The planner asks each broker for its queues' bounds (``queue_count``, ``min_offset``,
``max_offset``) and cuts the read into queue ranges exactly as a store read does
(:func:`sdk.spark.ranges.plan_ranges`). Each task pulls its range's stored record bytes in bulk
with the broker's pull (``POST /v1/pull``: a pull names its queue offset and commits nothing, so
it is a raw range read; its answer frames each queue's records as they lie in the log,
:mod:`sdk.protocol.pull_body`) and decodes them with the same columnar decoder
(:func:`sdk.spark.batches.records_to_batch`). No route was added for it.

Several URLs are several brokers: the read covers the topics' queues on each of them (a topic
a broker lacks has no offsets there, so nothing). Streaming offsets are
``{"topic/queue": next_offset}`` (with several brokers ``"<url>#topic/queue"``). With
``consumerGroup`` a streaming read commits each micro-batch's end offsets as that group's
broker offsets when Spark commits it, so the broker's lag reports (``quiver group lag``) show
how far the query is behind; the query's own position stays in its checkpoint.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, replace
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSourceReader, DataSourceStreamReader, InputPartition

from offsetstore import MessageQueue
from quiver_errors import IllegalStateError
from sdk.spark.batches import records_to_batch
from sdk.spark.options import (
    EARLIEST,
    EARLIEST_SENTINEL,
    LATEST,
    LATEST_SENTINEL,
    ReadOptions,
)
from sdk.spark.ranges import QueueRange, plan_ranges, split_ranges
from sdk.spark.row_filters import keep_tags
from sdk.transport.http_sync import HttpTransport
from sdk.transport.models import PullBatch, QueuePull

PULL_RECORDS = 4096  # records per pull, and so per record batch
PULL_BYTES = 8 << 20
READER_GROUP = "quiver-spark-reader"  # the pulls' group: it names no offsets and commits none


class BrokerQueues:
    """A broker's queue bounds as :class:`sdk.spark.ranges.QueueOffsets`."""

    def __init__(self, transport: Any) -> None:
        self.transport = transport

    def queue_ids(self, topic: str) -> list[int]:
        return list(range(self.transport.queue_count(topic)))

    def min_offset(self, topic: str, queue_id: int) -> int:
        return int(self.transport.min_offset(topic, queue_id))

    def max_offset(self, topic: str, queue_id: int) -> int:
        return int(self.transport.max_offset(topic, queue_id))

    def offset_for_timestamp(self, topic: str, queue_id: int, timestamp_ms: int) -> int:
        return int(self.transport.offset_for_timestamp(topic, queue_id, timestamp_ms))

    def topic_names(self) -> list[str]:
        """The broker's topics, sorted (for ``topicPattern``)."""
        return sorted(topic.name for topic in self.transport.list_topics())


@dataclass(frozen=True)
class BrokerRange:
    """One task's range on the broker at ``url``."""

    url: str
    queue_range: QueueRange


class BrokerRangePartition(InputPartition):
    """One Spark task: a :class:`BrokerRange`."""

    def __init__(self, broker_range: BrokerRange) -> None:
        super().__init__(broker_range)
        self.broker_range = broker_range


def plan_broker_ranges(options: ReadOptions) -> list[BrokerRange]:
    """The read's ranges on every broker, split to honour ``minPartitions`` over them all."""
    found = []
    for url in options.brokers:
        with HttpTransport(url) as transport:
            ranges = plan_ranges(BrokerQueues(transport), replace(options, min_partitions=None))
        found += [(url, queue_range) for queue_range in ranges]
    return _split_per_broker(found, options.min_partitions)


def _split_per_broker(
    found: list[tuple[str, QueueRange]], min_partitions: int | None
) -> list[BrokerRange]:
    """``found`` cut as :func:`split_ranges` cuts ranges of one store: each range into pieces
    in proportion to its share of all offsets, when there are fewer than ``min_partitions``."""
    total = sum(queue_range.count for _url, queue_range in found)
    if min_partitions is None or len(found) >= min_partitions or total == 0:
        return [BrokerRange(url, queue_range) for url, queue_range in found]
    pieces = []
    for url, queue_range in found:
        share = -(-queue_range.count * min_partitions // total)  # ceil
        pieces += [BrokerRange(url, piece) for piece in split_ranges([queue_range], share)]
    return pieces


def read_broker_range(
    transport: Any, queue_range: QueueRange, include_body: bool, include_properties: bool
) -> Iterator[pa.RecordBatch]:
    """The records of ``queue_range`` pulled from the broker, a batch per pull.
    :class:`IllegalStateError` when the broker no longer serves an offset of the range."""
    topic, queue_id = queue_range.topic, queue_range.queue_id
    offset = queue_range.start_offset
    while offset < queue_range.end_offset:
        count = min(PULL_RECORDS, queue_range.end_offset - offset)
        batch = PullBatch(READER_GROUP, (QueuePull(topic, queue_id, offset),), count, PULL_BYTES)
        (got,) = transport.pull(batch).results
        if got.status != "FOUND" or not got.count or got.next_offset <= offset:
            raise IllegalStateError(
                f"{topic!r} queue {queue_id} offset {offset} is no longer served by the broker "
                f"({got.status}; readable [{got.min_offset}, {got.max_offset}))"
            )
        if got.next_offset > queue_range.end_offset:  # pulled past the range: keep its part
            raise IllegalStateError(f"the pull of {topic!r} queue {queue_id} overran its count")
        yield records_to_batch(got.raw, include_body, include_properties)
        offset = got.next_offset


class QuiverBrokerReader(DataSourceReader):
    """A batch read of brokers (plain data: it is pickled to tasks)."""

    def __init__(self, options: ReadOptions) -> None:
        self.read_options = options

    def partitions(self) -> list[BrokerRangePartition]:
        return [BrokerRangePartition(found) for found in plan_broker_ranges(self.read_options)]

    def read(self, partition: Any) -> Iterator[pa.RecordBatch]:
        if not isinstance(partition, BrokerRangePartition):
            return  # Spark's stand-in partition when partitions() planned none
        yield from _read_partition(self.read_options, partition)


def _read_partition(
    options: ReadOptions, partition: BrokerRangePartition
) -> Iterator[pa.RecordBatch]:
    found = partition.broker_range
    with HttpTransport(found.url) as transport:
        batches = read_broker_range(
            transport, found.queue_range, options.include_body, options.include_properties
        )
        yield from keep_tags(batches, options.tags)


# -- streaming ---------------------------------------------------------------------------------
def offset_key(url: str, topic: str, queue_id: int, several: bool) -> str:
    """A queue's key in the streaming offsets (see the module docstring)."""
    return f"{url}#{topic}/{queue_id}" if several else f"{topic}/{queue_id}"


def parse_offset_key(key: str, urls: tuple[str, ...]) -> tuple[str, str, int]:
    """``(url, topic, queue id)`` of an :func:`offset_key`."""
    url, _, rest = key.rpartition("#") if len(urls) > 1 else ("", "", key)
    topic, _, queue = rest.rpartition("/")
    return url or urls[0], topic, int(queue)


class QuiverBrokerStreamReader(DataSourceStreamReader):
    """A streaming read of brokers: each micro-batch reads to the queues' ends as the planner
    saw them; ``commit`` advances ``consumerGroup``'s broker offsets when one is given."""

    def __init__(self, options: ReadOptions) -> None:
        self.read_options = options

    def initialOffset(self) -> dict[str, int]:  # noqa: N802 (Spark's name)
        """Each queue's start as ``startingOffsets`` says (default: earliest)."""
        options = self.read_options
        several = len(options.brokers) > 1
        spec = options.starting_offsets
        starts = {}
        for url in options.brokers:
            with HttpTransport(url) as transport:
                queues = BrokerQueues(transport)
                for topic in options.topics:
                    for queue_id in options.queues or queues.queue_ids(topic):
                        key = offset_key(url, topic, queue_id, several)
                        starts[key] = _start_offset(queues, spec, topic, queue_id)
        return starts

    def latestOffset(self, start: Any = None, limit: Any = None) -> dict[str, int]:  # noqa: N802
        options = self.read_options
        several = len(options.brokers) > 1
        ends = {}
        for url in options.brokers:
            with HttpTransport(url) as transport:
                queues = BrokerQueues(transport)
                for topic in options.topics:
                    for queue_id in options.queues or queues.queue_ids(topic):
                        ends[offset_key(url, topic, queue_id, several)] = queues.max_offset(
                            topic, queue_id
                        )
        return ends

    def partitions(self, start: dict[str, int], end: dict[str, int]) -> list[BrokerRangePartition]:
        urls = self.read_options.brokers
        ranges = []
        for key, end_offset in sorted(end.items()):
            url, topic, queue_id = parse_offset_key(key, urls)
            start_offset = start.get(key, 0)
            if end_offset > start_offset:
                ranges.append((url, QueueRange(topic, queue_id, start_offset, end_offset)))
        return [BrokerRangePartition(found) for found in _split_per_broker(ranges, None)]

    def read(self, partition: Any) -> Iterator[pa.RecordBatch]:
        yield from _read_partition(self.read_options, partition)

    def commit(self, end: dict[str, int]) -> None:
        group = self.read_options.consumer_group
        if group is not None:
            commit_group_offsets(self.read_options.brokers, group, end)


def commit_group_offsets(urls: tuple[str, ...], group: str, end: Mapping[str, int]) -> None:
    """Commit ``end`` (streaming offsets: next offset per queue) as ``group``'s offsets on
    every broker it names."""
    by_url: dict[str, dict[tuple[str, int], int]] = {}
    for key, offset in end.items():
        url, topic, queue_id = parse_offset_key(key, urls)
        by_url.setdefault(url, {})[topic, queue_id] = offset
    for url, offsets in by_url.items():
        with HttpTransport(url) as transport:
            name = transport.broker_name
            transport.commit_offsets(
                name,
                group,
                {
                    MessageQueue(topic, name, queue_id): o
                    for (topic, queue_id), o in offsets.items()
                },
            )


def _start_offset(queues: BrokerQueues, spec: Any, topic: str, queue_id: int) -> int:
    offset = spec if isinstance(spec, str) else spec.get(topic, {}).get(queue_id, EARLIEST)
    if offset in (EARLIEST, EARLIEST_SENTINEL):
        return queues.min_offset(topic, queue_id)
    if offset in (LATEST, LATEST_SENTINEL):
        return queues.max_offset(topic, queue_id)
    return int(offset)
