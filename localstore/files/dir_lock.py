"""The store directory's lock: ``{root}/lock`` (RocketMQ's lock file), held with flock.

flock conflicts between two opens even within one process, so a second store instance on the
same directory fails too; the holder writes its pid into the file so the error can name it.
A read-only view (:mod:`localstore.read_only`) takes no lock: it neither waits for nor
disturbs the holder.
"""

from __future__ import annotations

import os
from pathlib import Path

import filelock

from localstore.errors import StoreLockedError


def acquire_directory_lock(root: Path) -> filelock.BaseFileLock:
    """flock ``{root}/lock`` (RocketMQ's lock file) and write our pid into it.

    flock conflicts between two opens even within one process, so a second store instance on
    the same directory fails here too.
    """
    path = root / "lock"
    lock = filelock.FileLock(
        path,
        timeout=0,
        thread_local=False,
        is_singleton=False,
        preserve_lock_file=True,
        fallback_to_soft=False,
    )
    try:
        lock.acquire()
    except filelock.Timeout:
        raise StoreLockedError(root, _read_pid(path)) from None
    with open(path, "r+b") as handle:
        handle.write(str(os.getpid()).encode())
        handle.truncate()
    return lock


def _read_pid(path: Path) -> int | None:
    try:
        text = path.read_text().strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None
