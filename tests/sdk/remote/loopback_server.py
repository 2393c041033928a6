"""The broker server (:class:`sdk.server.app.BrokerApp`) over a real :class:`sdk.EmbeddedBroker`
of the test's own process, on a loopback port, served from a thread with its own event loop:
blocking and asyncio clients reach it over real HTTP while the test can still look at the
broker's service. (:mod:`tests.sdk.remote.broker_process` runs the server in a process of its
own.)"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from aiohttp import web

from sdk import EmbeddedBroker
from sdk.server.app import BrokerApp


class LoopbackServer:
    """What a test sees of the server: its ``url`` and the routes it answered."""

    def __init__(self, app: BrokerApp) -> None:
        self.app = app
        self.url = ""

    @property
    def requests(self) -> set[str]:
        """Every route answered so far."""
        return {route for route, _status in list(self.app.metrics.requests)}


@contextmanager
def loopback_server(
    broker: EmbeddedBroker,
    *,
    prepare: Callable[[BrokerApp], None] | None = None,
    **options: Any,
) -> Iterator[LoopbackServer]:
    """Serve ``broker`` on 127.0.0.1 (a free port) until the block ends; ``options`` are
    :class:`BrokerApp`'s. ``prepare`` may change the app before it serves (add a fault
    injecting middleware, say)."""
    loop = asyncio.new_event_loop()
    started = threading.Event()
    stop: list[asyncio.Event] = []
    failure: list[BaseException] = []
    server: list[LoopbackServer] = []

    async def serve() -> None:
        app = BrokerApp(broker.service, **options)
        if prepare is not None:
            prepare(app)
        runner = web.AppRunner(app.app, shutdown_timeout=2.0, access_log=None)
        await runner.setup()
        try:
            site = web.TCPSite(runner, "127.0.0.1", 0)
            await site.start()
            front = LoopbackServer(app)
            front.url = f"http://127.0.0.1:{runner.addresses[0][1]}"
            server.append(front)
            stop.append(asyncio.Event())
            started.set()
            await stop[0].wait()
            await app.drain(10.0)
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
        yield server[0]
    finally:
        loop.call_soon_threadsafe(stop[0].set)
        thread.join(30)
