"""Consumer group membership kept by the broker (RocketMQ's ``ConsumerManager``).

Consumers heartbeat with their client id, subscriptions and message model; a member silent for
longer than ``expiry_ms`` is dropped. Every change of a group's member set bumps the group's
``generation``, which the broker returns with each pull: a consumer that sees a new generation
rebalances at once instead of waiting for its periodic rebalance.

Invariant: members are reported sorted, so every member computes the same allocation.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import dataclass, field

from sdk.clock import SYSTEM_CLOCK, Clock
from sdk.transport.models import GroupView

__all__ = ["DEFAULT_MEMBER_EXPIRY_MS", "GroupRegistry"]

DEFAULT_MEMBER_EXPIRY_MS = 120_000


@dataclass(slots=True)
class _Member:
    subscriptions: dict[str, str]
    message_model: str
    last_seen_ms: int


@dataclass(slots=True)
class _Group:
    generation: int = 0
    members: dict[str, _Member] = field(default_factory=dict)


class GroupRegistry:
    """Members of every consumer group (thread-safe)."""

    def __init__(
        self,
        expiry_ms: int = DEFAULT_MEMBER_EXPIRY_MS,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        self.expiry_ms = expiry_ms
        self._clock = clock
        self._lock = threading.Lock()
        self._groups: dict[str, _Group] = {}

    def heartbeat(
        self,
        group: str,
        client_id: str,
        subscriptions: Mapping[str, str],
        message_model: str,
    ) -> int:
        """Register or refresh a member; answers the group's generation (bumped if it joined)."""
        now = self._now_ms()
        with self._lock:
            state = self._groups.setdefault(group, _Group())
            self._expire(state, now)
            member = state.members.get(client_id)
            if member is None:
                state.generation += 1
            state.members[client_id] = _Member(dict(subscriptions), message_model, now)
            return state.generation

    def unregister(self, group: str, client_id: str) -> int:
        """A member leaves (a clean close); answers the generation after it left."""
        with self._lock:
            state = self._groups.get(group)
            if state is None:
                return 0
            if state.members.pop(client_id, None) is not None:
                state.generation += 1
            return state.generation

    def view(self, group: str) -> GroupView:
        """The group's live members (expired ones are dropped first)."""
        with self._lock:
            state = self._groups.get(group)
            if state is None:
                return GroupView(0, ())
            self._expire(state, self._now_ms())
            members = tuple(sorted(state.members))
            subscriptions = {cid: dict(state.members[cid].subscriptions) for cid in members}
            return GroupView(state.generation, members, subscriptions)

    def models(self, group: str) -> dict[str, str]:
        """Each live member's message model (CLUSTERING or BROADCASTING)."""
        with self._lock:
            state = self._groups.get(group)
            if state is None:
                return {}
            return {cid: member.message_model for cid, member in state.members.items()}

    def generation(self, group: str) -> int:
        """The group's generation without touching expiry (cheap: asked on every pull)."""
        state = self._groups.get(group)
        return state.generation if state is not None else 0

    def groups(self) -> list[str]:
        with self._lock:
            return sorted(self._groups)

    def expire(self) -> list[str]:
        """Drop silent members of every group (the broker calls this periodically); answers
        the groups that changed."""
        now = self._now_ms()
        with self._lock:
            return [group for group, state in self._groups.items() if self._expire(state, now)]

    def _expire(self, state: _Group, now: int) -> bool:
        silent = [cid for cid, m in state.members.items() if now - m.last_seen_ms > self.expiry_ms]
        for cid in silent:
            del state.members[cid]
        if silent:
            state.generation += 1
        return bool(silent)

    def _now_ms(self) -> int:
        return round(self._clock.monotonic() * 1000)
