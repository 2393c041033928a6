"""The broker server's HTTP API, spoken by hand (httpx, the protocol's encoders) to a real
broker process on a loopback port: routes, bad input, limits, and a clean shutdown."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import orjson
import pytest

from localstore.record.codec import NewMessage
from sdk.protocol.data_plane import (
    decode_checks_answer,
    encode_checks_request,
    encode_pull_request,
    send_query,
)
from sdk.protocol.errors import error_from_answer
from sdk.protocol.produce_body import encode_produce_body
from sdk.protocol.pull_body import decode_pull_answer
from sdk.transport.models import PullBatch, QueuePull, decode_records
from tests.sdk.remote.broker_process import BrokerProcess

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    root = tmp_path_factory.mktemp("server")
    with BrokerProcess(root / "data", max_request_bytes=64 * 1024) as process:
        yield process


@pytest.fixture
def http(broker: BrokerProcess) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=broker.url, timeout=30.0) as client:
        yield client


def _send(http: httpx.Client, messages: list[NewMessage]) -> httpx.Response:
    return http.post(
        "/v1/send",
        params=send_query(messages),
        content=encode_produce_body(messages),
        headers={"content-type": "application/octet-stream"},
    )


def _message(topic: str, body: bytes, **properties: str) -> NewMessage:
    return NewMessage(topic, body, 0, {"UNIQ_KEY": uuid.uuid4().hex.upper(), **properties})


def test_health_names_the_broker(http: httpx.Client) -> None:
    answer = http.get("/health")
    assert answer.status_code == 200
    assert answer.json()["broker_name"] == "broker-a"
    assert answer.json()["status"] == "ok"


def test_a_batch_sent_is_pulled_back_byte_for_byte(http: httpx.Client) -> None:
    batch = [_message("http-orders", f"order-{i}".encode(), TAGS="paid") for i in range(5)]
    sent = _send(http, batch)
    assert sent.status_code == 200, sent.text
    result = sent.json()
    assert result["status"] == "PUT_OK"
    assert len(result["phys_offsets"]) == 5
    pull = PullBatch("g", (QueuePull("http-orders", 0, 0),), max_count=10)
    answer = http.post("/v1/pull", content=encode_pull_request(pull))
    assert answer.status_code == 200
    assert answer.headers["content-type"] == "application/octet-stream"
    (queue,) = decode_pull_answer(answer.content).results
    assert queue.status == "FOUND"
    assert queue.count == 5
    assert [m.body for m in decode_records(queue.raw)] == [m.body for m in batch]
    assert [m.properties["TAGS"] for m in decode_records(queue.raw)] == ["paid"] * 5


def test_a_parked_pull_is_woken_by_a_send(broker: BrokerProcess) -> None:
    with (
        httpx.Client(base_url=broker.url, timeout=30.0) as first,
        httpx.Client(base_url=broker.url, timeout=30.0) as second,
    ):
        pull = PullBatch("g", (QueuePull("http-wake", 0, 0),), max_count=10, wait_ms=20_000)
        answers: list[httpx.Response] = []
        waiter = threading.Thread(
            target=lambda: answers.append(first.post("/v1/pull", content=encode_pull_request(pull)))
        )
        waiter.start()
        # the pull parks first or reads the message at once: either way it answers FOUND
        assert _send(second, [_message("http-wake", b"wake up")]).status_code == 200
        waiter.join(30.0)
        assert not waiter.is_alive()
        (queue,) = decode_pull_answer(answers[0].content).results
        assert queue.status == "FOUND"
        assert [m.body for m in decode_records(queue.raw)] == [b"wake up"]


@pytest.mark.parametrize(
    ("path", "body", "code", "needle"),
    [
        ("/v1/queue-count", b"{}", "INVALID_ARGUMENT", "topic is missing"),
        ("/v1/queue-count", b"[1]", "INVALID_ARGUMENT", "JSON object"),
        ("/v1/queue-count", b"\xff", "INVALID_ARGUMENT", "not JSON"),
        ("/v1/min-offset", b'{"topic":"t","queue_id":"0"}', "INVALID_ARGUMENT", "queue_id"),
        (
            "/v1/pull",
            b'{"group":"g","pulls":[["t",-1,0,null,false]]}',
            "INVALID_ARGUMENT",
            "queue id",
        ),
        ("/v1/pull", b'{"group":"g","pulls":[["t",0,0]]}', "INVALID_ARGUMENT", "pulls[0]"),
        ("/v1/describe-group", b'{"group":"nobody"}', "UNKNOWN_GROUP", "nobody"),
        ("/v1/no-such-thing", b"{}", "INVALID_ARGUMENT", "404"),
    ],
)
def test_bad_input_is_a_4xx_naming_the_problem(
    http: httpx.Client, path: str, body: bytes, code: str, needle: str
) -> None:
    answer = http.post(path, content=body)
    assert 400 <= answer.status_code < 500, answer.text
    document = answer.json()
    assert document["code"] == code
    assert needle in document["message"]
    assert document["retriable"] is False


def test_a_send_with_a_malformed_body_or_query_is_refused(http: httpx.Client) -> None:
    good = [_message("http-bad", b"x")]
    query = send_query(good)
    body = encode_produce_body(good)
    cut = http.post("/v1/send", params=query, content=body[:-3])
    assert cut.status_code == 400
    assert cut.json()["code"] == "MALFORMED_BODY"
    wrong_count = http.post("/v1/send", params={**query, "count": "2"}, content=body)
    assert wrong_count.status_code == 400
    assert "2" in wrong_count.json()["message"]
    no_topic = http.post(
        "/v1/send", params={k: v for k, v in query.items() if k != "topic"}, content=body
    )
    assert no_topic.json()["message"] == "topic is missing"
    bad_host = http.post("/v1/send", params={**query, "born_host": "zz"}, content=body)
    assert "born_host" in bad_host.json()["message"]


@pytest.mark.parametrize("name", ["RETRY_TOPIC", "REAL_TOPIC", "ORIGIN_MESSAGE_ID", "__QUIVER_X"])
def test_a_property_only_the_broker_writes_is_refused(http: httpx.Client, name: str) -> None:
    answer = _send(http, [_message("http-props", b"x", **{name: "forged"})])
    assert answer.status_code == 400
    assert answer.json()["code"] == "INVALID_MESSAGE"
    assert name in answer.json()["message"]


def test_properties_a_producer_sets_are_taken(http: httpx.Client) -> None:
    message = _message("http-props", b"x", TAGS="a", KEYS="k1 k2", mine="yes")
    assert _send(http, [message]).json()["status"] == "PUT_OK"


def test_a_body_over_the_limit_is_refused_with_413(http: httpx.Client) -> None:
    big = [_message("http-big", b"x" * (70 * 1024))]
    answer = _send(http, big)
    assert answer.status_code == 413
    error = error_from_answer(answer.status_code, answer.content)
    assert "65536" in str(error)


def test_transaction_checks_answer_binary(http: httpx.Client) -> None:
    answer = http.post(
        "/v1/fetch-transaction-checks", content=encode_checks_request("tx-group", "c1", 0)
    )
    assert answer.status_code == 200
    assert decode_checks_answer(answer.content).count == 0


def test_metrics_count_puts_and_gets(http: httpx.Client) -> None:
    _send(http, [_message("http-metrics", b"abc")])
    text = http.get("/metrics").text
    assert "# TYPE quiver_put_messages_total counter" in text
    put = next(line for line in text.splitlines() if line.startswith("quiver_put_messages_total"))
    assert int(put.split()[1]) >= 1
    assert "quiver_open_connections" in text
    assert "quiver_parked_pulls 0" in text


def test_openapi_names_every_route(http: httpx.Client) -> None:
    from sdk.protocol.calls import CALLS

    document = orjson.loads(http.get("/openapi.json").content)
    operations = {
        method["operationId"] for path in document["paths"].values() for method in path.values()
    }
    assert set(CALLS) <= operations
    assert {"health", "metrics"} <= operations


def test_sigterm_stops_cleanly(tmp_path: Path) -> None:
    process = BrokerProcess(tmp_path / "data")
    with httpx.Client(base_url=process.url, timeout=30.0) as http:
        assert _send(http, [_message("http-stop", b"kept")]).status_code == 200
        pull = PullBatch("g", (QueuePull("http-stop", 0, 1),), wait_ms=60_000)
        answers: list[httpx.Response] = []
        parked = threading.Thread(
            target=lambda: answers.append(http.post("/v1/pull", content=encode_pull_request(pull)))
        )
        parked.start()
        # the parked pull is answered by the shutdown, long before its minute is up
        assert process.stop() == 0, process.log()
        parked.join(30.0)
        assert not parked.is_alive()
    assert answers[0].status_code in (200, 503)
    assert not (tmp_path / "data" / "abort").exists()
    assert "stopped" in process.log()


def test_a_pull_asking_to_wait_for_days_is_held_no_longer_than_the_broker_allows(
    tmp_path: Path,
) -> None:
    from sdk import EmbeddedBroker
    from tests.sdk.remote.loopback_server import loopback_server

    with (
        EmbeddedBroker(tmp_path / "b", commitlog_file_size=1 << 20) as embedded,
        loopback_server(embedded, max_hold_ms=200) as server,
        httpx.Client(base_url=server.url, timeout=30.0) as http,
    ):
        days = PullBatch("g", (QueuePull("http-hold", 0, 0),), wait_ms=3 * 86_400_000)
        answer = http.post("/v1/pull", content=encode_pull_request(days))  # not held for days
        assert answer.status_code == 200
        (queue,) = decode_pull_answer(answer.content).results
        assert queue.count == 0
        checks = http.post(
            "/v1/fetch-transaction-checks", content=encode_checks_request("tx", "c", 2**31 - 1)
        )
        assert decode_checks_answer(checks.content).count == 0


def test_one_pull_answer_is_bounded_whatever_its_queues_ask(tmp_path: Path) -> None:
    """4096 queues asking 2 GiB each would make one answer of terabytes in the broker's
    memory: the queues share a fixed budget instead."""
    from sdk import EmbeddedBroker
    from sdk.server.app import MAX_PULL_ANSWER_BYTES, BrokerApp

    with EmbeddedBroker(tmp_path / "b", commitlog_file_size=1 << 20) as embedded:
        app = BrokerApp(embedded.service)
        greedy = PullBatch(
            "g",
            tuple(QueuePull("t", q, 0) for q in range(4096)),
            max_bytes=2**31 - 1,
            wait_ms=10**9,
        )
        bounded = app._bounded(greedy)
        assert bounded.max_bytes * len(bounded.pulls) <= MAX_PULL_ANSWER_BYTES
        assert bounded.wait_ms == app.max_hold_ms
        modest = PullBatch("g", (QueuePull("t", 0, 0),), max_bytes=1 << 20, wait_ms=100)
        assert app._bounded(modest) is modest
        app.close_pools()
