"""The asyncio consumers learn the broker's name with an await before their first I/O
(``AsyncBrokerTransport.connect``): what happens around that await, on an embedded broker."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from offsetstore import MessageQueue
from sdk import (
    AsyncPullConsumer,
    AsyncPushConsumer,
    ConsumeFrom,
    EmbeddedBroker,
    Message,
    Producer,
    ReceivedMessage,
)
from sdk.errors import ClientClosedError, InvalidArgumentError
from sdk.transport.base import AsyncBrokerTransport

from .brokers import SMALL_GEOMETRY


class Held:
    """An asyncio transport whose ``held`` call (``connect``, ``heartbeat``) waits, the first
    time, until the test lets it go."""

    def __init__(self, real: AsyncBrokerTransport, held: str) -> None:
        self.real = real
        self.held = held
        self.entered = asyncio.Event()
        self.release = asyncio.Event()

    def __getattr__(self, name: str) -> Any:
        call = getattr(self.real, name)
        if name != self.held:
            return call

        async def held(*args: Any, **kwargs: Any) -> Any:
            self.entered.set()
            await self.release.wait()
            return await call(*args, **kwargs)

        return held

    async def connect(self) -> str:
        return str(await self.__getattr__("connect")())


def test_queues_of_another_broker_are_refused_by_every_call_until_reassigned(
    tmp_path: Path,
) -> None:
    with EmbeddedBroker(tmp_path / "b", **SMALL_GEOMETRY) as broker:
        with Producer(broker) as producer:
            for index in range(3):
                producer.send(Message("T", f"m{index}".encode()), queue_id=0)

        async def scenario() -> None:
            consumer = AsyncPullConsumer(
                broker.async_transport(), "g", consume_from=ConsumeFrom.FIRST_OFFSET
            )
            try:
                foreign = MessageQueue("T", "other-broker", 0)
                consumer.assign([foreign])  # the name is not known yet: checked later
                for _ in range(2):
                    with pytest.raises(InvalidArgumentError, match="not a queue of broker"):
                        await consumer.poll(0)
                with pytest.raises(InvalidArgumentError, match="not a queue of broker"):
                    await consumer.commit({foreign: 2})
                queues = await consumer.queues_for("T")  # works: to find the right ones
                consumer.assign(queues[:1])
                received: list[ReceivedMessage] = []
                while len(received) < 3:
                    received += await consumer.poll(5)
                assert [m.body for m in received] == [b"m0", b"m1", b"m2"]
            finally:
                await consumer.close()

        asyncio.run(scenario())


@pytest.mark.parametrize("held", ["connect", "heartbeat"], ids=["learning-the-name", "joining"])
def test_a_push_consumer_closed_while_it_starts_does_not_start(tmp_path: Path, held: str) -> None:
    with EmbeddedBroker(tmp_path / "b", **SMALL_GEOMETRY) as broker:

        async def listener(messages: list[ReceivedMessage]) -> None:
            pass

        async def scenario() -> None:
            transport = Held(broker.async_transport(), held)
            consumer = AsyncPushConsumer(transport, "g", {"T": None}, listener)
            starting = asyncio.ensure_future(consumer.start())
            await transport.entered.wait()
            await consumer.close()
            transport.release.set()
            with pytest.raises(ClientClosedError, match="closed while starting"):
                await starting
            assert consumer._task is None and consumer._keepers == []  # nothing left running

        asyncio.run(scenario())
        assert broker.service.groups.view("g").members == ()  # it left again
