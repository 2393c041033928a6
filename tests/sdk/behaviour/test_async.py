"""The asyncio twins: AsyncProducer and AsyncPushConsumer behave as the threaded clients."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from sdk import (
    AsyncProducer,
    AsyncPushConsumer,
    BrokerUnavailableError,
    ClientClosedError,
    ConsumeFrom,
    ConsumeResult,
    InvalidMessageError,
    Message,
)
from sdk.message import ReceivedMessage, dlq_topic

from .conftest import Harness, Recorder, async_wait_until

TOPIC = "telemetry"


def consumer(harness: Harness, group: str, listener: Any, **settings: Any) -> AsyncPushConsumer:
    settings.setdefault("consume_from", ConsumeFrom.FIRST_OFFSET)
    return AsyncPushConsumer(harness.broker_target, group, {TOPIC: None}, listener, **settings)


def test_async_consumer_receives_everything_the_async_producer_sends(harness: Harness) -> None:
    recorder = Recorder()

    async def listener(messages: list[ReceivedMessage]) -> ConsumeResult:
        await asyncio.sleep(0)
        recorder.record(messages)
        return ConsumeResult.SUCCESS

    async def main() -> None:
        async with (
            AsyncProducer(harness.broker_target) as producer,
            consumer(harness, "collectors", listener) as push,
        ):
            singles = await asyncio.gather(
                *(producer.send(Message(TOPIC, f"r{i}".encode(), tags="cpu")) for i in range(40))
            )
            batch = await producer.send_batch(
                [Message(TOPIC, f"b{i}".encode()) for i in range(10)], queue_id=3
            )
            task = producer.send_async(Message(TOPIC, b"background"))
            producer.send_oneway(Message(TOPIC, b"fire and forget"))
            receipts = [*singles, *batch, await task]
            await async_wait_until(lambda: recorder.count() >= 52)
            assert len(push.assignment()) == 5
        received = {m.msg_id: m for m in recorder.messages()}
        assert {r.msg_id for r in receipts} <= set(received)
        assert b"fire and forget" in recorder.bodies()
        assert len(recorder.messages()) == 52
        for receipt in receipts:
            got = received[receipt.msg_id]
            assert (got.queue_id, got.queue_offset) == (receipt.queue_id, receipt.queue_offset)
            assert got.reconsume_times == 0

    asyncio.run(main())


def test_async_retry_path_ends_in_the_dead_letter_queue(harness: Harness) -> None:
    recorder = Recorder()
    group = "sensors"

    async def listener(messages: list[ReceivedMessage]) -> ConsumeResult:
        recorder.record(messages)
        if messages[0].body == b"broken":
            raise ValueError("cannot parse the reading")
        if messages[0].reconsume_times == 0:
            return ConsumeResult.RECONSUME_LATER
        return ConsumeResult.SUCCESS

    def dead() -> list[ReceivedMessage]:
        stored = harness.service.store.get_messages(dlq_topic(group), 0, 0).messages
        return [ReceivedMessage.from_stored(m) for m in stored]  # as a DLQ consumer sees them

    async def main() -> None:
        async with (
            AsyncProducer(harness.broker_target) as producer,
            consumer(harness, group, listener, max_reconsume_times=2),
        ):
            broken = await producer.send(Message(TOPIC, b"broken"))
            late = await producer.send(Message(TOPIC, b"late"))
            await async_wait_until(lambda: len(dead()) == 1 and len(recorder.of(b"late")) == 2)
        assert [d.message.reconsume_times for d in recorder.of(b"broken")] == [0, 1, 2]
        assert [d.message.reconsume_times for d in recorder.of(b"late")] == [0, 1]
        assert {d.message.topic for d in recorder.deliveries} == {TOPIC}
        assert {d.message.msg_id for d in recorder.of(b"late")} == {late.msg_id}
        (dead_letter,) = dead()
        assert dead_letter.msg_id == broken.msg_id
        assert dead_letter.original_topic == TOPIC
        assert dead_letter.properties == {}

    asyncio.run(main())


def test_async_producer_errors(harness: Harness) -> None:
    bad_messages = [
        Message("bad topic!", b"x"),
        Message(TOPIC, b""),
        Message(TOPIC, b"x", properties={"KEYS": "k"}),
    ]

    async def main() -> None:
        producer = AsyncProducer(harness.broker_target, retries=1)
        for bad in bad_messages:
            with pytest.raises(InvalidMessageError):
                await producer.send(bad)
        await producer.send(Message(TOPIC, b"fine"))
        harness.stop()
        with pytest.raises(BrokerUnavailableError):
            await producer.send(Message(TOPIC, b"too late"))
        await producer.close()
        with pytest.raises(ClientClosedError):
            await producer.send(Message(TOPIC, b"closed"))

    asyncio.run(main())
