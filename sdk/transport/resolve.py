"""Turn what a user hands a client (an embedded broker, or a transport) into a transport."""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from sdk.errors import ArgumentTypeError
from sdk.transport.base import AsyncBrokerTransport, BrokerTransport

__all__ = ["BrokerTarget", "resolve", "resolve_async"]


@runtime_checkable
class _TransportFactory(Protocol):
    def transport(self) -> BrokerTransport: ...

    def async_transport(self) -> AsyncBrokerTransport: ...


BrokerTarget = _TransportFactory | BrokerTransport
"""An :class:`sdk.EmbeddedBroker` (anything with ``transport()``/``async_transport()``) or a
transport."""


def resolve(target: object) -> BrokerTransport:
    """A blocking transport to ``target``."""
    if isinstance(target, _TransportFactory):
        return target.transport()
    if callable(getattr(target, "pull", None)) and callable(getattr(target, "send", None)):
        return target  # type: ignore[return-value]
    raise ArgumentTypeError(f"cannot reach a broker through {target!r}: give an EmbeddedBroker")


def resolve_async(target: object) -> AsyncBrokerTransport:
    """An asyncio transport to ``target``."""
    if isinstance(target, _TransportFactory):
        return target.async_transport()
    if callable(getattr(target, "pull", None)) and hasattr(target, "sync"):
        return target  # type: ignore[return-value]
    raise ArgumentTypeError(f"cannot reach a broker through {target!r}: give an EmbeddedBroker")
