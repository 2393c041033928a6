"""The streaming read of several brokers, driven without a Spark session against two real
``quiver broker`` processes: offsets keyed ``"<url>#topic/queue"``, ``maxOffsetsPerTrigger``
shared across both brokers' queues (pyspark 4.2+; before, a micro-batch reads everything),
each task reading its own broker, and ``consumerGroup`` committed on each broker at its own
offsets."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from sdk import Message, Producer
from sdk.spark.broker_source import BrokerQueues, SeveralBrokerQueues, qualified_options
from sdk.spark.options import parse_read_options
from sdk.spark.pyspark_api import ADMISSION_CONTROL
from sdk.spark.ranges import read_topics
from sdk.spark.source import QuiverDataSource
from sdk.transport.http_sync import HttpTransport
from tests.sdk.remote.broker_process import BrokerProcess

pytestmark = [pytest.mark.spark]

TOPIC = "multi"


@pytest.fixture
def two_brokers(tmp_path: Path) -> Iterator[tuple[BrokerProcess, BrokerProcess]]:
    with (
        BrokerProcess(tmp_path / "a", name="broker-a") as first,
        BrokerProcess(tmp_path / "b", name="broker-b") as second,
    ):
        yield first, second


def produce(url: str, prefix: str, count: int) -> None:
    with Producer(url) as producer:
        producer.send_batch([Message(TOPIC, f"{prefix}{i}".encode()) for i in range(count)])


def test_a_stream_of_two_brokers_caps_reads_and_commits_per_broker(
    two_brokers: tuple[BrokerProcess, BrokerProcess],
) -> None:
    first, second = two_brokers
    produce(first.url, "a", 20)
    produce(second.url, "b", 12)
    options = {
        "broker": f"{first.url},{second.url}",
        "topics": TOPIC,
        "startingOffsets": "earliest",
        "consumerGroup": "watch",
    }
    if ADMISSION_CONTROL:  # else refused (test_quiver_stream.py), and the batch reads all 32
        options["maxOffsetsPerTrigger"] = "10"
    reader = QuiverDataSource(options).streamReader(None)  # type: ignore[arg-type]
    start = reader.initialOffset()
    urls = {key.rpartition("#")[0] for key in start}
    assert urls == {first.url, second.url}
    assert set(start.values()) == {0}
    if ADMISSION_CONTROL:
        end = reader.latestOffset(start, reader.getDefaultReadLimit())  # type: ignore[call-arg]
    else:
        end = reader.latestOffset()
    expected = 10 if ADMISSION_CONTROL else 32
    assert sum(end[key] - start[key] for key in start) == expected
    bodies: Counter[bytes] = Counter()
    for partition in reader.partitions(start, end):
        for batch in reader.read(partition):
            bodies.update(batch.column("body").to_pylist())
    assert sum(bodies.values()) == expected
    assert all(body[:1] in (b"a", b"b") for body in bodies)
    reader.commit(end)
    for process in (first, second):
        with HttpTransport(process.url) as transport:
            name = transport.broker_name
            for key, offset in end.items():
                url, _, queue = key.rpartition("#")
                if url == process.url:
                    queue_id = int(queue.rpartition("/")[2])
                    assert transport.query_offset(name, "watch", TOPIC, queue_id) == offset


class ListedTopics:
    """A broker's transport as far as topic listing goes: ``names`` (system topics too, as a
    broker lists them)."""

    def __init__(self, *names: str) -> None:
        self.names = names

    def list_topics(self) -> list[Any]:
        return [SimpleNamespace(name=name) for name in self.names]


def test_a_pattern_over_several_brokers_never_matches_their_system_topics() -> None:
    urls = ("http://a:1", "http://b:2")
    options = parse_read_options({"broker": ",".join(urls), "topicPattern": ".*"})
    queues = SeveralBrokerQueues(
        {url: BrokerQueues(ListedTopics("orders", "SCHEDULE_TOPIC_XXXX")) for url in urls}
    )
    assert read_topics(queues, qualified_options(options)) == (
        "http://a:1#orders",
        "http://b:2#orders",
    )
