"""The asyncio HTTP transport against a real aiohttp server on a loopback port that answers
from a script: 503 then 200, a reset connection, an answer that never comes, a 4xx. As for the
blocking transport: retries happen exactly when they should, a resent batch keeps its stamp,
and the deadline bounds the retries (the retry pauses move a fake clock, not real time)."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Awaitable, Callable
from typing import Any

import orjson
import pytest

from sdk.errors import BrokerUnavailableError, InvalidArgumentError, UnknownTopicError
from sdk.transport.http_async import AsyncHttpTransport
from tests.sdk.remote.fakes import FakeTime, error_body, message, send_result_body
from tests.sdk.remote.scripted_server import (
    RESET,
    SILENCE,
    Answer,
    ScriptedServer,
    refused_url,
    scripted_server,
)

Scenario = Callable[[ScriptedServer, AsyncHttpTransport, FakeTime], Awaitable[Any]]


def run(scenario: Scenario, *, timeout_s: float = 5.0, retry_deadline_s: float = 5.0) -> Any:
    async def main() -> Any:
        time_ = FakeTime()
        async with scripted_server() as server:
            transport = AsyncHttpTransport(
                server.url,
                timeout_s=timeout_s,
                retry_deadline_s=retry_deadline_s,
                clock=time_.clock,
                async_sleep=time_.async_sleep,
            )
            async with transport:
                return await scenario(server, transport, time_)

    return asyncio.run(main())


def unavailable() -> Answer:
    return Answer(*error_body(BrokerUnavailableError("shutting down")))


def ok(value: object) -> Answer:
    return Answer(200, orjson.dumps(value))


def test_a_503_answer_is_retried_until_the_broker_answers() -> None:
    async def scenario(server, transport, time_) -> None:
        server.script("POST /v1/queue-count", [unavailable(), unavailable(), ok(4)])
        assert await transport.queue_count("Orders") == 4
        assert len(server.requests_to("/v1/queue-count")) == 3
        assert len(time_.sleeps_s) == 2

    run(scenario)


def test_a_4xx_answer_surfaces_at_once() -> None:
    async def scenario(server, transport, time_) -> None:
        error = UnknownTopicError.from_message("topic Orders does not exist")
        server.script("POST /v1/min-offset", [Answer(*error_body(error)), ok(0)])
        with pytest.raises(UnknownTopicError, match="Orders does not exist"):
            await transport.min_offset("Orders", 0)
        assert len(server.requests_to("/v1/min-offset")) == 1

    run(scenario)


def test_a_500_answer_is_not_retried() -> None:
    async def scenario(server, transport, time_) -> None:
        server.script("POST /v1/queue-count", [Answer(500, b"oops"), ok(4)])
        with pytest.raises(Exception, match="HTTP 500"):
            await transport.queue_count("Orders")
        assert len(server.requests_to("/v1/queue-count")) == 1

    run(scenario)


def test_a_reset_connection_is_retried_for_an_idempotent_call() -> None:
    async def scenario(server, transport, time_) -> None:
        server.script("POST /v1/max-offset", [RESET, ok(17)])
        assert await transport.max_offset("Orders", 0) == 17
        assert len(server.requests_to("/v1/max-offset")) == 2

    run(scenario)


def test_an_answer_slower_than_the_timeout_is_retried_with_the_same_stamp() -> None:
    async def scenario(server, transport, time_) -> None:
        server.script("POST /v1/send", [SILENCE, Answer(200, send_result_body())])
        assert (await transport.send([message()])).status == "PUT_OK"
        first_try, resend = server.requests_to("/v1/send")
        assert first_try.query["producer"] == resend.query["producer"] == transport.producer_id
        assert first_try.query["sequence"] == resend.query["sequence"] == "0"
        assert first_try.body == resend.body

    run(scenario, timeout_s=0.3)


@pytest.mark.parametrize("fault", [RESET, SILENCE])
def test_send_back_is_not_resent_once_the_broker_may_have_acted(fault: str) -> None:
    async def scenario(server, transport, time_) -> None:
        server.script("POST /v1/send-back", [fault, Answer(200, send_result_body())])
        with pytest.raises(BrokerUnavailableError, match=re.escape(server.url)):
            await transport.send_back("billing", 4096)
        assert len(server.requests_to("/v1/send-back")) == 1

    run(scenario, timeout_s=0.3)


def test_send_back_is_resent_after_a_503() -> None:
    async def scenario(server, transport, time_) -> None:
        server.script("POST /v1/send-back", [unavailable(), Answer(200, send_result_body())])
        assert (await transport.send_back("billing", 4096)).status == "PUT_OK"
        assert len(server.requests_to("/v1/send-back")) == 2

    run(scenario)


def test_a_refused_connection_is_retried_until_the_deadline_even_for_send_back() -> None:
    async def main() -> None:
        time_ = FakeTime()
        url = refused_url()
        async with AsyncHttpTransport(
            url, retry_deadline_s=3.0, clock=time_.clock, async_sleep=time_.async_sleep
        ) as transport:
            expected = re.escape(f"cannot reach broker {url}")
            with pytest.raises(BrokerUnavailableError, match=expected) as raised:
                await transport.send_back("billing", 4096)
            assert type(raised.value) is BrokerUnavailableError  # the public error, retriable
            assert raised.value.retriable
        assert len(time_.sleeps_s) >= 2
        assert sum(time_.sleeps_s) == pytest.approx(3.0)

    asyncio.run(main())


def test_a_4xx_answer_to_a_send_is_not_resent() -> None:
    async def scenario(server, transport, time_) -> None:
        refused = InvalidArgumentError("count: want an integer")
        server.script("POST /v1/send", [Answer(*error_body(refused))])
        with pytest.raises(InvalidArgumentError, match="count"):
            await transport.send([message()])
        assert len(server.requests_to("/v1/send")) == 1

    run(scenario)


def test_the_broker_name_comes_from_health_awaited_or_blocking() -> None:
    async def scenario(server, transport, time_) -> None:
        health = ok({"status": "ok", "broker_name": "broker-a", "version": "1"})
        server.script("GET /health", [unavailable(), health, health])
        assert await transport.connect() == "broker-a"  # the 503 retried
        assert transport.broker_name == "broker-a"
        assert len(server.requests_to("/health")) == 2
        # a fresh transport that did not connect asks once, blocking (from a thread here:
        # this loop serves the test server)
        async with AsyncHttpTransport(server.url) as fresh:
            assert await asyncio.to_thread(lambda: fresh.broker_name) == "broker-a"
        assert len(server.requests_to("/health")) == 3

    run(scenario)


def test_a_closed_transport_refuses_calls() -> None:
    async def scenario(server, transport, time_) -> None:
        server.script("POST /v1/queue-count", [ok(4), ok(4)])
        assert await transport.queue_count("Orders") == 4
        await transport.close()
        await transport.close()
        with pytest.raises(BrokerUnavailableError, match="closed"):
            await transport.queue_count("Orders")
        assert len(server.requests_to("/v1/queue-count")) == 1

    run(scenario)
