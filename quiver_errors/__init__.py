"""The root of every Quiver exception: ``except QuiverError`` catches whatever the public API of
localstore, offsetstore and sdk raises.

Each package keeps its own tree under this root (``localstore.errors.StoreError``,
``offsetstore.OffsetStoreError``, ``sdk.errors``); the root lives in this package of its own,
which imports nothing, so that the store engine and the offset store share it without importing
each other or the SDK. Applications import these names from ``sdk`` (or ``sdk.errors``).

The three argument and state errors keep the built-in class a caller may already catch as a
second base: a bad value is a ``ValueError``, a value of the wrong type also a ``TypeError``, a
call the object's state does not allow a ``RuntimeError``.
"""

from __future__ import annotations


class QuiverError(Exception):
    """Base class of every Quiver error. ``retriable`` says whether the same call may succeed
    if tried again (retry policies read it instead of guessing from the class)."""

    retriable: bool = False

    @classmethod
    def from_message(cls, message: str) -> QuiverError:
        """The error as another process reported it, from its whole message (the wire API
        rebuilds errors this way). A subclass whose constructor takes other arguments
        overrides this."""
        return cls(message)


class InvalidArgumentError(QuiverError, ValueError):
    """An argument the API refuses; the message names the argument, the value and the rule."""


class ArgumentTypeError(InvalidArgumentError, TypeError):
    """An argument of a type the API cannot use (a listener that is not callable, a coroutine
    function given to a thread-pool consumer, ...)."""


class IllegalStateError(QuiverError, RuntimeError):
    """A call the object's state does not allow now: polling before subscribing, starting a
    service twice, subscribing after assigning queues."""


__all__ = ["ArgumentTypeError", "IllegalStateError", "InvalidArgumentError", "QuiverError"]
