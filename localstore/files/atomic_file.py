"""Crash-safe replacement of small files: write a temp file, fsync it, keep the previous version
as ``.bak``, rename the temp file over the original, fsync the directory. A reader therefore
always finds either the old or the new content whole, never a torn mix."""

from __future__ import annotations

import os
import shutil
from pathlib import Path


def write_atomically(path: Path, data: bytes, *, keep_backup: bool = True) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as handle:
        handle.write(data)
        handle.flush()
        os.fsync(handle.fileno())
    if keep_backup and path.exists():
        shutil.copyfile(path, path.with_name(path.name + ".bak"))
    os.replace(tmp, path)
    fsync_directory(path.parent)


def fsync_directory(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
