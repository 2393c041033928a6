"""A client left open is reported when it is collected, as an unclosed file is.

Every producer, consumer and :class:`sdk.EmbeddedBroker` is *open* from the end of its
constructor until ``close()``: one collected while open emits a :class:`ResourceWarning`
(``source=`` the object, so ``tracemalloc`` shows where it was made). An object whose
constructor raised was never open and never warns. Python ignores ``ResourceWarning`` by
default; ``-W default`` or ``-X dev`` shows it, ``-W error::ResourceWarning`` (or pytest's
``filterwarnings = error``) reports it through ``sys.unraisablehook``, as for files.

A client kept alive by something else is not collected, so it cannot warn: a started push
consumer is held by its own threads (or tasks) until it is closed, and a transactional producer
by its check thread (checks must be answered for as long as the process runs: a producer that
stopped answering would let the broker roll back transactions whose local part committed).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable

__all__ = ["WarnsUnclosed"]


class WarnsUnclosed:
    """Mixin: ``__del__`` warns (ResourceWarning) if the object was opened and not closed.

    The class calls :meth:`_mark_opened` last in its constructor and answers whether it is
    still open in :meth:`_still_open`. ``__del__`` never raises of its own: it reads nothing
    that a half-built object or interpreter shutdown may have taken away without a guard.
    """

    _opened = False  # class default: an object whose constructor raised was never opened

    def _mark_opened(self) -> None:
        self._opened = True

    def _still_open(self) -> bool:
        """Whether ``close()`` has not begun (the default reads ``_closed``)."""
        return not getattr(self, "_closed", True)

    def __del__(self, _warn: Callable[..., object] = warnings.warn) -> None:
        # warnings.warn is bound at definition: module globals may be gone at shutdown.
        try:
            still_open = self._opened and self._still_open()
            message = f"unclosed {type(self).__name__} {_describe(self)}" if still_open else ""
        except Exception:
            return
        if still_open:
            # Not guarded: a filter that makes the warning an error reports it through
            # sys.unraisablehook, as an unclosed file's warning is.
            _warn(message, ResourceWarning, source=self)


def _describe(obj: object) -> str:
    """What names the object in the warning: its group or its store directory."""
    for name in ("group", "root"):
        value = getattr(obj, name, None)
        if value is not None:
            return f"({name}={str(value)!r})"
    return ""
