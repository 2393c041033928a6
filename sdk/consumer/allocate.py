"""Queue allocation strategies: which queues of a topic one member of a consumer group consumes.

Every strategy answers ``allocate(consumer_group, current_cid, all_queues, all_cids)`` with the
share of ``current_cid``, RocketMQ's ``AllocateMessageQueueStrategy.allocate``. Each member of the
group calls it independently with the same inputs, so the answer must be a pure function of them.

Invariants every strategy keeps (and the tests check by property):

* Inputs are normalised first: queues and client ids are de-duplicated and **sorted** (RocketMQ
  sorts both before calling a strategy), so the answer does not depend on input order.
* An empty ``current_cid``, an empty queue list or an empty member list raise :class:`ValueError`
  (RocketMQ throws); a ``current_cid`` that is not a member gets ``[]``.
* Over all members, the shares partition the queues: every queue is allocated exactly once
  (:class:`AllocateByConfig` only when the members' configured lists partition them).
* Each share is returned sorted.

Strategies (RocketMQ names in brackets):

* :class:`AllocateAveragely` (``AVG``, the default): contiguous blocks, sizes differ by at most 1.
* :class:`AllocateAveragelyByCircle` (``AVG_BY_CIRCLE``): round robin.
* :class:`AllocateConsistentHash` (``CONSISTENT_HASH``): an MD5 ring with virtual nodes; a member
  leaving moves only its own queues.
* :class:`AllocateByConfig` (``CONFIG``): a fixed list given at construction.
* :class:`AllocateSticky` (``STICKY``, not in RocketMQ): balanced like AVG, but keeps every queue
  with its previous owner when it can, so a membership change moves as few queues as possible.
"""

from __future__ import annotations

import bisect
import hashlib
from collections.abc import Iterable, Mapping, Sequence
from typing import Protocol

from offsetstore.base import MessageQueue
from sdk.errors import InvalidArgumentError

__all__ = [
    "AllocateAveragely",
    "AllocateAveragelyByCircle",
    "AllocateByConfig",
    "AllocateConsistentHash",
    "AllocateSticky",
    "AllocateStrategy",
    "allocate",
    "allocate_all",
    "md5_position",
]


class AllocateStrategy(Protocol):
    """What every allocation strategy does (RocketMQ's ``AllocateMessageQueueStrategy``)."""

    @property
    def name(self) -> str:
        """The strategy's RocketMQ name, e.g. ``"AVG"``."""
        ...

    def allocate(
        self,
        consumer_group: str,
        current_cid: str,
        all_queues: Iterable[MessageQueue],
        all_cids: Iterable[str],
    ) -> list[MessageQueue]:
        """The sorted queues ``current_cid`` consumes; ``[]`` when it is not in ``all_cids``.

        Raises :class:`ValueError` when ``current_cid``, ``all_queues`` or ``all_cids`` is empty.
        """
        ...


def _normalise(
    current_cid: str, all_queues: Iterable[MessageQueue], all_cids: Iterable[str]
) -> tuple[list[MessageQueue], list[str]] | None:
    """Check the inputs as RocketMQ does; the sorted unique queues and cids, or None when
    ``current_cid`` is not a member (its share is then empty)."""
    if not current_cid:
        raise InvalidArgumentError("current_cid is empty")
    queues = sorted(set(all_queues))
    if not queues:
        raise InvalidArgumentError("all_queues is empty: nothing to allocate")
    cids = sorted(set(all_cids))
    if not cids:
        raise InvalidArgumentError("all_cids is empty: the consumer group has no members")
    if current_cid not in cids:
        return None
    return queues, cids


def allocate(
    strategy: AllocateStrategy,
    consumer_group: str,
    current_cid: str,
    all_queues: Iterable[MessageQueue],
    all_cids: Iterable[str],
) -> list[MessageQueue]:
    """``strategy.allocate(...)``: the sorted share of ``current_cid``."""
    return strategy.allocate(consumer_group, current_cid, all_queues, all_cids)


def allocate_all(
    strategy: AllocateStrategy,
    consumer_group: str,
    all_queues: Iterable[MessageQueue],
    all_cids: Iterable[str],
) -> dict[str, list[MessageQueue]]:
    """Every member's share, as each member computes it alone: ``{cid: sorted queues}``."""
    queues = list(all_queues)
    cids = sorted(set(all_cids))
    return {cid: strategy.allocate(consumer_group, cid, queues, cids) for cid in cids}


class AllocateAveragely:
    """Contiguous blocks (RocketMQ's ``AllocateMessageQueueAveragely``, exactly its arithmetic).

    With ``n`` queues and ``c`` members, the first ``n % c`` members get ``n // c + 1`` queues and
    the others ``n // c``; when ``n < c`` the last ``c - n`` members get nothing.
    """

    name = "AVG"

    def allocate(
        self,
        consumer_group: str,
        current_cid: str,
        all_queues: Iterable[MessageQueue],
        all_cids: Iterable[str],
    ) -> list[MessageQueue]:
        """The block of ``current_cid``; see the class docstring."""
        normal = _normalise(current_cid, all_queues, all_cids)
        if normal is None:
            return []
        queues, cids = normal
        n, c, index = len(queues), len(cids), cids.index(current_cid)
        mod = n % c
        if n <= c:
            avg = 1
        elif mod > 0 and index < mod:
            avg = n // c + 1
        else:
            avg = n // c
        start = index * avg if (mod > 0 and index < mod) else index * avg + mod
        size = min(avg, n - start)
        return queues[start : start + size] if size > 0 else []


class AllocateAveragelyByCircle:
    """Round robin (RocketMQ's ``AllocateMessageQueueAveragelyByCircle``): member ``i`` of ``c``
    takes every queue ``j`` with ``j % c == i``."""

    name = "AVG_BY_CIRCLE"

    def allocate(
        self,
        consumer_group: str,
        current_cid: str,
        all_queues: Iterable[MessageQueue],
        all_cids: Iterable[str],
    ) -> list[MessageQueue]:
        """Every ``len(cids)``-th queue, starting at the index of ``current_cid``."""
        normal = _normalise(current_cid, all_queues, all_cids)
        if normal is None:
            return []
        queues, cids = normal
        return queues[cids.index(current_cid) :: len(cids)]


def md5_position(key: str) -> int:
    """A key's place on the consistent-hash ring: the first 4 bytes of MD5(UTF-8 key), unsigned
    big-endian (RocketMQ's ``ConsistentHashRouter.MD5Hash``)."""
    return int.from_bytes(hashlib.md5(key.encode("utf-8")).digest()[:4], "big")


class AllocateConsistentHash:
    """An MD5 hash ring (RocketMQ's ``AllocateMessageQueueConsistentHash``).

    Each member has ``virtual_nodes`` points on the ring, keyed ``f"{cid}-{k}"`` for
    ``k in range(virtual_nodes)``; a queue is hashed by its ``str()`` (RocketMQ's
    ``MessageQueue.toString()``) and belongs to the first point at or after its hash, wrapping
    to the smallest. Removing a member moves only that member's queues.
    """

    name = "CONSISTENT_HASH"

    def __init__(self, virtual_nodes: int = 10) -> None:
        """``virtual_nodes`` points per member (RocketMQ's default 10); must be positive."""
        if virtual_nodes <= 0:
            raise InvalidArgumentError(f"virtual_nodes must be positive, got {virtual_nodes}")
        self.virtual_nodes = virtual_nodes

    def allocate(
        self,
        consumer_group: str,
        current_cid: str,
        all_queues: Iterable[MessageQueue],
        all_cids: Iterable[str],
    ) -> list[MessageQueue]:
        """The queues whose ring owner is ``current_cid``."""
        normal = _normalise(current_cid, all_queues, all_cids)
        if normal is None:
            return []
        queues, cids = normal
        # Equal points (an MD5 prefix collision) resolve to the smaller cid, deterministically.
        ring = sorted(
            (md5_position(f"{cid}-{k}"), cid) for cid in cids for k in range(self.virtual_nodes)
        )
        positions = [position for position, _ in ring]
        mine = []
        for queue in queues:
            at = bisect.bisect_left(positions, md5_position(str(queue)))
            if ring[at % len(ring)][1] == current_cid:
                mine.append(queue)
        return mine


class AllocateByConfig:
    """A fixed list of queues given at construction (RocketMQ's ``AllocateMessageQueueByConfig``).

    The configured queues that exist in ``all_queues`` are returned (RocketMQ returns the list
    unchecked; a queue no longer in the route would only make the consumer pull in vain).
    """

    name = "CONFIG"

    def __init__(self, queues: Iterable[MessageQueue]) -> None:
        """``queues``: what this member consumes, whoever else is in the group."""
        self.queues: tuple[MessageQueue, ...] = tuple(sorted(set(queues)))

    def allocate(
        self,
        consumer_group: str,
        current_cid: str,
        all_queues: Iterable[MessageQueue],
        all_cids: Iterable[str],
    ) -> list[MessageQueue]:
        """The configured queues present in ``all_queues``."""
        normal = _normalise(current_cid, all_queues, all_cids)
        if normal is None:
            return []
        present = set(normal[0])
        return [queue for queue in self.queues if queue in present]


class AllocateSticky:
    """Balanced allocation that moves as few queues as possible when members come and go.

    Built with the previous assignment ``{cid: queues}`` (for instance the last
    :func:`allocate_all` answer). The global assignment is computed from the inputs alone, so
    every member derives the same one and takes its own share:

    1. Quotas: with ``n`` queues and ``c`` members each member gets ``n // c`` or ``n // c + 1``;
       the ``n % c`` larger quotas go to the members keeping the most previous queues (ties: the
       smaller cid), which maximises the queues that stay put.
    2. Every member keeps its previous queues still in the route, the smallest ones first, up to
       its quota. A queue claimed by several previous owners stays with the smallest such cid.
    3. Orphaned queues (of departed members, new queues, a member's excess) go, in sorted order,
       each to the member with the fewest queues below its quota (ties: the smaller cid).

    So loads differ by at most 1, and the queues that move are exactly those of departed members,
    new queues, and the minimum excess that rebalancing requires.
    """

    name = "STICKY"

    def __init__(self, previous: Mapping[str, Iterable[MessageQueue]] | None = None) -> None:
        """``previous``: the last assignment ``{cid: queues}``; None or empty for a fresh start."""
        self.previous: dict[str, tuple[MessageQueue, ...]] = {
            cid: tuple(sorted(set(queues))) for cid, queues in (previous or {}).items()
        }

    def allocate(
        self,
        consumer_group: str,
        current_cid: str,
        all_queues: Iterable[MessageQueue],
        all_cids: Iterable[str],
    ) -> list[MessageQueue]:
        """The share of ``current_cid`` in :meth:`assign`'s global answer."""
        normal = _normalise(current_cid, all_queues, all_cids)
        if normal is None:
            return []
        return self.assign(*normal)[current_cid]

    def assign(
        self, queues: Sequence[MessageQueue], cids: Sequence[str]
    ) -> dict[str, list[MessageQueue]]:
        """The global assignment ``{cid: sorted queues}`` over sorted unique inputs."""
        kept = self._previous_claims(queues, cids)
        quota = self._quotas(len(queues), cids, kept)
        assignment = {cid: kept[cid][: quota[cid]] for cid in cids}
        taken = {queue for share in assignment.values() for queue in share}
        for queue in queues:
            if queue in taken:
                continue
            hungry = [cid for cid in cids if len(assignment[cid]) < quota[cid]]
            owner = min(hungry, key=lambda cid: (len(assignment[cid]), cid))
            assignment[owner].append(queue)
        return {cid: sorted(share) for cid, share in assignment.items()}

    def _previous_claims(
        self, queues: Sequence[MessageQueue], cids: Sequence[str]
    ) -> dict[str, list[MessageQueue]]:
        """Each current member's previous queues still in the route, claimed once, sorted."""
        present = set(queues)
        claimed: set[MessageQueue] = set()
        kept: dict[str, list[MessageQueue]] = {}
        for cid in cids:  # sorted: a doubly claimed queue stays with the smaller cid
            mine = [q for q in self.previous.get(cid, ()) if q in present and q not in claimed]
            claimed.update(mine)
            kept[cid] = mine
        return kept

    @staticmethod
    def _quotas(
        n: int, cids: Sequence[str], kept: Mapping[str, list[MessageQueue]]
    ) -> dict[str, int]:
        """``n // c`` each, plus one for the ``n % c`` members keeping the most queues."""
        base, extra = divmod(n, len(cids))
        by_claim = sorted(cids, key=lambda cid: (-len(kept[cid]), cid))
        return {cid: base + (1 if rank < extra else 0) for rank, cid in enumerate(by_claim)}
