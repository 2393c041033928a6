"""An in-memory dedup store: one process, any number of threads.

Records live in a dict guarded by one lock, so every method is atomic. Nothing survives the
process: use it for tests, or when duplicates only matter within one process's lifetime. Expired
records are purged at most once per ``purge_interval_s`` during a claim, and on
:meth:`MemoryDedupStore.purge_expired`.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence

from sdk.idempotency.records import (
    ClaimStatus,
    Clock,
    DedupRecord,
    DedupState,
    decide_claim,
    wall_clock_ms,
)

__all__ = ["MemoryDedupStore"]


class MemoryDedupStore:
    """A :class:`~sdk.idempotency.records.DedupStore` held in a dict (thread-safe)."""

    def __init__(self, *, clock: Clock = wall_clock_ms, purge_interval_s: float = 60.0) -> None:
        self._clock = clock
        self._purge_interval_ms = int(purge_interval_s * 1000)
        self._records: dict[str, DedupRecord] = {}
        self._lock = threading.Lock()
        self._next_purge_ms = clock() + self._purge_interval_ms

    def claim(self, keys: Sequence[str], *, owner: str, lease_s: float) -> dict[str, ClaimStatus]:
        """Claim ``keys`` for ``owner`` (see :meth:`DedupStore.claim`)."""
        with self._lock:
            now = self._clock()
            if now >= self._next_purge_ms:
                self._purge(now)
            expires = now + int(lease_s * 1000)
            outcome: dict[str, ClaimStatus] = {}
            for key in keys:
                status = decide_claim(self._records.get(key), now)
                if status.owned:
                    self._records[key] = DedupRecord(key, DedupState.CONSUMING, expires, owner)
                outcome[key] = status
            return outcome

    def mark_consumed(self, keys: Sequence[str], *, ttl_s: float) -> None:
        """Record ``keys`` as consumed for ``ttl_s`` seconds."""
        with self._lock:
            expires = self._clock() + int(ttl_s * 1000)
            for key in keys:
                owner = record.owner if (record := self._records.get(key)) else ""
                self._records[key] = DedupRecord(key, DedupState.CONSUMED, expires, owner)

    def release(self, keys: Sequence[str], *, owner: str) -> None:
        """Delete the ``CONSUMING`` records of ``keys`` that ``owner`` holds."""
        with self._lock:
            for key in keys:
                record = self._records.get(key)
                if record and record.state is DedupState.CONSUMING and record.owner == owner:
                    del self._records[key]

    def get(self, key: str) -> DedupRecord | None:
        """The stored record of ``key`` (expired or not), or ``None``."""
        with self._lock:
            return self._records.get(key)

    def purge_expired(self) -> int:
        """Delete every expired record; answer how many."""
        with self._lock:
            return self._purge(self._clock())

    def close(self) -> None:
        """Drop every record."""
        with self._lock:
            self._records.clear()

    def __len__(self) -> int:
        with self._lock:
            return len(self._records)

    def _purge(self, now_ms: int) -> int:
        expired = [key for key, record in self._records.items() if not record.live(now_ms)]
        for key in expired:
            del self._records[key]
        self._next_purge_ms = now_ms + self._purge_interval_ms
        return len(expired)
