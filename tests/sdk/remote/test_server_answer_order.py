"""A send that wakes a parked pull answers after it: the consumer waiting on the message hears
first (:mod:`sdk.server.app`), whether the send was appended on the loop or on the writer
thread, alone or in a send-many. Seen in the order the server finished its answers."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest

from localstore.record.codec import NewMessage
from sdk import EmbeddedBroker
from sdk.protocol.data_plane import encode_pull_request, send_query
from sdk.protocol.produce_body import encode_produce_body
from sdk.protocol.pull_body import decode_pull_answer
from sdk.protocol.send_many import SEND_MANY_PATH, encode_send_many_body
from sdk.server.app import INLINE_APPEND_BYTES, BrokerApp
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


def _message(topic: str, body: bytes) -> NewMessage:
    return NewMessage(topic, body, 0, {"UNIQ_KEY": uuid.uuid4().hex.upper()})


def _send(client: httpx.Client, topic: str, body: bytes) -> httpx.Response:
    message = _message(topic, body)
    return client.post(
        "/v1/send",
        params=send_query([message]),
        content=encode_produce_body([message]),
        headers={"content-type": "application/octet-stream"},
    )


def _send_many(client: httpx.Client, topic: str, body: bytes) -> httpx.Response:
    parts = [[_message(topic, body)], [_message("elsewhere", body)]]
    return client.post(
        SEND_MANY_PATH,
        content=encode_send_many_body([(send_query(p), encode_produce_body(p)) for p in parts]),
        headers={"content-type": "application/octet-stream"},
    )


@pytest.mark.parametrize(
    ("send", "body"),
    [
        (_send, b"wake up"),  # appended on the loop
        (_send, b"w" * (INLINE_APPEND_BYTES + 1)),  # on the writer thread
        (_send_many, b"wake up"),
    ],
    ids=["small-send", "large-send", "send-many"],
)
def test_the_pull_a_send_woke_is_answered_before_the_send(
    tmp_path: Path, send: Callable[[httpx.Client, str, bytes], httpx.Response], body: bytes
) -> None:
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
        sent = send(producer, "order", body)
        assert sent.status_code == 200, sent.text
        waiter.join(30.0)
        assert not waiter.is_alive()
        (queue,) = decode_pull_answer(answers[0].content).results
        assert queue.status == "FOUND"
        assert order[0] == "/v1/pull" and order[1] in ("/v1/send", SEND_MANY_PATH)
