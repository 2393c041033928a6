"""Turn what a user hands a client (a broker URL, an embedded broker, or a transport) into a
transport.

A URL (``"http://host:8080"``, or a :class:`~sdk.transport.remote_broker.RemoteBroker` with
options) gives a new HTTP transport that the client owns: the client closes it in its own
``close()`` (:func:`owns_transport`), as it closes an embedded broker's (which holds nothing).
A transport given outright belongs to whoever made it. The HTTP libraries are imported only when
a URL is resolved, so ``import sdk`` and the CLI stay light.
"""

from __future__ import annotations

import inspect
from typing import Protocol, runtime_checkable

from sdk.errors import ArgumentTypeError
from sdk.transport.base import AsyncBrokerTransport, BrokerTransport

__all__ = ["BrokerTarget", "owns_transport", "resolve", "resolve_async"]


@runtime_checkable
class _TransportFactory(Protocol):
    def transport(self) -> BrokerTransport: ...

    def async_transport(self) -> AsyncBrokerTransport: ...


BrokerTarget = str | _TransportFactory | BrokerTransport
"""A broker URL (``http://host:port``), a :class:`~sdk.transport.remote_broker.RemoteBroker`
or an :class:`sdk.EmbeddedBroker` (anything with ``transport()``/``async_transport()``), or a
transport."""

_GIVE = "give a broker URL (http://host:port) or an EmbeddedBroker"


def owns_transport(target: object) -> bool:
    """Whether a client given ``target`` owns the transport it resolves to: one made for it
    from a URL or by a broker's ``transport()`` (a new transport per client), which it closes.
    (An embedded broker's transports hold nothing: closing one does nothing.)"""
    return isinstance(target, (str, _TransportFactory))


def resolve(target: object) -> BrokerTransport:
    """A blocking transport to ``target``: an
    :class:`~sdk.transport.http_sync.HttpTransport` for a URL (InvalidArgumentError naming a
    bad one)."""
    if isinstance(target, str):
        from sdk.transport.http_sync import http_transport  # noqa: PLC0415 (lazy: httpx)

        return http_transport(target)
    if isinstance(target, _TransportFactory):
        return target.transport()
    if _is_async_transport(target):
        raise ArgumentTypeError(
            f"{target!r} is an asyncio transport: give it to an asyncio client, or give this "
            "client a blocking transport"
        )
    if callable(getattr(target, "pull", None)) and callable(getattr(target, "send", None)):
        return target  # type: ignore[return-value]
    raise ArgumentTypeError(f"cannot reach a broker through {target!r}: {_GIVE}")


def resolve_async(target: object) -> AsyncBrokerTransport:
    """An asyncio transport to ``target``: an
    :class:`~sdk.transport.http_async.AsyncHttpTransport` for a URL."""
    if isinstance(target, str):
        from sdk.transport.http_async import async_http_transport  # noqa: PLC0415

        return async_http_transport(target)
    if isinstance(target, _TransportFactory):
        return target.async_transport()
    if _is_async_transport(target):
        if not inspect.iscoroutinefunction(getattr(target, "connect", None)):
            raise ArgumentTypeError(
                f"{target!r} has no async connect(): an asyncio transport answers the broker's "
                "name with it (AsyncBrokerTransport)"
            )
        return target  # type: ignore[return-value]
    if callable(getattr(target, "pull", None)) and callable(getattr(target, "send", None)):
        raise ArgumentTypeError(
            f"{target!r} is a blocking transport: give it to a blocking client, or give this "
            "client an asyncio transport"
        )
    raise ArgumentTypeError(f"cannot reach a broker through {target!r}: {_GIVE}")


def _is_async_transport(target: object) -> bool:
    """Whether ``target`` is an asyncio transport: its ``pull`` and ``send`` are coroutine
    functions (every operation is, :class:`AsyncBrokerTransport`)."""
    return all(
        inspect.iscoroutinefunction(getattr(target, name, None)) for name in ("pull", "send")
    )
