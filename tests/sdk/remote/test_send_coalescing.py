"""Concurrent sends on one asyncio HTTP transport leave together (``POST /v1/send-many``), each
caller getting its own outcome, against a real broker server on a loopback port; and the
send-many body's framing (:mod:`sdk.protocol.send_many`).

Requests are counted by the server's own per-route counters, never timed. The sends of one
``asyncio.gather`` all reach the transport before the first one's answer can arrive (its request
is on the network when the others run), so the first leaves alone and the rest queue behind it.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable, Iterator, Mapping
from pathlib import Path

import orjson
import pytest
from aiohttp import web

from localstore.record.codec import NewMessage
from sdk import AsyncProducer, EmbeddedBroker, Message
from sdk.errors import BrokerUnavailableError, InvalidMessageError, MalformedBodyError, QuiverError
from sdk.protocol.calls import WireRequest
from sdk.protocol.data_plane import send_query
from sdk.protocol.produce_body import encode_produce_body
from sdk.protocol.send_many import (
    SEND_MANY_PATH,
    PartError,
    decode_send_many_answer,
    decode_send_many_body,
    encode_send_many_answer,
    encode_send_many_body,
)
from sdk.protocol.shapes import SEND_RESULT
from sdk.server.app import BrokerApp
from sdk.transport.coalesce import FEWEST_TOGETHER, SendCoalescer
from sdk.transport.http_async import AsyncHttpTransport
from sdk.transport.models import SendResult
from tests.sdk.remote.loopback_server import LoopbackServer, loopback_server

pytestmark = pytest.mark.integration

TOPIC = "Coalesced"
QUEUES = 4


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[EmbeddedBroker]:
    with EmbeddedBroker(tmp_path / "b", commitlog_file_size=1 << 20) as embedded:
        embedded.service.admin.create_topic(TOPIC, QUEUES, 6)
        yield embedded


def _batch(queue_id: int, label: str, count: int = 3, **extra: str) -> list[NewMessage]:
    return [
        NewMessage(
            TOPIC,
            f"{label}-{i}".encode(),
            queue_id,
            {"UNIQ_KEY": uuid.uuid4().hex, **extra},
        )
        for i in range(count)
    ]


def _answered(front: LoopbackServer, route: str) -> int:
    return sum(n for (name, _status), n in front.app.metrics.requests.items() if name == route)


def _stored_bodies(broker: EmbeddedBroker, result: SendResult) -> list[bytes]:
    return [bytes(broker.service.store.message_at(p).body) for p in result.phys_offsets]


async def _send_all(
    url: str, batches: list[list[NewMessage]], **options: int
) -> list[SendResult | BaseException]:
    async with AsyncHttpTransport(url, retry_deadline_s=30.0, **options) as transport:
        await transport.connect()  # the session's first request: not one of the counted sends
        return await asyncio.gather(
            *(transport.send(batch) for batch in batches), return_exceptions=True
        )


def test_concurrent_sends_leave_in_few_requests_and_each_gets_its_own_receipts(
    broker: EmbeddedBroker,
) -> None:
    batches = [_batch(i % QUEUES, f"send{i}") for i in range(8)]
    with loopback_server(broker) as front:
        results = asyncio.run(_send_all(front.url, batches))
        assert _answered(front, "/v1/send") == 1  # the first, alone, at once
        # the seven queued behind it: half of the eight in play, then the other three
        assert _answered(front, "/v1/send-many") == 2
    for batch, result in zip(batches, results, strict=True):
        assert isinstance(result, SendResult), result
        assert result.status == "PUT_OK"
        assert (result.topic, result.queue_id) == (TOPIC, batch[0].queue_id)
        assert _stored_bodies(broker, result) == [m.body for m in batch]
    assert sum(broker.service.max_offset(TOPIC, q) for q in range(QUEUES)) == 8 * 3


def test_queued_sends_leave_in_requests_of_at_most_coalesce_bytes(broker: EmbeddedBroker) -> None:
    batches = [_batch(i % QUEUES, f"send{i}") for i in range(7)]
    body_bytes = len(encode_produce_body(batches[1]))  # every batch's body is as long
    with loopback_server(broker) as front:
        results = asyncio.run(_send_all(front.url, batches, coalesce_bytes=2 * body_bytes))
        assert _answered(front, "/v1/send") == 1  # the first, alone
        assert _answered(front, "/v1/send-many") == 3  # six queued, two per request
    assert all(isinstance(result, SendResult) for result in results), results


def test_a_refused_part_fails_only_its_caller(broker: EmbeddedBroker) -> None:
    forged = _batch(1, "forged", RETRY_TOPIC="%RETRY%g")  # a property only the broker writes
    batches = [_batch(0, "first"), _batch(0, "before"), forged, _batch(2, "after")]
    with loopback_server(broker) as front:
        results = asyncio.run(_send_all(front.url, batches))
        assert _answered(front, "/v1/send-many") == 1
    first, before, refused, after = results
    assert isinstance(refused, InvalidMessageError)
    assert "RETRY_TOPIC" in str(refused)
    for batch, result in ((batches[0], first), (batches[1], before), (batches[3], after)):
        assert isinstance(result, SendResult), result
        assert _stored_bodies(broker, result) == [m.body for m in batch]
    assert broker.service.max_offset(TOPIC, 1) == 0


def _drop_first_send_many_answer(dropped: list[int]) -> Callable[[BrokerApp], None]:
    """A middleware that lets the first send-many be stored, then closes its connection
    without an answer (the client cannot know whether it was stored)."""

    @web.middleware
    async def drop(
        request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
    ) -> web.StreamResponse:
        response = await handler(request)
        if request.path == "/v1/send-many" and not dropped:
            dropped.append(response.status)
            assert request.transport is not None
            request.transport.abort()
        return response

    return lambda app: app.app.middlewares.append(drop)


def test_a_resent_coalesced_request_is_answered_from_the_window_and_stores_nothing_twice(
    broker: EmbeddedBroker,
) -> None:
    batches = [_batch(i % 2, f"send{i}") for i in range(5)]
    dropped: list[int] = []
    with loopback_server(broker, prepare=_drop_first_send_many_answer(dropped)) as front:
        results = asyncio.run(_send_all(front.url, batches))
        assert dropped == [200]  # the broker stored the parts; the client saw a reset
        assert _answered(front, "/v1/send-many") + _answered(front, "/v1/send") >= 3
    for batch, result in zip(batches, results, strict=True):
        assert isinstance(result, SendResult), result
        assert _stored_bodies(broker, result) == [m.body for m in batch]
    assert broker.service.max_offset(TOPIC, 0) + broker.service.max_offset(TOPIC, 1) == 5 * 3


def test_async_producers_sharing_one_transport_coalesce_their_batches(
    broker: EmbeddedBroker,
) -> None:
    async def run(url: str) -> list[list[str]]:
        async with AsyncHttpTransport(url) as transport:
            producers = [AsyncProducer(transport) for _ in range(4)]
            for producer in producers:  # learn the route before the counted sends
                await producer.send(Message(TOPIC, b"warm-up"), queue_id=3)
            sent = await asyncio.gather(
                *(
                    p.send_batch([Message(TOPIC, f"p{n}-{i}".encode()) for i in range(10)])
                    for n, p in enumerate(producers)
                )
            )
            for producer in producers:
                await producer.close()
            return [[r.msg_id for r in receipts] for receipts in sent]

    with loopback_server(broker) as front:
        ids = asyncio.run(run(front.url))
        assert _answered(front, "/v1/send") == 4 + 1  # the warm-ups, one by one; the first batch
        assert _answered(front, "/v1/send-many") == 1
    assert [len(set(batch)) for batch in ids] == [10] * 4
    assert sum(broker.service.max_offset(TOPIC, q) for q in range(QUEUES)) == 4 + 40


class _ScriptedPost:
    """A coalescer's ``post`` whose answers the test gives: each request waits for
    ``answer``/``fail`` under its name (its sends' labels joined by ``+``). It writes a body on
    a task of its own, as aiohttp does on Python 3.11, and notes what happens in ``events``."""

    def __init__(self) -> None:
        self.events: list[str] = []
        self.pending: dict[str, asyncio.Future[None]] = {}

    async def __call__(self, request: WireRequest) -> bytes:
        labels = [query["label"] for query, _ in _parts_of(request)]
        name = "+".join(labels)

        async def write_body() -> None:
            self.events.append(f"written {name}")

        loop = asyncio.get_running_loop()
        self.pending[name] = loop.create_future()
        writing = loop.create_task(write_body())
        await self.pending[name]
        await writing
        result = SendResult("PUT_OK", topic=TOPIC, queue_offset=0, phys_offsets=[0])
        if request.path == SEND_MANY_PATH:
            return encode_send_many_answer([result] * len(labels))
        return orjson.dumps(SEND_RESULT.encode(result))

    async def answer(self, name: str) -> None:
        await _until(lambda: name in self.pending)
        self.pending[name].set_result(None)

    async def fail(self, name: str, error: Exception) -> None:
        await _until(lambda: name in self.pending)
        self.pending[name].set_exception(error)

    def caller(self, coalescer: SendCoalescer, label: str) -> asyncio.Future[SendResult]:
        """A send from a caller of its own (started now), noting when it resumes."""

        async def send() -> SendResult:
            try:
                return await coalescer.send(
                    WireRequest("/v1/send", b"", {"label": label}, binary=True)
                )
            finally:
                self.events.append(f"resumed {label}")

        return asyncio.ensure_future(send())


def _coalescer(post: _ScriptedPost) -> SendCoalescer:
    return SendCoalescer(post, lambda part: QuiverError(str(part.error)))


async def _behind_a(
    post: _ScriptedPost, coalescer: SendCoalescer, labels: list[str]
) -> list[asyncio.Future[SendResult]]:
    """``a`` leaves alone; the sends of ``labels`` queue behind it (``a`` is not answered)."""
    sends = [post.caller(coalescer, "a")]
    await asyncio.sleep(0)
    sends += [post.caller(coalescer, label) for label in labels]
    await asyncio.sleep(0)
    return sends


async def _a_then_b_c(
    post: _ScriptedPost, coalescer: SendCoalescer
) -> list[asyncio.Future[SendResult]]:
    """``a`` leaves alone and is answered; ``b`` and ``c``, queued meanwhile, leave together."""
    sends = await _behind_a(post, coalescer, ["b", "c"])
    await post.answer("a")
    await _until(lambda: "b+c" in post.pending)
    return sends


def test_the_next_request_is_written_before_the_answered_callers_resume() -> None:
    """When a coalesced request is answered, the one queued meanwhile leaves first: its body is
    written before the answered callers resume (each would build its next send first, and the
    broker would wait meanwhile)."""
    post = _ScriptedPost()

    async def run() -> None:
        coalescer = _coalescer(post)
        sends = await _a_then_b_c(post, coalescer)
        sends.append(post.caller(coalescer, "d"))  # queues behind b+c
        await asyncio.sleep(0)
        await post.answer("b+c")
        await post.answer("d")
        await asyncio.gather(*sends)

    asyncio.run(run())
    assert post.events.index("written d") < post.events.index("resumed b")
    assert post.events.index("written d") < post.events.index("resumed c")


def test_a_request_of_queued_sends_takes_half_of_the_sends_in_play() -> None:
    """Ten queued behind the first, one of them given up: half of the ten in play (the nine
    live ones and the one answered) leave, then the four left."""
    post = _ScriptedPost()
    labels = [chr(ord("b") + n) for n in range(10)]

    async def run() -> None:
        sends = await _behind_a(post, _coalescer(post), labels)
        sends.pop(2).cancel()  # "c": never leaves
        await post.answer("a")
        await post.answer("b+d+e+f+g")
        await post.answer("h+i+j+k")
        await asyncio.gather(*sends)

    asyncio.run(run())
    assert list(post.pending) == ["a", "b+d+e+f+g", "h+i+j+k"]


def test_callers_that_send_again_at_once_take_turns_in_two_groups() -> None:
    """Sixteen callers, each sending again as soon as it is answered: after the first send,
    requests of eight, one group's while the other builds."""
    post = _ScriptedPost()

    async def run() -> None:
        coalescer = _coalescer(post)

        async def sender(number: int) -> None:
            for turn in range(4):
                await post.caller(coalescer, f"{number}.{turn}")

        senders = [asyncio.ensure_future(sender(number)) for number in range(16)]
        while not all(sender.done() for sender in senders):
            await _until(
                lambda: (
                    all(s.done() for s in senders)
                    or any(not answer.done() for answer in post.pending.values())
                )
            )
            for answer in post.pending.values():
                if not answer.done():
                    answer.set_result(None)
            for _ in range(10):  # the broker takes longer than the callers' next sends
                await asyncio.sleep(0)
        await asyncio.gather(*senders)

    asyncio.run(run())
    sizes = [name.count("+") + 1 for name in post.pending]
    assert sizes[:7] == [1, 8, 8, 8, 8, 8, 8]
    assert sum(sizes) == 16 * 4


def test_a_few_queued_sends_leave_in_one_request() -> None:
    """FEWEST_TOGETHER queued behind the first: one request takes them all, where half of
    the sends in play would be fewer."""
    post = _ScriptedPost()
    labels = [chr(ord("b") + n) for n in range(FEWEST_TOGETHER)]

    async def run() -> None:
        sends = await _behind_a(post, _coalescer(post), labels)
        await post.answer("a")
        await post.answer("+".join(labels))
        await asyncio.gather(*sends)

    asyncio.run(run())
    assert list(post.pending) == ["a", "+".join(labels)]


def test_a_coalescer_cancelled_as_it_hands_out_answers_still_hands_them_all_out() -> None:
    post = _ScriptedPost()

    async def run() -> list[SendResult]:
        coalescer = _coalescer(post)
        sends = await _a_then_b_c(post, coalescer)
        (task,) = coalescer._tasks  # the request of b and c, in flight
        post.pending["b+c"].set_result(None)
        await asyncio.sleep(0)  # it takes its answer, then turns the loop once: cancelled there
        task.cancel()
        await _until(lambda: all(send.done() for send in sends))
        return await asyncio.gather(*sends)

    assert [result.status for result in asyncio.run(run())] == ["PUT_OK"] * 3


def test_a_request_that_fails_whole_fails_its_sends_and_lets_the_next_ones_leave() -> None:
    post = _ScriptedPost()

    async def run() -> list[SendResult | BaseException]:
        coalescer = _coalescer(post)
        sends = await _a_then_b_c(post, coalescer)
        sends.append(post.caller(coalescer, "d"))  # queues behind b+c
        await asyncio.sleep(0)
        await post.fail("b+c", BrokerUnavailableError("reset"))
        await post.answer("d")
        return await asyncio.gather(*sends, return_exceptions=True)

    a, b, c, d = asyncio.run(run())
    assert isinstance(a, SendResult) and isinstance(d, SendResult)
    assert isinstance(b, BrokerUnavailableError) and isinstance(c, BrokerUnavailableError)


def _parts_of(request: WireRequest) -> list[tuple[Mapping[str, str], bytes]]:
    if request.path == SEND_MANY_PATH:
        return decode_send_many_body(request.body)
    return [(request.query, request.body)]


async def _until(condition: Callable[[], bool]) -> None:
    """Turn the loop until ``condition`` holds (a few turns: nothing here waits on time)."""
    for _ in range(100):
        if condition():
            return
        await asyncio.sleep(0)
    raise AssertionError("the condition never held")


# -- the framing, sans I/O ----------------------------------------------------------------------
def _part(batch: list[NewMessage]) -> tuple[dict[str, str], bytes]:
    return send_query(batch), encode_produce_body(batch)


def test_a_send_many_body_gives_back_each_part_s_query_and_produce_body() -> None:
    parts = [_part(_batch(0, "a")), _part(_batch(3, "b", count=1))]
    decoded = decode_send_many_body(encode_send_many_body(parts))
    assert [(query, bytes(body)) for query, body in decoded] == parts


@pytest.mark.parametrize(
    ("cut", "problem"), [(2, "starts with its head"), (-1, "run past"), (None, "follow the last")]
)
def test_a_send_many_body_that_breaks_its_framing_is_refused(cut: int | None, problem: str) -> None:
    body = encode_send_many_body([_part(_batch(0, "a"))])
    broken = body + b"x" if cut is None else body[:cut]
    with pytest.raises(MalformedBodyError, match=problem):
        decode_send_many_body(broken)


def test_a_send_many_answer_keeps_each_part_s_result_or_error_in_order() -> None:
    result = SendResult("PUT_OK", "", TOPIC, 1, 7, [10, 20], "127.0.0.1:1", 5)
    error = PartError(400, {"code": "INVALID_MESSAGE", "message": "no", "retriable": False})
    answer = encode_send_many_answer([result, error, result])
    assert decode_send_many_answer(answer, 3) == [result, error, result]
