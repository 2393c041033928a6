"""Idempotent consumption: delivery is at-least-once, so give each message's effect a dedup key.

- :mod:`sdk.idempotency.records`: states (``CONSUMING`` with a lease, ``CONSUMED`` kept for a
  TTL), claim outcomes, the :class:`DedupStore` protocol, the message protocol and key functions
  (``UNIQ_KEY`` by default, or a business key).
- Backends: :class:`MemoryDedupStore` (one process) and :class:`SqliteDedupStore` (stdlib
  ``sqlite3`` in WAL mode, safe across processes).
- :func:`idempotent` wraps any listener, plain or ``async def``;
  :func:`idempotent_in_transaction` commits the listener's SQLite writes and the dedup records in
  one transaction (exactly-once effect).

Only the standard library is imported.
"""

from __future__ import annotations

from sdk.idempotency.listener import (
    DEFAULT_LEASE_S,
    DEFAULT_TTL_S,
    AsyncListener,
    Listener,
    SkipHook,
    TransactionalListener,
    idempotent,
    idempotent_in_transaction,
)
from sdk.idempotency.memory import MemoryDedupStore
from sdk.idempotency.records import (
    ClaimStatus,
    Clock,
    ConsumeResult,
    DedupRecord,
    DedupState,
    DedupStore,
    KeyFunction,
    ReceivedMessage,
    first_key,
    property_key,
    uniq_key,
    wall_clock_ms,
)
from sdk.idempotency.sqlite import SqliteDedupStore

__all__ = [
    "DEFAULT_LEASE_S",
    "DEFAULT_TTL_S",
    "AsyncListener",
    "ClaimStatus",
    "Clock",
    "ConsumeResult",
    "DedupRecord",
    "DedupState",
    "DedupStore",
    "KeyFunction",
    "Listener",
    "MemoryDedupStore",
    "ReceivedMessage",
    "SkipHook",
    "SqliteDedupStore",
    "TransactionalListener",
    "first_key",
    "idempotent",
    "idempotent_in_transaction",
    "property_key",
    "uniq_key",
    "wall_clock_ms",
]
