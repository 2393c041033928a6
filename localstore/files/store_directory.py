"""The store's root directory: making it, and telling a store directory from any other.

A store directory (layout in :mod:`localstore.store`) is recognised by any entry that only a
store, its broker or a RocketMQ broker makes there (:func:`store_marks_in`): ``lock``,
``abort``, ``checkpoint``, ``commitlog/``, ``consumequeue/``, Quiver's ``timeindex/``,
``offsetindex/`` and ``quiver-tmp/``, one of the broker's files under ``config/`` (or its
``.bak``), or an ``index/`` holding nothing but key index files (17-digit names). So a store
reduced to its offsets or its aborted-run marker is still one. Entries any new directory may
hold (``lost+found`` of a freshly made file system, dotfiles such as ``.DS_Store`` or
``.gitkeep``) are ignored. A directory holding nothing else, or missing, is where a new store
may be made; any other directory holds something else, and a store is made there only when
asked in so many words.
"""

from __future__ import annotations

from pathlib import Path

from localstore.errors import StoreDirectoryError

STORE_MARKS = (
    "lock",
    "abort",
    "checkpoint",
    "commitlog",
    "consumequeue",
    "timeindex",
    "offsetindex",
    "quiver-tmp",
)
# The files a store or its broker keeps under config/ (RocketMQ's names, and Quiver's own).
CONFIG_FILES = (
    "store.json",
    "topics.json",
    "consumerOffset.json",
    "delayOffset.json",
    "quiverConsumerGroups.json",
)
INDEX_DIRECTORY = "index"
_INDEX_FILE_NAME_DIGITS = 17  # yyyyMMddHHmmssSSS
_IGNORED = ("lost+found",)  # besides dotfiles


def make_store_directory(root: Path) -> None:
    """Create ``root`` (and its parents) unless it is a directory already;
    :class:`StoreDirectoryError` when it is a file or cannot be created."""
    if root.exists() and not root.is_dir():
        raise StoreDirectoryError(root, "is a file, not a directory")
    try:
        root.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise StoreDirectoryError(root, f"cannot be created: {exc}") from exc


def is_ignored(name: str) -> bool:
    """Whether a root entry says nothing about what the directory holds: ``lost+found`` or a
    dotfile."""
    return name.startswith(".") or name in _IGNORED


def _is_key_index(directory: Path) -> bool:
    """``directory`` holds only key index files (or nothing)."""
    return directory.is_dir() and all(
        len(entry.name) == _INDEX_FILE_NAME_DIGITS and entry.name.isdigit()
        for entry in directory.iterdir()
    )


def store_marks_in(root: Path) -> list[str]:
    """The entries of ``root`` that mark it as a store (see the module docstring)."""
    marks = [mark for mark in STORE_MARKS if (root / mark).exists()]
    config = root / "config"
    for name in CONFIG_FILES:
        marks += [f"config/{n}" for n in (name, name + ".bak") if (config / n).is_file()]
    if _is_key_index(root / INDEX_DIRECTORY):
        marks.append(INDEX_DIRECTORY + "/")
    return marks


def holds_a_store(root: Path) -> bool:
    """Whether ``root`` holds a store (or what is left of one)."""
    return bool(store_marks_in(root))


def check_store_directory(root: Path, *, create: bool) -> None:
    """Refuse (:class:`StoreDirectoryError`) a root that is a file, or a directory that holds
    something besides ignored entries and no store, unless ``create`` says to make one there."""
    if not root.exists() or create:
        return
    if not root.is_dir():
        raise StoreDirectoryError(root, "is a file, not a directory")
    entries = sorted(entry.name for entry in root.iterdir() if not is_ignored(entry.name))
    if entries and not holds_a_store(root):
        shown = ", ".join(entries[:5]) + (", ..." if len(entries) > 5 else "")
        raise StoreDirectoryError(
            root,
            f"holds {shown} but no store (none of {', '.join(STORE_MARKS)}, "
            f"config/{{{','.join(CONFIG_FILES)}}} or an {INDEX_DIRECTORY}/ of key index "
            "files); pass create=True to make a store there",
        )
