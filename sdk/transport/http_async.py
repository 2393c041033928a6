"""The asyncio HTTP transport of remote mode: :class:`AsyncHttpTransport`, an
:class:`~sdk.transport.base.AsyncBrokerTransport` over one long-lived
:class:`aiohttp.ClientSession`.

The session is made on first use, on the running loop, and kept (with its keep-alive
connections) until :meth:`AsyncHttpTransport.close`; a transport serves one event loop.
aiohttp's exceptions end here, each turned once into the SDK's: a connection that cannot be
opened is a :class:`~sdk.transport.http_common.RequestNotServedError`, a timeout or a broken
connection a :class:`~sdk.errors.BrokerUnavailableError` (both name the URL), an error answer
the error of :func:`sdk.protocol.errors.error_from_answer`. Retries, stamps and timeouts follow
:mod:`sdk.transport.http_common`. Sends issued concurrently (several tasks, or several producers
given this one transport) leave together while a request is in flight
(:mod:`sdk.transport.coalesce`); a send alone goes at once.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, cast

import aiohttp

from sdk.errors import BrokerUnavailableError
from sdk.protocol.calls import WireRequest
from sdk.transport.base import AsyncBrokerTransport
from sdk.transport.coalesce import DEFAULT_COALESCE_BYTES, SendCoalescer
from sdk.transport.derived import install_methods
from sdk.transport.http_common import (
    DEFAULT_RETRY_DEADLINE_S,
    DEFAULT_TIMEOUT_S,
    HEALTH_PATH,
    RequestNotServedError,
    RetryPolicy,
    Stamper,
    answer_failure,
    broker_url,
    closed_error,
    decode_health,
    part_failure,
    prepare,
    read_timeout_s,
)
from sdk.transport.http_sync import HttpTransport

__all__ = ["AsyncHttpTransport", "async_http_transport"]

_NOT_SENT = (aiohttp.ClientConnectorError, aiohttp.ConnectionTimeoutError)


class AsyncHttpTransport:
    """An asyncio transport to the broker at ``url`` (``http://host:port``).

    Options as :class:`sdk.transport.http_sync.HttpTransport`'s (``async_sleep`` in place of
    ``sleep``), and ``coalesce_bytes``: the most produce-body bytes that concurrent sends
    carry in one request (:mod:`sdk.transport.coalesce`). Every operation of
    :class:`~sdk.transport.base.AsyncBrokerTransport` is a coroutine method, generated from
    :data:`sdk.protocol.calls.CALLS`. Close it with ``await close()``."""

    def __init__(
        self,
        url: str,
        *,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        retry_deadline_s: float = DEFAULT_RETRY_DEADLINE_S,
        producer_id: str | None = None,
        clock: Callable[[], float] = time.monotonic,
        async_sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        coalesce_bytes: int = DEFAULT_COALESCE_BYTES,
    ) -> None:
        self.url = broker_url(url)
        self.timeout_s = timeout_s
        self.policy = RetryPolicy(self.url, retry_deadline_s, clock=clock, async_sleep=async_sleep)
        self.stamper = Stamper(producer_id)
        self.sends = SendCoalescer(
            self._post,
            lambda part: part_failure(self.url, part),
            max_request_bytes=coalesce_bytes,
        )
        self._session: aiohttp.ClientSession | None = None
        self._closed = False
        self._name: str | None = None
        self._connecting = asyncio.Lock()

    @property
    def producer_id(self) -> str:
        return self.stamper.producer_id

    async def connect(self) -> str:
        """Learn the broker's name (``GET /health``, retried as any idempotent call) and
        answer it; :attr:`broker_name` is then known without blocking."""
        if self._name is None:
            async with self._connecting:  # callers at once share one GET /health
                if self._name is None:
                    self._name = await self.policy.run_async(self._health, idempotent=True)
        return self._name

    @property
    def broker_name(self) -> str:
        """The broker's name. Unless :meth:`connect` learnt it already, this asks
        ``GET /health`` once with a short *blocking* request (httpx, no retries): the one
        blocking call of this transport. The SDK's asyncio clients await :meth:`connect`
        instead; so should other callers on a loop."""
        if self._name is None:
            with HttpTransport(self.url, timeout_s=self.timeout_s, retry_deadline_s=0) as probe:
                self._name = probe.broker_name
        return self._name

    async def _health(self) -> str:
        status, body = await self._exchange(
            "GET", HEALTH_PATH, timeout=aiohttp.ClientTimeout(total=self.timeout_s)
        )
        return decode_health(self.url, status, body).broker_name

    async def _call(self, name: str, args: Sequence[Any], kwargs: Mapping[str, Any]) -> Any:
        call, request = prepare(self.stamper, name, args, kwargs)
        if name == "send":  # stamped, so every try may be answered from the broker's window
            return await self.policy.run_async(lambda: self.sends.send(request), True)
        body = await self.policy.run_async(lambda: self._post(request), call.idempotent)
        return call.answer(body)

    async def _post(self, request: WireRequest) -> bytes:
        status, body = await self._exchange(
            "POST",
            request.path,
            params=request.query,
            data=request.body,
            headers={
                "content-type": "application/octet-stream" if request.binary else "application/json"
            },
            timeout=aiohttp.ClientTimeout(
                total=None,
                connect=self.timeout_s,
                sock_read=read_timeout_s(self.timeout_s, request.hold_ms),
            ),
        )
        if status != 200:
            raise answer_failure(self.url, status, body)
        return body

    async def _exchange(self, method: str, path: str, **options: Any) -> tuple[int, bytes]:
        """One request and its whole body; aiohttp's failures as the SDK's."""
        session = self._open_session()
        try:
            async with session.request(method, self.url + path, **options) as response:
                return response.status, await response.read()
        except _NOT_SENT as exc:
            raise RequestNotServedError(f"cannot reach broker {self.url}: {exc!r}") from exc
        except TimeoutError as exc:
            raise BrokerUnavailableError(
                f"broker {self.url} did not answer {path} in time: {exc!r}"
            ) from exc
        except aiohttp.ClientError as exc:
            if self._closed:
                raise closed_error(self.url) from exc
            raise BrokerUnavailableError(
                f"connection to broker {self.url} failed during {path}: {exc!r}"
            ) from exc

    def _open_session(self) -> aiohttp.ClientSession:
        if self._closed:
            raise closed_error(self.url)
        if self._session is None:
            self._session = aiohttp.ClientSession(
                headers={"accept": "application/json, application/octet-stream"}
            )
        return self._session

    async def close(self) -> None:
        """Close the session and its connections (not the broker). Idempotent."""
        if self._closed:
            return
        self._closed = True
        session, self._session = self._session, None
        if session is not None:
            await session.close()

    async def __aenter__(self) -> AsyncHttpTransport:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    def __repr__(self) -> str:
        return f"AsyncHttpTransport({self.url!r})"

    if TYPE_CHECKING:  # the generated operations (install_methods below)

        def __getattr__(self, name: str) -> Any: ...


def _operation(name: str) -> Callable[..., Awaitable[Any]]:
    async def method(self: AsyncHttpTransport, *args: Any, **kwargs: Any) -> Any:
        return await self._call(name, args, kwargs)

    return method


install_methods(AsyncHttpTransport, _operation)


def async_http_transport(url: str, **options: Any) -> AsyncBrokerTransport:
    """:class:`AsyncHttpTransport` to ``url``, typed as the seam it implements."""
    return cast(AsyncBrokerTransport, AsyncHttpTransport(url, **options))
