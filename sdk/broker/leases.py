"""Queue leases: at most one member of a consumer group consumes a queue at any time.

RocketMQ's concurrent consumers take no lock, so during a rebalance two members may briefly pull
the same queue (duplicates); only orderly consumers lock queues (``lockBatchMQ``, 30 s). Quiver
leases every queue a clustering member consumes, the same way for both kinds of listener:

* :meth:`QueueLeases.acquire` grants a queue that is free, already the caller's (a renewal), or
  whose owner's lease ran out; it refuses a queue another live owner holds.
* An owner renews its leases well before they expire (every 20 s for a 30 s lease) and gives a
  queue back with :meth:`QueueLeases.release` only after its last in-flight message finished and
  its offset was committed, so the next owner starts exactly where it stopped.
* A member that leaves the group loses its leases at once (:meth:`QueueLeases.release_member`);
  a member that dies keeps them until they expire, then its queues are free.

Invariant: for each (group, queue) there is at most one owner whose lease has not expired, so two
members that both honour their leases never consume one queue at the same time. Times are the
broker's monotonic clock (the :class:`~sdk.clock.Clock` it is given) in ms.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from dataclasses import dataclass

from offsetstore import MessageQueue
from sdk.clock import SYSTEM_CLOCK, Clock

__all__ = ["DEFAULT_LEASE_MS", "QueueLeases"]

DEFAULT_LEASE_MS = 30_000  # RocketMQ's lock max live time (renewed every 20 s)


@dataclass(slots=True)
class _Lease:
    owner: str
    expires_ms: int


class QueueLeases:
    """The queue leases of every consumer group (thread-safe)."""

    def __init__(self, lease_ms: int = DEFAULT_LEASE_MS, clock: Clock = SYSTEM_CLOCK) -> None:
        self.lease_ms = lease_ms
        self._clock = clock
        self._lock = threading.Lock()
        self._leases: dict[tuple[str, MessageQueue], _Lease] = {}

    def acquire(
        self, group: str, client_id: str, queues: Iterable[MessageQueue]
    ) -> set[MessageQueue]:
        """Grant or renew leases on ``queues``; answers the queues ``client_id`` now holds
        among them (those held by another live owner are refused)."""
        now = self._now_ms()
        expires = now + self.lease_ms
        granted: set[MessageQueue] = set()
        with self._lock:
            for queue in queues:
                key = (group, queue)
                lease = self._leases.get(key)
                if lease is None or lease.owner == client_id or lease.expires_ms <= now:
                    self._leases[key] = _Lease(client_id, expires)
                    granted.add(queue)
        return granted

    def release(self, group: str, client_id: str, queues: Iterable[MessageQueue]) -> int:
        """Give back the caller's leases on ``queues``; answers how many it held."""
        released = 0
        with self._lock:
            for queue in queues:
                key = (group, queue)
                lease = self._leases.get(key)
                if lease is not None and lease.owner == client_id:
                    del self._leases[key]
                    released += 1
        return released

    def release_member(self, group: str, client_id: str) -> int:
        """Drop every lease of a member that left the group."""
        with self._lock:
            mine = [
                k for k, lease in self._leases.items() if k[0] == group and lease.owner == client_id
            ]
            for key in mine:
                del self._leases[key]
        return len(mine)

    def owners(self, group: str) -> dict[MessageQueue, str]:
        """The live lease of every queue of ``group``: ``{queue: owner}``."""
        now = self._now_ms()
        with self._lock:
            return {
                queue: lease.owner
                for (g, queue), lease in self._leases.items()
                if g == group and lease.expires_ms > now
            }

    def _now_ms(self) -> int:
        return round(self._clock.monotonic() * 1000)
