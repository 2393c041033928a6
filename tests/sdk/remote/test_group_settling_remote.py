"""Asyncio pull consumers of one group joining together over HTTP, against a real broker
process, as ``quiver perf consume --consumers N`` runs them: each over its own transport, all
in one process. The group settles with every queue consumed by one member (the broker's lease
on it is that member's), every stored message is received, and the members settle with the
calls made for it: ``rebalance_view`` (the group and its topics' queue counts in one answer)
and ``start_offsets`` (every new queue's start in one answer), not a call per topic or queue.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from sdk import Admin, AsyncPullConsumer, ConsumeFrom, Message, Producer, RemoteBroker
from tests.sdk.remote.broker_process import BrokerProcess
from tests.sdk.test_group_settling import Yielding  # counts the calls by name

pytestmark = pytest.mark.integration

TOPIC = "joined"
GROUP = "joiners"
MEMBERS = 6
PER_QUEUE = 20
SETTLE_S = 90.0  # the longest the group may take here, under load (a bound, not an expectation)


def test_members_joining_together_over_http_settle_and_receive_everything(
    tmp_path: Path,
) -> None:
    with BrokerProcess(tmp_path / "broker") as broker:
        with Admin(broker.url) as admin:
            admin.create_topic(TOPIC, MEMBERS)
        with Producer(broker.url) as producer:
            for queue_id in range(MEMBERS):
                batch = [Message(TOPIC, f"{queue_id}-{i}".encode()) for i in range(PER_QUEUE)]
                producer.send_batch(batch, queue_id=queue_id)
        calls: Counter[str] = Counter()
        got, leases, used = asyncio.run(_consume(broker.url, calls))
        expected = {f"{q}-{i}".encode() for q in range(MEMBERS) for i in range(PER_QUEUE)}
        assert set(got) == expected
        for member, mine in leases.items():  # one member per queue, and its lease is that member's
            assert len(mine) == 1, f"{member} consumes {mine}"
        assert len(set().union(*leases.values())) == MEMBERS
        assert used["rebalance_view"] >= MEMBERS and used["start_offsets"] >= MEMBERS
        assert not {"group_view", "queue_count", "query_offset", "min_offset"} & set(used)


async def _consume(
    url: str, calls: Counter[str]
) -> tuple[list[bytes], dict[str, set[Any]], Counter[str]]:
    """Poll every member at once until all messages came and each holds one queue; answers
    the bodies received, the queues whose lease each member holds, the calls made so far."""
    transports = [Yielding(RemoteBroker(url).async_transport(), calls) for _ in range(MEMBERS)]
    consumers = [
        AsyncPullConsumer(transport, GROUP, consume_from=ConsumeFrom.FIRST_OFFSET)
        for transport in transports
    ]
    got: list[bytes] = []
    deadline = time.monotonic() + SETTLE_S
    try:
        for consumer in consumers:
            consumer.subscribe([TOPIC])
        while len(got) < MEMBERS * PER_QUEUE or any(len(c.assignment()) != 1 for c in consumers):
            assert time.monotonic() < deadline, f"{len(got)} messages, not settled"
            answers = await asyncio.gather(*(c.poll(0.05) for c in consumers))
            got += [message.body for messages in answers for message in messages]
        used = Counter(calls)
        view = await transports[0].group_view(GROUP)
        leases = {
            c.client_id: {q for q, owner in view.owners.items() if owner == c.client_id}
            for c in consumers
        }
        for consumer in consumers:
            assert leases[consumer.client_id] == set(consumer.assignment())
        return got, leases, used
    finally:
        for consumer in consumers:
            await consumer.close()
        for transport in transports:
            await transport.close()
