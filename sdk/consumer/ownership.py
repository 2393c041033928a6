"""Which queues a member may consume, honouring the broker's queue leases.

A rebalance gives a member the queues it *should* own (:func:`membership.assigned_queues`); this
module turns that into the queues it *may* consume, without ever overlapping another member
(clustering; see :mod:`sdk.broker.leases`):

* a queue that is no longer wanted enters *releasing*: the consumer stops pulling it and starts
  no new listener call on it; once its in-flight calls finished (or ``release_timeout_s`` passed)
  the consumer commits its offset and only then gives the lease back (:meth:`released`);
* a wanted queue is consumed only once the broker granted its lease; a refused one stays
  *pending* (its previous owner is still releasing it) and is asked for again at the next
  :meth:`update`, which the consumer runs as soon as the broker reports a lease change;
* every :meth:`update` renews the leases of the queues owned, releasing ones included (the
  consumer calls it at least every third of the lease); a queue whose lease was lost (it expired
  and another member took it) is reported so the consumer drops it at once, committing nothing.

Broadcasting consumers own every queue and take no lease.
"""

from __future__ import annotations

from collections.abc import Iterable

from offsetstore import MessageQueue
from sdk.clock import SYSTEM_CLOCK, Clock
from sdk.transport.steps import Call, Steps

__all__ = ["QueueOwnership"]


class QueueOwnership:
    """The owned, releasing and pending queues of one member. Changed by one sequence at a time
    (the push consumer's shell runs them under its control lock); read from any thread.
    :meth:`update` and :meth:`released` are steps (:mod:`sdk.transport.steps`)."""

    def __init__(
        self,
        group: str,
        client_id: str,
        *,
        leased: bool,
        release_timeout_s: float,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        self.clock = clock
        self.group = group
        self.client_id = client_id
        self.leased = leased
        self.release_timeout_s = release_timeout_s
        self.owned: set[MessageQueue] = set()
        self.releasing: dict[MessageQueue, float] = {}  # queue -> when its release began
        self.pending: set[MessageQueue] = set()

    @property
    def settling(self) -> bool:
        """Queues are being handed over (pending leases or releases in progress)."""
        return bool(self.pending or self.releasing)

    def update(
        self, wanted: Iterable[MessageQueue]
    ) -> Steps[tuple[set[MessageQueue], set[MessageQueue]]]:
        """Match ``wanted`` and renew every lease held (owned or still releasing): answers
        (queues to start consuming, queues whose lease was lost outright)."""
        wanted = set(wanted)
        now = self.clock.monotonic()
        for queue in self.owned - wanted:
            self.releasing.setdefault(queue, now)
        for queue in wanted & self.releasing.keys():  # given back to us before we let go
            del self.releasing[queue]
        if not self.leased:
            started = wanted - self.owned
            self.owned |= started
            self.pending.clear()
            return started, set()
        asked = wanted | self.owned
        granted: set[MessageQueue] = yield Call.of(
            "lock_queues", self.group, self.client_id, sorted(asked)
        )
        lost = self.owned - granted
        for queue in lost:
            self.releasing.pop(queue, None)
        started = (wanted & granted) - self.owned
        self.owned = (self.owned - lost) | started
        self.pending = wanted - granted
        return started, lost

    def release_timed_out(self, queue: MessageQueue) -> bool:
        """Whether a releasing queue waited ``release_timeout_s`` for its listeners."""
        since = self.releasing.get(queue)
        return since is not None and self.clock.monotonic() - since >= self.release_timeout_s

    def released(self, queues: Iterable[MessageQueue]) -> Steps[None]:
        """The queues' offsets are committed (or they were never taken): give their leases
        back, in one call."""
        queues = sorted(queues)
        for queue in queues:
            self.releasing.pop(queue, None)
            self.owned.discard(queue)
        if queues and self.leased:
            yield Call.of("unlock_queues", self.group, self.client_id, queues)

    def is_releasing(self, queue: MessageQueue) -> bool:
        return queue in self.releasing
