"""A fault-injecting layer over the OS calls the store makes.

:class:`OsFaults` wraps the calls through which the store gets files, blocks, mappings and
durability (``os.open``, ``os.ftruncate``, ``os.posix_fallocate``, ``os.pwrite``, ``os.pwritev``,
``os.fdatasync``, ``os.fsync``, ``os.replace``, ``os.mkdir``, ``mmap.mmap``). While armed it
counts the calls the arming thread makes (``all_threads``: every thread's) and makes the one at
position ``fail_at`` raise ``OSError(errno)`` instead of reaching the kernel, as a full disk
(ENOSPC), a process out of file descriptors (EMFILE) or a failing device (EIO) would. Every other
call goes through unchanged. Running an operation once with ``fail_at=None`` tells how many calls
it makes, so a test can fail each of them in turn.
"""

from __future__ import annotations

import errno as errno_codes
import mmap
import os
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest

WRAPPED: tuple[tuple[Any, str], ...] = (
    (os, "open"),
    (os, "ftruncate"),
    (os, "posix_fallocate"),
    (os, "pwrite"),
    (os, "pwritev"),
    (os, "fdatasync"),
    (os, "fsync"),
    (os, "replace"),
    (os, "mkdir"),
    (mmap, "mmap"),
)
ERRNOS = (errno_codes.ENOSPC, errno_codes.EMFILE, errno_codes.EIO)


class OsFaults:
    """Counts the wrapped OS calls while armed and fails the ``fail_at``-th (0-based)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch):
        self._lock = threading.Lock()
        self._armed_thread: int | None = None
        self._all_threads = False
        self.calls = 0
        self.fail_at: int | None = None
        self.errno = errno_codes.ENOSPC
        self.only: str | None = None
        self.under: str | None = None
        self.repeat = False
        self.failed: list[str] = []  # the names of the calls made to fail
        self.seen: list[str] = []  # the names of the calls counted, in order
        for module, name in WRAPPED:
            monkeypatch.setattr(module, name, self._wrap(name, getattr(module, name)))

    def _wrap(self, name: str, real: Callable[..., Any]) -> Callable[..., Any]:
        def call(*args: Any, **kwargs: Any) -> Any:
            if self._counts_this_thread() and self._selects(name, args):
                with self._lock:
                    position = self.calls
                    self.calls += 1
                    self.seen.append(name)
                fail_at = self.fail_at
                if fail_at is not None and (
                    position == fail_at or (self.repeat and position > fail_at)
                ):
                    self.failed.append(name)
                    raise OSError(self.errno, f"{os.strerror(self.errno)} (injected in {name})")
            return real(*args, **kwargs)

        return call

    def _selects(self, name: str, args: tuple[Any, ...]) -> bool:
        if self.only is not None and name != self.only:
            return False
        if self.under is None:
            return True
        return (
            bool(args)
            and isinstance(args[0], (str, os.PathLike))
            and (self.under in os.fspath(args[0]))
        )

    def _counts_this_thread(self) -> bool:
        armed = self._armed_thread
        if armed is None:
            return False
        return self._all_threads or threading.get_ident() == armed

    @contextmanager
    def armed(
        self,
        fail_at: int | None,
        errno: int = errno_codes.ENOSPC,
        *,
        all_threads: bool = False,
        only: str | None = None,
        under: str | None = None,
        repeat: bool = False,
    ) -> Iterator[OsFaults]:
        """Count (and fail the ``fail_at``-th of) the calls made inside the block; ``only``:
        count only the calls of that name (``"posix_fallocate"``, ``"open"``, ...); ``under``:
        only the calls whose first argument is a path holding that text (``"/index/"``);
        ``repeat``: every call from the ``fail_at``-th on fails, as on a disk that stays full."""
        self.calls, self.fail_at, self.errno, self.failed, self.seen = 0, fail_at, errno, [], []
        self.only, self.under, self.repeat = only, under, repeat
        self._all_threads = all_threads
        self._armed_thread = threading.get_ident()
        try:
            yield self
        finally:
            self._armed_thread = None

    @property
    def fired(self) -> bool:
        return bool(self.failed)
