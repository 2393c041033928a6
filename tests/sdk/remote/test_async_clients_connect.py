"""The asyncio consumers never block their loop to learn the broker's name: the constructor asks
nothing, and the first await asks ``GET /health`` once through the asyncio transport. The tests
run on the loop that also serves the scripted broker, so a blocking request from that loop
would never be answered."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import orjson
import pytest

from offsetstore import MessageQueue
from sdk import AsyncPullConsumer, AsyncPushConsumer, ReceivedMessage
from sdk.errors import ArgumentTypeError, InvalidArgumentError, QuiverError
from sdk.transport.http_async import AsyncHttpTransport
from tests.sdk.remote.scripted_server import Answer, ScriptedServer, scripted_server

HEALTH = Answer(200, orjson.dumps({"status": "ok", "broker_name": "broker-a", "version": "1"}))


def run(scenario: Callable[[ScriptedServer], Awaitable[None]]) -> None:
    async def main() -> None:
        async with scripted_server() as server:
            await asyncio.wait_for(scenario(server), timeout=10)

    asyncio.run(main())


def test_a_pull_consumer_learns_the_broker_on_its_first_await() -> None:
    async def scenario(server: ScriptedServer) -> None:
        server.script("GET /health", [HEALTH])
        server.script("POST /v1/queue-count", [Answer(200, b"2")])
        consumer = AsyncPullConsumer(server.url, "g", auto_commit=False)
        try:
            assert server.seen == []  # the constructor asked nothing
            queues = await consumer.queues_for("Orders")
            assert queues == [MessageQueue("Orders", "broker-a", q) for q in (0, 1)]
            assert [seen.path for seen in server.seen] == ["/health", "/v1/queue-count"]
        finally:
            await consumer.close()

    run(scenario)


def test_queues_of_another_broker_assigned_before_the_first_await_are_refused_then() -> None:
    async def scenario(server: ScriptedServer) -> None:
        server.script("GET /health", [HEALTH])
        consumer = AsyncPullConsumer(server.url, "g", auto_commit=False)
        try:
            consumer.assign([MessageQueue("Orders", "broker-b", 0)])  # not known yet
            with pytest.raises(InvalidArgumentError, match="not a queue of broker 'broker-a'"):
                await consumer.poll(0)
            assert [seen.path for seen in server.seen] == ["/health"]  # nothing pulled
        finally:
            await consumer.close()

    run(scenario)


def test_a_push_consumer_asks_nothing_until_it_starts_then_asks_without_blocking() -> None:
    async def listener(messages: list[ReceivedMessage]) -> None:
        pass

    async def scenario(server: ScriptedServer) -> None:
        server.script("GET /health", [HEALTH])
        consumer = AsyncPushConsumer(server.url, "g", {"Orders": None}, listener)
        try:
            assert server.seen == []
            with pytest.raises(QuiverError):  # the script has no answer for joining the group
                await consumer.start()
            # the name came from the awaited GET /health; the join followed it
            assert [seen.path for seen in server.seen[:2]] == ["/health", "/v1/heartbeat"]
        finally:
            await consumer.close()

    run(scenario)


def test_callers_awaiting_the_name_at_once_share_one_request() -> None:
    async def scenario(server: ScriptedServer) -> None:
        server.script("GET /health", [HEALTH])
        async with AsyncHttpTransport(server.url) as transport:
            names = await asyncio.gather(*(transport.connect() for _ in range(5)))
        assert names == ["broker-a"] * 5
        assert len(server.requests_to("/health")) == 1

    run(scenario)


def test_an_asyncio_transport_without_connect_is_refused_by_name() -> None:
    class NoConnect:
        async def pull(self, batch: object) -> None: ...

        async def send(self, messages: object) -> None: ...

    with pytest.raises(ArgumentTypeError, match="no async connect"):
        AsyncPullConsumer(NoConnect(), "g")
