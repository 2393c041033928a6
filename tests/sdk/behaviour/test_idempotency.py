"""Idempotent listeners (:mod:`sdk.idempotency`) turn repeated deliveries into one effect."""

from __future__ import annotations

import collections
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from sdk import ConsumeResult, Message, Producer
from sdk.idempotency import (
    ClaimStatus,
    DedupStore,
    MemoryDedupStore,
    SqliteDedupStore,
    first_key,
    idempotent,
)
from sdk.message import ReceivedMessage

from .conftest import ConsumerFactory, Recorder, wait_until

TOPIC = "shipments"


@pytest.fixture(params=["memory", "sqlite"])
def dedup_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[DedupStore]:
    store: DedupStore
    if request.param == "memory":
        store = MemoryDedupStore()
    else:
        store = SqliteDedupStore(tmp_path / "dedup.sqlite3")
    try:
        yield store
    finally:
        store.close()


class Effects:
    """The business effect: a counter per message body (thread-safe)."""

    def __init__(self) -> None:
        self.counts: collections.Counter[bytes] = collections.Counter()
        self.lock = threading.Lock()

    def apply(self, messages: list[ReceivedMessage]) -> ConsumeResult:
        with self.lock:
            self.counts.update(m.body for m in messages)
        return ConsumeResult.SUCCESS


def test_redelivery_after_the_effect_is_skipped(
    producer: Producer, start_consumer: ConsumerFactory, dedup_store: DedupStore
) -> None:
    """The consumer fails *after* the effect was recorded (as if it crashed before committing
    the offset): the broker re-delivers each message, the dedup record skips it."""
    effects, deliveries = Effects(), Recorder()
    once = idempotent(effects.apply, dedup_store, namespace="shippers:")

    def listener(messages: list[ReceivedMessage]) -> ConsumeResult:
        deliveries.record(messages)
        result = once(messages)
        if any(m.reconsume_times == 0 for m in messages):
            raise RuntimeError("lost the connection before committing")
        return result

    start_consumer("shippers", {TOPIC: None}, listener)
    receipts = [producer.send(Message(TOPIC, f"parcel {i}".encode())) for i in range(10)]

    wait_until(lambda: deliveries.count() >= 20)
    for receipt in receipts:
        times = sorted(
            d.message.reconsume_times
            for d in deliveries.deliveries
            if d.message.msg_id == receipt.msg_id
        )
        assert times == [0, 1]  # delivered twice, with one UNIQ_KEY
    assert effects.counts == {f"parcel {i}".encode(): 1 for i in range(10)}


def test_duplicate_sends_of_one_business_key_have_one_effect(
    producer: Producer, start_consumer: ConsumerFactory, dedup_store: DedupStore
) -> None:
    """A producer that re-sends an order (new message ids, same business key): consumed
    concurrently from different queues, the order's effect still happens once."""
    effects = Effects()
    skipped: list[ClaimStatus] = []
    lock = threading.Lock()

    def on_skip(message: ReceivedMessage, status: ClaimStatus) -> None:
        with lock:
            skipped.append(status)

    listener = idempotent(effects.apply, dedup_store, key=first_key, on_skip=on_skip)
    start_consumer("packers", {TOPIC: None}, listener, consume_threads=4)
    orders = [f"order-{i}" for i in range(8)]
    for copy in range(3):
        for order in orders:
            producer.send(
                Message(TOPIC, order.encode(), keys=[order], properties={"copy": str(copy)})
            )

    wait_until(lambda: skipped.count(ClaimStatus.DUPLICATE) >= 2 * len(orders))
    assert effects.counts == {order.encode(): 1 for order in orders}


def test_a_failed_effect_is_retried_and_then_applied_once(
    producer: Producer, start_consumer: ConsumerFactory, dedup_store: DedupStore
) -> None:
    """A listener failing *before* its effect releases its claim: the retry applies it."""
    effects, deliveries = Effects(), Recorder()

    def flaky(messages: list[ReceivedMessage]) -> ConsumeResult:
        deliveries.record(messages)
        if any(m.reconsume_times == 0 for m in messages):
            return ConsumeResult.RECONSUME_LATER
        return effects.apply(messages)

    start_consumer("returns", {TOPIC: None}, idempotent(flaky, dedup_store))
    producer.send(Message(TOPIC, b"return 1"))
    wait_until(lambda: effects.counts[b"return 1"] == 1)
    assert [d.message.reconsume_times for d in deliveries.deliveries] == [0, 1]
