"""Transport methods derived from the call table (:data:`sdk.protocol.calls.CALLS`), so that
no transport writes an operation out by hand: each generated method has the name, signature
and docstring of the :class:`~sdk.transport.base.BrokerTransport` method it implements. The
call table's encoders bind the arguments as the method would (TypeError for a call it refuses,
before any I/O).

The HTTP transports generate every operation; the asyncio in-process transport generates all
but the ones that wait (pull, transaction checks), from its blocking twin's.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Collection
from typing import Any

from sdk.protocol.calls import CALLS
from sdk.transport.base import BrokerTransport

__all__ = ["install_methods"]

_SIGNATURES = {name: inspect.signature(getattr(BrokerTransport, name)) for name in CALLS}


def install_methods(
    cls: type, make: Callable[[str], Callable[..., Any]], *, but: Collection[str] = ()
) -> None:
    """Give ``cls`` one method per entry of :data:`CALLS` (``but`` those it writes itself),
    made by ``make(name)``, with the name, signature and docstring of the protocol's method."""
    for name in CALLS:
        if name in but:
            continue
        method = make(name)
        method.__name__ = name
        method.__qualname__ = f"{cls.__name__}.{name}"
        method.__doc__ = getattr(BrokerTransport, name).__doc__
        method.__signature__ = _SIGNATURES[name]  # type: ignore[attr-defined]
        setattr(cls, name, method)
