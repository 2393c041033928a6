"""What crosses the transport seam for administration: topics, groups, lag and offset resets.

Frozen, transport-neutral answers (the HTTP transports of remote mode encode them as JSON with
:meth:`to_json`). Permissions are RocketMQ's bits (``PERM_READ`` 4, ``PERM_WRITE`` 2), as a
topic's ``perm`` is kept in ``config/topics.json``.

Refusals are typed errors, not statuses: :class:`sdk.errors.UnknownTopicError`,
:class:`sdk.errors.UnknownGroupError`, :class:`sdk.errors.InvalidArgumentError` (a bad name, a
queue count out of range, a system topic) and :class:`sdk.errors.IllegalStateError` (a change
that would hide unconsumed messages, a reset of a group whose consumers are running).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

__all__ = [
    "PERM_READ",
    "PERM_READ_WRITE",
    "PERM_WRITE",
    "SYSTEM_GROUP_PREFIX",
    "GroupInfo",
    "MemberInfo",
    "OffsetReset",
    "QueueLag",
    "ResetRequest",
    "TopicInfo",
]

PERM_READ = 4  # RocketMQ's PermName.PERM_READ
PERM_WRITE = 2  # RocketMQ's PermName.PERM_WRITE
PERM_READ_WRITE = PERM_READ | PERM_WRITE
SYSTEM_GROUP_PREFIX = "CID_RMQ_SYS_"  # RocketMQ's MixAll.CID_RMQ_SYS_PREFIX


@dataclass(frozen=True, slots=True)
class TopicInfo:
    """A topic's config: RocketMQ's ``readQueueNums`` (queues consumers read),
    ``writeQueueNums`` (queues producers write) and ``perm``. ``system``: one of the broker's
    own topics (retry, dead-letter, schedule, transaction)."""

    name: str
    read_queue_nums: int
    write_queue_nums: int
    perm: int
    system: bool = False

    @property
    def readable(self) -> bool:
        return bool(self.perm & PERM_READ)

    @property
    def writable(self) -> bool:
        return bool(self.perm & PERM_WRITE)

    def to_json(self) -> dict[str, Any]:
        return {
            "topic": self.name,
            "read_queue_nums": self.read_queue_nums,
            "write_queue_nums": self.write_queue_nums,
            "perm": self.perm,
            "system": self.system,
        }


@dataclass(frozen=True, slots=True)
class MemberInfo:
    """A consumer of a group: its subscriptions (topic -> expression) and the queues whose
    lease it holds (``"topic/queue_id"``)."""

    client_id: str
    message_model: str
    subscriptions: tuple[tuple[str, str], ...]
    queues: tuple[str, ...]

    def to_json(self) -> dict[str, Any]:
        return {
            "client_id": self.client_id,
            "message_model": self.message_model,
            "subscriptions": dict(self.subscriptions),
            "queues": list(self.queues),
        }


@dataclass(frozen=True, slots=True)
class QueueLag:
    """One queue of a group: lease owner, committed offset (None if none), bounds, lag."""

    topic: str
    queue_id: int
    owner: str | None
    committed: int | None
    min_offset: int
    max_offset: int

    @property
    def lag(self) -> int:
        """Messages not consumed yet: ``max - committed`` (``max - min`` when none)."""
        start = self.min_offset if self.committed is None else self.committed
        return max(0, self.max_offset - start)

    def to_json(self) -> dict[str, Any]:
        return {
            "topic": self.topic,
            "queue_id": self.queue_id,
            "owner": self.owner,
            "committed": self.committed,
            "min_offset": self.min_offset,
            "max_offset": self.max_offset,
            "lag": self.lag,
        }


@dataclass(frozen=True, slots=True)
class GroupInfo:
    """A consumer group: its members and, per queue of the topics it subscribes to or has
    offsets of, the committed offset and lag. ``live``: members as the running broker sees them
    now; otherwise as the broker last recorded them (``as_of_ms``; 0: never). ``system``: one of
    the broker's own groups (``CID_RMQ_SYS_*``: the transaction service's progress)."""

    group: str
    live: bool
    as_of_ms: int
    generation: int
    members: tuple[MemberInfo, ...]
    queues: tuple[QueueLag, ...]
    system: bool = False

    @property
    def total_lag(self) -> int:
        return sum(queue.lag for queue in self.queues)

    def to_json(self) -> dict[str, Any]:
        return {
            "group": self.group,
            "live": self.live,
            "as_of_ms": self.as_of_ms,
            "generation": self.generation,
            "members": [member.to_json() for member in self.members],
            "queues": [queue.to_json() for queue in self.queues],
            "total_lag": self.total_lag,
            "system": self.system,
        }


@dataclass(frozen=True, slots=True)
class ResetRequest:
    """Where a reset moves a group's offsets of a topic: exactly one of ``to``
    (``"earliest"``/``"latest"``), ``timestamp_ms`` (the first message stored at or after it)
    or ``offsets`` (queue id -> offset, each within the queue's bounds; other queues keep
    theirs)."""

    to: Literal["earliest", "latest"] | None = None
    timestamp_ms: int | None = None
    offsets: tuple[tuple[int, int], ...] | None = None

    def describe(self) -> str:
        if self.to is not None:
            return self.to
        if self.timestamp_ms is not None:
            return f"timestamp {self.timestamp_ms}"
        return "offsets " + ", ".join(f"{q}={o}" for q, o in self.offsets or ())


@dataclass(frozen=True, slots=True)
class OffsetReset:
    """One queue's offset moved by a reset (``previous`` None: none was committed)."""

    topic: str
    queue_id: int
    previous: int | None
    offset: int

    def to_json(self) -> dict[str, Any]:
        return {
            "topic": self.topic,
            "queue_id": self.queue_id,
            "previous": self.previous,
            "offset": self.offset,
        }
