"""Faults at the broker server's edge, on a loopback server over a real broker: a client that
goes away half-way through its request body, and a request that comes after the server shut
its thread pools down (a drain that ran out of time). Neither is a bug of the broker: neither
may be answered or logged as a 500."""

from __future__ import annotations

import asyncio
import logging
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from localstore.record.codec import NewMessage
from sdk import EmbeddedBroker
from sdk.errors import BrokerUnavailableError
from sdk.protocol.data_plane import encode_query_by_id_request, send_query
from sdk.protocol.errors import error_from_answer
from sdk.protocol.produce_body import encode_produce_body
from sdk.server.run import ServerOptions, serve
from tests.sdk.remote.loopback_server import LoopbackServer, loopback_server

pytestmark = pytest.mark.integration


@pytest.fixture
def front(tmp_path: Path) -> Iterator[LoopbackServer]:
    with EmbeddedBroker(tmp_path / "data") as broker, loopback_server(broker) as server:
        yield server


def test_a_client_gone_mid_body_is_not_a_broker_bug(
    front: LoopbackServer, caplog: pytest.LogCaptureFixture
) -> None:
    port = int(front.url.rsplit(":", 1)[1])
    head = (
        b"POST /v1/heartbeat HTTP/1.1\r\nHost: broker\r\n"
        b"Content-Type: application/json\r\nContent-Length: 100\r\n\r\n"
    )
    with caplog.at_level(logging.DEBUG, logger="sdk.server.app"):
        with socket.create_connection(("127.0.0.1", port), timeout=30) as client:
            client.sendall(head + b'{"gro')
        with httpx.Client(base_url=front.url, timeout=30) as http:  # the server is still well
            assert http.get("/health").status_code == 200
        answered = _wait_for_route(front, "/v1/heartbeat")
    assert all(status != 500 for status in answered)
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]


def _wait_for_route(front: LoopbackServer, route: str) -> list[int]:
    """The statuses ``route`` was answered with, once it was (the server counts a request when
    its handler ends, after the client left)."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        statuses = [s for (r, s), _ in list(front.app.metrics.requests.items()) if r == route]
        if statuses:
            return statuses
        time.sleep(0.01)
    raise AssertionError(f"{route} was never answered")


@pytest.mark.parametrize("route", ["/v1/send", "/v1/query-by-id", "/v1/list-groups"])
def test_a_request_after_the_pools_shut_down_is_a_retriable_503(
    front: LoopbackServer, route: str
) -> None:
    front.app.close_pools()  # what the server does once its drain ran out of time
    message = NewMessage("orders", b"late", 0, {"UNIQ_KEY": "ABC"})
    requests = {
        "/v1/send": {
            "params": send_query([message]),
            "content": encode_produce_body([message]),
            "headers": {"content-type": "application/octet-stream"},
        },
        "/v1/query-by-id": {"content": encode_query_by_id_request("ABC")},
        "/v1/list-groups": {"json": {}},
    }
    with httpx.Client(base_url=front.url, timeout=30) as http:
        answer = http.post(route, **requests[route])
    assert answer.status_code == 503, answer.text
    error = error_from_answer(answer.status_code, answer.content)
    assert isinstance(error, BrokerUnavailableError)
    assert error.retriable


def test_a_client_that_never_finishes_its_body_does_not_hold_the_shutdown(
    tmp_path: Path,
) -> None:
    """The drain waits ``drain_timeout_s`` for requests in flight; then the connections close
    at once, even one whose request body never ends (the store is already closed)."""
    options = ServerOptions(data=tmp_path / "data", port=0, drain_timeout_s=0.2)
    loop = asyncio.new_event_loop()
    stop = asyncio.Event()
    listening = threading.Event()
    urls: list[str] = []

    def on_listening(url: str) -> None:
        urls.append(url)
        listening.set()

    server = threading.Thread(
        target=lambda: loop.run_until_complete(serve(options, stop, on_listening=on_listening))
    )
    server.start()
    try:
        assert listening.wait(30)
        port = int(urls[0].rsplit(":", 1)[1])
        with socket.create_connection(("127.0.0.1", port), timeout=30) as client:
            client.sendall(
                b"POST /v1/heartbeat HTTP/1.1\r\nHost: broker\r\n"
                b"Content-Type: application/json\r\nContent-Length: 100\r\n\r\n{"
            )
            with httpx.Client(base_url=urls[0], timeout=30) as http:  # the request is in
                assert http.get("/health").status_code == 200
            loop.call_soon_threadsafe(stop.set)
            server.join(30)  # well under aiohttp's default of a minute per connection
            assert not server.is_alive()
    finally:
        loop.call_soon_threadsafe(stop.set)
        server.join(120)
        loop.close()
    assert not (tmp_path / "data" / "abort").exists()
