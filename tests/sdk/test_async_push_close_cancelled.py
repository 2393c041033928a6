"""Cancelling ``AsyncPushConsumer.close()`` while it persists (a slow broker, a ``wait_for``
round the close) does not cut the shutdown short: the offsets are still committed and the
member still leaves the group, so its queues go to the others at once instead of after its
leases and its membership expire."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from pathlib import Path

import pytest

from offsetstore import MessageQueue
from sdk import AsyncPushConsumer, ConsumeFrom, EmbeddedBroker, Message, Producer, ReceivedMessage
from sdk.transport.base import AsyncBrokerTransport

TOPIC = "CloseCancelled"
GROUP = "g"


class SlowCommits:
    """The real transport, except that a commit waits for ``answer`` (a slow broker)."""

    def __init__(self, real: AsyncBrokerTransport) -> None:
        self.real = real
        self.commit_out = asyncio.Event()
        self.answer = asyncio.Event()

    def __getattr__(self, name: str) -> object:
        return getattr(self.real, name)

    async def commit_offsets(
        self, broker_name: str, group: str, offsets: Mapping[MessageQueue, int]
    ) -> None:
        self.commit_out.set()
        await self.answer.wait()
        await self.real.commit_offsets(broker_name, group, offsets)


def test_a_close_cancelled_while_persisting_still_commits_and_leaves(tmp_path: Path) -> None:
    with EmbeddedBroker(tmp_path / "b", commitlog_file_size=1 << 20) as broker:
        with Producer(broker) as producer:
            for i in range(3):
                producer.send(Message(TOPIC, f"m{i}".encode()), queue_id=0)
        service = broker.service

        async def scenario() -> None:
            transport = SlowCommits(broker.async_transport())
            consumed: list[int] = []
            all_in = asyncio.Event()

            async def listener(messages: list[ReceivedMessage]) -> None:
                consumed.extend(m.queue_offset for m in messages if m.topic == TOPIC)
                if len(consumed) == 3:
                    all_in.set()

            consumer = AsyncPushConsumer(
                transport, GROUP, {TOPIC: None}, listener, consume_from=ConsumeFrom.FIRST_OFFSET
            )
            await consumer.start()
            await asyncio.wait_for(all_in.wait(), 30)
            closing = asyncio.create_task(consumer.close())
            await asyncio.wait_for(transport.commit_out.wait(), 30)
            closing.cancel()
            with pytest.raises(asyncio.CancelledError):
                await closing
            transport.answer.set()  # the broker answers after all
            for _ in range(3000):  # at most 30 s
                if not service.group_view(GROUP).members:
                    break
                await asyncio.sleep(0.01)
            assert not service.group_view(GROUP).members, "the member never left the group"

        asyncio.run(scenario())
        assert service.query_offset(GROUP, TOPIC, 0) == 3
