"""Deleted files whose mappings are closed only once no reader can still be using them.

A file that retention (:mod:`localstore.retention`) or the key index deletes is unlinked at once
(its inode lives on while mapped) and kept here with the function that closes its mapping. The
mapping is closed after a grace period: a reader or the flush thread that picked the file up just
before may still be using its memoryview, and releasing that view under it would make the read
fail. ``mmap.close`` raises BufferError while a slice of the mapping is still exported: such a
file stays retired and is retried at the next reap; nothing is closed forcibly. Disk space comes
back when the last mapping closes.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

DEFAULT_CLOSE_GRACE_S = 10.0


class RetiredFiles:
    """Deleted files whose mappings are closed once no reader can still be using them.

    ``grace_s`` is how long after retirement a file stays mapped (0: close at the first
    :meth:`reap`). A close that could not unmap (it raises BufferError or, as
    :meth:`MappedFile.close`, answers False: a slice of the mapping is still exported) is
    retried by the next reap. Not thread-safe: one cleaner calls it (under the put lock).
    """

    def __init__(
        self, grace_s: float = DEFAULT_CLOSE_GRACE_S, clock: Callable[[], float] = time.monotonic
    ):
        self.grace_s = grace_s
        self._clock = clock
        self._pending: list[tuple[float, Path, Callable[[], object]]] = []

    def __len__(self) -> int:
        return len(self._pending)

    @property
    def paths(self) -> list[Path]:
        return [path for _, path, _ in self._pending]

    def retire(self, path: Path, close: Callable[[], object]) -> None:
        """Unlink ``path`` now; ``close`` releases its mapping later."""
        path.unlink(missing_ok=True)
        self._pending.append((self._clock(), path, close))

    def reap(self, *, force: bool = False) -> int:
        """Close what is past its grace period (``force``: everything); returns how many are
        still open."""
        now = self._clock()
        still: list[tuple[float, Path, Callable[[], object]]] = []
        for entry in self._pending:
            retired_at, _, close = entry
            if not force and now - retired_at < self.grace_s:
                still.append(entry)
                continue
            try:
                unmapped = close()
            except BufferError:
                unmapped = False
            if unmapped is False:  # a reader holds a slice still (a MappedFile says so)
                still.append(entry)
        self._pending = still
        return len(still)

    def close(self) -> list[Path]:
        """At store close: close every mapping that can be; returns the paths that could not
        (someone still holds a slice of them; they close when it is garbage-collected)."""
        self.reap(force=True)
        return self.paths
