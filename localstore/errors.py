"""The store's exceptions: one tree under :class:`StoreError`.

Expected outcomes (a rejected message, an offset past the end) are statuses on the results, not
exceptions; these are for a store that cannot be opened or used as asked.
"""

from __future__ import annotations

from pathlib import Path


class StoreError(Exception):
    """Base class of every localstore error."""


class StoreLockedError(StoreError):
    """The store directory is open in another store instance (this process or another)."""

    def __init__(self, directory: Path, holder_pid: int | None):
        self.directory = directory
        self.holder_pid = holder_pid
        holder = f"process {holder_pid}" if holder_pid else "another process"
        super().__init__(f"store {directory} is already open by {holder}")


class GeometryMismatchError(StoreError):
    """A store was opened with a geometry that contradicts the one recorded when it was created."""


class CorruptStoreError(StoreError):
    """Files of the store are damaged in a way the store will not guess its way around."""


class StoreClosedError(StoreError):
    """The store was used after ``close()``."""


class IndexProcessError(StoreError):
    """The key-index process (``StoreOptions.index_process``) could not start or answer: it
    stopped indexing on a record it could not read, it exited, or a request to it was cut
    short. Reopening the store rebuilds what the index lacks."""


class SegmentUnavailableError(StoreError, OSError):
    """A segment file could not be opened or mapped when first touched (it was deleted by
    retention meanwhile, or the process is out of file descriptors or mappings). Also an
    ``OSError`` (with its errno and the file's name), so the put path answers it with a
    status as it does any other resource error."""
