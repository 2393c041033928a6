"""Orderly push consumption: one batch per queue at a time, strictly in queue-offset order;
a failed batch is retried in place (never skipped) and dead-lettered after the maximum."""

from __future__ import annotations

import asyncio
import threading
import time
from collections import defaultdict
from pathlib import Path

import pytest

from sdk import (
    AsyncPushConsumer,
    ConsumeFrom,
    ConsumeResult,
    EmbeddedBroker,
    Message,
    Producer,
    PushConsumer,
    dlq_topic,
)

from .waiting import wait_until


@pytest.fixture
def broker(tmp_path: Path):
    with EmbeddedBroker(tmp_path / "b", commitlog_file_size=1 << 20) as embedded:
        yield embedded


def produce_orders(broker: EmbeddedBroker, orders: int, events: int) -> None:
    """``events`` lifecycle events per order id, each order's events on one queue."""
    with Producer(broker) as producer:
        for step in range(events):
            for order in range(orders):
                body = f"order-{order}:{step}".encode()
                producer.send(Message("orders", body), sharding_key=f"order-{order}")


def test_each_queue_is_consumed_in_order_one_batch_at_a_time(broker):
    produce_orders(broker, orders=8, events=25)
    seen: dict[int, list[int]] = defaultdict(list)
    steps: dict[str, list[int]] = defaultdict(list)
    active: dict[int, int] = defaultdict(int)
    overlaps = []
    lock = threading.Lock()

    def listener(messages):
        queue_id = messages[0].queue_id
        with lock:
            active[queue_id] += 1
            if active[queue_id] > 1:
                overlaps.append(queue_id)
        time.sleep(0.001)
        with lock:
            for message in messages:
                seen[message.queue_id].append(message.queue_offset)
                order, step = message.body.decode().split(":")
                steps[order].append(int(step))
            active[queue_id] -= 1

    with PushConsumer(
        broker, "g", {"orders": None}, listener, orderly=True, consume_threads=4,
        consume_batch_size=3, consume_from=ConsumeFrom.FIRST_OFFSET,
    ):  # fmt: skip
        wait_until(lambda: sum(map(len, seen.values())) == 200)
    assert overlaps == []
    for offsets in seen.values():
        assert offsets == list(range(len(offsets)))
    assert all(s == list(range(25)) for s in steps.values())


def test_a_failing_batch_is_retried_in_place_before_anything_after_it(broker):
    produce_orders(broker, orders=1, events=6)
    delivered: list[tuple[int, int]] = []
    failures = {3: 2}  # the event at offset 3 fails twice

    def listener(messages):
        message = messages[0]
        delivered.append((message.queue_offset, message.reconsume_times))
        if failures.get(message.queue_offset, 0) > 0:
            failures[message.queue_offset] -= 1
            return ConsumeResult.RECONSUME_LATER
        return ConsumeResult.SUCCESS

    with PushConsumer(
        broker, "g", {"orders": None}, listener, orderly=True,
        orderly_retry_pause_s=0.01, consume_from=ConsumeFrom.FIRST_OFFSET,
    ):  # fmt: skip
        wait_until(lambda: len(delivered) == 8)
    assert delivered == [(0, 0), (1, 0), (2, 0), (3, 0), (3, 1), (3, 2), (4, 0), (5, 0)]
    queue_id = next(q for q in range(4) if broker.service.store.max_offset("orders", q))
    assert broker.service.query_offset("g", "orders", queue_id) == 6


def test_a_batch_failing_past_the_maximum_goes_to_the_dlq_and_the_queue_moves_on(broker):
    produce_orders(broker, orders=1, events=3)
    delivered: list[tuple[int, int]] = []

    def listener(messages):
        message = messages[0]
        delivered.append((message.queue_offset, message.reconsume_times))
        if message.queue_offset == 1:
            raise RuntimeError("cannot process this event")

    with PushConsumer(
        broker, "g", {"orders": None}, listener, orderly=True, max_reconsume_times=2,
        orderly_retry_pause_s=0.01, consume_from=ConsumeFrom.FIRST_OFFSET,
    ):  # fmt: skip
        wait_until(lambda: (2, 0) in delivered)
    assert delivered == [(0, 0), (1, 0), (1, 1), (1, 2), (2, 0)]
    dead = broker.service.store.get_messages(dlq_topic("g"), 0, 0).messages
    assert [m.body for m in dead] == [b"order-0:1"]
    # its history as a concurrent consumer's dead letter tells it: delivered 3 times (0, 1, 2),
    # not the stored 0 + 1 (an orderly consumer retries in place and counts in memory)
    assert [m.reconsume_times for m in dead] == [3]


def test_async_orderly_consumer(broker):
    produce_orders(broker, orders=4, events=10)

    async def scenario() -> tuple[dict[int, list[int]], list[int]]:
        seen: dict[int, list[int]] = defaultdict(list)
        active: dict[int, int] = defaultdict(int)
        overlaps: list[int] = []

        async def listener(messages):
            queue_id = messages[0].queue_id
            active[queue_id] += 1
            if active[queue_id] > 1:
                overlaps.append(queue_id)
            await asyncio.sleep(0.001)  # other listener tasks run meanwhile
            for message in messages:
                seen[message.queue_id].append(message.queue_offset)
            active[queue_id] -= 1

        async with AsyncPushConsumer(
            broker, "g", {"orders": None}, listener, orderly=True, consume_batch_size=3,
            consume_from=ConsumeFrom.FIRST_OFFSET,
        ):  # fmt: skip
            deadline = time.monotonic() + 10
            while sum(map(len, seen.values())) < 40 and time.monotonic() < deadline:
                await asyncio.sleep(0.01)
        return seen, overlaps

    seen, overlaps = asyncio.run(scenario())
    assert sum(map(len, seen.values())) == 40
    assert overlaps == []  # one batch per queue at a time
    assert all(offsets == list(range(len(offsets))) for offsets in seen.values())
