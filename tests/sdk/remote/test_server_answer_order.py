"""A send that wakes a parked pull answers after it: the consumer waiting on the message hears
first (:mod:`sdk.server.app`). Seen in the order the server finished its answers."""

from __future__ import annotations

import threading
import time
import uuid
from pathlib import Path

import httpx
import pytest

from localstore.record.codec import NewMessage
from sdk import EmbeddedBroker
from sdk.protocol.data_plane import encode_pull_request, send_query
from sdk.protocol.produce_body import encode_produce_body
from sdk.protocol.pull_body import decode_pull_answer
from sdk.server.app import BrokerApp
from sdk.transport.models import PullBatch, QueuePull
from tests.sdk.remote.loopback_server import loopback_server

pytestmark = pytest.mark.integration


def _record_answers(app: BrokerApp, order: list[str]) -> None:
    answered = app.metrics.answered

    def recording(route: str, status: int) -> None:
        order.append(route)
        answered(route, status)

    app.metrics.answered = recording  # type: ignore[method-assign]


def _wait_until_parked(app: BrokerApp) -> None:
    deadline = time.monotonic() + 30
    while app.metrics.parked_pulls < 1:
        assert time.monotonic() < deadline, "the pull never parked"
        time.sleep(0.005)


def _send(client: httpx.Client, topic: str) -> httpx.Response:
    message = NewMessage(topic, b"wake up", 0, {"UNIQ_KEY": uuid.uuid4().hex.upper()})
    return client.post(
        "/v1/send",
        params=send_query([message]),
        content=encode_produce_body([message]),
        headers={"content-type": "application/octet-stream"},
    )


def test_the_pull_a_send_woke_is_answered_before_the_send(tmp_path: Path) -> None:
    order: list[str] = []
    with (
        EmbeddedBroker(tmp_path / "data", create=True) as broker,
        loopback_server(broker, prepare=lambda app: _record_answers(app, order)) as server,
        httpx.Client(base_url=server.url, timeout=30.0) as consumer,
        httpx.Client(base_url=server.url, timeout=30.0) as producer,
    ):
        pull = PullBatch("g", (QueuePull("order", 0, 0),), max_count=10, wait_ms=20_000)
        answers: list[httpx.Response] = []
        waiter = threading.Thread(
            target=lambda: answers.append(
                consumer.post("/v1/pull", content=encode_pull_request(pull))
            )
        )
        waiter.start()
        _wait_until_parked(server.app)
        assert _send(producer, "order").status_code == 200
        waiter.join(30.0)
        assert not waiter.is_alive()
        (queue,) = decode_pull_answer(answers[0].content).results
        assert queue.status == "FOUND"
        assert order == ["/v1/pull", "/v1/send"]


def test_a_send_that_woke_nobody_answers_as_before(tmp_path: Path) -> None:
    order: list[str] = []
    with (
        EmbeddedBroker(tmp_path / "data", create=True) as broker,
        loopback_server(broker, prepare=lambda app: _record_answers(app, order)) as server,
        httpx.Client(base_url=server.url, timeout=30.0) as producer,
    ):
        wake_ups = broker.service.notifier.wake_ups
        assert _send(producer, "alone").status_code == 200
        assert order == ["/v1/send"]
        assert broker.service.notifier.wake_ups == wake_ups
