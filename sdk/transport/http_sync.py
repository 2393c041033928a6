"""The blocking HTTP transport of remote mode: :class:`HttpTransport`, a
:class:`~sdk.transport.base.BrokerTransport` over one long-lived :class:`httpx.Client`.

One client, kept alive for the transport's life: its connection pool is shared by every thread
that calls (httpx's client is thread-safe); no event loop and no thread of its own. httpx's
exceptions end here, each turned once into the SDK's: a connection that cannot be opened is a
:class:`~sdk.transport.http_common.RequestNotServedError`, a timeout or a broken connection a
:class:`~sdk.errors.BrokerUnavailableError` (both name the URL), an error answer the error of
:func:`sdk.protocol.errors.error_from_answer`. Retries, stamps and timeouts follow
:mod:`sdk.transport.http_common`.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, cast

import httpx

from sdk.errors import BrokerUnavailableError
from sdk.protocol.calls import CALLS, WireRequest
from sdk.protocol.data_plane import encoded_send_query
from sdk.transport.base import BrokerTransport
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
    prepare,
    read_timeout_s,
)
from sdk.transport.models import ProducerStamp, SendResult

__all__ = ["HttpTransport", "http_transport"]

_NOT_SENT = (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout)


class HttpTransport:
    """A blocking transport to the broker at ``url`` (``http://host:port``); thread-safe.

    ``timeout_s``: connect, write and read timeout of one request (a long poll waits its hold
    on top). ``retry_deadline_s``: how long a call retries retriable failures.
    ``producer_id``: a name for the id stamped on sends, which is this transport's own (the
    name, ``.`` and a random part; default: a random id). ``clock``
    and ``sleep`` drive the retry backoff (tests inject them). Close it with :meth:`close`.
    Every operation of :class:`~sdk.transport.base.BrokerTransport` is a method, generated
    from :data:`sdk.protocol.calls.CALLS`."""

    def __init__(
        self,
        url: str,
        *,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        retry_deadline_s: float = DEFAULT_RETRY_DEADLINE_S,
        producer_id: str | None = None,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.url = broker_url(url)
        self.timeout_s = timeout_s
        self.policy = RetryPolicy(self.url, retry_deadline_s, clock=clock, sleep=sleep)
        self.stamper = Stamper(producer_id)
        self._client = httpx.Client(base_url=self.url, timeout=timeout_s)
        self._closed = False
        self._name: str | None = None
        self._name_lock = threading.Lock()

    @property
    def producer_id(self) -> str:
        return self.stamper.producer_id

    @property
    def broker_name(self) -> str:
        """The broker's name, asked once with ``GET /health`` (retried as any idempotent
        call)."""
        with self._name_lock:
            if self._name is None:
                self._name = self.policy.run(self._health, idempotent=True)
            return self._name

    def _health(self) -> str:
        response = self._exchange("GET", HEALTH_PATH, timeout=httpx.Timeout(self.timeout_s))
        return decode_health(self.url, response.status_code, response.content).broker_name

    def _call(self, name: str, args: Sequence[Any], kwargs: Mapping[str, Any]) -> Any:
        call, request = prepare(self.stamper, name, args, kwargs)
        body = self.policy.run(lambda: self._post(request), call.idempotent)
        return call.answer(body)

    def send_encoded(
        self, topic: str, queue_id: int, body: bytes, count: int, stamp: ProducerStamp
    ) -> SendResult:
        """Send ``count`` messages to ``topic``/``queue_id`` already encoded as a produce body
        (:mod:`sdk.protocol.produce_body`) under ``stamp``, the caller's own (not this
        transport's): retried as any send is, and stored once however often it is sent with
        that stamp (within the broker's idempotence bounds). Born now, on the default host."""
        query = encoded_send_query(
            topic, queue_id, count, stamp, born_timestamp=time.time_ns() // 1_000_000
        )
        request = WireRequest("/v1/send", body, query, binary=True)
        send = CALLS["send"]
        answer = self.policy.run(lambda: self._post(request), send.idempotent)
        result: SendResult = send.answer(answer)
        return result

    def _post(self, request: WireRequest) -> bytes:
        response = self._exchange(
            "POST",
            request.path,
            params=request.query,
            content=request.body,
            headers={
                "content-type": "application/octet-stream" if request.binary else "application/json"
            },
            timeout=httpx.Timeout(
                self.timeout_s, read=read_timeout_s(self.timeout_s, request.hold_ms)
            ),
        )
        if response.status_code != 200:
            raise answer_failure(self.url, response.status_code, response.content)
        return response.content

    def _exchange(self, method: str, path: str, **options: Any) -> httpx.Response:
        """One request, its whole body read; httpx's failures as the SDK's."""
        if self._closed:
            raise closed_error(self.url)
        try:
            return self._client.request(method, path, **options)
        except _NOT_SENT as exc:
            raise RequestNotServedError(f"cannot reach broker {self.url}: {exc!r}") from exc
        except httpx.TimeoutException as exc:
            raise BrokerUnavailableError(
                f"broker {self.url} did not answer {path} in time: {exc!r}"
            ) from exc
        except httpx.TransportError as exc:
            raise BrokerUnavailableError(
                f"connection to broker {self.url} failed during {path}: {exc!r}"
            ) from exc
        except RuntimeError as exc:  # httpx: the client was closed meanwhile
            if self._closed:
                raise closed_error(self.url) from exc
            raise

    def close(self) -> None:
        """Close the connection pool (not the broker). Idempotent."""
        if not self._closed:
            self._closed = True
            self._client.close()

    def __enter__(self) -> HttpTransport:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"HttpTransport({self.url!r})"

    if TYPE_CHECKING:  # the generated operations (install_methods below)

        def __getattr__(self, name: str) -> Any: ...


def _operation(name: str) -> Callable[..., Any]:
    def method(self: HttpTransport, *args: Any, **kwargs: Any) -> Any:
        return self._call(name, args, kwargs)

    return method


install_methods(HttpTransport, _operation)


def http_transport(url: str, **options: Any) -> BrokerTransport:
    """:class:`HttpTransport` to ``url``, typed as the seam it implements."""
    return cast(BrokerTransport, HttpTransport(url, **options))
