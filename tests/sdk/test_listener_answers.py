"""How push consumers read a listener's answer, through a real broker, for both shells
(:class:`PushConsumer`, :class:`AsyncPushConsumer`) and both ways of consuming (concurrent,
orderly): ``None`` and ``SUCCESS`` acknowledge the batch once; a value that is not a
:class:`ConsumeResult` (``True``, ``"ok"``, ``1``) is logged at ERROR with its repr, the group and
the message ids, and the batch is retried (sent back, or retried in place when orderly), never
dead-lettered on that account."""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from sdk import (
    AsyncPushConsumer,
    BrokerOptions,
    ConsumeFrom,
    ConsumeResult,
    EmbeddedBroker,
    Message,
    Producer,
    PushConsumer,
    dlq_topic,
    retry_topic,
)
from sdk.message import ReceivedMessage

from .waiting import wait_until

TOPIC = "orders"
GROUP = "billing"
SCHEDULE_TOPIC = "SCHEDULE_TOPIC_XXXX"

# What a listener answers on each delivery, by the message's reconsume count.
Answers = Callable[[int], object]


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[EmbeddedBroker]:
    # Short delay levels: a message sent back comes again within ~50 ms.
    options = BrokerOptions(delay_levels=[50] * 18, schedule_poll_interval_s=0.01)
    with EmbeddedBroker(tmp_path / "b", options=options, commitlog_file_size=1 << 20) as b:
        yield b


class Deliveries:
    """Every delivery (msg_id, reconsume count) a listener saw, thread-safe."""

    def __init__(self, answers: Answers) -> None:
        self.answers = answers
        self.seen: list[tuple[str | None, int]] = []
        self.lock = threading.Lock()

    def record(self, messages: list[ReceivedMessage]) -> object:
        with self.lock:
            self.seen.extend((m.msg_id, m.reconsume_times) for m in messages)
        return self.answers(messages[0].reconsume_times)

    def count(self) -> int:
        with self.lock:
            return len(self.seen)


def _settings(orderly: bool) -> dict[str, object]:
    settings: dict[str, object] = {"consume_from": ConsumeFrom.FIRST_OFFSET}
    if orderly:
        settings.update(orderly=True, orderly_retry_pause_s=0.01)
    return settings


def consume_until(
    broker: EmbeddedBroker, shell: str, orderly: bool, deliveries: Deliveries, count: int
) -> None:
    """Run a push consumer of ``shell`` ("sync" or "async") until ``count`` deliveries were
    seen, then close it (which waits for the running call and commits its result)."""
    if shell == "sync":
        with PushConsumer(broker, GROUP, {TOPIC: None}, deliveries.record, **_settings(orderly)):
            wait_until(lambda: deliveries.count() >= count)
        return

    async def listener(messages: list[ReceivedMessage]) -> object:
        return deliveries.record(messages)

    async def scenario() -> None:
        consumer = AsyncPushConsumer(
            broker,
            GROUP,
            {TOPIC: None},
            listener,  # type: ignore[arg-type]
            **_settings(orderly),
        )
        async with consumer:
            deadline = time.monotonic() + 10.0
            while deliveries.count() < count:
                assert time.monotonic() < deadline, f"{count} deliveries not seen within 10 s"
                await asyncio.sleep(0.01)

    asyncio.run(scenario())


def send_one(broker: EmbeddedBroker) -> tuple[str, int]:
    """Send one message; its msg_id and queue id."""
    with Producer(broker) as producer:
        receipt = producer.send(Message(TOPIC, b"order-42"))
    return receipt.msg_id, receipt.queue_id


def sent_back(broker: EmbeddedBroker) -> int:
    """How many messages of the group were sent back (delayed, retried or dead-lettered)."""
    store = broker.service.store
    scheduled = sum(store.max_offset(SCHEDULE_TOPIC, level) for level in range(18))
    return scheduled + store.max_offset(retry_topic(GROUP), 0) + dead_letters(broker)


def dead_letters(broker: EmbeddedBroker) -> int:
    return broker.service.store.max_offset(dlq_topic(GROUP), 0)


SHELLS = ["sync", "async"]
KINDS = [pytest.param(False, id="concurrent"), pytest.param(True, id="orderly")]


@pytest.mark.parametrize("shell", SHELLS)
@pytest.mark.parametrize("orderly", KINDS)
@pytest.mark.parametrize("answer", [None, ConsumeResult.SUCCESS], ids=["None", "SUCCESS"])
def test_none_and_success_acknowledge_the_batch_once(
    broker: EmbeddedBroker, shell: str, orderly: bool, answer: object
) -> None:
    msg_id, queue_id = send_one(broker)
    deliveries = Deliveries(lambda _times: answer)
    consume_until(broker, shell, orderly, deliveries, count=1)
    # closed: the call's result is committed and persisted, and nothing more can arrive
    assert deliveries.seen == [(msg_id, 0)]
    assert broker.service.query_offset(GROUP, TOPIC, queue_id) == 1
    assert sent_back(broker) == 0


@pytest.mark.parametrize("shell", SHELLS)
@pytest.mark.parametrize("orderly", KINDS)
@pytest.mark.parametrize("wrong", [True, "ok", 1], ids=["True", "ok", "1"])
def test_a_value_that_is_not_a_consume_result_is_logged_and_retried(
    broker: EmbeddedBroker,
    caplog: pytest.LogCaptureFixture,
    shell: str,
    orderly: bool,
    wrong: object,
) -> None:
    msg_id, queue_id = send_one(broker)
    # the wrong answer on the first delivery; None (success) on the retry
    deliveries = Deliveries(lambda times: wrong if times == 0 else None)
    with caplog.at_level(logging.ERROR, logger="sdk"):
        consume_until(broker, shell, orderly, deliveries, count=2)
    assert deliveries.seen == [(msg_id, 0), (msg_id, 1)]
    errors = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
    assert len(errors) == 1, errors
    assert repr(wrong) in errors[0]
    assert GROUP in errors[0]
    assert msg_id in errors[0]
    assert "not a ConsumeResult" in errors[0]
    assert broker.service.query_offset(GROUP, TOPIC, queue_id) == 1
    assert dead_letters(broker) == 0


@pytest.mark.parametrize("shell", SHELLS)
def test_true_is_retried_like_reconsume_later_not_dead_lettered(
    broker: EmbeddedBroker, shell: str
) -> None:
    """A listener answering True every time is retried with rising reconsume counts (sent back
    through the retry topic), not treated as a final failure."""
    msg_id, _ = send_one(broker)
    deliveries = Deliveries(lambda _times: True)
    consume_until(broker, shell, False, deliveries, count=4)
    assert deliveries.seen[:4] == [(msg_id, times) for times in range(4)]
    assert broker.service.store.max_offset(retry_topic(GROUP), 0) >= 3
    assert dead_letters(broker) == 0
