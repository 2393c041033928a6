"""The key index as both put paths feed it, and why it stopped taking keys.

The general path (:mod:`localstore.put.path`) and the single put's fast path
(:mod:`localstore.put.single`) note a stored put's keys through one shared :class:`KeyIndexFeed`,
so that a swap of the store's key index (``MessageStore.index = ...``) or a stop reaches both at
once. Invariant: ``index`` is None once ``error`` is set. A stop happens when the key index could
not take a stored put's keys (a full disk, or no file descriptor for a new index file): the put
stands (the commitlog and its consume queue hold it); the key index, a derived file, takes no
more keys, queries say why, and the next open catches it up from the commitlog.

Thread safety: read and changed under the store's put lock.
"""

from __future__ import annotations

import logging
from pathlib import Path

from localstore.commitlog.log import CommitLog
from localstore.index.service import KeyIndex

log = logging.getLogger(__name__)


class KeyIndexFeed:
    """The key index the puts of one store feed (None: none is kept, or it stopped)."""

    __slots__ = ("_commitlog", "_root", "error", "index")

    def __init__(self, index: KeyIndex | None, *, root: Path, commitlog: CommitLog):
        self.index = index
        self.error: OSError | None = None  # why the key index stopped (:meth:`stop`)
        self._root = root
        self._commitlog = commitlog  # for the offset a stop is logged at

    def stop(self, error: OSError) -> None:
        """Under the put lock: the key index could not take a stored put's keys; it takes no
        more (see the module docstring)."""
        log.error(
            "the key index of %s stopped at commitlog offset %d (%s): queries fail until the "
            "store is reopened, which rebuilds what it lacks",
            self._root,
            self._commitlog.max_offset,
            error,
        )
        self.error = error
        self.index = None
