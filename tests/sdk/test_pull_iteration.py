"""Iterating over a lite pull consumer (``for`` / ``async for``) against a real embedded broker:
what it yields, when it ends, and what it commits (a message counts as handed out when yielded).
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from offsetstore import MessageQueue
from sdk import (
    AsyncPullConsumer,
    ConsumeFrom,
    EmbeddedBroker,
    Message,
    Producer,
    PullConsumer,
    ReceivedMessage,
)

from .brokers import SMALL_GEOMETRY

GEOMETRY = SMALL_GEOMETRY
TOPIC = "orders"
GROUP = "billing"
COUNT = 10


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[EmbeddedBroker]:
    with EmbeddedBroker(tmp_path / "data", **GEOMETRY) as embedded:
        with Producer(embedded) as producer:
            for i in range(COUNT):
                producer.send(Message(TOPIC, f"m{i}".encode()), queue_id=0)
        yield embedded


def queue0(broker: EmbeddedBroker) -> MessageQueue:
    return MessageQueue(TOPIC, broker.service.broker_name, 0)


def from_first(broker: EmbeddedBroker, **options: Any) -> PullConsumer:
    return PullConsumer(broker, GROUP, consume_from=ConsumeFrom.FIRST_OFFSET, **options)


def first(consumer: PullConsumer, count: int) -> list[ReceivedMessage]:
    """The first ``count`` messages of iterating over ``consumer``, breaking out after them."""
    got: list[ReceivedMessage] = []
    for message in consumer:
        got.append(message)
        if len(got) == count:
            break
    return got


def test_breaking_out_commits_what_was_yielded_and_not_what_was_only_fetched(broker):
    q0 = queue0(broker)
    with from_first(broker) as consumer:
        consumer.assign([q0])
        got = first(consumer, 4)
        assert [m.body for m in got] == [f"m{i}".encode() for i in range(4)]
        assert consumer.position(q0) == 4  # the other six were fetched, not handed out
    assert broker.service.query_offset(GROUP, TOPIC, 0) == 4
    with from_first(broker) as reopened:
        reopened.assign([q0])
        assert reopened.committed(q0) == 4
        assert [m.body for m in first(reopened, 6)] == [f"m{i}".encode() for i in range(4, 10)]
    assert broker.service.query_offset(GROUP, TOPIC, 0) == COUNT


def test_a_second_loop_goes_on_where_the_first_broke_out(broker):
    with from_first(broker) as consumer:
        consumer.subscribe([TOPIC])
        assert [m.queue_offset for m in first(consumer, 3)] == [0, 1, 2]
        assert [m.queue_offset for m in first(consumer, 7)] == list(range(3, 10))


def test_commit_inside_the_loop_commits_the_current_message_without_auto_commit(broker):
    q0 = queue0(broker)
    with from_first(broker, auto_commit=False) as consumer:
        consumer.assign([q0])
        for message in consumer:
            if message.queue_offset == 2:
                consumer.commit()
                break
    assert broker.service.query_offset(GROUP, TOPIC, 0) == 3  # nothing more at close


def test_close_from_another_thread_ends_the_iteration(broker):
    q0 = queue0(broker)
    consumer = from_first(broker)
    consumer.subscribe([TOPIC])
    got: list[ReceivedMessage] = []
    all_yielded = threading.Event()
    ended = threading.Event()

    def iterate() -> None:
        for message in consumer:
            got.append(message)
            if len(got) == COUNT:
                all_yielded.set()
        ended.set()

    worker = threading.Thread(target=iterate, daemon=True)
    worker.start()
    assert all_yielded.wait(10.0)
    consumer.close()
    assert ended.wait(10.0)
    worker.join(10.0)
    assert [m.queue_offset for m in got] == list(range(COUNT))
    assert broker.service.query_offset(GROUP, TOPIC, q0.queue_id) == COUNT


def test_async_iteration_breaks_commits_and_ends_on_close_from_another_task(broker):
    q0 = queue0(broker)

    async def break_after(count: int) -> list[int]:
        async with AsyncPullConsumer(
            broker, GROUP, consume_from=ConsumeFrom.FIRST_OFFSET
        ) as consumer:
            consumer.assign([q0])
            offsets: list[int] = []
            async for message in consumer:
                offsets.append(message.queue_offset)
                if len(offsets) == count:
                    break
            assert await consumer.committed(q0) is not None
            return offsets

    async def until_closed() -> list[int]:
        consumer = AsyncPullConsumer(broker, GROUP, consume_from=ConsumeFrom.FIRST_OFFSET)
        consumer.subscribe([TOPIC])
        offsets: list[int] = []
        all_yielded = asyncio.Event()

        async def iterate() -> None:
            async for message in consumer:
                offsets.append(message.queue_offset)
                if len(offsets) == COUNT - 4:
                    all_yielded.set()

        iterating = asyncio.create_task(iterate())
        await asyncio.wait_for(all_yielded.wait(), 10.0)
        await consumer.close()
        await asyncio.wait_for(iterating, 10.0)  # the iteration ended by itself
        return offsets

    assert asyncio.run(break_after(4)) == [0, 1, 2, 3]
    assert broker.service.query_offset(GROUP, TOPIC, 0) == 4
    assert asyncio.run(until_closed()) == list(range(4, COUNT))
    assert broker.service.query_offset(GROUP, TOPIC, 0) == COUNT
