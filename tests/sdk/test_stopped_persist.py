"""A persist that is stopped half-way (its task cancelled, as closing an AsyncPushConsumer cancels
the pull task, or a KeyboardInterrupt) keeps what it had taken to send.

``RemoteBrokerOffsetStore.commits_due`` hands the persist every offset due, failed commits kept
from before included, and forgets them: only the persist can give them back. A persist closed
while a commit is out must give back what it did not see through, or a queue being let go
loses its final offset (the state is gone, so no later persist names it) and its next owner
consumes again what this member already finished.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from offsetstore import MessageQueue, RemoteBrokerOffsetStore
from sdk import ConsumeFrom, EmbeddedBroker, Message, Producer
from sdk.consumer.membership import MessageModel
from sdk.consumer.offset_steps import NO_BACKEND, persist
from sdk.consumer.push_core import PushCore, PushSettings
from sdk.message import retry_topic
from sdk.transport.base import AsyncBrokerTransport
from sdk.transport.resolve import resolve, resolve_async
from sdk.transport.steps import run_steps_async

TOPIC = "Stopped"
GROUP = "g"


class CommitsPark:
    """The real transport, except that a commit of ``topic`` is sent and never answered (a
    slow link)."""

    def __init__(self, real: AsyncBrokerTransport, topic: str) -> None:
        self.real = real
        self.topic = topic
        self.commit_out = asyncio.Event()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.real, name)

    async def commit_offsets(
        self, broker_name: str, group: str, offsets: dict[MessageQueue, int]
    ) -> None:
        if all(queue.topic != self.topic for queue in offsets):
            return await self.real.commit_offsets(broker_name, group, offsets)
        self.commit_out.set()
        await asyncio.Event().wait()


async def cancel_while_committing(steps: Any, transport: CommitsPark) -> None:
    task = asyncio.create_task(run_steps_async(steps, transport))  # type: ignore[arg-type]
    await asyncio.wait_for(transport.commit_out.wait(), 30)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


def test_a_cancelled_persist_keeps_the_commits_it_took() -> None:
    queue = MessageQueue(TOPIC, "b", 0)
    offsets = RemoteBrokerOffsetStore(GROUP, NO_BACKEND)
    offsets.commit_failed("b", {queue: 7}, ConnectionError("broker away"))  # kept from before

    async def scenario() -> None:
        parks = CommitsPark(None, TOPIC)  # type: ignore[arg-type]
        await cancel_while_committing(persist(offsets, [], drop_others=True), parks)

    asyncio.run(scenario())
    assert offsets.pending() == {queue: 7}  # sent with the next persist


def test_a_queue_let_go_while_closing_keeps_its_final_offset(tmp_path: Path) -> None:
    with EmbeddedBroker(tmp_path / "b", commitlog_file_size=1 << 20) as broker:
        with Producer(broker) as producer:
            for i in range(5):
                producer.send(Message(TOPIC, f"m{i}".encode()), queue_id=0)
        blocking = resolve(broker)

        async def scenario() -> None:
            transport = resolve_async(broker)
            settings = PushSettings(consume_from=ConsumeFrom.FIRST_OFFSET)
            # "client-2" sorts after "client-1": once that one joins, queue 0 is its.
            core = PushCore(transport.broker_name, GROUP, "client-2", {TOPIC: None}, settings)
            await run_steps_async(core.rebalance(), transport)
            queue = next(q for q in core.states if (q.topic, q.queue_id) == (TOPIC, 0))
            batch = core.next_pull(0)
            for work_queue, process_queue, messages in core.on_pulled(
                batch, await transport.pull(batch)
            ):
                state = core.try_start(work_queue, process_queue, messages)
                assert state is not None
                core.complete(work_queue, state, messages)  # the listener finished all five
            subscription = {TOPIC: "*", retry_topic(GROUP): "*"}
            blocking.heartbeat(GROUP, "client-1", subscription, MessageModel.CLUSTERING.value)
            await run_steps_async(core.rebalance(), transport)
            assert core.ownership.is_releasing(queue)
            # The pull task lets the queue go; its commit is out when close cancels the task.
            await cancel_while_committing(core.settle(), CommitsPark(transport, TOPIC))
            await run_steps_async(core.shutdown(), transport)

        asyncio.run(scenario())
        assert blocking.query_offset(blocking.broker_name, GROUP, TOPIC, 0) == 5
