"""The store's root directory: making it, and telling a store directory from any other.

A store directory (layout in :mod:`localstore.store`) is recognised by the entries that only a
store makes: ``lock`` (RocketMQ's and ours; the first file an opening store writes),
``checkpoint``, ``commitlog/``, ``consumequeue/`` or ``config/store.json``. A RocketMQ broker's
store has the first four, so one is recognised too. An empty or missing directory is where a new
store may be made; any other directory holds something else, and a store is made there only
when asked in so many words.
"""

from __future__ import annotations

from pathlib import Path

from localstore.errors import StoreDirectoryError

STORE_MARKS = ("lock", "checkpoint", "commitlog", "consumequeue", "config/store.json")


def make_store_directory(root: Path) -> None:
    """Create ``root`` (and its parents) unless it is a directory already;
    :class:`StoreDirectoryError` when it is a file or cannot be created."""
    if root.exists() and not root.is_dir():
        raise StoreDirectoryError(root, "is a file, not a directory")
    try:
        root.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise StoreDirectoryError(root, f"cannot be created: {exc}") from exc


def holds_a_store(root: Path) -> bool:
    """Whether ``root`` holds a store (or the start of one): any of :data:`STORE_MARKS`."""
    return any((root / mark).exists() for mark in STORE_MARKS)


def check_store_directory(root: Path, *, create: bool) -> None:
    """Refuse (:class:`StoreDirectoryError`) a root that is a file, or a non-empty directory
    that holds no store unless ``create`` says to make one there."""
    if not root.exists() or create:
        return
    if not root.is_dir():
        raise StoreDirectoryError(root, "is a file, not a directory")
    entries = sorted(entry.name for entry in root.iterdir())
    if entries and not holds_a_store(root):
        shown = ", ".join(entries[:5]) + (", ..." if len(entries) > 5 else "")
        raise StoreDirectoryError(
            root,
            f"is not empty ({shown}) and holds no store (none of {', '.join(STORE_MARKS)}); "
            "pass create=True to make a store there",
        )
