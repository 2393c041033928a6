"""PushConsumer settings: refused when they make no sense, and the broker's max reconsume times
used when the consumer names none (RocketMQ's -1)."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from sdk import (
    AsyncPushConsumer,
    BrokerOptions,
    ConsumeFrom,
    ConsumeResult,
    EmbeddedBroker,
    Message,
    MessageModel,
    Producer,
    PushConsumer,
    dlq_topic,
    retry_topic,
)

from .waiting import group_settled, wait_until


@pytest.mark.parametrize(
    ("setting", "problem"),
    [
        ({"consume_from": "LAST_OFFSET"}, "consume_from must be a ConsumeFrom"),
        ({"consume_from": "bogus"}, "consume_from must be a ConsumeFrom"),
        ({"message_model": "BROADCASTING"}, "message_model must be a MessageModel"),
        ({"consume_batch_size": 0}, "consume_batch_size must be an int >= 1"),
        ({"pull_batch_size": 2.5}, "pull_batch_size must be an int >= 1"),
        ({"consume_timeout_ms": 0}, "consume_timeout_ms must be an int >= 1"),
        ({"pull_wait_ms": -1}, "pull_wait_ms must be an int >= 0"),
        ({"consume_timestamp_ms": -5}, "consume_timestamp_ms must be >= 0"),
        ({"max_reconsume_times": -2}, "max_reconsume_times must be an int >= 0"),
        ({"max_reconsume_times": "3"}, "max_reconsume_times must be an int >= 0"),
        ({"rebalance_interval_s": 0}, "rebalance_interval_s must be a number > 0"),
    ],
)
def test_settings_that_make_no_sense_are_refused_at_construction(tmp_path: Path, setting, problem):
    """A string where an enum belongs used to fall into the TIMESTAMP branch (replaying the
    whole history) or fail later with an AttributeError."""
    with EmbeddedBroker(tmp_path / "b") as broker, pytest.raises(ValueError, match=problem):
        PushConsumer(broker, "g", {"orders": None}, lambda messages: None, **setting)


def test_the_enums_themselves_are_accepted(tmp_path: Path):
    with EmbeddedBroker(tmp_path / "b") as broker:
        consumer = PushConsumer(
            broker,
            "g",
            {"orders": None},
            lambda messages: None,
            consume_from=ConsumeFrom.FIRST_OFFSET,
            message_model=MessageModel.BROADCASTING,
            offsets_dir=str(tmp_path / "offsets"),
        )
        consumer.close()


def _deliveries_until_dead(broker: EmbeddedBroker, **settings: object) -> list[int]:
    """The reconsume counts a message that always fails is delivered with, until it reaches
    the group's dead-letter queue."""
    seen: list[int] = []
    lock = threading.Lock()

    def always_later(messages):
        with lock:
            seen.extend(m.reconsume_times for m in messages)
        return ConsumeResult.RECONSUME_LATER

    with Producer(broker) as producer:
        producer.send(Message("orders", b"poison"), queue_id=0)
    store = broker.service.store
    with PushConsumer(
        broker,
        "billing",
        {"orders": None},
        always_later,
        consume_from=ConsumeFrom.FIRST_OFFSET,
        **settings,
    ) as consumer:
        deadline = time.monotonic() + 20
        while store.max_offset(dlq_topic("billing"), 0) < 1:
            assert time.monotonic() < deadline, f"not dead-lettered; deliveries {seen}"
            time.sleep(0.01)
        # Nothing more is delivered once it is dead: by the time no send-back waits in the
        # schedule and the group committed the topic and its retry topic to their ends, every
        # delivery there will be has been made.
        topics = ("orders", retry_topic("billing"))
        wait_until(lambda: group_settled(broker.service, consumer, "billing", topics))
    with lock:
        return list(seen)


@pytest.fixture
def strict_broker(tmp_path: Path):
    options = BrokerOptions(
        delay_levels=[20] * 18, schedule_poll_interval_s=0.01, max_reconsume_times=2
    )
    with EmbeddedBroker(tmp_path / "b", options=options, commitlog_file_size=1 << 20) as b:
        yield b


def test_a_consumer_naming_no_limit_follows_the_brokers(strict_broker):
    """BrokerOptions(max_reconsume_times=2): delivered with reconsume counts 0, 1, 2, then dead
    (it was delivered 17 times, the consumer's own default winning)."""
    assert _deliveries_until_dead(strict_broker) == [0, 1, 2]


def test_a_consumer_naming_a_limit_overrides_the_brokers(strict_broker):
    assert _deliveries_until_dead(strict_broker, max_reconsume_times=1) == [0, 1]


@pytest.mark.parametrize(
    ("subscription", "problem"),
    [
        ({}, "at least one topic"),
        ({"bad topic": None}, "cannot subscribe to topic 'bad topic'"),
        ("orders", "not the bare string"),
    ],
)
def test_a_subscription_is_checked_at_construction(tmp_path: Path, subscription, problem):
    """As PullConsumer checks it: a bad topic name used to be accepted and pulled in vain."""

    async def listener(messages):
        return None

    with EmbeddedBroker(tmp_path / "b") as broker:
        with pytest.raises(ValueError, match=problem):
            PushConsumer(broker, "g", subscription, lambda messages: None)
        with pytest.raises(ValueError, match=problem):
            AsyncPushConsumer(broker, "g", subscription, listener)


def test_the_typed_keywords_name_every_setting_with_its_type() -> None:
    """``PushOptions`` (what mypy checks a push consumer's keywords against) and
    ``PushSettings`` (what the consumer builds from them) name the same fields, typed alike."""
    import dataclasses
    import typing

    from sdk.consumer.push_core import PushOptions, PushSettings

    hints = typing.get_type_hints(PushSettings)
    fields = {f.name: hints[f.name] for f in dataclasses.fields(PushSettings)}
    assert typing.get_type_hints(PushOptions) == fields
