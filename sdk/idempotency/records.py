"""The dedup record model shared by every backend: states, claim outcomes, the store protocol,
the received-message protocol and the key functions.

A dedup record is ``(key, state, expires_at_ms, owner)``:

- ``CONSUMING``: a consumer (``owner``, one token per listener call) claimed the message and is
  processing it; ``expires_at_ms`` is the end of its lease. A consumer that crashes never releases
  its claim, so once the lease is over the next claimer takes the message over.
- ``CONSUMED``: the message's effect is done; the record is kept until ``expires_at_ms`` (the TTL)
  so re-deliveries within the TTL are recognised as duplicates.

Invariants every backend keeps:

- A record whose ``expires_at_ms <= now`` is treated exactly as an absent one (claimable); purging
  it is an optimisation only, never needed for correctness.
- ``claim`` is atomic per key: of several concurrent claimers of an absent or expired key, exactly
  one gets ``CLAIMED`` / ``TAKEN_OVER``; the others see ``IN_PROGRESS`` (or ``DUPLICATE`` once it
  is consumed).
- ``release`` deletes only ``CONSUMING`` records still held by the given owner, so a consumer whose
  lease ran out never deletes the claim of the consumer that took over.
- ``mark_consumed`` always writes ``CONSUMED``: the effect has happened, whoever holds the lease.

Times are wall-clock milliseconds since the epoch (shared by processes on one machine); clocks are
injectable (:data:`Clock`) so tests move time without sleeping.
"""

from __future__ import annotations

import enum
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from sdk.message import ConsumeResult  # re-exported here for the listener wrappers

__all__ = [
    "ClaimStatus",
    "Clock",
    "ConsumeResult",
    "DedupRecord",
    "DedupState",
    "DedupStore",
    "KeyFunction",
    "ReceivedMessage",
    "first_key",
    "property_key",
    "uniq_key",
    "wall_clock_ms",
]

Clock = Callable[[], int]
"""A clock answering wall-clock milliseconds since the epoch."""


def wall_clock_ms() -> int:
    """The default :data:`Clock`: ``time.time()`` in whole milliseconds."""
    return time.time_ns() // 1_000_000


class DedupState(enum.StrEnum):
    """The state stored in a dedup record."""

    CONSUMING = "CONSUMING"
    CONSUMED = "CONSUMED"


class ClaimStatus(enum.Enum):
    """The outcome of claiming one key."""

    CLAIMED = "claimed"
    """No live record: a ``CONSUMING`` record with a fresh lease now belongs to the claimer."""
    TAKEN_OVER = "taken_over"
    """A ``CONSUMING`` record whose lease had expired (a crashed consumer) now belongs to the
    claimer."""
    IN_PROGRESS = "in_progress"
    """A ``CONSUMING`` record with a live lease: another consumer is processing it."""
    DUPLICATE = "duplicate"
    """A live ``CONSUMED`` record: the message was already processed."""

    @property
    def owned(self) -> bool:
        """True when the claimer now holds the record (``CLAIMED`` or ``TAKEN_OVER``)."""
        return self in (ClaimStatus.CLAIMED, ClaimStatus.TAKEN_OVER)


@dataclass(frozen=True, slots=True)
class DedupRecord:
    """One stored dedup record."""

    key: str
    state: DedupState
    expires_at_ms: int
    owner: str

    def live(self, now_ms: int) -> bool:
        """True while the lease (``CONSUMING``) or the TTL (``CONSUMED``) runs."""
        return self.expires_at_ms > now_ms


def decide_claim(record: DedupRecord | None, now_ms: int) -> ClaimStatus:
    """The claim outcome for a key whose current record is ``record`` (shared by backends)."""
    if record is None or (not record.live(now_ms) and record.state is DedupState.CONSUMED):
        return ClaimStatus.CLAIMED
    if not record.live(now_ms):
        return ClaimStatus.TAKEN_OVER
    if record.state is DedupState.CONSUMED:
        return ClaimStatus.DUPLICATE
    return ClaimStatus.IN_PROGRESS


class DedupStore(Protocol):
    """Where dedup records live. Implementations: :class:`~sdk.idempotency.memory.MemoryDedupStore`
    (one process) and :class:`~sdk.idempotency.sqlite.SqliteDedupStore` (many processes)."""

    def claim(self, keys: Sequence[str], *, owner: str, lease_s: float) -> dict[str, ClaimStatus]:
        """Claim each of ``keys`` for ``owner`` with a lease of ``lease_s`` seconds, atomically per
        key; answer each key's outcome. Owned keys are ``CONSUMING`` until ``now + lease_s``."""
        ...

    def mark_consumed(self, keys: Sequence[str], *, ttl_s: float) -> None:
        """Record ``keys`` as ``CONSUMED`` until ``now + ttl_s``."""
        ...

    def release(self, keys: Sequence[str], *, owner: str) -> None:
        """Delete the ``CONSUMING`` records of ``keys`` that ``owner`` still holds."""
        ...

    def get(self, key: str) -> DedupRecord | None:
        """The stored record of ``key``, expired or not; ``None`` when there is none."""
        ...

    def purge_expired(self) -> int:
        """Delete every expired record; answer how many were deleted."""
        ...

    def close(self) -> None:
        """Release the store's resources."""
        ...


@runtime_checkable
class ReceivedMessage(Protocol):
    """What the idempotency helpers need of a received message (:class:`sdk.ReceivedMessage`
    has it)."""

    @property
    def msg_id(self) -> str | None:
        """The producer-side id, the ``UNIQ_KEY`` property."""
        ...

    @property
    def keys(self) -> Sequence[str]:
        """The message's keys (the ``KEYS`` property, split)."""
        ...

    @property
    def topic(self) -> str:
        """The message's topic."""
        ...

    @property
    def properties(self) -> Mapping[str, str]:
        """The user's properties."""
        ...


KeyFunction = Callable[[ReceivedMessage], str | None]
"""Maps a message to its dedup key; ``None`` means "no key: process without deduplication"."""


def uniq_key(message: ReceivedMessage) -> str | None:
    """The default key: the message's ``UNIQ_KEY`` (the same for every re-delivery and for a
    producer's retried send)."""
    return message.msg_id


def first_key(message: ReceivedMessage) -> str | None:
    """A business key: the first of the message's ``KEYS`` (for example an order id)."""
    return message.keys[0] if message.keys else None


def property_key(name: str) -> KeyFunction:
    """A business key read from the user property ``name``."""

    def key(message: ReceivedMessage) -> str | None:
        return message.properties.get(name)

    key.__name__ = f"property_key({name!r})"
    return key
