"""Delayed delivery: by level and at an absolute time; never early, not much late."""

from __future__ import annotations

import pytest

from sdk import InvalidMessageError, Message, Producer

from .conftest import DELAY_LEVELS_MS, ConsumerFactory, Harness, Recorder, now_ms, wait_until

TOPIC = "reminders"
LATE_TOLERANCE_MS = 2000  # generous: the schedule polls every 100 ms


def test_delay_levels_deliver_no_earlier_than_their_delay(
    producer: Producer, start_consumer: ConsumerFactory
) -> None:
    recorder = Recorder()
    start_consumer("reminder-mailer", {TOPIC: None}, recorder.listener)
    sent_at = now_ms()
    level_1 = producer.send(Message(TOPIC, b"in 300 ms", delay_level=1, keys=["r-1"]))
    level_2 = producer.send(Message(TOPIC, b"in 600 ms", delay_level=2, tags="later"))
    at_once = producer.send(Message(TOPIC, b"now"))
    assert level_1.queue_offset == level_2.queue_offset == -1  # offsets come on delivery
    assert at_once.queue_offset >= 0

    wait_until(lambda: recorder.count() >= 3)
    assert recorder.bodies()[0] == b"now"
    for receipt, level in ((level_1, 1), (level_2, 2)):
        (delivery,) = [d for d in recorder.deliveries if d.message.msg_id == receipt.msg_id]
        delay = DELAY_LEVELS_MS[level - 1]
        assert delivery.at_ms >= sent_at + delay
        assert delivery.message.store_timestamp >= receipt.store_timestamp + delay
        assert delivery.at_ms < sent_at + delay + LATE_TOLERANCE_MS
        got = delivery.message
        assert got.topic == TOPIC
        assert got.queue_id == receipt.queue_id
        assert "DELAY" not in got.properties
        assert "REAL_TOPIC" not in got.properties
    first = next(d for d in recorder.deliveries if d.message.msg_id == level_1.msg_id)
    assert first.message.keys == ("r-1",)
    second = next(d for d in recorder.deliveries if d.message.msg_id == level_2.msg_id)
    assert second.message.tags == "later"


def test_absolute_delivery_time_is_never_early(
    producer: Producer, start_consumer: ConsumerFactory
) -> None:
    recorder = Recorder()
    start_consumer("reminder-mailer", {TOPIC: None}, recorder.listener)
    # 450 ms fits no level exactly: the broker chains levels (300 ms, then 50 ms steps).
    due = {f"due +{ms} ms".encode(): now_ms() + ms for ms in (450, 700, 80)}
    for body, deliver_at in due.items():
        producer.send(Message(TOPIC, body, deliver_at_ms=deliver_at))
    past = producer.send(Message(TOPIC, b"already due", deliver_at_ms=now_ms() - 1000))
    assert past.queue_offset >= 0  # due already: stored straight into its topic

    wait_until(lambda: recorder.count() >= 4)
    for body, deliver_at in due.items():
        (delivery,) = recorder.of(body)
        assert delivery.at_ms >= deliver_at
        assert delivery.message.store_timestamp >= deliver_at
        assert delivery.at_ms < deliver_at + LATE_TOLERANCE_MS
        assert "__QUIVER_DELIVER_AT" not in delivery.message.properties


@pytest.mark.parametrize(
    "message",
    [
        Message(TOPIC, b"x", delay_level=19),
        Message(TOPIC, b"x", delay_level=-1),
        Message(TOPIC, b"x", delay_level=1, deliver_at_ms=1),
    ],
    ids=["level-19", "level-minus-1", "level-and-time"],
)
def test_bad_delays_are_refused(producer: Producer, message: Message) -> None:
    with pytest.raises(InvalidMessageError):
        producer.send(message)


def test_delayed_messages_keep_their_tags_for_filtering(
    producer: Producer, start_consumer: ConsumerFactory
) -> None:
    recorder = Recorder()
    start_consumer("reminder-mailer", {TOPIC: "email"}, recorder.listener)
    producer.send(Message(TOPIC, b"sms later", tags="sms", delay_level=3))
    producer.send(Message(TOPIC, b"email later", tags="email", delay_level=3))
    producer.send(Message(TOPIC, b"email at", tags="email", deliver_at_ms=now_ms() + 100))
    wait_until(lambda: recorder.count() >= 2)
    assert sorted(recorder.bodies()) == [b"email at", b"email later"]


def test_pending_delays_survive_a_broker_restart_and_fire_once(
    harness: Harness, start_consumer: ConsumerFactory
) -> None:
    with Producer(harness.broker_target) as producer:
        sent_at = now_ms()
        pending = producer.send(Message(TOPIC, b"after the restart", delay_level=2))
        due_soon = producer.send(Message(TOPIC, b"during the restart", delay_level=3))
    harness.restart()
    recorder = Recorder()
    start_consumer("reminder-mailer", {TOPIC: None}, recorder.listener)
    wait_until(lambda: recorder.count() >= 2)
    (late,) = recorder.of(b"after the restart")
    assert late.message.msg_id == pending.msg_id
    assert late.at_ms >= sent_at + DELAY_LEVELS_MS[1]
    (soon,) = recorder.of(b"during the restart")
    assert soon.message.msg_id == due_soon.msg_id

    harness.restart()  # a clean stop persisted the schedule's progress: nothing fires again
    with Producer(harness.broker_target) as producer:
        producer.send(Message(TOPIC, b"marker", delay_level=3))
    again = Recorder()
    start_consumer("second-mailer", {TOPIC: None}, again.listener)
    # The marker is due after anything delivered again would have been (due at once). The
    # group reads its queues in no set order: the marker may come before the older messages.
    wait_until(lambda: again.of(b"marker") and again.count() >= 3)
    assert sorted(again.bodies()) == [b"after the restart", b"during the restart", b"marker"]
