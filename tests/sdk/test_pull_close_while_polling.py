"""A lite pull consumer closed from another thread (task) while a poll is in its membership step:
the close waits for that step and nothing rejoins the group after the close left it."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Mapping
from pathlib import Path

from sdk import AsyncPullConsumer, EmbeddedBroker, PullConsumer
from sdk.clock import ManualClock
from sdk.consumer import pull_core
from sdk.transport.in_process import AsyncInProcessTransport, InProcessTransport

TOPIC = "closing"
GROUP = "g-closing"


class HeldHeartbeat(InProcessTransport):
    """Parks the heartbeat of a poll (once armed) until released."""

    def __init__(self, broker: EmbeddedBroker) -> None:
        super().__init__(broker.service)
        self.armed = False
        self.parked = threading.Event()
        self.release = threading.Event()

    def heartbeat(
        self, group: str, client_id: str, subscriptions: Mapping[str, str], message_model: str
    ) -> int:
        if self.armed:
            self.armed = False
            self.parked.set()
            assert self.release.wait(10)
        return super().heartbeat(group, client_id, subscriptions, message_model)


def test_a_close_from_another_thread_waits_for_the_polls_membership_step(tmp_path: Path) -> None:
    clock = ManualClock()
    with EmbeddedBroker(tmp_path / "b", commitlog_file_size=1 << 20, clock=clock) as broker:
        transport = HeldHeartbeat(broker)
        consumer = PullConsumer(transport, GROUP, clock=clock)
        consumer.subscribe([TOPIC])
        assert broker.service.group_view(GROUP).members == (consumer.client_id,)
        clock.advance(pull_core.REBALANCE_INTERVAL_S)  # the next poll heartbeats again
        transport.armed = True
        polling = threading.Thread(target=consumer.poll, args=(0.0,))
        polling.start()
        assert transport.parked.wait(10)
        closing = threading.Thread(target=consumer.close)
        closing.start()
        closing.join(0.2)  # time for a close that did not wait to finish (it did, before)
        assert closing.is_alive()  # it waits for the poll's heartbeat
        transport.release.set()
        polling.join(10)
        closing.join(10)
        assert not polling.is_alive() and not closing.is_alive()
        assert broker.service.group_view(GROUP).members == ()  # no member rejoined


class HeldAsyncHeartbeat(AsyncInProcessTransport):
    def __init__(self, broker: EmbeddedBroker) -> None:
        super().__init__(broker.service)
        self.armed = False
        self.parked = asyncio.Event()
        self.release = asyncio.Event()

    async def heartbeat(
        self, group: str, client_id: str, subscriptions: Mapping[str, str], message_model: str
    ) -> int:
        if self.armed:
            self.armed = False
            self.parked.set()
            await self.release.wait()
        return await super().heartbeat(group, client_id, subscriptions, message_model)


def test_a_close_from_another_task_waits_for_the_polls_membership_step(tmp_path: Path) -> None:
    clock = ManualClock()
    with EmbeddedBroker(tmp_path / "b", commitlog_file_size=1 << 20, clock=clock) as broker:

        async def scenario() -> None:
            transport = HeldAsyncHeartbeat(broker)
            consumer = AsyncPullConsumer(transport, GROUP, clock=clock)
            consumer.subscribe([TOPIC])
            await consumer.poll(0.0)  # joins
            assert broker.service.group_view(GROUP).members == (consumer.client_id,)
            clock.advance(pull_core.REBALANCE_INTERVAL_S)
            transport.armed = True
            polling = asyncio.create_task(consumer.poll(0.0))
            await asyncio.wait_for(transport.parked.wait(), 10)
            closing = asyncio.create_task(consumer.close())
            await asyncio.sleep(0)  # the close starts and waits for the poll's step
            assert not closing.done()
            transport.release.set()
            await asyncio.wait_for(asyncio.gather(polling, closing), 10)
            assert broker.service.group_view(GROUP).members == ()

        asyncio.run(scenario())
