"""A small HTTP front for a real :class:`sdk.EmbeddedBroker`, for end-to-end tests of the HTTP
transports before the broker server exists: it decodes each request with :mod:`sdk.protocol`
(the same modules the real server reads), calls the broker's in-process transport on a worker
thread (a parked pull blocks one), and encodes the answer or the error. It runs on its own
loop in a thread, so blocking and asyncio clients both reach it over a loopback port."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager

import orjson
from aiohttp import web

from sdk.protocol.data_plane import (
    decode_pull_request,
    decode_send_query,
    encode_checks_answer,
)
from sdk.protocol.errors import error_answer
from sdk.protocol.operations import (
    CONTROL_OPERATIONS,
    Operation,
    decode_request,
    encode_answer,
)
from sdk.protocol.pull_body import encode_pull_answer
from sdk.protocol.shapes import SEND_RESULT
from sdk.transport.base import BrokerTransport

Handler = Callable[[BrokerTransport, bytes, dict[str, str]], bytes]


def _control(operation: Operation) -> Handler:
    def handle(broker: BrokerTransport, body: bytes, _query: dict[str, str]) -> bytes:
        args, kwargs = decode_request(operation, body)
        return encode_answer(operation, getattr(broker, operation.name)(*args, **kwargs))

    return handle


def _send(broker: BrokerTransport, body: bytes, query: dict[str, str]) -> bytes:
    messages, _stamp = decode_send_query(query, body)
    return orjson.dumps(SEND_RESULT.encode(broker.send(messages)))


def _send_half(broker: BrokerTransport, body: bytes, query: dict[str, str]) -> bytes:
    messages, _stamp = decode_send_query(query, body, half=True)
    return orjson.dumps(SEND_RESULT.encode(broker.send_half(query["group"], messages[0])))


def _pull(broker: BrokerTransport, body: bytes, _query: dict[str, str]) -> bytes:
    return encode_pull_answer(broker.pull(decode_pull_request(body)))


def _checks(broker: BrokerTransport, body: bytes, _query: dict[str, str]) -> bytes:
    fields = orjson.loads(body)
    checks = broker.fetch_transaction_checks(
        fields["group"], fields["client_id"], fields["wait_ms"]
    )
    return encode_checks_answer(checks)


HANDLERS: dict[str, Handler] = {
    **{op.path: _control(op) for op in CONTROL_OPERATIONS.values()},
    "/v1/send": _send,
    "/v1/send-half": _send_half,
    "/v1/pull": _pull,
    "/v1/fetch-transaction-checks": _checks,
}


class LoopbackServer:
    def __init__(self, broker: BrokerTransport) -> None:
        self.broker = broker
        self.url = ""
        self.requests: list[str] = []
        self._workers = ThreadPoolExecutor(32, thread_name_prefix="loopback-broker")

    async def _health(self, _request: web.Request) -> web.Response:
        body = {"status": "ok", "broker_name": self.broker.broker_name, "version": "test"}
        return web.json_response(body)

    async def _call(self, request: web.Request) -> web.Response:
        self.requests.append(request.path)
        handler = HANDLERS.get(request.path)
        if handler is None:
            return web.Response(status=404, text=f"no route {request.path}")
        body = await request.read()
        query = dict(request.query)
        loop = asyncio.get_running_loop()
        try:
            answer = await loop.run_in_executor(self._workers, handler, self.broker, body, query)
        except Exception as exc:
            status, error = error_answer(exc)
            return web.Response(status=status, body=error, content_type="application/json")
        return web.Response(body=answer)

    def app(self) -> web.Application:
        app = web.Application(client_max_size=64 << 20)
        app.router.add_get("/health", self._health)
        app.router.add_post("/{tail:.*}", self._call)
        return app


@contextmanager
def loopback_server(broker: BrokerTransport) -> Iterator[LoopbackServer]:
    """Serve ``broker`` on 127.0.0.1 (a free port) from a thread of its own until the block
    ends."""
    server = LoopbackServer(broker)
    loop = asyncio.new_event_loop()
    started = threading.Event()
    stop: list[asyncio.Event] = []
    failure: list[BaseException] = []

    async def serve() -> None:
        runner = web.AppRunner(server.app(), shutdown_timeout=2.0)
        await runner.setup()
        try:
            site = web.TCPSite(runner, "127.0.0.1", 0)
            await site.start()
            server.url = f"http://127.0.0.1:{runner.addresses[0][1]}"
            stop.append(asyncio.Event())
            started.set()
            await stop[0].wait()
        finally:
            await runner.cleanup()

    def main() -> None:
        try:
            loop.run_until_complete(serve())
        except BaseException as exc:  # reported to the test
            failure.append(exc)
            started.set()
        finally:
            loop.close()

    thread = threading.Thread(target=main, name="loopback-server", daemon=True)
    thread.start()
    assert started.wait(30), "the loopback server did not start"
    if failure:
        raise failure[0]
    try:
        yield server
    finally:
        loop.call_soon_threadsafe(stop[0].set)
        thread.join(30)
        server._workers.shutdown(wait=True)
