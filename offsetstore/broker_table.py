"""The broker's consumer offset table (RocketMQ's ``ConsumerOffsetManager``).

Memory: ``"topic@group" -> {queue_id: offset}`` (topic first, separator ``@``; neither a topic
nor a group may contain ``@``). Offsets are "next to consume". :meth:`ConsumerOffsetTable.commit`
**overwrites**, as the broker does: clients send increase-only values, and an administrator's
reset must be able to move an offset back.

File ``{root}/config/consumerOffset.json`` (and ``consumerOffset.json.bak``)::

    {
      "dataVersion": {"counter": 7, "stateVersion": 0, "timestamp": 1736661762584},
      "offsetTable": {"TopicTest@group_a": {"0": 42, "1": 41}}
    }

Quiver writes strict JSON (quoted keys), which RocketMQ's fastjson reads too. It reads
RocketMQ's own files: tab-indented fastjson output with **unquoted integer map keys**
(``{0:42,1:41}``), 4.x files holding only ``offsetTable``, and 5.x files whose derived
``groupTopicMap`` and ``lmqOffsetTable`` are ignored.

Invariants:

* Writes are atomic (see :mod:`offsetstore.atomic_file`): the file is always a complete old or a
  complete new table, and ``.bak`` holds the table before the last write.
* Loading never silently restarts from nothing: a missing, empty or unparsable main file, or one
  of another shape than above (offsets that are not integers in [0, 2^63 - 1], queue ids that
  are not integers in [0, 2^31 - 1], a key that is not ``topic@group``, ...), falls back to
  ``.bak`` with a WARNING naming both (:func:`offsetstore.atomic_file.read_with_backup`); when
  neither is usable, :class:`~offsetstore.base.OffsetFileError` names both files and what is
  wrong with each. Only when neither file exists does the table start empty.
* The table is thread-safe: one lock guards memory, a second serializes file writes (the write
  happens outside the memory lock, from a snapshot).
* Persisted every ``interval_s`` seconds by :meth:`start_auto_persist` (RocketMQ's
  ``flushConsumerOffsetInterval``, 5 s) when changed, and by :meth:`close`.

Queue bounds come through the :class:`QueueBounds` protocol (localstore's ``MessageStore``
satisfies it), so this module never imports localstore.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal, Protocol

import orjson

from offsetstore.atomic_file import backup_path, read_with_backup, write_atomically
from offsetstore.base import NOT_FOUND, ReadResult
from offsetstore.fastjson import loads as fastjson_loads
from offsetstore.json_shape import (
    INT32_MAX,
    ShapeError,
    data_version,
    expect_int,
    expect_int_key,
    expect_object,
    json_kind,
)
from offsetstore.memory import PeriodicPersister, check_offset
from quiver_errors import InvalidArgumentError

__all__ = [
    "FILE_NAME",
    "ConsumerOffsetTable",
    "MinOffsetSource",
    "QueueBounds",
    "ResetTarget",
    "parse_offset_file",
]

log = logging.getLogger(__name__)

FILE_NAME = "consumerOffset.json"
DEFAULT_PERSIST_INTERVAL_S = 5.0
ResetTarget = Literal["earliest", "latest"] | int  # an int is a store timestamp in ms

# A JSON string (kept as is) or an unquoted integer map key after "{" or "," (quoted).


class MinOffsetSource(Protocol):
    """Asks a queue's smallest readable offset (for the "young queue answers 0" rule)."""

    def min_offset(self, topic: str, queue_id: int) -> int: ...


class QueueBounds(MinOffsetSource, Protocol):
    """What resets and lag reports need from the store; localstore's ``MessageStore`` has all
    four."""

    def max_offset(self, topic: str, queue_id: int) -> int: ...

    def offset_for_timestamp(self, topic: str, queue_id: int, timestamp_ms: int) -> int: ...

    def queue_ids(self, topic: str) -> list[int]: ...


def parse_offset_file(
    text: str | bytes,
) -> tuple[dict[str, dict[int, int]], dict[str, int]]:
    """``(offset table, data version)`` of a consumerOffset.json text (strict JSON or
    RocketMQ's fastjson dialect). Raises ValueError when it is not such a file: not JSON, or
    JSON of another shape (:class:`~offsetstore.json_shape.ShapeError` naming the field)."""
    if not text.strip():
        raise ValueError("the file is empty")
    document = fastjson_loads(text)
    if not isinstance(document, dict):
        raise ShapeError(f"not a JSON object (found {json_kind(document)})")
    table: dict[str, dict[int, int]] = {}
    for key, queues in expect_object("offsetTable", document.get("offsetTable", {})).items():
        table[_table_key(key)] = _queue_offsets(f"offsetTable[{json_kind(key)}]", queues)
    version = data_version(document["dataVersion"]) if "dataVersion" in document else {}
    return table, version


def _table_key(key: Any) -> str:
    """A key of ``offsetTable``: ``topic@group``, both parts non-empty."""
    if isinstance(key, str):
        topic, at, group = key.partition("@")
        if topic and at and group:
            return key
    raise ShapeError(f"offsetTable key {json_kind(key)} is not TOPIC@GROUP")


def _queue_offsets(where: str, queues: Any) -> dict[int, int]:
    """``{queue id: offset}`` of one ``topic@group`` entry (queue ids as keys, quoted or not)."""
    return {
        expect_int_key(where, queue_id): expect_int(f"{where}[{queue_id!r}]", offset)
        for queue_id, offset in expect_object(where, queues).items()
    }


class ConsumerOffsetTable:
    """The committed offsets of every consumer group of one broker (thread-safe)."""

    def __init__(self, root: str | Path, *, min_offsets: MinOffsetSource | None = None):
        """Load ``{root}/config/consumerOffset.json`` (or its ``.bak``). ``min_offsets``
        enables RocketMQ's rule that a never-committed queue whose min offset is 0 answers 0."""
        self.path = Path(root) / "config" / FILE_NAME
        self.backup_path = backup_path(self.path)
        self._min_offsets = min_offsets
        self._lock = threading.Lock()
        self._write_lock = threading.Lock()
        self._table: dict[str, dict[int, int]] = {}
        self._version = {"counter": 0, "stateVersion": 0, "timestamp": 0}
        self._dirty = False
        self._keep_backup = True  # False after loading from .bak: the main file is garbage
        self._persister: PeriodicPersister | None = None
        self.load()

    # -- memory -----------------------------------------------------------------------------

    def commit(self, group: str, topic: str, queue_id: int, offset: int) -> None:
        """Record ``offset`` for the queue, overwriting (a decrease is logged, not refused)."""
        self.commit_many(group, topic, {queue_id: offset})

    def commit_many(self, group: str, topic: str, offsets: dict[int, int]) -> None:
        """Record several queues of one topic at once. A queue id outside ``[0, 2**31 - 1]`` or an
        offset outside ``[0, 2**63 - 1]`` is refused (InvalidArgumentError) before any is
        recorded: the offset file could not be loaded again with it."""
        _check_entries(group, topic, offsets)
        key = _key(topic, group)
        with self._lock:
            queues = self._table.setdefault(key, {})
            for queue_id, offset in offsets.items():
                old = queues.get(queue_id)
                if old is not None and offset < old:
                    log.debug("offset of %s/%d moves back: %d -> %d", key, queue_id, old, offset)
                queues[queue_id] = offset
            self._touch()

    def commit_absent(self, group: str, topic: str, offsets: dict[int, int]) -> dict[int, int]:
        """Record each of ``offsets`` whose queue has no committed offset yet, in one step
        under the table's lock (a commit or a reset that lands meanwhile wins), and answer the
        offset each queue has after it. Checked as :meth:`commit_many` checks."""
        _check_entries(group, topic, offsets)
        with self._lock:
            queues = self._table.setdefault(_key(topic, group), {})
            now = {
                queue_id: queues.setdefault(queue_id, offset)
                for queue_id, offset in offsets.items()
            }
            self._touch()
        return now

    def query(
        self, group: str, topic: str, queue_id: int, *, zero_if_young: bool = True
    ) -> ReadResult:
        """The committed offset, or :data:`NOT_FOUND`. With ``zero_if_young`` (RocketMQ's
        ``setZeroIfNotFound``) and a min-offset source, a never-committed queue whose min offset
        is 0 answers 0: nothing was ever deleted from it, so starting at 0 misses nothing."""
        with self._lock:
            found = self._table.get(_key(topic, group), {}).get(queue_id)
        if found is not None:
            return found
        source = self._min_offsets
        if zero_if_young and source is not None and source.min_offset(topic, queue_id) <= 0:
            return 0
        return NOT_FOUND

    def groups(self) -> list[str]:
        """Every group with committed offsets, sorted."""
        with self._lock:
            return sorted({key.partition("@")[2] for key in self._table})

    def topics(self, group: str) -> list[str]:
        """The topics ``group`` committed offsets of, sorted."""
        with self._lock:
            return sorted(t for t, _, g in (k.partition("@") for k in self._table) if g == group)

    def offsets(self, group: str, topic: str) -> dict[int, int]:
        """A copy of ``{queue_id: offset}`` of ``group`` on ``topic`` (empty when none)."""
        with self._lock:
            return dict(sorted(self._table.get(_key(topic, group), {}).items()))

    def remove(self, group: str, topic: str) -> bool:
        """Forget ``group``'s offsets on ``topic``; whether there were any."""
        with self._lock:
            found = self._table.pop(_key(topic, group), None) is not None
            if found:
                self._touch()
            return found

    def data_version(self) -> dict[str, int]:
        """RocketMQ's ``dataVersion`` (``counter`` grows with every change)."""
        with self._lock:
            return dict(self._version)

    def _touch(self) -> None:
        self._version["counter"] += 1
        self._version["timestamp"] = int(time.time() * 1000)
        self._dirty = True

    # -- resets and lag ---------------------------------------------------------------------

    def reset(self, group: str, topic: str, to: ResetTarget, bounds: QueueBounds) -> dict[int, int]:
        """Move ``group``'s offsets of every queue of ``topic`` to the earliest or latest
        offset, or to the first offset stored at or after a timestamp (ms); returns them."""
        queue_ids = sorted(set(bounds.queue_ids(topic)) | set(self.offsets(group, topic)))
        target: Callable[[int], int]
        if to == "earliest":
            target = lambda q: bounds.min_offset(topic, q)  # noqa: E731
        elif to == "latest":
            target = lambda q: bounds.max_offset(topic, q)  # noqa: E731
        elif isinstance(to, int) and not isinstance(to, bool) and to >= 0:
            timestamp_ms = to
            target = lambda q: bounds.offset_for_timestamp(topic, q, timestamp_ms)  # noqa: E731
        else:
            raise InvalidArgumentError(
                f"reset target must be earliest, latest or a timestamp, not {to!r}"
            )
        offsets = {q: target(q) for q in queue_ids}
        self.commit_many(group, topic, offsets)
        return offsets

    # -- file -------------------------------------------------------------------------------

    def load(self) -> None:
        """Replace memory with the file's table (or the backup's); see the module docstring."""
        loaded = read_with_backup(self.path, parse_offset_file, "consumer offsets")
        if loaded is None:
            return
        table, version = loaded.value
        with self._lock:
            self._table = table
            self._version.update(version)
            self._dirty = False
            self._keep_backup = not loaded.from_backup

    def persist(self) -> None:
        """Write the table to the file atomically (keeping the previous one as ``.bak``)."""
        with self._write_lock:
            with self._lock:
                document = {
                    "dataVersion": dict(self._version),
                    "offsetTable": {
                        key: {str(q): o for q, o in sorted(queues.items())}
                        for key, queues in sorted(self._table.items())
                    },
                }
                self._dirty = False
                keep_backup = self._keep_backup
            data = orjson.dumps(document, option=orjson.OPT_INDENT_2) + b"\n"
            try:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                # After loading from .bak the main file is damaged: never rotate it over .bak.
                write_atomically(self.path, data, keep_backup=keep_backup)
            except BaseException:
                with self._lock:
                    self._dirty = True
                raise
            with self._lock:
                self._keep_backup = True

    def start_auto_persist(self, interval_s: float = DEFAULT_PERSIST_INTERVAL_S) -> None:
        """Persist every ``interval_s`` seconds (when changed) on a daemon thread."""
        if self._persister is None:
            self._persister = PeriodicPersister(
                "consumer-offsets", self._persist_if_changed, interval_s
            )

    def _persist_if_changed(self) -> None:
        if self._dirty:
            self.persist()

    def close(self) -> None:
        """Stop the persist thread and persist (when changed). Idempotent."""
        persister, self._persister = self._persister, None
        if persister is not None:
            persister.stop()
        self._persist_if_changed()

    def __enter__(self) -> ConsumerOffsetTable:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def _key(topic: str, group: str) -> str:
    """``topic@group``, refused (InvalidArgumentError) unless :func:`_table_key` can load it."""
    if "@" in topic or "@" in group:
        raise InvalidArgumentError(f"a topic or group may not contain '@': {topic!r}, {group!r}")
    if not topic or not group:
        raise InvalidArgumentError(f"a topic and a group must not be empty: {topic!r}, {group!r}")
    return f"{topic}@{group}"


def _check_entries(group: str, topic: str, offsets: dict[int, int]) -> None:
    """Refuse a queue id outside ``[0, 2**31 - 1]`` or an offset outside ``[0, 2**63 - 1]``."""
    for queue_id, offset in offsets.items():
        if type(queue_id) is not int or not 0 <= queue_id <= INT32_MAX:
            raise InvalidArgumentError(
                f"{topic}@{group}: a queue id is an int in [0, {INT32_MAX}], got {queue_id!r}"
            )
        check_offset(offset)
