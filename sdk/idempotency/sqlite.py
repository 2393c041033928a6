"""A SQLite dedup store (stdlib ``sqlite3``): durable, and safe across threads and processes.

Layout: one table, by default ``quiver_dedup``::

    key TEXT PRIMARY KEY, state TEXT ('CONSUMING' | 'CONSUMED'), expires_at_ms INTEGER,
    owner TEXT (the claim token of the listener call holding a CONSUMING record)

Invariants:

- The database runs in WAL mode with ``busy_timeout`` set, so readers never block the writer and a
  writer waits (up to ``busy_timeout_s``) for another process's write instead of failing.
- Every write runs inside ``BEGIN IMMEDIATE``: the write lock is taken before the first read, so a
  claim's read-decide-write is atomic across processes and two processes never both own a key.
  A claim is one conditional upsert per key (``INSERT ... ON CONFLICT DO UPDATE ... WHERE`` the
  existing record has expired).
- ``synchronous=FULL`` by default: a committed ``CONSUMED`` record survives power loss, so an
  offset committed after it never points past a lost record.
- :meth:`SqliteDedupStore.transaction` hands the same connection to application code, so a
  business write and the dedup record commit in one transaction (exactly-once effect when the
  business data lives in the same database file).
- One connection per store object, shared by threads under a re-entrant lock; store methods
  called inside :meth:`~SqliteDedupStore.transaction` (same thread) join that transaction.
"""

from __future__ import annotations

import os
import re
import sqlite3
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Literal

from sdk.errors import InvalidArgumentError
from sdk.idempotency.records import (
    ClaimStatus,
    Clock,
    DedupRecord,
    DedupState,
    decide_claim,
    wall_clock_ms,
)

__all__ = ["SqliteDedupStore"]

_TABLE_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


class SqliteDedupStore:
    """A :class:`~sdk.idempotency.records.DedupStore` in a SQLite database file.

    Several store objects, in one process or many, may open the same file.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        table: str = "quiver_dedup",
        clock: Clock = wall_clock_ms,
        busy_timeout_s: float = 30.0,
        purge_interval_s: float = 60.0,
        synchronous: Literal["OFF", "NORMAL", "FULL", "EXTRA"] = "FULL",
    ) -> None:
        if not _TABLE_NAME.match(table):
            raise InvalidArgumentError(f"not a plain SQL identifier: {table!r}")
        self.path = os.fspath(path)
        self._table = table
        self._clock = clock
        self._purge_interval_ms = int(purge_interval_s * 1000)
        self._next_purge_ms = clock() + self._purge_interval_ms
        self._lock = threading.RLock()
        self._conn = sqlite3.connect(
            self.path, timeout=busy_timeout_s, isolation_level=None, check_same_thread=False
        )
        try:
            self._setup(int(busy_timeout_s * 1000), synchronous)
        except BaseException:
            self._conn.close()
            raise

    def _setup(self, busy_timeout_ms: int, synchronous: str) -> None:
        conn = self._conn
        conn.execute(f"PRAGMA busy_timeout = {busy_timeout_ms}")
        conn.execute("PRAGMA journal_mode = WAL")
        conn.execute(f"PRAGMA synchronous = {synchronous}")
        with self._write():
            conn.execute(
                f"CREATE TABLE IF NOT EXISTS {self._table} ("
                " key TEXT PRIMARY KEY NOT NULL,"
                " state TEXT NOT NULL CHECK (state IN ('CONSUMING', 'CONSUMED')),"
                " expires_at_ms INTEGER NOT NULL,"
                " owner TEXT NOT NULL DEFAULT ''"
                ") WITHOUT ROWID"
            )

    @property
    def table(self) -> str:
        """The name of the dedup table."""
        return self._table

    @contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        """A ``BEGIN IMMEDIATE`` transaction, or the caller's when one is already open."""
        with self._lock:
            if self._conn.in_transaction:
                yield self._conn
                return
            self._conn.execute("BEGIN IMMEDIATE")
            try:
                yield self._conn
            except BaseException:
                self._conn.execute("ROLLBACK")
                raise
            self._conn.execute("COMMIT")

    @contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        """A ``BEGIN IMMEDIATE`` transaction on the store's connection, committed when the block
        ends, rolled back when it raises. Business writes made on the yielded connection commit
        together with the dedup records written by the store inside the block."""
        with self._write() as conn:
            yield conn

    def claim(self, keys: Sequence[str], *, owner: str, lease_s: float) -> dict[str, ClaimStatus]:
        """Claim ``keys`` for ``owner`` in one transaction (see :meth:`DedupStore.claim`)."""
        outcome: dict[str, ClaimStatus] = {}
        with self._write() as conn:
            now = self._clock()
            if now >= self._next_purge_ms:
                self._purge(conn, now)
            expires = now + int(lease_s * 1000)
            for key in keys:
                status = decide_claim(self._select(conn, key), now)
                if status.owned:
                    taken = conn.execute(
                        f"INSERT INTO {self._table} (key, state, expires_at_ms, owner)"
                        " VALUES (?, 'CONSUMING', ?, ?)"
                        " ON CONFLICT (key) DO UPDATE SET state = 'CONSUMING',"
                        " expires_at_ms = excluded.expires_at_ms, owner = excluded.owner"
                        f" WHERE {self._table}.expires_at_ms <= ?",
                        (key, expires, owner, now),
                    ).rowcount
                    # The write lock is held since BEGIN IMMEDIATE, so the row read above is
                    # the row the upsert saw.
                    assert taken == 1, f"claim of {key!r} lost a race it cannot lose"
                outcome[key] = status
        return outcome

    def mark_consumed(self, keys: Sequence[str], *, ttl_s: float) -> None:
        """Record ``keys`` as consumed for ``ttl_s`` seconds (joins an open transaction)."""
        with self._write() as conn:
            expires = self._clock() + int(ttl_s * 1000)
            conn.executemany(
                f"INSERT INTO {self._table} (key, state, expires_at_ms) VALUES (?, 'CONSUMED', ?)"
                " ON CONFLICT (key) DO UPDATE SET state = 'CONSUMED',"
                " expires_at_ms = excluded.expires_at_ms",
                [(key, expires) for key in keys],
            )

    def release(self, keys: Sequence[str], *, owner: str) -> None:
        """Delete the ``CONSUMING`` records of ``keys`` that ``owner`` holds."""
        with self._write() as conn:
            conn.executemany(
                f"DELETE FROM {self._table} WHERE key = ? AND state = 'CONSUMING' AND owner = ?",
                [(key, owner) for key in keys],
            )

    def get(self, key: str) -> DedupRecord | None:
        """The stored record of ``key`` (expired or not), or ``None``."""
        with self._lock:
            return self._select(self._conn, key)

    def purge_expired(self) -> int:
        """Delete every expired record; answer how many."""
        with self._write() as conn:
            return self._purge(conn, self._clock())

    def close(self) -> None:
        """Close the connection (idempotent)."""
        with self._lock:
            self._conn.close()

    def __enter__(self) -> SqliteDedupStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _select(self, conn: sqlite3.Connection, key: str) -> DedupRecord | None:
        row = conn.execute(
            f"SELECT state, expires_at_ms, owner FROM {self._table} WHERE key = ?", (key,)
        ).fetchone()
        if row is None:
            return None
        return DedupRecord(key, DedupState(row[0]), int(row[1]), str(row[2]))

    def _purge(self, conn: sqlite3.Connection, now_ms: int) -> int:
        self._next_purge_ms = now_ms + self._purge_interval_ms
        deleted = conn.execute(
            f"DELETE FROM {self._table} WHERE expires_at_ms <= ?", (now_ms,)
        ).rowcount
        return int(deleted)
