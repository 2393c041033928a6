"""The retry path: a failed message comes back through ``%RETRY%{group}`` with its original
topic and id, ``max_reconsume_times`` times, then lands in ``%DLQ%{group}``."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from sdk import ConsumeResult, Message, Producer
from sdk.message import ReceivedMessage, dlq_topic, retry_topic
from tests.sdk.waiting import group_settled

from .conftest import ConsumerFactory, Harness, Recorder, wait_until

TOPIC = "payments"


def always_later(recorder: Recorder) -> Callable[[list[ReceivedMessage]], ConsumeResult]:
    def listener(messages: list[ReceivedMessage]) -> ConsumeResult:
        recorder.record(messages)
        return ConsumeResult.RECONSUME_LATER

    return listener


def always_raises(recorder: Recorder) -> Callable[[list[ReceivedMessage]], ConsumeResult]:
    def listener(messages: list[ReceivedMessage]) -> ConsumeResult:
        recorder.record(messages)
        raise RuntimeError("the payment gateway is down")

    return listener


def dead_letters(harness: Harness, group: str) -> list[ReceivedMessage]:
    store = harness.service.store
    stored = store.get_messages(dlq_topic(group), 0, 0, max_count=64).messages
    return [ReceivedMessage.from_stored(m) for m in stored]  # as a DLQ consumer sees them


@pytest.mark.parametrize("failing", [always_later, always_raises], ids=["later", "raises"])
def test_failed_message_is_retried_then_dead_lettered(
    harness: Harness,
    producer: Producer,
    start_consumer: ConsumerFactory,
    failing: Callable[[Recorder], Callable[[list[ReceivedMessage]], ConsumeResult]],
) -> None:
    group = "settlement"
    recorder = Recorder()
    consumer = start_consumer(group, {TOPIC: None}, failing(recorder), max_reconsume_times=2)
    message = Message(TOPIC, b"charge 42", tags="card", keys=["payment-42"], properties={"a": "1"})
    receipt = producer.send(message)

    wait_until(lambda: len(dead_letters(harness, group)) == 1)
    deliveries = recorder.of(b"charge 42")
    assert [d.message.reconsume_times for d in deliveries] == [0, 1, 2]
    for delivery in deliveries:
        got = delivery.message
        assert got.topic == TOPIC  # a retried message shows its original topic
        assert got.msg_id == receipt.msg_id
        assert got.tags == "card"
        assert got.keys == ("payment-42",)
        assert got.properties == {"a": "1"}  # the user's only
        assert got.body == b"charge 42"
    assert deliveries[0].message.original_topic is None
    assert deliveries[1].message.original_topic == TOPIC

    (dead,) = dead_letters(harness, group)
    assert dead.topic == dlq_topic(group)
    assert dead.body == b"charge 42"
    assert dead.msg_id == receipt.msg_id
    assert dead.original_topic == TOPIC
    assert dead.properties == {"a": "1"}
    assert dead.tags == "card"
    assert dead.keys == ("payment-42",)

    # The group is done with the message: its offsets pass the original and both retries.
    def finished() -> bool:
        consumer.persist_offsets()
        service = harness.service
        return (
            service.query_offset(group, TOPIC, receipt.queue_id) == receipt.queue_offset + 1
            and service.query_offset(group, retry_topic(group), 0) == 2
        )

    wait_until(finished)
    assert len(recorder.of(b"charge 42")) == 3


def test_message_succeeding_on_retry_is_not_dead_lettered(
    harness: Harness, producer: Producer, start_consumer: ConsumerFactory
) -> None:
    group = "invoicing"
    recorder = Recorder()

    def listener(messages: list[ReceivedMessage]) -> ConsumeResult:
        recorder.record(messages)
        if any(m.reconsume_times < 1 for m in messages):
            return ConsumeResult.RECONSUME_LATER
        return ConsumeResult.SUCCESS

    # One retry allowed: a success on it that did not count would dead-letter at once.
    consumer = start_consumer(group, {TOPIC: None}, listener, max_reconsume_times=1)
    receipts = [producer.send(Message(TOPIC, f"invoice {i}".encode())) for i in range(5)]

    wait_until(lambda: recorder.count() >= 10)
    # A late send-back would wait in the schedule or the retry topic: once neither holds
    # anything the group has not committed, every delivery there will be has been made.
    topics = (TOPIC, retry_topic(group))
    wait_until(lambda: group_settled(harness.service, consumer, group, topics))
    assert recorder.count() == 10
    for receipt in receipts:
        times = sorted(
            d.message.reconsume_times
            for d in recorder.deliveries
            if d.message.msg_id == receipt.msg_id
        )
        assert times == [0, 1]
    assert dead_letters(harness, group) == []


def test_retries_of_one_group_do_not_reach_another(
    harness: Harness, producer: Producer, start_consumer: ConsumerFactory
) -> None:
    failing, happy = Recorder(), Recorder()
    start_consumer("flaky", {TOPIC: None}, always_later(failing), max_reconsume_times=1)
    start_consumer("steady", {TOPIC: None}, happy.listener)
    producer.send(Message(TOPIC, b"once"))

    wait_until(lambda: len(dead_letters(harness, "flaky")) == 1)
    assert [d.message.reconsume_times for d in failing.deliveries] == [0, 1]
    assert [d.message.reconsume_times for d in happy.deliveries] == [0]
    assert dead_letters(harness, "steady") == []
