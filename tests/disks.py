"""Real full disks for the fault tests: a small tmpfs, mounted for one test (root only, as in
CI; a test that needs one is skipped otherwise), and a file that fills it."""

from __future__ import annotations

import contextlib
import errno
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest


@contextlib.contextmanager
def small_tmpfs(directory: Path, size: str) -> Iterator[Path]:
    """A tmpfs of ``size`` ("2m") mounted at ``directory`` (created) for the block."""
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    directory.mkdir()
    subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(directory)], check=True
    )
    try:
        yield directory
    finally:
        subprocess.run(["umount", "-l", str(directory)], check=True)


def fill(path: Path) -> None:
    """Write ``path`` until its disk is full (ENOSPC)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        while True:
            os.write(fd, bytes(64 * 1024))
    except OSError as exc:
        if exc.errno != errno.ENOSPC:
            raise
    finally:
        os.close(fd)
