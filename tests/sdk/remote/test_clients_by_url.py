"""Every client takes a broker URL where it takes an EmbeddedBroker: real producers and
consumers, blocking and asyncio, over the HTTP transports to a real broker behind a loopback
broker server (tests/sdk/remote/loopback_server.py); a client closes the transport it made, and
only that one. Also: the transports have every method of the seam, with its signature."""

from __future__ import annotations

import asyncio
import inspect
import re
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from sdk import (
    Admin,
    AsyncAdmin,
    AsyncProducer,
    AsyncPullConsumer,
    AsyncPushConsumer,
    ConsumeFrom,
    EmbeddedBroker,
    Message,
    Producer,
    PullConsumer,
    PushConsumer,
    TransactionalProducer,
    TransactionState,
)
from sdk.errors import BrokerUnavailableError, InvalidArgumentError
from sdk.protocol.calls import CALLS
from sdk.transport.base import AsyncBrokerTransport, BrokerTransport
from sdk.transport.http_async import AsyncHttpTransport
from sdk.transport.http_sync import HttpTransport
from sdk.transport.resolve import resolve, resolve_async
from sdk.transport.transaction_models import COMMITTED
from tests.sdk.remote.loopback_server import LoopbackServer, loopback_server
from tests.sdk.remote.scripted_server import refused_url
from tests.sdk.waiting import wait_until

TOPIC = "Remote"
REPO = Path(__file__).resolve().parents[3]


@pytest.fixture
def server(tmp_path: Path) -> Iterator[LoopbackServer]:
    with (
        EmbeddedBroker(tmp_path / "b", commitlog_file_size=1 << 20) as broker,
        loopback_server(broker) as front,
    ):
        yield front


def protocol_methods(protocol: type) -> set[str]:
    return {
        name
        for name, member in inspect.getmembers(protocol)
        if not name.startswith("_") and callable(member)
    }


# -- the generated methods ----------------------------------------------------------------------
def test_the_transports_have_every_method_of_the_seam_with_its_signature() -> None:
    assert protocol_methods(BrokerTransport) == set(CALLS) | {"close"}
    # connect(): an asyncio client learns the broker's name without blocking its loop
    assert protocol_methods(AsyncBrokerTransport) == set(CALLS) | {"close", "connect"}
    for name in CALLS:
        wanted = inspect.signature(getattr(BrokerTransport, name)).parameters
        for transport in (HttpTransport, AsyncHttpTransport):
            method = getattr(transport, name)
            assert inspect.signature(method).parameters == wanted, (transport, name)
            assert method.__name__ == name
        assert not inspect.iscoroutinefunction(getattr(HttpTransport, name)), name
        assert inspect.iscoroutinefunction(getattr(AsyncHttpTransport, name)), name
    assert inspect.iscoroutinefunction(AsyncHttpTransport.close)


def test_a_call_the_method_would_refuse_fails_before_any_request() -> None:
    with HttpTransport("http://127.0.0.1:9", retry_deadline_s=0) as transport:
        with pytest.raises(TypeError):
            transport.min_offset("Orders")  # type: ignore[call-arg]
        with pytest.raises(TypeError):
            transport.send_back("g", 1, 0)  # type: ignore[misc]  (delay_level is keyword-only)
        with pytest.raises(TypeError):
            transport.queue_count(topic="Orders", queue_id=1)  # type: ignore[call-arg]


def test_resolve_turns_a_url_into_an_http_transport_and_refuses_a_bad_one() -> None:
    sync = resolve("http://127.0.0.1:8080/")
    assert isinstance(sync, HttpTransport) and sync.url == "http://127.0.0.1:8080"
    sync.close()
    assert isinstance(resolve_async("https://broker:443"), AsyncHttpTransport)
    with pytest.raises(InvalidArgumentError, match="gopher://x:1"):
        Producer("gopher://x:1")


# -- blocking clients ---------------------------------------------------------------------------
def test_producer_and_pull_consumer_by_url(server: LoopbackServer) -> None:
    with Producer(server.url) as producer:
        receipts = [
            producer.send(Message(TOPIC, f"m{i}".encode(), keys=[f"k{i}"])) for i in range(20)
        ]
        transport = producer.transport
    assert {r.status for r in receipts} == {"PUT_OK"}
    assert isinstance(transport, HttpTransport) and transport._closed  # closed with the producer

    got: list[bytes] = []
    with PullConsumer(server.url, "remote-pull", consume_from=ConsumeFrom.FIRST_OFFSET) as consumer:
        consumer.subscribe([TOPIC])
        wait_until(lambda: bool(got.extend(m.body for m in consumer.poll(0.2))) or len(got) >= 20)
        consumer.commit()
        committed = sum(consumer.committed(q) or 0 for q in consumer.assignment())
    assert sorted(got) == sorted(f"m{i}".encode() for i in range(20))
    assert committed == 20
    assert "/v1/pull" in server.requests and "/v1/commit-offsets" in server.requests


def test_push_consumer_by_url(server: LoopbackServer) -> None:
    with Producer(server.url) as producer:
        for i in range(10):
            producer.send(Message(TOPIC, f"p{i}".encode()))
    seen: list[bytes] = []
    lock = threading.Lock()

    def listener(messages) -> None:  # type: ignore[no-untyped-def]
        with lock:
            seen.extend(m.body for m in messages)

    consumer = PushConsumer(
        server.url, "remote-push", {TOPIC: None}, listener,
        consume_from=ConsumeFrom.FIRST_OFFSET,
    )  # fmt: skip
    with consumer:
        wait_until(lambda: len(seen) >= 10)
    assert sorted(seen) == sorted(f"p{i}".encode() for i in range(10))
    assert consumer._transport._closed  # type: ignore[attr-defined]


def test_admin_by_url_and_a_given_transport_stays_open(server: LoopbackServer) -> None:
    with Admin(server.url) as admin:
        admin.create_topic("Made", queue_count=3)
        assert "Made" in {t.name for t in admin.list_topics()}
    given = HttpTransport(server.url)
    with Admin(given) as admin:
        assert admin.list_topics()
    assert given.queue_count("Made") == 3  # Admin did not close what it was given
    given.close()


def test_an_unreachable_broker_fails_the_consumer_constructor_naming_it() -> None:
    url = refused_url()
    with (
        HttpTransport(url, retry_deadline_s=0) as unreachable,  # no 30 s of retries
        pytest.raises(BrokerUnavailableError, match=re.escape(f"cannot reach broker {url}")),
    ):
        PullConsumer(unreachable, "g")


# -- asyncio clients ----------------------------------------------------------------------------
def test_async_clients_by_url(server: LoopbackServer) -> None:
    async def main() -> tuple[list[bytes], list[bytes]]:
        async with AsyncProducer(server.url) as producer:
            for i in range(10):
                await producer.send(Message(TOPIC, f"a{i}".encode()))
            transport = producer.transport
        assert isinstance(transport, AsyncHttpTransport) and transport._closed

        pulled: list[bytes] = []
        async with AsyncPullConsumer(
            server.url, "remote-async-pull", consume_from=ConsumeFrom.FIRST_OFFSET
        ) as consumer:
            consumer.subscribe([TOPIC])
            for _ in range(100):
                pulled += [m.body for m in await consumer.poll(0.2)]
                if len(pulled) >= 10:
                    break

        pushed: list[bytes] = []
        done = asyncio.Event()

        async def listener(messages) -> None:  # type: ignore[no-untyped-def]
            pushed.extend(m.body for m in messages)
            if len(pushed) >= 10:
                done.set()

        async with AsyncPushConsumer(
            server.url, "remote-async-push", {TOPIC: None}, listener,
            consume_from=ConsumeFrom.FIRST_OFFSET,
        ):  # fmt: skip
            await asyncio.wait_for(done.wait(), 30)

        async with AsyncAdmin(server.url) as admin:
            assert TOPIC in {t.name for t in await admin.list_topics()}
        return pulled, pushed

    pulled, pushed = asyncio.run(main())
    expected = sorted(f"a{i}".encode() for i in range(10))
    assert sorted(pulled) == expected
    assert sorted(pushed) == expected


def test_transactional_producer_by_url(server: LoopbackServer) -> None:
    with TransactionalProducer(
        server.url, "tx-remote", lambda message: TransactionState.UNKNOWN, check_wait_ms=50
    ) as producer:
        receipt = producer.send_in_transaction(
            Message(TOPIC, b"paid 42"), lambda message: TransactionState.COMMIT
        )
        transport = producer.transport
        wait_until(lambda: "/v1/fetch-transaction-checks" in server.requests)
    assert receipt.state is TransactionState.COMMIT and receipt.end_status == COMMITTED
    assert isinstance(transport, HttpTransport) and transport._closed
    with PullConsumer(server.url, "tx-reader", consume_from=ConsumeFrom.FIRST_OFFSET) as reader:
        reader.subscribe([TOPIC])
        got: list[bytes] = []
        wait_until(lambda: bool(got.extend(m.body for m in reader.poll(0.2))) or bool(got))
    assert got == [b"paid 42"]


def test_the_http_libraries_load_only_when_a_url_is_resolved() -> None:
    code = (
        "import sys; from sdk import Producer, PushConsumer, PullConsumer, Admin, AsyncProducer; "
        "import sdk.transport.resolve; "
        "print(sorted(m for m in ('httpx', 'aiohttp') if m in sys.modules))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=REPO
    )
    assert out.stdout.strip() == "[]"
