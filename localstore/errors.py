"""The store's exceptions: one tree under :class:`StoreError`, itself under the root of every
Quiver error, :class:`quiver_errors.QuiverError`.

Expected outcomes (a rejected message, an offset past the end) are statuses on the results, not
exceptions; these are for a store that cannot be opened or used as asked.
"""

from __future__ import annotations

from pathlib import Path

from quiver_errors import InvalidArgumentError, QuiverError


class StoreError(QuiverError):
    """Base class of every localstore error (a :class:`~quiver_errors.QuiverError`)."""


class StoreLockedError(StoreError):
    """The store directory is open in another store instance (this process or another)."""

    def __init__(self, directory: Path, holder_pid: int | None):
        self.directory = directory
        self.holder_pid = holder_pid
        holder = f"process {holder_pid}" if holder_pid else "another process"
        super().__init__(f"store {directory} is already open by {holder}")


class StoreDirectoryError(StoreError):
    """The store's root cannot hold a store: it is a file, it cannot be created, or (for
    ``EmbeddedBroker`` without ``create=True``) it is a non-empty directory that holds no
    store. ``directory`` is the root, ``problem`` says which."""

    def __init__(self, directory: Path, problem: str):
        self.directory = directory
        self.problem = problem
        super().__init__(f"store directory {directory}: {problem}")


class GeometryMismatchError(StoreError):
    """A store was opened with a geometry that contradicts the one recorded when it was created."""


class GeometryError(StoreError, InvalidArgumentError):
    """A geometry value the store's format cannot hold, or one that makes no sense (a segment too
    small for the largest message): the message names the field, the value and the allowed
    range, on one line. Also an :class:`~quiver_errors.InvalidArgumentError` (so a
    :class:`ValueError`), as a bad argument is."""


class CorruptStoreError(StoreError):
    """Files of the store are damaged in a way the store will not guess its way around."""


class StoreClosedError(StoreError):
    """The store was used after ``close()``."""


class IndexProcessError(StoreError):
    """The key-index process (``StoreOptions.index_process``) could not start or answer: it
    stopped indexing on a record it could not read, it exited, or a request to it was cut
    short. Reopening the store rebuilds what the index lacks."""


class DamagedRecordError(CorruptStoreError):
    """A read met a record it cannot hand out: its bytes do not decode, it is not the record its
    consume-queue unit points at, or (``StoreOptions.check_crc_on_read``) its body fails its CRC.

    Names where it is: ``topic``, ``queue_id``, ``queue_offset`` (of the unit), ``phys_offset``
    (the commitlog offset the unit points at) and ``reason``. A unit that points at another
    record is rebuilt from the log before a get reports it; ``reason`` says why it could not
    be when it could not. A reader steps over it by going on from ``queue_offset + 1``; the
    record stays on disk (``quiver store verify`` lists it, ``--repair`` rebuilds units).
    """

    def __init__(self, topic: str, queue_id: int, queue_offset: int, phys_offset: int, reason: str):
        self.topic = topic
        self.queue_id = queue_id
        self.queue_offset = queue_offset
        self.phys_offset = phys_offset
        self.reason = reason
        super().__init__(
            f"damaged record: {topic}/{queue_id} queue offset {queue_offset}, commitlog offset "
            f"{phys_offset}: {reason}; `quiver store verify` lists every problem"
        )


class SegmentUnavailableError(StoreError, OSError):
    """A segment file could not be opened or mapped when first touched (it was deleted by
    retention meanwhile, or the process is out of file descriptors or mappings). Also an
    ``OSError`` (with its errno and the file's name), so the put path answers it with a
    status as it does any other resource error."""
