"""The broker's HTTP API: an aiohttp application over a :class:`~sdk.broker.service.BrokerService`.

Routes come from the protocol's tables, not written out here: every control operation
(:data:`sdk.protocol.operations.CONTROL_OPERATIONS`) is ``POST /v1/<name>`` answered by the
in-process transport's method of the same name; the data plane (send, send-half, pull,
transaction checks, queries by key and by id: :mod:`sdk.protocol.data_plane`) has a handler
each. Besides:
``GET /health``, ``GET /metrics`` (:mod:`sdk.server.metrics`) and ``GET /openapi.json``
(:mod:`sdk.server.openapi`).

The event loop never waits on the disk. Every call that appends (sends, send-backs, half
messages, transaction ends, topic changes, offset resets) goes through one writer
(:mod:`sdk.server.writer`), in the order the requests came (the parts of a send-many in one
hand-over, one after the other): on its thread, but for a small send under async flush, which
is copied into the mapped log on the loop when the thread is idle;
reads of the log (pulls, queries by time, key and id, the admin's reports) run on a small
reader pool; the calls that only touch memory (membership, leases, offsets, queue
bounds) run on the loop. A pull with nothing new parks a future (long polling) and is woken
by the arrival of a message. A send that woke parked pulls answers after them (one turn of
the loop later): their consumers wait on the message, its producer only on the receipt, and
the client of both (one process holding a producer and a consumer) reads the pull's answer
first.

Every failure is an error answer of :mod:`sdk.protocol.errors`: bad input is a 4xx naming the
problem, a closing broker a 503 (retriable), a request body over ``max_request_bytes`` a 413.
Anything else is a bug: it is logged with its traceback and answered 500 ``INTERNAL`` without
the exception's text (which may name the broker's files).
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import logging
from collections.abc import Awaitable, Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

import orjson
from aiohttp import web

from localstore import StoreClosedError
from localstore.record.codec import NewMessage
from sdk._version import __version__
from sdk.broker.service import BrokerService
from sdk.errors import BrokerUnavailableError, InvalidArgumentError, MalformedBodyError
from sdk.protocol.data_plane import (
    decode_checks_request,
    decode_pull_request,
    decode_query_by_id_request,
    decode_query_by_key_request,
    decode_send_query,
    encode_checks_answer,
    encode_records_answer,
)
from sdk.protocol.errors import error_answer, error_document
from sdk.protocol.operations import CONTROL_OPERATIONS, Operation, decode_request, encode_answer
from sdk.protocol.pull_body import encode_pull_answer
from sdk.protocol.send_many import (
    SEND_MANY_PATH,
    PartError,
    decode_send_many_body,
    encode_send_many_answer,
)
from sdk.protocol.shapes import SEND_RESULT
from sdk.server.metrics import Gauges, ServerMetrics, render
from sdk.server.openapi import openapi_document
from sdk.server.produce import refuse_broker_properties
from sdk.server.writer import Writer
from sdk.transport.in_process import InProcessTransport
from sdk.transport.models import ProducerStamp, PullBatch, SendResult

__all__ = ["INLINE_APPEND_BYTES", "ON_LOOP", "WRITES", "BrokerApp"]

log = logging.getLogger(__name__)

T = TypeVar("T")

WRITES = frozenset(
    {
        "send_back",
        "end_transaction",
        "create_topic",
        "update_topic",
        "delete_topic",
        "reset_offsets",
    }
)
"""Control operations that append to the log or write config files: on the writer thread."""

ON_LOOP = frozenset(
    {
        "queue_count",
        "min_offset",
        "max_offset",
        "query_offset",
        "commit_offsets",
        "heartbeat",
        "unregister",
        "lock_queues",
        "unlock_queues",
        "group_view",
        "rebalance_view",
    }
)
"""Control operations answered from memory: on the event loop. The others read the log or
the store's files: on the reader pool."""

DEFAULT_MAX_HOLD_MS = 30_000
"""The longest the broker holds a pull or a transaction-check fetch (RocketMQ holds a pull up
to 15 s): a longer wait asked for is answered then with nothing new, and the client asks
again, so no request is held for days."""

MAX_PULL_ANSWER_BYTES = 64 << 20
"""The most record bytes one pull answer holds, whatever its queues ask for (a pull may name
thousands of queues, each with its own ``max_bytes``): the answer is built in memory."""

INLINE_APPEND_BYTES = 4 << 10
"""A produce body up to this size is appended on the event loop when the writer thread is idle
and the store flushes asynchronously (:mod:`sdk.server.writer`): copying it into the mapped
commitlog costs less than the thread hand-over."""

_JSON = "application/json"
_BINARY = "application/octet-stream"
_MIB = 1 << 20


class BrokerApp:
    """The HTTP API of ``service`` (see the module docstring). ``max_request_bytes``: the
    largest request body taken (default: the store's largest message plus 4 MiB);
    ``max_hold_ms``: the longest a pull or a transaction-check fetch is held."""

    def __init__(
        self,
        service: BrokerService,
        *,
        max_request_bytes: int | None = None,
        max_hold_ms: int = DEFAULT_MAX_HOLD_MS,
    ):
        self.service = service
        self.max_hold_ms = max_hold_ms
        self.transport = InProcessTransport(service)
        self.metrics = ServerMetrics()
        if max_request_bytes is None:
            max_request_bytes = service.store.geometry.max_message_size + 4 * _MIB
        self.max_request_bytes = max_request_bytes
        self._writer = Writer(inline_allowed=service.store.geometry.flush_mode == "async")
        self._readers = ThreadPoolExecutor(2, thread_name_prefix="quiver-reader")
        self.stopping = False
        # what GET /metrics reports as open connections (the runner serving the app sets it)
        self.count_connections: Callable[[], int] = lambda: 0
        self.in_flight = 0
        self._idle = asyncio.Event()
        self._idle.set()
        self.app = web.Application(
            client_max_size=max_request_bytes, middlewares=[self._answer_errors]
        )
        self._routes()

    # -- routes --------------------------------------------------------------------------------
    def _routes(self) -> None:
        router = self.app.router
        for operation in CONTROL_OPERATIONS.values():
            router.add_post(operation.path, functools.partial(self._control, operation))
        router.add_post("/v1/send", self._send)
        router.add_post(SEND_MANY_PATH, self._send_many)
        router.add_post("/v1/send-half", self._send_half)
        router.add_post("/v1/pull", self._pull)
        router.add_post("/v1/fetch-transaction-checks", self._fetch_checks)
        router.add_post("/v1/query-by-key", self._query_by_key)
        router.add_post("/v1/query-by-id", self._query_by_id)
        router.add_get("/health", self._health)
        router.add_get("/metrics", self._metrics)
        router.add_get("/openapi.json", self._openapi)

    async def _control(self, operation: Operation, request: web.Request) -> web.Response:
        args, kwargs = decode_request(operation, await request.read())
        call = functools.partial(getattr(self.transport, operation.name), *args, **kwargs)
        if operation.name in ON_LOOP:
            value = call()
        elif operation.name in WRITES:
            value = await self._write(call)
        else:
            value = await self._run(self._readers, call)
        return _json(encode_answer(operation, value))

    async def _send(self, request: web.Request) -> web.Response:
        body = await request.read()
        messages, stamp = decode_send_query(request.query, body)
        refuse_broker_properties(messages)
        result, woke = await self._append(
            functools.partial(self.service.send, messages, stamp=stamp), len(body)
        )
        self._count_put(result, len(body))
        await _yield_to_woken_pulls(woke)
        return _json(orjson.dumps(SEND_RESULT.encode(result)))

    async def _send_many(self, request: web.Request) -> web.Response:
        body = await request.read()
        produces = decode_send_many_body(body)
        parts = [_decoded_part(query, data) for query, data in produces]
        outcomes, woke = await self._append(functools.partial(self._store_parts, parts), len(body))
        for (_query, data), outcome in zip(produces, outcomes, strict=True):
            if isinstance(outcome, SendResult):
                self._count_put(outcome, len(data))
        await _yield_to_woken_pulls(woke)
        return _json(encode_send_many_answer(outcomes))

    async def _append(self, call: Callable[[], T], body_bytes: int) -> tuple[T, bool]:
        """A send's store call through the writer: its value, and whether it woke parked
        pulls (counted on the thread that ran it)."""
        notifier = self.service.notifier

        def noting_wake_ups() -> tuple[T, bool]:
            before = notifier.woken_here()
            value = call()
            return value, notifier.woken_here() != before

        return await self._write(noting_wake_ups, append_bytes=body_bytes)

    def _count_put(self, result: SendResult, body_bytes: int) -> None:
        """Count a send's messages and produce-body bytes in the metrics, if it stored them."""
        if result.stored:
            self.metrics.put_messages += len(result.phys_offsets)
            self.metrics.put_bytes += body_bytes

    def _store_parts(self, parts: list[_Part | PartError]) -> list[SendResult | PartError]:
        """Store each decoded part (on the writer), in order; a part's failure is its answer."""
        outcomes: list[SendResult | PartError] = []
        for part in parts:
            if isinstance(part, PartError):
                outcomes.append(part)
                continue
            messages, stamp = part
            try:
                outcomes.append(self.service.send(messages, stamp=stamp))
            except Exception as exc:
                outcomes.append(_part_error(exc))
        return outcomes

    async def _send_half(self, request: web.Request) -> web.Response:
        group = request.query.get("group")
        if group is None:
            raise InvalidArgumentError("group is missing")
        body = await request.read()
        messages, stamp = decode_send_query(request.query, body, half=True)
        refuse_broker_properties(messages)
        call = functools.partial(self.service.send_half, group, messages[0], stamp=stamp)
        result: SendResult = await self._write(call, append_bytes=len(body))
        return _json(orjson.dumps(SEND_RESULT.encode(result)))

    async def _pull(self, request: web.Request) -> web.Response:
        batch = self._bounded(decode_pull_request(await request.read()))
        self._check_serving()
        parked = batch.wait_ms > 0
        self.metrics.parked_pulls += parked
        try:
            result = await self.service.pull_async(batch, self._offload_read)
        finally:
            self.metrics.parked_pulls -= parked
        for answer in result.results:
            self.metrics.get_messages += answer.count
            self.metrics.get_bytes += len(answer.raw)
        return web.Response(body=encode_pull_answer(result), content_type=_BINARY)

    def _bounded(self, batch: PullBatch) -> PullBatch:
        """``batch`` held at most ``max_hold_ms``, and answered with at most
        :data:`MAX_PULL_ANSWER_BYTES` of records in all (its per-queue ``max_bytes`` shared
        out among its queues)."""
        per_queue = max(1, MAX_PULL_ANSWER_BYTES // max(1, len(batch.pulls)))
        if batch.wait_ms <= self.max_hold_ms and batch.max_bytes <= per_queue:
            return batch
        return dataclasses.replace(
            batch,
            wait_ms=min(batch.wait_ms, self.max_hold_ms),
            max_bytes=min(batch.max_bytes, per_queue),
        )

    async def _fetch_checks(self, request: web.Request) -> web.Response:
        group, client_id, wait_ms = decode_checks_request(await request.read())
        wait_ms = min(wait_ms, self.max_hold_ms)
        self._check_serving()
        checks = await self.service.fetch_transaction_checks_async(
            group, client_id, wait_ms, self._offload_read
        )
        return web.Response(body=encode_checks_answer(checks), content_type=_BINARY)

    async def _query_by_key(self, request: web.Request) -> web.Response:
        topic, key, begin_ms, end_ms, max_count = decode_query_by_key_request(await request.read())
        call = functools.partial(
            self.transport.query_by_key,
            topic,
            key,
            begin_ms=begin_ms,
            end_ms=end_ms,
            max_count=max_count,
        )
        records = await self._run(self._readers, call)
        return web.Response(body=encode_records_answer(records), content_type=_BINARY)

    async def _query_by_id(self, request: web.Request) -> web.Response:
        message_id = decode_query_by_id_request(await request.read())
        call = functools.partial(self.transport.query_by_id, message_id)
        records = await self._run(self._readers, call)
        return web.Response(body=encode_records_answer(records), content_type=_BINARY)

    async def _health(self, _request: web.Request) -> web.Response:
        serving = not (self.stopping or self.service.closed)
        body = {
            "status": "ok" if serving else "stopping",
            "broker_name": self.service.broker_name,
            "version": __version__,
        }
        return _json(orjson.dumps(body), status=200 if serving else 503)

    async def _metrics(self, _request: web.Request) -> web.Response:
        gauges = await self._run(self._readers, self._gauges)
        return web.Response(
            text=render(self.metrics, gauges), content_type="text/plain", charset="utf-8"
        )

    def _gauges(self) -> Gauges:
        flusher = self.service.store.flusher
        lag = [
            (info.group, queue)
            for info in self.service.admin.list_groups()
            if not info.system
            for queue in info.queues
        ]
        return Gauges(
            open_connections=self.count_connections(),
            flush_seconds_sum=flusher.flush_seconds_total,
            flush_count=flusher.flush_rounds,
            lag=lag,
        )

    async def _openapi(self, _request: web.Request) -> web.Response:
        return _json(orjson.dumps(openapi_document(self.max_request_bytes)))

    # -- running calls -------------------------------------------------------------------------
    async def _run(self, pool: ThreadPoolExecutor, call: Callable[[], T]) -> T:
        self._check_serving()
        return await _submit(pool, call)

    async def _write(self, call: Callable[[], T], *, append_bytes: int | None = None) -> T:
        """``call`` (an append or a config write) through the one writer; ``append_bytes``:
        the size of the body it appends, which may run on the loop when it is at most
        :data:`INLINE_APPEND_BYTES` (see :class:`~sdk.server.writer.Writer`)."""
        self._check_serving()
        inline = append_bytes is not None and append_bytes <= INLINE_APPEND_BYTES
        return await self._writer.run(call, inline=inline)

    def _offload_read(self, call: Callable[[], T]) -> Awaitable[T]:
        return _submit(self._readers, call)

    def _check_serving(self) -> None:
        if self.service.closed:
            raise BrokerUnavailableError("the broker is closing")

    @web.middleware
    async def _answer_errors(
        self, request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
    ) -> web.StreamResponse:
        """Count the request in flight; turn every failure into an error answer."""
        self.in_flight += 1
        self._idle.clear()
        route = request.match_info.route.resource
        name = route.canonical if route is not None else "unknown"
        try:
            if self.stopping and request.path.startswith("/v1/"):
                raise BrokerUnavailableError("the broker is shutting down")
            response = await handler(request)
        except web.HTTPException as exc:  # aiohttp's own: no route, wrong method, too large
            response = _http_error(exc, self.max_request_bytes)
        except StoreClosedError as exc:  # for every route: a closing store is a retriable 503
            response = _error(_closing(exc))
        except ConnectionResetError:  # the client left before its whole request body came
            log.debug("%s %s: the client closed the connection", request.method, request.path)
            response = _error(MalformedBodyError(0, "the connection closed mid-body"))
        except Exception as exc:
            if not _is_expected(exc):
                log.exception("%s %s failed", request.method, request.path)
            response = _error(exc)
        finally:
            self.in_flight -= 1
            if not self.in_flight:
                self._idle.set()
        self.metrics.answered(name, response.status)
        return response

    async def drain(self, timeout_s: float) -> None:
        """Stop serving: new requests are answered 503, parked pulls and transaction-check
        fetches answer at once, the requests in flight may finish for up to ``timeout_s``
        (logged when some do not), then the writes queued on the writer thread finish and both
        pools stop. The broker itself stays open (its owner closes it next)."""
        self.stopping = True
        self.service.stop_waiting()
        try:
            await asyncio.wait_for(self._idle.wait(), timeout_s)
        except TimeoutError:
            log.warning(
                "%d requests still in flight after %.1f s; closing anyway",
                self.in_flight,
                timeout_s,
            )
        await asyncio.to_thread(self.close_pools)

    def close_pools(self) -> None:
        """Finish the writes queued on the writer thread, then stop both pools."""
        self._writer.shutdown()
        self._readers.shutdown(wait=True)


_Part = tuple[Sequence[NewMessage], ProducerStamp | None]
"""A send-many part ready to store: its messages and its stamp."""


async def _yield_to_woken_pulls(woke: bool) -> None:
    """One turn of the loop when a send woke parked pulls: their tasks are ready and answer
    in it, before the send does (see the module docstring)."""
    if woke:
        await asyncio.sleep(0)


def _decoded_part(query: dict[str, str], body: memoryview) -> _Part | PartError:
    """A send-many part as :meth:`BrokerApp._send` decodes a send, or the error it is refused
    with."""
    try:
        messages, stamp = decode_send_query(query, body)
        refuse_broker_properties(messages)
    except Exception as exc:
        return _part_error(exc)
    return messages, stamp


def _part_error(exc: Exception) -> PartError:
    """A part's failure as the error answer a send of it alone would get (a bug logged and
    answered INTERNAL, as :meth:`BrokerApp._answer_errors` does). Called in its ``except``."""
    status, document = error_document(_closing(exc) if isinstance(exc, StoreClosedError) else exc)
    if status == 500:
        log.exception("a part of %s failed", SEND_MANY_PATH)
        return PartError(500, _INTERNAL_ERROR)
    return PartError(status, document)


def _closing(exc: StoreClosedError) -> BrokerUnavailableError:
    """A store closed under a request, as the retriable 503 its client gets."""
    return BrokerUnavailableError(f"the broker is closing: {exc}")


_INTERNAL_ERROR = {
    "code": "INTERNAL",
    "message": "internal error (see the broker's log)",
    "retriable": False,
}


def _submit(pool: ThreadPoolExecutor, call: Callable[[], T]) -> asyncio.Future[T]:
    """``call`` on ``pool``; a pool already shut down (the server is stopping and its drain ran
    out of time) refuses it as a closing broker (503: the call never ran, a client resends)."""
    try:
        return asyncio.get_running_loop().run_in_executor(pool, call)
    except RuntimeError as exc:  # concurrent.futures: "cannot schedule new futures after shutdown"
        raise BrokerUnavailableError("the broker is shutting down") from exc


def _json(body: bytes, status: int = 200) -> web.Response:
    return web.Response(body=body, status=status, content_type=_JSON)


def _error(exc: BaseException) -> web.Response:
    status, body = error_answer(exc)
    if status == 500:  # a bug: its text may name the broker's internals
        body = orjson.dumps(_INTERNAL_ERROR)
    return _json(body, status)


def _is_expected(exc: Exception) -> bool:
    """A refusal the error table knows (a 4xx or a 503), not a bug."""
    status, _ = error_answer(exc)
    return status != 500


def _http_error(exc: web.HTTPException, max_request_bytes: int) -> web.Response:
    if exc.status == 413:
        message = f"the request body is over the broker's limit of {max_request_bytes} bytes"
    else:
        message = f"{exc.status} {exc.reason}"
    body = {"code": "INVALID_ARGUMENT", "message": message, "retriable": False}
    return _json(orjson.dumps(body), exc.status)
