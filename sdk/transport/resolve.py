"""Turn what a user hands a client (an embedded broker, or a transport) into a transport."""

from __future__ import annotations

import inspect
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
    if _is_async_transport(target):
        raise ArgumentTypeError(
            f"{target!r} is an asyncio transport: give it to an asyncio client, or give this "
            "client a blocking transport"
        )
    if callable(getattr(target, "pull", None)) and callable(getattr(target, "send", None)):
        return target  # type: ignore[return-value]
    raise ArgumentTypeError(f"cannot reach a broker through {target!r}: give an EmbeddedBroker")


def resolve_async(target: object) -> AsyncBrokerTransport:
    """An asyncio transport to ``target``."""
    if isinstance(target, _TransportFactory):
        return target.async_transport()
    if _is_async_transport(target):
        return target  # type: ignore[return-value]
    if callable(getattr(target, "pull", None)) and callable(getattr(target, "send", None)):
        raise ArgumentTypeError(
            f"{target!r} is a blocking transport: give it to a blocking client, or give this "
            "client an asyncio transport"
        )
    raise ArgumentTypeError(f"cannot reach a broker through {target!r}: give an EmbeddedBroker")


def _is_async_transport(target: object) -> bool:
    """Whether ``target`` is an asyncio transport: its ``pull`` and ``send`` are coroutine
    functions (every operation is, :class:`AsyncBrokerTransport`)."""
    return all(
        inspect.iscoroutinefunction(getattr(target, name, None)) for name in ("pull", "send")
    )
