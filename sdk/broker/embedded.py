"""Local mode: a broker inside the application's process, over a store directory.

``EmbeddedBroker("./data")`` opens (or creates) the store and runs the broker service next to it:
committed offsets, consumer groups, the delay schedule and retries. Producers and consumers are
given the broker itself; they reach it through the in-process transport, the same seam the HTTP
transports of remote mode implement.

A broker still open when the interpreter exits is closed by an ``atexit`` hook (offsets
persisted, the store's abort marker removed), after the main thread ended and before the
interpreter stops: the hook holds the open brokers' services weakly (a closed broker leaves the
set) and logs a failed close instead of raising. Clients still open then are not closed first:
their threads are daemons, a parked pull is answered by the close, and their later calls find
the broker closed (:class:`sdk.errors.BrokerUnavailableError`). What a pull consumer committed
is at the broker already; what a push consumer committed since its last persist (every
``persist_interval_s``) is delivered again. A forked child never closes its parent's brokers.
The set holds the service, not this object: a broker dropped while its service still runs
(its clients hold the service) is still closed at exit.
"""

from __future__ import annotations

import atexit
import logging
import os
import weakref
from pathlib import Path
from types import TracebackType
from typing import Any

from localstore import StoreOptions
from localstore.files.store_directory import check_store_directory
from sdk.broker.service import BrokerOptions, BrokerService
from sdk.clock import Clock
from sdk.lifecycle import WarnsUnclosed
from sdk.transport.in_process import AsyncInProcessTransport, InProcessTransport

__all__ = ["EmbeddedBroker"]

log = logging.getLogger(__name__)

# The services of the brokers open in this process, closed at exit if still open.
_open_services: weakref.WeakSet[BrokerService] = weakref.WeakSet()


def _close_open_brokers() -> None:
    """The atexit hook: close every broker still open; a failure is logged, never raised."""
    for service in list(_open_services):
        try:
            if not service.closed:
                log.info("closing broker %s, still open at exit", service.root)
            service.close()
        except Exception:
            log.error("closing broker %s at exit failed", service.root, exc_info=True)
        finally:
            _open_services.discard(service)


atexit.register(_close_open_brokers)
os.register_at_fork(after_in_child=_open_services.clear)  # the parent's brokers are its own


class EmbeddedBroker(WarnsUnclosed):
    """A broker service over the store in ``root``, in this process.

    ``options`` sets the broker (:class:`BrokerOptions`); ``store_options`` and ``geometry``
    (e.g. ``commitlog_file_size=...``, ``flush_mode="sync"``) are shortcuts for its store part.
    ``root`` is a store directory (or what is left of one), an empty one (``lost+found`` and
    dotfiles aside), or one that does not exist yet; a directory that holds something else and
    no store is refused (:class:`localstore.errors.StoreDirectoryError`) unless
    ``create=True`` says to make the store there (see :mod:`localstore.files.store_directory`).
    ``clock`` (a shortcut for ``options.clock``) is the time its leases, member expiry,
    schedule and transaction checks read: tests give a :class:`sdk.clock.ManualClock`.
    Close it (or use ``with``) after the clients that use it: closing flushes and releases the
    store directory.
    """

    def __init__(
        self,
        root: str | os.PathLike[str],
        *,
        options: BrokerOptions | None = None,
        store_options: StoreOptions | None = None,
        create: bool = False,
        clock: Clock | None = None,
        **geometry: Any,
    ) -> None:
        check_store_directory(Path(root), create=create)
        options = options or BrokerOptions()
        if clock is not None:
            options.clock = clock
        if store_options is not None:
            options.store = store_options
        if geometry:
            options.geometry = {**options.geometry, **geometry}
        self.service = BrokerService(root, options)
        self.root = self.service.root
        _open_services.add(self.service)
        self._mark_opened()

    def transport(self) -> InProcessTransport:
        """A blocking transport to this broker (what :class:`sdk.Producer` uses)."""
        return InProcessTransport(self.service)

    def async_transport(self) -> AsyncInProcessTransport:
        """An asyncio transport to this broker (what :class:`sdk.AsyncProducer` uses)."""
        return AsyncInProcessTransport(self.service)

    @property
    def closed(self) -> bool:
        return self.service.closed

    def close(self) -> None:
        """Stop the broker: parked pulls answer, offsets are persisted, the store is closed."""
        try:
            self.service.close()
        except Exception:  # every step ran (CloseError says which failed): not again at exit
            _open_services.discard(self.service)
            raise
        # An interrupted close (KeyboardInterrupt) stays in the set: exit runs the steps left.
        _open_services.discard(self.service)

    def _still_open(self) -> bool:
        return not self.service.closed

    def __enter__(self) -> EmbeddedBroker:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"EmbeddedBroker({str(self.root)!r})"
