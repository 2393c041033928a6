"""The ``quiver`` source reading brokers over HTTP (``broker`` option), for clusters whose
executors share no disk with the store.

The planner asks each broker for its queues' bounds (``queue_count``, ``min_offset``,
``max_offset``) and cuts the read into queue ranges exactly as a store read does
(:func:`sdk.spark.ranges.plan_ranges`). Each task pulls its range's stored record bytes in bulk
with the broker's pull (``POST /v1/pull``: a pull names its queue offset and commits nothing, so
it is a raw range read; its answer frames each queue's records as they lie in the log,
:mod:`sdk.protocol.pull_body`) and decodes them with the same columnar decoder
(:func:`sdk.spark.batches.records_to_batch`). No route was added for it.

Several URLs are several brokers: the read covers the topics' queues on each of them. Planning
names a queue of one of several brokers by a qualified topic, ``"<url>#topic"``
(:func:`qualified_options`), so the store read's planning (:func:`sdk.spark.ranges.plan_ranges`,
:mod:`sdk.spark.offsets`) covers every broker at once and streaming offsets are
``{"topic/queue": next_offset}`` (with several brokers ``"<url>#topic/queue"``). A streaming
read is :class:`sdk.spark.stream.QuiverStreamReader` with :class:`BrokerBounds` as its bounds
and :class:`QuiverBrokerReader` as its tasks, so it honours every option a store stream does.
With ``consumerGroup`` it commits each micro-batch's end offsets as that group's broker offsets
when Spark commits it, so the broker's lag reports (``quiver group lag``) show how far the
query is behind; the query's own position stays in its checkpoint.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, replace
from typing import Any, TypeVar

import pyarrow as pa
from pyspark.sql.datasource import DataSourceReader, InputPartition

from localstore.record.validation import is_system_topic
from offsetstore import MessageQueue
from quiver_errors import IllegalStateError
from sdk.spark.batches import records_to_batch
from sdk.spark.dataloss import start_within
from sdk.spark.offsets import from_json
from sdk.spark.options import OffsetSpec, ReadOptions
from sdk.spark.ranges import QueueRange, plan_ranges
from sdk.spark.row_filters import keep_tags
from sdk.spark.timestamps import TimeBound
from sdk.transport.http_sync import HttpTransport
from sdk.transport.models import PullBatch, QueuePull

PULL_RECORDS = 4096  # records per pull, and so per record batch
PULL_BYTES = 8 << 20
READER_GROUP = "quiver-spark-reader"  # the pulls' group: it names no offsets and commits none

_V = TypeVar("_V")


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


class SeveralBrokerQueues:
    """The queue bounds of several brokers as :class:`sdk.spark.ranges.QueueOffsets`, each
    topic qualified with its broker's URL (:func:`qualify`)."""

    def __init__(self, by_url: Mapping[str, BrokerQueues]) -> None:
        self.by_url = by_url

    def _split(self, topic: str) -> tuple[BrokerQueues, str]:
        url, plain = unqualify(topic, tuple(self.by_url))
        return self.by_url[url], plain

    def queue_ids(self, topic: str) -> list[int]:
        queues, plain = self._split(topic)
        return queues.queue_ids(plain)

    def min_offset(self, topic: str, queue_id: int) -> int:
        queues, plain = self._split(topic)
        return queues.min_offset(plain, queue_id)

    def max_offset(self, topic: str, queue_id: int) -> int:
        queues, plain = self._split(topic)
        return queues.max_offset(plain, queue_id)

    def offset_for_timestamp(self, topic: str, queue_id: int, timestamp_ms: int) -> int:
        queues, plain = self._split(topic)
        return queues.offset_for_timestamp(plain, queue_id, timestamp_ms)

    def topic_names(self) -> list[str]:
        """Every broker's topics but its system ones, qualified, sorted (for ``topicPattern``,
        which never matches a system topic: qualified, one no longer looks like one)."""
        return sorted(
            qualify(url, topic)
            for url, queues in self.by_url.items()
            for topic in queues.topic_names()
            if not is_system_topic(topic)
        )


def qualify(url: str, topic: str) -> str:
    """``topic`` on the broker at ``url``, as planning names it when there are several."""
    return f"{url}#{topic}"


def unqualify(topic: str, urls: tuple[str, ...]) -> tuple[str, str]:
    """``(url, plain topic)`` of a topic as planning names it (:func:`qualified_options`);
    :class:`IllegalStateError` for a URL the read does not name (a checkpoint of another
    read)."""
    if len(urls) == 1:
        return urls[0], topic
    url, _, plain = topic.rpartition("#")
    if url not in urls:
        raise IllegalStateError(
            f"{topic!r}: names no broker of this read ({', '.join(urls)}): a checkpoint of "
            "another read?"
        )
    return url, plain


def qualified_options(options: ReadOptions) -> ReadOptions:
    """``options`` with topics named as planning names them: unchanged for one broker; for
    several, each topic once per broker, ``"<url>#topic"`` (a ``topicPattern`` matching a
    topic of any broker), JSON bounds applying to it on every broker."""
    urls = options.brokers
    if len(urls) <= 1:
        return options

    def per_broker(spec: Mapping[str, _V]) -> dict[str, _V]:
        return {qualify(url, topic): value for url in urls for topic, value in spec.items()}

    def offsets(spec: OffsetSpec) -> OffsetSpec:
        return spec if isinstance(spec, str) else per_broker(spec)

    def time_bound(bound: TimeBound | None) -> TimeBound | None:
        if bound is None or isinstance(bound.spec, int):
            return bound
        return replace(bound, spec=per_broker(bound.spec))

    any_url = "|".join(re.escape(url) for url in urls)
    pattern = options.topic_pattern
    times = options.timestamps
    return replace(
        options,
        topics=tuple(qualify(url, topic) for url in urls for topic in options.topics),
        topic_pattern=None if pattern is None else f"(?:{any_url})#(?:{pattern})",
        starting_offsets=offsets(options.starting_offsets),
        ending_offsets=offsets(options.ending_offsets),
        timestamps=replace(
            times, starting=time_bound(times.starting), ending=time_bound(times.ending)
        ),
    )


@dataclass(frozen=True)
class BrokerBounds:
    """The queue bounds of the brokers at ``urls`` for a streaming read
    (:class:`sdk.spark.stream.QueueBounds`), asked over HTTP at each look; ``commit``
    advances ``consumer_group`` when given."""

    urls: tuple[str, ...]
    consumer_group: str | None = None

    @contextmanager
    def open(self) -> Iterator[BrokerQueues | SeveralBrokerQueues]:
        """Each broker's bounds, its connection open inside the ``with``."""
        with ExitStack() as stack:
            by_url = {
                url: BrokerQueues(stack.enter_context(HttpTransport(url))) for url in self.urls
            }
            yield by_url[self.urls[0]] if len(self.urls) == 1 else SeveralBrokerQueues(by_url)

    def commit(self, end: Mapping[str, int]) -> None:
        """``end`` committed as ``consumer_group``'s offsets (see the module docstring)."""
        if self.consumer_group is not None:
            commit_group_offsets(self.urls, self.consumer_group, end)


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


def read_broker_range(
    transport: Any,
    queue_range: QueueRange,
    include_body: bool,
    include_properties: bool,
    fail_on_data_loss: bool = True,
) -> Iterator[pa.RecordBatch]:
    """The records of ``queue_range`` pulled from the broker, a batch per pull. Offsets
    retention removed since the planner looked are data loss
    (:func:`~sdk.spark.dataloss.start_within`); :class:`IllegalStateError` when the broker
    serves no offset of the rest."""
    topic, queue_id = queue_range.topic, queue_range.queue_id
    offset = queue_range.start_offset
    while offset < queue_range.end_offset:
        count = min(PULL_RECORDS, queue_range.end_offset - offset)
        batch = PullBatch(READER_GROUP, (QueuePull(topic, queue_id, offset),), count, PULL_BYTES)
        (got,) = transport.pull(batch).results
        if not got.count and offset < got.min_offset:
            offset = start_within(topic, queue_id, offset, got.min_offset, fail_on_data_loss)
            continue
        if got.status != "FOUND" or not got.count or got.next_offset <= offset:
            raise IllegalStateError(
                f"{topic!r} queue {queue_id} offset {offset} is no longer served by the broker "
                f"({got.status}; readable [{got.min_offset}, {got.max_offset}))"
            )
        if got.next_offset > queue_range.end_offset:  # a pull answers at most its count
            raise IllegalStateError(f"the pull of {topic!r} queue {queue_id} overran its count")
        yield records_to_batch(got.raw, include_body, include_properties)
        offset = got.next_offset


class QuiverBrokerReader(DataSourceReader):
    """A batch read of brokers, and the tasks of a streaming one (plain data: it is pickled
    to tasks)."""

    def __init__(self, options: ReadOptions) -> None:
        self.read_options = options

    def partitions(self) -> list[BrokerRangePartition]:
        """The read's ranges on every broker, split to honour ``minPartitions`` over them all."""
        options = self.read_options
        with BrokerBounds(options.brokers).open() as queues:
            return self.partitions_of(plan_ranges(queues, qualified_options(options)))

    def partitions_of(self, ranges: list[QueueRange]) -> list[BrokerRangePartition]:
        """A task per range, its topic named as planning names it (:func:`qualified_options`)."""
        partitions = []
        for queue_range in ranges:
            url, topic = unqualify(queue_range.topic, self.read_options.brokers)
            plain = replace(queue_range, topic=topic)
            partitions.append(BrokerRangePartition(BrokerRange(url, plain)))
        return partitions

    def read(self, partition: Any) -> Iterator[pa.RecordBatch]:
        if not isinstance(partition, BrokerRangePartition):
            return  # Spark's stand-in partition when partitions() planned none
        options = self.read_options
        found = partition.broker_range
        with HttpTransport(found.url) as transport:
            batches = read_broker_range(
                transport,
                found.queue_range,
                options.include_body,
                options.include_properties,
                options.fail_on_data_loss,
            )
            yield from keep_tags(batches, options.tags)


def commit_group_offsets(urls: tuple[str, ...], group: str, end: Mapping[str, int]) -> None:
    """Commit ``end`` (streaming offsets: next offset per queue) as ``group``'s offsets on
    every broker it names."""
    by_url: dict[str, dict[tuple[str, int], int]] = {}
    for (topic, queue_id), offset in from_json(end).items():
        url, plain = unqualify(topic, urls)
        by_url.setdefault(url, {})[plain, queue_id] = offset
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
