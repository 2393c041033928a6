"""What a consumer group looks like: members, the queues each owns, committed offsets and lag.

Two sources, one report:

* live, from a running broker (:meth:`sdk.broker.service.BrokerService.group_report`);
* recorded, for ``quiver group show --data DIR`` on a store no broker serves: the broker writes
  the membership of every group to ``{root}/config/quiverConsumerGroups.json`` at most once a
  second while it changes, and when it closes (Quiver's own file: RocketMQ's loader ignores it).
  Committed offsets come from RocketMQ's ``consumerOffset.json`` in both cases.

Snapshot layout (JSON)::

    {"timestamp": 1795340508324,
     "groups": {"billing": {"generation": 7,
                            "members": {"host@12@1": {"messageModel": "CLUSTERING",
                                                      "subscriptions": {"orders": "paid"}}},
                            "owners": {"orders@0": "host@12@1"}}}}
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from offsetstore import MessageQueue
from offsetstore.atomic_file import read_with_backup, write_atomically
from offsetstore.broker_table import ConsumerOffsetTable, QueueBounds
from offsetstore.json_shape import ShapeError, json_kind
from sdk.transport.models import GroupView

__all__ = [
    "SNAPSHOT_FILE",
    "GroupReport",
    "MemberReport",
    "QueueReport",
    "build_report",
    "read_snapshot",
    "snapshot_document",
    "write_snapshot",
]

SNAPSHOT_FILE = Path("config") / "quiverConsumerGroups.json"


@dataclass(frozen=True, slots=True)
class MemberReport:
    client_id: str
    message_model: str
    subscriptions: dict[str, str]
    queues: list[str]  # "topic/queue_id"


@dataclass(frozen=True, slots=True)
class QueueReport:
    topic: str
    queue_id: int
    owner: str | None
    committed: int | None
    min_offset: int
    max_offset: int

    @property
    def lag(self) -> int:
        """Messages not consumed yet: max offset - committed (everything when none)."""
        start = self.committed if self.committed is not None else self.min_offset
        return max(0, self.max_offset - start)


@dataclass(frozen=True, slots=True)
class GroupReport:
    group: str
    live: bool  # from a running broker, or from the last recorded snapshot
    as_of_ms: int
    generation: int
    members: list[MemberReport] = field(default_factory=list)
    queues: list[QueueReport] = field(default_factory=list)

    @property
    def total_lag(self) -> int:
        return sum(queue.lag for queue in self.queues)

    def to_json(self) -> dict[str, Any]:
        return {
            "group": self.group,
            "live": self.live,
            "as_of_ms": self.as_of_ms,
            "generation": self.generation,
            "members": [
                {
                    "client_id": m.client_id,
                    "message_model": m.message_model,
                    "subscriptions": m.subscriptions,
                    "queues": m.queues,
                }
                for m in self.members
            ],
            "queues": [
                {
                    "topic": q.topic,
                    "queue_id": q.queue_id,
                    "owner": q.owner,
                    "committed": q.committed,
                    "min_offset": q.min_offset,
                    "max_offset": q.max_offset,
                    "lag": q.lag,
                }
                for q in self.queues
            ],
            "total_lag": self.total_lag,
        }


def build_report(
    group: str,
    view: GroupView,
    models: dict[str, str],
    offsets: ConsumerOffsetTable,
    bounds: QueueBounds,
    *,
    live: bool,
    as_of_ms: int,
) -> GroupReport:
    """The report of ``group``: members from ``view``, every queue of the topics they subscribe
    to or the group has offsets of, with owner, committed offset, bounds and lag."""
    topics = set(offsets.topics(group)) | {q.topic for q in view.owners}
    for subscriptions in view.subscriptions.values():
        topics.update(subscriptions)
    queues = []
    for topic in sorted(topics):
        committed = offsets.offsets(group, topic)
        queue_ids = set(bounds.queue_ids(topic)) | set(committed)
        queue_ids |= {q.queue_id for q in view.owners if q.topic == topic}
        for queue_id in sorted(queue_ids):
            owner = next(
                (
                    cid
                    for q, cid in view.owners.items()
                    if (q.topic, q.queue_id) == (topic, queue_id)
                ),
                None,
            )
            queues.append(
                QueueReport(
                    topic,
                    queue_id,
                    owner,
                    committed.get(queue_id),
                    bounds.min_offset(topic, queue_id),
                    bounds.max_offset(topic, queue_id),
                )
            )
    members = [
        MemberReport(
            cid,
            models.get(cid, ""),
            dict(view.subscriptions.get(cid, {})),
            sorted(f"{q.topic}/{q.queue_id}" for q, owner in view.owners.items() if owner == cid),
        )
        for cid in view.members
    ]
    return GroupReport(group, live, as_of_ms, view.generation, members, queues)


def snapshot_document(
    views: dict[str, GroupView], models: dict[str, dict[str, str]], now_ms: int
) -> bytes:
    """The snapshot file's bytes for ``views`` (``models``: group -> client id -> model)."""
    groups = {
        group: {
            "generation": view.generation,
            "members": {
                cid: {
                    "messageModel": models.get(group, {}).get(cid, ""),
                    "subscriptions": dict(view.subscriptions.get(cid, {})),
                }
                for cid in view.members
            },
            "owners": {f"{q.topic}@{q.queue_id}": cid for q, cid in sorted(view.owners.items())},
        }
        for group, view in sorted(views.items())
    }
    return orjson.dumps({"timestamp": now_ms, "groups": groups}, option=orjson.OPT_INDENT_2)


def write_snapshot(root: Path, document: bytes) -> None:
    write_atomically(root / SNAPSHOT_FILE, document)


def read_snapshot(
    root: Path, group: str, broker_name: str
) -> tuple[GroupView, dict[str, str], int]:
    """The recorded view of ``group`` (empty when none), its members' message models, and the
    snapshot's time (0 when there is no snapshot). A damaged file (not valid JSON, or not of the
    layout above: the whole file is checked, not only ``group``'s entry) falls back to its
    ``.bak`` with a WARNING; when both are damaged
    :class:`~offsetstore.base.OffsetFileError` names both files."""

    def decode(data: bytes) -> tuple[int, dict[str, tuple[GroupView, dict[str, str]]]]:
        try:
            document = orjson.loads(data)
        except orjson.JSONDecodeError as exc:
            raise ValueError(f"is not valid JSON: {exc}") from exc
        return _parse_snapshot(document, broker_name)

    loaded = read_with_backup(root / SNAPSHOT_FILE, decode, "consumer group records")
    if loaded is None:
        return GroupView(0, ()), {}, 0
    timestamp, groups = loaded.value
    recorded = groups.get(group)
    if recorded is None:
        return GroupView(0, ()), {}, timestamp
    view, models = recorded
    return view, models, timestamp


def _parse_snapshot(
    document: Any, broker_name: str
) -> tuple[int, dict[str, tuple[GroupView, dict[str, str]]]]:
    """``(timestamp, group -> (view, models))`` of a parsed snapshot; :class:`ShapeError`
    naming the first entry that is not of the layout :func:`snapshot_document` writes."""

    def fail(where: str, expected: str, value: Any) -> ShapeError:
        return ShapeError(f"{where} is not {expected} (found {json_kind(value)})")

    def mapping(where: str, value: Any) -> dict[str, Any]:
        if not isinstance(value, dict):
            raise fail(where, "an object", value)
        return value

    def integer(where: str, value: Any) -> int:
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise fail(where, "a non-negative integer", value)
        return value

    def string(where: str, value: Any) -> str:
        if not isinstance(value, str):
            raise fail(where, "a string", value)
        return value

    if not isinstance(document, dict):
        raise ShapeError(f"not a JSON object (found {json_kind(document)})")
    timestamp = integer("timestamp", document.get("timestamp", 0))
    groups: dict[str, tuple[GroupView, dict[str, str]]] = {}
    for group, entry in mapping("groups", document.get("groups", {})).items():
        where = f"groups[{group!r}]"
        recorded = mapping(where, entry)
        generation = integer(f"{where}.generation", recorded.get("generation", 0))
        subscriptions: dict[str, dict[str, str]] = {}
        models: dict[str, str] = {}
        members = mapping(f"{where}.members", recorded.get("members", {}))
        for cid, value in members.items():
            at = f"{where}.members[{cid!r}]"
            member = mapping(at, value)
            models[cid] = string(f"{at}.messageModel", member.get("messageModel", ""))
            topics = mapping(f"{at}.subscriptions", member.get("subscriptions", {}))
            subscriptions[cid] = {
                topic: string(f"{at}.subscriptions[{topic!r}]", expression)
                for topic, expression in topics.items()
            }
        owners = {}
        for key, cid in mapping(f"{where}.owners", recorded.get("owners", {})).items():
            topic, _, queue_id = key.rpartition("@")
            if not topic or not (queue_id.isascii() and queue_id.isdigit()):
                raise ShapeError(f"{where}.owners key {key!r} is not TOPIC@QUEUE_ID")
            owner = string(f"{where}.owners[{key!r}]", cid)
            owners[MessageQueue(topic, broker_name, int(queue_id))] = owner
        view = GroupView(generation, tuple(sorted(members)), subscriptions, owners)
        groups[group] = (view, models)
    return timestamp, groups
