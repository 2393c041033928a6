"""Run a broker server until it is told to stop: ``quiver broker``'s body.

:func:`serve` opens the store as an :class:`~sdk.broker.embedded.EmbeddedBroker`, serves
:class:`~sdk.server.app.BrokerApp` on ``host:port`` and, when ``stop`` is set (SIGTERM or
SIGINT under ``quiver broker``), shuts down in this order, so that nothing acknowledged is lost
and no client waits for nothing:

1. stop accepting connections; requests still arriving on open ones are answered 503
   (retriable: a client retries, and finds the broker gone or back);
2. answer the parked pulls and transaction-check fetches at once (with what they have);
3. let the requests in flight finish (up to ``drain_timeout_s``), then the writes queued on the
   writer thread;
4. close the broker: flush the commitlog, persist the consumer offsets, remove the abort
   marker (a clean stop: the next open recovers nothing);
5. close the connections (a handler still running is cancelled within a second).
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from sdk.broker.embedded import EmbeddedBroker
from sdk.broker.service import BrokerOptions
from sdk.server.app import BrokerApp

__all__ = ["ServerOptions", "serve"]

log = logging.getLogger(__name__)

_CLOSE_TIMEOUT_S = 1.0
"""How long closing the connections waits for a handler still running after the drain (aiohttp
waits a minute by default: a client trickling a request body would hold the stop that long)."""


@dataclass
class ServerOptions:
    """Where and how ``quiver broker`` serves. ``port`` 0 takes a free port."""

    data: str | os.PathLike[str]
    host: str = "127.0.0.1"
    port: int = 8080
    broker: BrokerOptions = field(default_factory=BrokerOptions)
    max_request_bytes: int | None = None
    drain_timeout_s: float = 10.0
    create: bool = False
    geometry: dict[str, Any] = field(default_factory=dict)


async def serve(
    options: ServerOptions,
    stop: asyncio.Event,
    *,
    on_listening: Callable[[str], None] | None = None,
) -> None:
    """Serve the broker over ``options.data`` until ``stop`` is set, then shut down (see the
    module docstring). ``on_listening`` is told the base URL once the port is bound."""
    broker = await asyncio.to_thread(
        EmbeddedBroker,
        options.data,
        options=options.broker,
        create=options.create,
        **options.geometry,
    )
    try:
        app = BrokerApp(broker.service, max_request_bytes=options.max_request_bytes)
        runner = web.AppRunner(
            app.app, handle_signals=False, access_log=None, shutdown_timeout=_CLOSE_TIMEOUT_S
        )
        await runner.setup()
        try:
            site = web.TCPSite(runner, options.host, options.port)
            await site.start()
            server = runner.server
            app.count_connections = lambda: len(server.connections) if server else 0
            url = _base_url(runner.addresses[0])
            log.info("broker %s serving %s on %s", options.broker.broker_name, broker.root, url)
            if on_listening is not None:
                on_listening(url)
            await stop.wait()
            log.info("broker %s stopping", options.broker.broker_name)
            app.stopping = True
            await site.stop()
            await app.drain(options.drain_timeout_s)
        finally:
            await asyncio.to_thread(broker.close)
            await runner.cleanup()
    finally:
        if not broker.closed:
            await asyncio.to_thread(broker.close)
    log.info("broker %s stopped", options.broker.broker_name)


def _base_url(address: Any) -> str:
    host, port = address[0], address[1]
    if ":" in host:  # IPv6
        host = f"[{host}]"
    return f"http://{host}:{port}"
