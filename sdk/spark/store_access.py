"""The store directory of the ``path`` option, opened read-only (see
:class:`localstore.read_only.ReadOnlyStore`: no lock, no recovery, nothing created or deleted,
only complete records served): by the batch planner, the stream planner and every task."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from localstore.errors import StoreDirectoryError
from localstore.read_only import ReadOnlyStore
from quiver_errors import InvalidArgumentError


def open_store(path: str) -> ReadOnlyStore:
    """The store at ``path`` opened read-only; :class:`InvalidArgumentError` naming the
    ``path`` option when there is none."""
    try:
        return ReadOnlyStore(path)
    except StoreDirectoryError as exc:
        raise InvalidArgumentError(f"path: {exc}") from exc


@dataclass(frozen=True)
class StoreBounds:
    """The queue bounds of the store at ``path`` for a streaming read
    (:class:`sdk.spark.stream.QueueBounds`): the store opened read-only at each look."""

    path: str

    def open(self) -> ReadOnlyStore:
        """The store, read-only (a context manager)."""
        return open_store(self.path)

    def commit(self, end: Mapping[str, int]) -> None:
        """Nothing to release: the checkpoint holds the offsets and the store is only read."""
