"""Consumer group membership as the broker serves it: heartbeats, members leaving, queue leases,
the views a member rebalances from, the live report, and the record ``quiver group show`` reads.

The members are kept by :class:`~sdk.broker.groups.GroupRegistry` (members silent past their
expiry are swept every 10 s), the queue leases by :class:`~sdk.broker.leases.QueueLeases`; this
module ties them to the pulls parked on the group and to the record of every group,
``{root}/config/quiverConsumerGroups.json`` (:mod:`sdk.broker.group_report`).

Invariants:

* A change that can move a member's share wakes the group's parked pulls at once (the key
  ``(GROUP_WAKE_PREFIX + group, -1)``, :mod:`sdk.broker.parked_pulls`): a heartbeat that bumps
  the group's generation, a member leaving or swept, a lease given back. A member hears it in
  its pull's answer and rebalances instead of waiting for its periodic rebalance.
* Each of those, and every lease taken or renewed, marks the record stale; a stale record is
  rewritten within about a second, and once more when the broker closes unless it never saw a
  group (a broker opened only to inspect a store keeps the record it found).
"""

from __future__ import annotations

import dataclasses
import logging
import threading
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from localstore.runtime.periodic import PeriodicTask
from offsetstore import MessageQueue
from offsetstore.broker_table import ConsumerOffsetTable, QueueBounds
from sdk.broker.administration import check_name
from sdk.broker.group_report import build_report, snapshot_document, write_snapshot
from sdk.broker.groups import GroupRegistry
from sdk.broker.leases import QueueLeases
from sdk.broker.long_poll import ArrivalNotifier
from sdk.broker.parked_pulls import GROUP_WAKE_PREFIX
from sdk.clock import Clock
from sdk.errors import InvalidArgumentError
from sdk.transport.admin_models import GroupInfo
from sdk.transport.models import BROADCASTING, CLUSTERING, GroupView

__all__ = ["GroupMembership"]

log = logging.getLogger(__name__)

CloseStep = tuple[str, Callable[[], object]]


class GroupMembership:
    """The groups' members and queue leases of one broker, its wake-ups and its record.

    ``offsets`` and ``bounds`` (the store) give a report its committed offsets and lag;
    ``root`` is the store's directory; ``running`` says whether the broker still runs (the
    expiry and the record's rewrites stop once it does not). The expiry and the record's
    rewrites run on threads of their own until :meth:`close_steps` are run."""

    def __init__(
        self,
        groups: GroupRegistry,
        leases: QueueLeases,
        notifier: ArrivalNotifier,
        offsets: ConsumerOffsetTable,
        bounds: QueueBounds,
        *,
        root: Path,
        clock: Clock,
        running: Callable[[], bool],
    ):
        self._groups = groups
        self._leases = leases
        self._notifier = notifier
        self._offsets = offsets
        self._bounds = bounds
        self._root = root
        self._clock = clock
        self._running = running
        self._expiry = PeriodicTask("quiver-groups", self._expire_members, 10.0, 10.0)
        self._changed = threading.Event()
        self._snapshots = PeriodicTask("quiver-group-snapshot", self._snapshot_if_changed, 1.0, 1.0)

    def heartbeat(
        self, group: str, client_id: str, subscriptions: Mapping[str, str], message_model: str
    ) -> int:
        """Register or refresh a consumer; answers its group's generation. An empty group or
        client id, a group with ``@``, or a message model other than CLUSTERING and
        BROADCASTING is refused (InvalidArgumentError)."""
        check_name("group", group)
        if not client_id:
            raise InvalidArgumentError("a consumer's client id must not be empty")
        if message_model not in (CLUSTERING, BROADCASTING):
            raise InvalidArgumentError(
                f"message model must be {CLUSTERING} or {BROADCASTING}, not {message_model!r:.40}"
            )
        before = self._groups.generation(group)
        generation = self._groups.heartbeat(group, client_id, subscriptions, message_model)
        if generation != before:
            self._wake_group(group)  # members parked in a pull see the new generation
        return generation

    def unregister(self, group: str, client_id: str) -> int:
        """A member leaves: its queue leases are dropped and the others told at once."""
        self._leases.release_member(group, client_id)
        generation = self._groups.unregister(group, client_id)
        self._wake_group(group)
        return generation

    def lock_queues(
        self, group: str, client_id: str, queues: Sequence[MessageQueue]
    ) -> set[MessageQueue]:
        """Take or renew leases on ``queues`` (see :mod:`sdk.broker.leases`); answers those
        the member now holds."""
        granted = self._leases.acquire(group, client_id, queues)
        self._changed.set()
        return granted

    def unlock_queues(self, group: str, client_id: str, queues: Sequence[MessageQueue]) -> None:
        """Give leases back; members waiting for those queues are woken."""
        if self._leases.release(group, client_id, queues):
            self._wake_group(group)

    def _wake_group(self, group: str) -> None:
        self._changed.set()
        self._notifier.notify(GROUP_WAKE_PREFIX + group, -1)

    def _expire_members(self) -> bool:
        for group in self._groups.expire():
            self._wake_group(group)
        return self._running()

    def view(self, group: str) -> GroupView:
        """The group's live members, their subscriptions and the queues' lease owners."""
        view = self._groups.view(group)
        return dataclasses.replace(view, owners=self._leases.owners(group))

    def report(self, group: str) -> GroupInfo:
        """Members, the queues each owns, committed offsets and lag, as the broker sees them
        now (``quiver group show`` prints the same from the last recorded snapshot)."""
        return build_report(
            group,
            self.view(group),
            self._groups.models(group),
            self._offsets,
            self._bounds,
            live=True,
            as_of_ms=self._clock.time_ms(),
        )

    # -- the record of every group (quiver group show) -----------------------------------------
    def _snapshot_if_changed(self) -> bool:
        if self._changed.is_set():
            self._write_snapshot()
        return self._running()

    def _write_snapshot(self) -> None:
        """Record every group's members and lease owners for ``quiver group show``."""
        self._changed.clear()
        groups = self._groups.groups()
        views = {group: self.view(group) for group in groups}
        models = {group: self._groups.models(group) for group in groups}
        try:
            write_snapshot(self._root, snapshot_document(views, models, self._clock.time_ms()))
        except OSError as exc:
            log.warning("cannot record the consumer groups: %s", exc)

    def _write_snapshot_if_any(self) -> None:
        """At close: record the groups, unless this broker never saw one (a broker opened to
        inspect or administer a store keeps the record the last serving broker left)."""
        if self._groups.groups():
            self._write_snapshot()

    def close_steps(self) -> list[CloseStep]:
        """The broker's close steps of membership, in order: the threads stop, then the
        record is written a last time."""
        return [
            ("stopping the group expiry", self._expiry.close),
            ("stopping the group snapshots", self._snapshots.close),
            ("recording the consumer groups", self._write_snapshot_if_any),
        ]
