"""Topic configs, kept in ``config/topics.json`` in the shape RocketMQ's broker keeps them::

    {"dataVersion": {"counter": N, "stateVersion": 0, "timestamp": MS},
     "topicConfigTable": {"T": {"attributes": {}, "order": false, "perm": 6,
                                "readQueueNums": 4, "topicFilterType": "SINGLE_TAG",
                                "topicName": "T", "topicSysFlag": 0, "writeQueueNums": 4}}}

so a RocketMQ broker pointed at a Quiver store finds its topics. A store without the file (one
RocketMQ's store code wrote without a broker) gets its topics from its consume-queue directories.
Topics are created on first put with the store's default queue count, or ahead of that (and
changed) by an administrator (:meth:`localstore.MessageStore.set_topic`).

A deleted topic (:meth:`localstore.MessageStore.delete_topic`) leaves a tombstone in the
document's ``quiverDeletedTopics`` map (topic -> the commitlog offset when it was deleted, a field
RocketMQ's broker ignores): its records stay in the commitlog until retention removes them, and
recovery dispatches none of those before the tombstone's offset, so a reopened store does not
bring the deleted topic back. A tombstone is dropped once retention removed every record it
covers.

A damaged ``topics.json`` (unreadable, not JSON, or JSON of another shape) is replaced by its
``topics.json.bak`` at load, as every config file is (:mod:`localstore.files.json_shape`).
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from localstore.files.atomic_file import write_atomically
from localstore.files.json_shape import (
    ShapeError,
    decode_json_object,
    is_json_int,
    json_kind,
    read_with_backup,
)

PERM_READ = 4  # RocketMQ's PermName.PERM_READ
PERM_WRITE = 2  # RocketMQ's PermName.PERM_WRITE
PERM_READ_WRITE = PERM_READ | PERM_WRITE
MAX_QUEUE_NUMS = 2**31 - 1  # Java ints in RocketMQ's TopicConfig
TOPICS_FILE = Path("config") / "topics.json"
DELETED_TOPICS_FIELD = "quiverDeletedTopics"


@dataclass(slots=True)
class TopicConfig:
    name: str
    read_queue_nums: int
    write_queue_nums: int
    perm: int = PERM_READ_WRITE
    order: bool = False

    def to_json(self) -> dict[str, Any]:
        return {
            "attributes": {},
            "order": self.order,
            "perm": self.perm,
            "readQueueNums": self.read_queue_nums,
            "topicFilterType": "SINGLE_TAG",
            "topicName": self.name,
            "topicSysFlag": 0,
            "writeQueueNums": self.write_queue_nums,
        }


class TopicTable:
    """The store's topics; ``save`` rewrites the file atomically (topics change rarely)."""

    def __init__(self, root: Path):
        self.path = root / TOPICS_FILE
        self.topics: dict[str, TopicConfig] = {}
        self._counter = 0
        self._extra: dict[str, Any] = {}  # RocketMQ fields we keep as they were
        self._document_extra: dict[str, Any] = {}  # top-level fields we keep (RocketMQ 5's maps)
        self._main_damaged = False  # loaded from topics.json.bak
        # deleted topic -> commitlog offset at its deletion (recovery skips its records before)
        self.deleted: dict[str, int] = {}

    def load(self, consume_queue_dir: Path) -> None:
        """Read ``config/topics.json`` (if any), then add the topics found on disk.

        A file that cannot be read, is not valid JSON, or is valid JSON of another shape than
        RocketMQ's is damaged: ``topics.json.bak`` is used instead (logged at WARNING naming both
        files, and the next save leaves that good backup as it is); when both are damaged,
        :class:`CorruptStoreError` names both files and what is wrong with each.
        """
        loaded = read_with_backup(self.path, _decode_topics)
        if loaded is not None:
            data, self._counter, table = loaded.value
            self._main_damaged = loaded.from_backup
            self._document_extra = {
                key: value
                for key, value in data.items()
                if key not in ("dataVersion", "topicConfigTable", DELETED_TOPICS_FIELD)
            }
            self.deleted = _deleted_topics(data.get(DELETED_TOPICS_FIELD, {}))
            for name, entry in table.items():
                self._extra[name] = entry
                self.topics[name] = TopicConfig(
                    name,
                    entry.get("readQueueNums", 0),
                    entry.get("writeQueueNums", 0),
                    entry.get("perm", PERM_READ_WRITE),
                    entry.get("order", False),
                )
        for name, queue_count in _queues_on_disk(consume_queue_dir).items():
            config = self.topics.get(name)
            if config is None:
                self.topics[name] = TopicConfig(name, queue_count, queue_count)
            elif config.read_queue_nums < queue_count:
                config.read_queue_nums = queue_count

    def get(self, name: str) -> TopicConfig | None:
        return self.topics.get(name)

    def create(self, name: str, queue_count: int) -> TopicConfig:
        config = TopicConfig(name, queue_count, queue_count)
        self.topics[name] = config
        self.save()
        return config

    def remove(self, name: str, deleted_at_offset: int) -> None:
        """Forget topic ``name``, leaving a tombstone for its records before
        ``deleted_at_offset`` (the commitlog's end when it was deleted), and save."""
        self.topics.pop(name, None)
        self._extra.pop(name, None)
        self.deleted[name] = max(deleted_at_offset, self.deleted.get(name, 0))
        self.save()

    def forget_tombstones_before(self, commitlog_min_offset: int) -> None:
        """Drop the tombstones whose records retention removed (saves when one went)."""
        gone = [name for name, end in self.deleted.items() if end <= commitlog_min_offset]
        for name in gone:
            del self.deleted[name]
        if gone:
            self.save()

    def save(self) -> None:
        self._counter += 1
        # A topic's entry: what Quiver owns from its config, every other field as it was read
        # (attributes, filter type, sys flag of a RocketMQ-written file), defaults for a new one.
        table = {
            name: {
                **config.to_json(),
                **self._extra.get(name, {}),
                **_owned_fields(config),
            }
            for name, config in self.topics.items()
        }
        document = {
            **self._document_extra,
            "dataVersion": {
                "counter": self._counter,
                "stateVersion": 0,
                "timestamp": int(time.time() * 1000),
            },
            "topicConfigTable": table,
        }
        if self.deleted:
            document[DELETED_TOPICS_FIELD] = dict(sorted(self.deleted.items()))
        data = orjson.dumps(document, option=orjson.OPT_INDENT_2)
        # Loaded from .bak: the damaged main file must not be rotated over that good backup.
        write_atomically(self.path, data, keep_backup=not self._main_damaged)
        self._main_damaged = False


def _owned_fields(config: TopicConfig) -> dict[str, Any]:
    """The fields of a topic's entry that Quiver keeps up to date (the rest it keeps as read)."""
    return {
        "order": config.order,
        "perm": config.perm,
        "readQueueNums": config.read_queue_nums,
        "topicName": config.name,
        "writeQueueNums": config.write_queue_nums,
    }


def _decode_topics(data: bytes) -> tuple[dict[str, Any], int, dict[str, dict[str, Any]]]:
    """``(document, dataVersion.counter, topicConfigTable)`` of a ``topics.json``, checked field
    by field against the shape RocketMQ's broker writes (fields it writes that Quiver does not
    use are left alone); anything else raises :class:`ValueError` (:class:`ShapeError` naming
    the field)."""
    document = decode_json_object(data)
    version = document.get("dataVersion", {})
    if not isinstance(version, dict):
        raise ShapeError(f"dataVersion is not an object (found {json_kind(version)})")
    counter = version.get("counter", 0)
    if not is_json_int(counter):
        raise ShapeError(f"dataVersion.counter is not an integer (found {json_kind(counter)})")
    table = document.get("topicConfigTable", {})
    if not isinstance(table, dict):
        raise ShapeError(f"topicConfigTable is not an object (found {json_kind(table)})")
    for name, config in table.items():
        _check_topic_entry(f"topicConfigTable[{name!r}]", config)
    _deleted_topics(document.get(DELETED_TOPICS_FIELD, {}))
    return document, counter, table


def _deleted_topics(value: Any) -> dict[str, int]:
    """The tombstones of a loaded document (a field of another shape is a damaged file)."""
    if not isinstance(value, dict):
        raise ShapeError(f"{DELETED_TOPICS_FIELD} is not an object (found {json_kind(value)})")
    for name, end in value.items():
        if not is_json_int(end) or end < 0:
            raise ShapeError(
                f"{DELETED_TOPICS_FIELD}[{name!r}] is not a non-negative integer "
                f"(found {json_kind(end)})"
            )
    return dict(value)


def _check_topic_entry(where: str, config: Any) -> None:
    if not isinstance(config, dict):
        raise ShapeError(f"{where} is not an object (found {json_kind(config)})")
    for field in ("readQueueNums", "writeQueueNums", "perm"):
        value = config.get(field, 0)
        if not is_json_int(value) or not 0 <= value <= MAX_QUEUE_NUMS:
            raise ShapeError(
                f"{where}.{field} is not an integer in [0, {MAX_QUEUE_NUMS}] "
                f"(found {json_kind(value)})"
            )
    order = config.get("order", False)
    if not isinstance(order, bool):
        raise ShapeError(f"{where}.order is not a boolean (found {json_kind(order)})")


def _queues_on_disk(consume_queue_dir: Path) -> dict[str, int]:
    """topic -> 1 + highest queue id found under ``consumequeue/``."""
    found: dict[str, int] = {}
    if not consume_queue_dir.is_dir():
        return found
    for topic in os.listdir(consume_queue_dir):
        topic_dir = consume_queue_dir / topic
        if not topic_dir.is_dir():
            continue
        ids = [int(q) for q in os.listdir(topic_dir) if q.isdigit()]
        if ids:
            found[topic] = max(ids) + 1
    return found
