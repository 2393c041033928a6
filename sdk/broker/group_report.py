"""What a consumer group looks like: members, the queues each owns, committed offsets and lag.

The report is the transport's :class:`~sdk.transport.admin_models.GroupInfo` (what
:meth:`sdk.Admin.describe_group` answers). Two sources, one report:

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

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import orjson

from offsetstore import MessageQueue
from offsetstore.atomic_file import read_with_backup, write_atomically
from offsetstore.broker_table import ConsumerOffsetTable, QueueBounds
from offsetstore.json_shape import ShapeError, json_kind
from sdk.transport.admin_models import SYSTEM_GROUP_PREFIX, GroupInfo, MemberInfo, QueueLag
from sdk.transport.models import GroupView

__all__ = [
    "SNAPSHOT_FILE",
    "build_report",
    "queue_lags",
    "read_snapshot",
    "snapshot_document",
    "write_snapshot",
]

SNAPSHOT_FILE = Path("config") / "quiverConsumerGroups.json"


def build_report(
    group: str,
    view: GroupView,
    models: dict[str, str],
    offsets: ConsumerOffsetTable,
    bounds: QueueBounds,
    *,
    live: bool,
    as_of_ms: int,
) -> GroupInfo:
    """The report of ``group``: members from ``view``, every queue of the topics they subscribe
    to or the group has offsets of, with owner, committed offset, bounds and lag."""
    topics = set(offsets.topics(group)) | {q.topic for q in view.owners}
    for subscriptions in view.subscriptions.values():
        topics.update(subscriptions)
    queues = []
    for topic in sorted(topics):
        owners = {q.queue_id: cid for q, cid in view.owners.items() if q.topic == topic}
        queues += queue_lags(
            topic, offsets.offsets(group, topic), bounds, owners, more_queue_ids=owners
        )
    members = tuple(
        MemberInfo(
            cid,
            models.get(cid, ""),
            tuple(sorted(view.subscriptions.get(cid, {}).items())),
            tuple(sorted(f"{q.topic}/{q.queue_id}" for q, o in view.owners.items() if o == cid)),
        )
        for cid in view.members
    )
    system = group.startswith(SYSTEM_GROUP_PREFIX)
    return GroupInfo(group, live, as_of_ms, view.generation, members, tuple(queues), system)


def queue_lags(
    topic: str,
    committed: Mapping[int, int],
    bounds: QueueBounds,
    owners: Mapping[int, str] | None = None,
    *,
    more_queue_ids: Iterable[int] = (),
) -> list[QueueLag]:
    """Per queue of ``topic`` the store holds, ``committed`` names (queue id -> committed
    offset) or ``more_queue_ids`` adds, sorted: its owner (from ``owners``), committed offset,
    bounds and lag."""
    owners = owners or {}
    queue_ids = set(bounds.queue_ids(topic)) | set(committed) | set(more_queue_ids)
    return [
        QueueLag(
            topic,
            queue_id,
            owners.get(queue_id),
            committed.get(queue_id),
            bounds.min_offset(topic, queue_id),
            bounds.max_offset(topic, queue_id),
        )
        for queue_id in sorted(queue_ids)
    ]


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
