"""A broker server reached over HTTP, as a client's target: what a URL stands for, with the
options its transports take.

``Producer("http://host:8080")`` is the short form of ``Producer(RemoteBroker("http://host:8080"))``.
Give a :class:`RemoteBroker` to choose the request timeout, how long a call keeps retrying a
broker that does not answer, or the producer id of the transports' stamps. Like an
:class:`sdk.EmbeddedBroker`, it makes a new transport for each client that is given it, and the
client owns and closes that transport. The HTTP libraries are imported when a transport is made.
"""

from __future__ import annotations

from sdk.transport.base import AsyncBrokerTransport, BrokerTransport
from sdk.transport.http_common import DEFAULT_RETRY_DEADLINE_S, DEFAULT_TIMEOUT_S, broker_url

__all__ = ["RemoteBroker"]


class RemoteBroker:
    """The broker at ``url`` (``http://host:port``; InvalidArgumentError naming a bad one).

    ``timeout_s``: connect, write and read timeout of one request (a long poll adds its wait).
    ``retry_deadline_s``: how long a call retries while the broker cannot be reached or answers
    503, before it raises :class:`sdk.BrokerUnavailableError` (0: one try).
    ``producer_id``: a name for the ids a producer's sends are stamped with (each transport's
    id is the name, ``.`` and a random part of its own: its sequences start at 0, so no two
    transports may share an id); the broker stores a batch once per stamp.
    """

    def __init__(
        self,
        url: str,
        *,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        retry_deadline_s: float = DEFAULT_RETRY_DEADLINE_S,
        producer_id: str | None = None,
    ) -> None:
        self.url = broker_url(url)
        self.timeout_s = timeout_s
        self.retry_deadline_s = retry_deadline_s
        self.producer_id = producer_id

    def transport(self) -> BrokerTransport:
        """A new blocking transport (httpx) to the broker."""
        from sdk.transport.http_sync import http_transport  # noqa: PLC0415 (lazy: httpx)

        return http_transport(
            self.url,
            timeout_s=self.timeout_s,
            retry_deadline_s=self.retry_deadline_s,
            producer_id=self.producer_id,
        )

    def async_transport(self) -> AsyncBrokerTransport:
        """A new asyncio transport (aiohttp) to the broker."""
        from sdk.transport.http_async import async_http_transport  # noqa: PLC0415 (lazy)

        return async_http_transport(
            self.url,
            timeout_s=self.timeout_s,
            retry_deadline_s=self.retry_deadline_s,
            producer_id=self.producer_id,
        )

    def __repr__(self) -> str:
        return f"RemoteBroker({self.url!r})"
