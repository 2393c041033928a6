"""The store directory of the ``path`` option, opened read-only (see
:class:`localstore.read_only.ReadOnlyStore`: no lock, no recovery, nothing created or deleted,
only complete records served): by the batch planner, the stream planner and every task."""

from __future__ import annotations

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
