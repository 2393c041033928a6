"""How many broker calls a consumer group needs to settle, and that it settles right.

Members that join together (as the asyncio consumers of one process do, or the processes of a
deployment started at once) each heartbeat, read the group and its topics' queue counts in one
``rebalance_view`` call, take their queues' leases and read where to start them in one
``start_offsets`` call. A member keeps the generation of the view it allocated from, so its
first pull does not send it round again when the others joined before it looked.

The embedded transport answers without yielding to the event loop; :class:`Yielding` makes
each call yield once first, as a call over the network does, so the members' calls interleave
(in the loop's first-in first-out order: every heartbeat lands before the first view is read).
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

from offsetstore import MessageQueue
from sdk import Admin, AsyncPullConsumer, ConsumeFrom, EmbeddedBroker, Message, Producer
from sdk.transport.base import AsyncBrokerTransport

TOPIC = "Settle"
GROUP = "settlers"
MEMBERS = 8
SETTLE_TIMEOUT_S = 60.0
PULL = "pull"


class Yielding:
    """An asyncio transport that yields to the loop before each call of ``real``, as a
    network transport does, and counts the calls by method name in ``calls``."""

    def __init__(self, real: AsyncBrokerTransport, calls: Counter[str]) -> None:
        self.real = real
        self.calls = calls

    @property
    def broker_name(self) -> str:
        return self.real.broker_name

    async def connect(self) -> str:
        return await self.real.connect()

    async def close(self) -> None:
        await self.real.close()

    def __getattr__(self, name: str) -> Callable[..., Any]:
        method = getattr(self.real, name)

        async def call(*args: Any, **kwargs: Any) -> Any:
            self.calls[name] += 1
            await asyncio.sleep(0)
            return await method(*args, **kwargs)

        return call

    # the two methods resolve_async() looks for, spelt out
    async def pull(self, *args: Any, **kwargs: Any) -> Any:
        return await self.__getattr__(PULL)(*args, **kwargs)

    async def send(self, *args: Any, **kwargs: Any) -> Any:
        return await self.__getattr__("send")(*args, **kwargs)


def _settled(consumers: list[AsyncPullConsumer], queues: set[MessageQueue]) -> bool:
    """Every member holds exactly one queue, and together they hold all of them."""
    held = [set(consumer.assignment()) for consumer in consumers]
    return all(len(mine) == 1 for mine in held) and set().union(*held) == queues


async def _settle(consumers: list[AsyncPullConsumer], queues: set[MessageQueue]) -> list[bytes]:
    """Poll every member at once, round after round, until the group has settled; answers the
    bodies of the messages the polls returned."""
    deadline = time.monotonic() + SETTLE_TIMEOUT_S
    got: list[bytes] = []
    while not _settled(consumers, queues):
        assert time.monotonic() < deadline, "the group never settled"
        answers = await asyncio.gather(*(consumer.poll(0) for consumer in consumers))
        got += [message.body for messages in answers for message in messages]
    return got


def _members(broker: EmbeddedBroker, calls: Counter[str]) -> list[AsyncPullConsumer]:
    consumers = [
        AsyncPullConsumer(
            Yielding(broker.async_transport(), calls), GROUP, consume_from=ConsumeFrom.FIRST_OFFSET
        )
        for _ in range(MEMBERS)
    ]
    for consumer in consumers:
        consumer.subscribe([TOPIC])
    return consumers


def _check_leases(broker: EmbeddedBroker, consumers: list[AsyncPullConsumer]) -> None:
    """The broker's lease on each queue a member consumes is that member's."""
    owners = broker.service.group_view(GROUP).owners
    for consumer in consumers:
        for queue in consumer.assignment():
            assert owners[queue] == consumer.client_id


def test_members_joining_together_settle_in_one_round_each(tmp_path: Path) -> None:
    with EmbeddedBroker(tmp_path / "broker", commitlog_file_size=1 << 20) as broker:
        with Admin(broker) as admin:
            admin.create_topic(TOPIC, MEMBERS)
        queues = {MessageQueue(TOPIC, broker.service.broker_name, q) for q in range(MEMBERS)}
        calls: Counter[str] = Counter()

        async def join() -> Counter[str]:
            consumers = _members(broker, calls)
            try:
                await _settle(consumers, queues)
                _check_leases(broker, consumers)
                return Counter(calls)
            finally:
                for consumer in consumers:
                    await consumer.close()

        settled = asyncio.run(join())
    del settled[PULL]
    # One heartbeat, one view, one lease request and one start read per member. A member that
    # kept its heartbeat's generation went round a second time; reading the group, each
    # topic's queue count and each queue's start (then recording it) took a call each.
    assert settled == dict.fromkeys(
        ("heartbeat", "rebalance_view", "lock_queues", "start_offsets"), MEMBERS
    )


def test_a_settled_group_consumes_everything_and_moves_the_queue_of_a_member_that_leaves(
    tmp_path: Path,
) -> None:
    per_queue = 5
    with EmbeddedBroker(tmp_path / "broker", commitlog_file_size=1 << 20) as broker:
        with Admin(broker) as admin:
            admin.create_topic(TOPIC, MEMBERS)
        with Producer(broker) as producer:
            for q in range(MEMBERS):
                batch = [Message(TOPIC, f"{q}-{i}".encode()) for i in range(per_queue)]
                producer.send_batch(batch, queue_id=q)
        queues = {MessageQueue(TOPIC, broker.service.broker_name, q) for q in range(MEMBERS)}
        calls: Counter[str] = Counter()

        async def consume() -> list[bytes]:
            consumers = _members(broker, calls)
            deadline = time.monotonic() + SETTLE_TIMEOUT_S
            try:
                got = await _settle(consumers, queues)
                while len(got) < MEMBERS * per_queue:
                    assert time.monotonic() < deadline, f"only {len(got)} messages came"
                    answers = await asyncio.gather(*(c.poll(0.05) for c in consumers))
                    got += [m.body for messages in answers for m in messages]
                await consumers.pop().close()  # its queue moves to another member
                while set().union(*(set(c.assignment()) for c in consumers)) != queues:
                    assert time.monotonic() < deadline, "the queue of the member that left stayed"
                    await asyncio.gather(*(c.poll(0.05) for c in consumers))
                _check_leases(broker, consumers)
                return got
            finally:
                for consumer in consumers:
                    await consumer.close()

        got = asyncio.run(consume())
    expected = [f"{q}-{i}".encode() for q in range(MEMBERS) for i in range(per_queue)]
    assert sorted(got) == sorted(expected)


class Forgetting(Yielding):
    """A :class:`Yielding` transport whose broker forgets the member (as a restarted broker
    would) between its first heartbeat and its first ``rebalance_view``."""

    def __init__(self, real: AsyncBrokerTransport, calls: Counter[str]) -> None:
        super().__init__(real, calls)
        self.client_id = ""

    def __getattr__(self, name: str) -> Callable[..., Any]:
        call = super().__getattr__(name)
        if name != "rebalance_view" or self.calls[name]:
            return call

        async def forgotten_first(*args: Any, **kwargs: Any) -> Any:
            await self.real.unregister(GROUP, self.client_id)
            return await call(*args, **kwargs)

        return forgotten_first


def test_a_member_the_broker_forgot_while_joining_joins_again_at_once(tmp_path: Path) -> None:
    """Missing from the group's view, it keeps its heartbeat's generation, not the view's: its
    next pull comes back at once with the broker's, and it joins again (with the view's
    generation it would wait for the next rebalance, 20 s later)."""
    with EmbeddedBroker(tmp_path / "broker", commitlog_file_size=1 << 20) as broker:
        with Admin(broker) as admin:
            admin.create_topic(TOPIC, 1)
        with Producer(broker) as producer:
            producer.send(Message(TOPIC, b"waiting"))
        transport = Forgetting(broker.async_transport(), Counter())

        async def first_message() -> list[bytes]:
            consumer = AsyncPullConsumer(transport, GROUP, consume_from=ConsumeFrom.FIRST_OFFSET)
            transport.client_id = consumer.client_id
            consumer.subscribe([TOPIC])
            try:
                return [message.body for message in await consumer.poll(10.0)]
            finally:
                await consumer.close()

        assert asyncio.run(first_message()) == [b"waiting"]
        assert transport.calls["heartbeat"] == 2  # it joined again
