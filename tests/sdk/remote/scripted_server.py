"""A fault-injecting broker stand-in for the asyncio transport's tests: an aiohttp server on a
loopback port that answers each request of a route with the next step of its script (an answer,
a reset connection, or no answer at all), and records what it was sent."""

from __future__ import annotations

import asyncio
import socket
from collections import defaultdict, deque
from collections.abc import AsyncIterator, Iterable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

from aiohttp import web


@dataclass(frozen=True)
class Answer:
    status: int
    body: bytes


RESET = "reset"  # close the connection without answering, once the request was read
SILENCE = "silence"  # never answer (the client's read timeout ends the wait)

Step = Answer | str


@dataclass(frozen=True)
class Seen:
    path: str
    query: dict[str, str]
    body: bytes


@dataclass
class ScriptedServer:
    url: str = ""
    scripts: dict[str, deque[Step]] = field(default_factory=lambda: defaultdict(deque))
    seen: list[Seen] = field(default_factory=list)
    _release: asyncio.Event = field(default_factory=asyncio.Event)

    def script(self, method_path: str, steps: Iterable[Step]) -> None:
        """``method_path``: e.g. ``"POST /v1/send"``."""
        self.scripts[method_path].extend(steps)

    def requests_to(self, path: str) -> list[Seen]:
        return [seen for seen in self.seen if seen.path == path]

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        body = await request.read()
        self.seen.append(Seen(request.path, dict(request.query), body))
        script = self.scripts[f"{request.method} {request.path}"]
        step = script.popleft() if script else Answer(500, b"script ran out")
        if step == RESET:
            assert request.transport is not None
            request.transport.abort()
            return web.Response()
        if step == SILENCE:
            await self._release.wait()
            return web.Response(status=503)
        assert isinstance(step, Answer)
        return web.Response(status=step.status, body=step.body)


@asynccontextmanager
async def scripted_server() -> AsyncIterator[ScriptedServer]:
    server = ScriptedServer()
    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", server._handle)
    runner = web.AppRunner(app, shutdown_timeout=1.0)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    server.url = f"http://127.0.0.1:{port}"
    try:
        yield server
    finally:
        server._release.set()
        await runner.cleanup()


def refused_url() -> str:
    """A loopback URL nothing listens on (the port was free a moment ago)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    return f"http://127.0.0.1:{port}"
