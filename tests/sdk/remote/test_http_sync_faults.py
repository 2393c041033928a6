"""The blocking HTTP transport under injected faults (respx in place of the network): retries
happen exactly when they should (retriable failures of calls that may be repeated), never after
a 4xx, never twice for a call the broker may have acted on, with the same producer stamp on a
resent batch, and within the retry deadline. The clock only moves when the policy sleeps, so no
test waits."""

from __future__ import annotations

from collections.abc import Iterator
from urllib.parse import parse_qs

import httpx
import orjson
import pytest
import respx

from sdk.errors import (
    BrokerUnavailableError,
    InvalidArgumentError,
    MalformedBodyError,
    QuiverError,
    UnknownTopicError,
)
from sdk.transport.http_common import MAX_PRODUCER_NAME
from sdk.transport.http_sync import HttpTransport
from sdk.transport.models import PullBatch, QueuePull
from tests.sdk.remote.fakes import FakeTime, error_body, message, send_result_body

URL = "http://broker.test:8080"


@pytest.fixture
def time_() -> FakeTime:
    return FakeTime()


@pytest.fixture
def router() -> Iterator[respx.MockRouter]:
    with respx.mock(base_url=URL, assert_all_called=False) as mock:
        yield mock


@pytest.fixture
def transport(time_: FakeTime) -> Iterator[HttpTransport]:
    with HttpTransport(
        URL, timeout_s=2.0, retry_deadline_s=5.0, clock=time_.clock, sleep=time_.sleep
    ) as made:
        yield made


def unavailable() -> httpx.Response:
    status, body = error_body(BrokerUnavailableError("shutting down"))
    return httpx.Response(status, content=body)


def count_answer(count: int = 4) -> httpx.Response:
    return httpx.Response(200, content=orjson.dumps(count))


def stamps(route: respx.Route) -> list[tuple[str, str]]:
    found = []
    for call in route.calls:
        query = parse_qs(call.request.url.query.decode())
        found.append((query["producer"][0], query["sequence"][0]))
    return found


# -- what is retried ----------------------------------------------------------------------------
def test_a_503_answer_is_retried_until_the_broker_answers(router, transport, time_) -> None:
    route = router.post("/v1/queue-count").mock(
        side_effect=[unavailable(), unavailable(), count_answer(4)]
    )
    assert transport.queue_count("Orders") == 4
    assert route.call_count == 3
    assert len(time_.sleeps_s) == 2


def test_a_500_answer_is_not_retried(router, transport) -> None:
    route = router.post("/v1/queue-count").mock(
        return_value=httpx.Response(500, content=b"Internal Server Error")
    )
    with pytest.raises(QuiverError, match="HTTP 500") as raised:
        transport.queue_count("Orders")
    assert not raised.value.retriable
    assert route.call_count == 1


@pytest.mark.parametrize(
    ("error", "expected"),
    [
        (InvalidArgumentError("queue_id: want an integer"), InvalidArgumentError),
        (UnknownTopicError.from_message("topic Orders does not exist"), UnknownTopicError),
    ],
)
def test_a_4xx_answer_surfaces_at_once_as_its_typed_error(
    router, transport, error, expected
) -> None:
    status, body = error_body(error)
    assert 400 <= status < 500
    route = router.post("/v1/min-offset").mock(return_value=httpx.Response(status, content=body))
    with pytest.raises(expected, match=str(error)):
        transport.min_offset("Orders", 0)
    assert route.call_count == 1


def test_a_4xx_answer_to_a_send_is_not_resent(router, transport) -> None:
    status, body = error_body(InvalidArgumentError("count: want an integer"))
    route = router.post("/v1/send").mock(return_value=httpx.Response(status, content=body))
    with pytest.raises(InvalidArgumentError):
        transport.send([message()])
    assert route.call_count == 1


@pytest.mark.parametrize(
    "fault",
    [
        httpx.ReadTimeout("read timed out"),
        httpx.RemoteProtocolError("Server disconnected without sending a response."),
        httpx.ReadError("[Errno 104] Connection reset by peer"),
        httpx.ConnectError("[Errno 111] Connection refused"),
    ],
    ids=["read-timeout", "disconnect", "reset", "refused"],
)
def test_an_idempotent_call_is_retried_after_a_network_fault(router, transport, fault) -> None:
    route = router.post("/v1/max-offset").mock(side_effect=[fault, count_answer(17)])
    assert transport.max_offset("Orders", 0) == 17
    assert route.call_count == 2


def test_a_body_that_arrives_too_slowly_is_a_timeout_and_is_retried(router, transport) -> None:
    class SlowBody(httpx.SyncByteStream):
        def __iter__(self) -> Iterator[bytes]:
            yield b"1"
            raise httpx.ReadTimeout("the rest of the body did not come in time")

    route = router.post("/v1/queue-count").mock(
        side_effect=[httpx.Response(200, stream=SlowBody()), count_answer(8)]
    )
    assert transport.queue_count("Orders") == 8
    assert route.call_count == 2


# -- producer stamps ----------------------------------------------------------------------------
def test_a_resent_batch_carries_the_stamp_of_its_first_try(router, transport) -> None:
    route = router.post("/v1/send").mock(
        side_effect=[
            httpx.ReadTimeout("answer lost"),
            httpx.Response(200, content=send_result_body(0)),
            httpx.Response(200, content=send_result_body(1)),
        ]
    )
    assert transport.send([message()]).status == "PUT_OK"
    first_try, resend = stamps(route)
    assert first_try == resend == (transport.producer_id, "0")
    transport.send([message()])  # the next batch to the queue: the next number
    assert stamps(route)[2] == (transport.producer_id, "1")


def test_sequences_count_per_queue_and_producer_ids_differ(router, time_) -> None:
    route = router.post("/v1/send").mock(
        return_value=httpx.Response(200, content=send_result_body())
    )
    with HttpTransport(URL, producer_id="orders-app.1") as named, HttpTransport(URL) as other:
        named.send([message(queue_id=1)])
        named.send([message(queue_id=2)])
        named.send([message(queue_id=1)])
        other.send([message(queue_id=1)])
    assert named.producer_id.startswith("orders-app.1.")  # the name, then the instance's own
    assert stamps(route) == [
        (named.producer_id, "0"),
        (named.producer_id, "0"),
        (named.producer_id, "1"),
        (other.producer_id, "0"),
    ]
    assert other.producer_id != named.producer_id
    with HttpTransport(URL, producer_id="orders-app.1") as again:  # the same name: its own id
        assert again.producer_id != named.producer_id


def test_a_producer_id_the_broker_would_refuse_is_refused_at_once() -> None:
    with pytest.raises(InvalidArgumentError, match="producer_id"):
        HttpTransport(URL, producer_id="has spaces")
    with pytest.raises(InvalidArgumentError, match="producer_id"):
        HttpTransport(URL, producer_id="x" * (MAX_PRODUCER_NAME + 1))


# -- a call that is not idempotent --------------------------------------------------------------
@pytest.mark.parametrize(
    "fault",
    [
        httpx.ReadTimeout("read timed out"),
        httpx.ReadError("[Errno 104] Connection reset by peer"),
    ],
    ids=["read-timeout", "reset"],
)
def test_send_back_is_not_resent_once_the_broker_may_have_acted(router, transport, fault) -> None:
    route = router.post("/v1/send-back").mock(
        side_effect=[fault, httpx.Response(200, content=send_result_body())]
    )
    with pytest.raises(BrokerUnavailableError, match=URL):
        transport.send_back("billing", 4096)
    assert route.call_count == 1


@pytest.mark.parametrize(
    "fault",
    [httpx.ConnectError("[Errno 111] Connection refused"), unavailable()],
    ids=["refused", "503"],
)
def test_send_back_is_resent_when_the_broker_certainly_did_not_act(
    router, transport, fault
) -> None:
    route = router.post("/v1/send-back").mock(
        side_effect=[fault, httpx.Response(200, content=send_result_body())]
    )
    assert transport.send_back("billing", 4096, delay_level=3).status == "PUT_OK"
    assert route.call_count == 2
    assert orjson.loads(route.calls[1].request.content)["delay_level"] == 3


# -- the deadline -------------------------------------------------------------------------------
def test_the_deadline_bounds_the_retries(router, transport, time_) -> None:
    route = router.post("/v1/queue-count").mock(side_effect=httpx.ConnectError("refused"))
    started_s = time_.now_s
    with pytest.raises(BrokerUnavailableError, match=f"cannot reach broker {URL}") as raised:
        transport.queue_count("Orders")
    assert type(raised.value) is BrokerUnavailableError  # the public error, not the marker
    assert raised.value.retriable
    assert route.call_count == len(time_.sleeps_s) + 1 > 2
    assert time_.now_s - started_s == pytest.approx(5.0)  # the last pause ends at the deadline


def test_no_deadline_means_one_try(router, time_) -> None:
    route = router.post("/v1/queue-count").mock(side_effect=httpx.ConnectError("refused"))
    with (
        HttpTransport(URL, retry_deadline_s=0, clock=time_.clock, sleep=time_.sleep) as once,
        pytest.raises(BrokerUnavailableError),
    ):
        once.queue_count("Orders")
    assert route.call_count == 1
    assert time_.sleeps_s == []


# -- answers, timeouts, the broker's name, closing ----------------------------------------------
def test_a_malformed_answer_is_the_protocols_typed_error(router, transport) -> None:
    count = router.post("/v1/queue-count").mock(return_value=httpx.Response(200, content=b"<html>"))
    pull = router.post("/v1/pull").mock(return_value=httpx.Response(200, content=b"\x00\x01"))
    with pytest.raises(InvalidArgumentError, match="queue_count: the answer is not JSON"):
        transport.queue_count("Orders")
    with pytest.raises(MalformedBodyError):
        transport.pull(PullBatch("billing", (QueuePull("Orders", 0, 0),)))
    assert count.call_count == pull.call_count == 1


def test_a_long_poll_reads_for_its_hold_on_top_of_the_timeout(router, transport) -> None:
    route = router.post("/v1/pull").mock(return_value=httpx.Response(200, content=b"\x00\x01"))
    with pytest.raises(MalformedBodyError):
        transport.pull(PullBatch("billing", (QueuePull("Orders", 0, 0),), wait_ms=30_000))
    timeout = route.calls[0].request.extensions["timeout"]
    assert timeout["read"] == pytest.approx(32.0)
    assert timeout["connect"] == pytest.approx(2.0)


def test_the_broker_name_is_asked_once_on_first_use(router, transport) -> None:
    health = router.get("/health").mock(
        side_effect=[
            unavailable(),
            httpx.Response(200, json={"status": "ok", "broker_name": "broker-a"}),
        ]
    )
    assert health.call_count == 0
    assert transport.broker_name == "broker-a"
    assert transport.broker_name == "broker-a"
    assert health.call_count == 2  # one 503, retried once; then remembered


def test_a_closed_transport_refuses_calls_without_retrying(router, transport) -> None:
    route = router.post("/v1/queue-count").mock(return_value=count_answer())
    transport.close()
    transport.close()
    with pytest.raises(BrokerUnavailableError, match="closed") as raised:
        transport.queue_count("Orders")
    assert not raised.value.retriable
    assert route.call_count == 0


@pytest.mark.parametrize(
    "url",
    ["ftp://broker:21", "http://", "http://broker:99999", "broker:8080", "http://h:1/?x=1"],
)
def test_a_bad_url_is_refused_naming_it(url: str) -> None:
    with pytest.raises(InvalidArgumentError, match="broker URL"):
        HttpTransport(url)
