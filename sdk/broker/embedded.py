"""Local mode: a broker inside the application's process, over a store directory.

``EmbeddedBroker("./data")`` opens (or creates) the store and runs the broker service next to it:
committed offsets, consumer groups, the delay schedule and retries. Producers and consumers are
given the broker itself; they reach it through the in-process transport, the same seam the HTTP
transports of remote mode implement.
"""

from __future__ import annotations

import os
from pathlib import Path
from types import TracebackType
from typing import Any

from localstore import StoreOptions
from localstore.files.store_directory import check_store_directory
from sdk.broker.service import BrokerOptions, BrokerService
from sdk.transport.in_process import AsyncInProcessTransport, InProcessTransport

__all__ = ["EmbeddedBroker"]


class EmbeddedBroker:
    """A broker service over the store in ``root``, in this process.

    ``options`` sets the broker (:class:`BrokerOptions`); ``store_options`` and ``geometry``
    (e.g. ``commitlog_file_size=...``, ``flush_mode="sync"``) are shortcuts for its store part.
    ``root`` is a store directory (or what is left of one), an empty one (``lost+found`` and
    dotfiles aside), or one that does not exist yet; a directory that holds something else and
    no store is refused (:class:`localstore.errors.StoreDirectoryError`) unless
    ``create=True`` says to make the store there (see :mod:`localstore.files.store_directory`).
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
        **geometry: Any,
    ) -> None:
        check_store_directory(Path(root), create=create)
        options = options or BrokerOptions()
        if store_options is not None:
            options.store = store_options
        if geometry:
            options.geometry = {**options.geometry, **geometry}
        self.service = BrokerService(root, options)
        self.root = self.service.root

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
        self.service.close()

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
