"""LocalFileOffsetStore: consumer offsets kept in a local file (RocketMQ's BROADCASTING store).

Path: ``{base_dir or ~/.quiver_offsets}/{client_id}/{group}/offsets.json``, with
``offsets.json.bak`` (the previous version, see :mod:`offsetstore.atomic_file`) and
``offsets.json.lock`` (the :class:`filelock.FileLock` that serialises writers) beside it.

File format written (standard JSON, via orjson, queues sorted)::

    {"version": 1,
     "offsetTable": [{"topic": "T", "brokerName": "b", "queueId": 3, "offset": 1470}, ...]}

Standard JSON rather than RocketMQ's shape because RocketMQ's is not JSON (its map keys are
``MessageQueue`` objects), so no ordinary tool could read it. Formats read, recognised by the
type of ``offsetTable``:

* a list: the format above;
* an object: RocketMQ's Java client (fastjson, compact or pretty), whose keys are objects
  ``{"brokerName":..,"queueId":..,"topic":..}``; parsed by :mod:`offsetstore.fastjson`.

So offsets of a RocketMQ broadcasting consumer can be taken over by copying its offsets.json.

Invariants:

* Reading never silently restarts from 0: a missing, empty or unparsable main file falls back to
  ``.bak`` with a logged warning; if both are unusable :class:`OffsetFileError` names both files.
  Only when neither file exists is the table empty (a new consumer).
* Writers merge: :meth:`persist_all` reads the file under the file lock, overlays the in-memory
  offsets of the given queues and writes the result atomically, so processes of one group that
  persist different queues never erase each other's queues.
* Offsets are "next to consume"; entries frozen by :meth:`update_and_freeze_offset` ignore every
  update (including :meth:`load` and READ_FROM_STORE) until :meth:`remove_offset`.
* Thread-safe: one lock guards the in-memory table, another serialises this instance's file I/O.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any, TypeGuard

import orjson
from filelock import FileLock

from offsetstore import fastjson
from offsetstore.atomic_file import backup_path, remove_stale_temp_files, write_atomically
from offsetstore.base import (
    NOT_FOUND,
    READ_FAILED,
    MessageQueue,
    OffsetFileError,
    OffsetStoreError,
    ReadOffsetType,
    ReadResult,
)

__all__ = [
    "DEFAULT_DIR_NAME",
    "FILE_FORMAT_VERSION",
    "LocalFileOffsetStore",
    "decode_offsets",
    "encode_offsets",
    "read_offsets_file",
]

logger = logging.getLogger(__name__)

DEFAULT_DIR_NAME = ".quiver_offsets"
FILE_NAME = "offsets.json"
FILE_FORMAT_VERSION = 1
MAX_OFFSET = 2**63 - 1  # a Java long, as in RocketMQ


# --- the file format --------------------------------------------------------------------------


def encode_offsets(table: Mapping[MessageQueue, int]) -> bytes:
    """The bytes of an offsets file holding ``table`` (Quiver's standard-JSON format)."""
    entries = [
        {"topic": q.topic, "brokerName": q.broker_name, "queueId": q.queue_id, "offset": offset}
        for q, offset in sorted(table.items())
    ]
    document = {"version": FILE_FORMAT_VERSION, "offsetTable": entries}
    return orjson.dumps(document, option=orjson.OPT_INDENT_2 | orjson.OPT_APPEND_NEWLINE)


def decode_offsets(data: bytes) -> dict[MessageQueue, int]:
    """Parse an offsets file in Quiver's or RocketMQ's format; :class:`ValueError` if unusable."""
    if not data.strip():
        raise ValueError("empty file")
    try:
        document: Any = orjson.loads(data)
    except orjson.JSONDecodeError:
        document = fastjson.loads(data)  # RocketMQ's dialect; raises ValueError on garbage
    if not isinstance(document, dict) or "offsetTable" not in document:
        raise ValueError("no 'offsetTable' at the top level")
    table = document["offsetTable"]
    if isinstance(table, list):
        return dict(_queue_and_offset(entry, entry.get("offset")) for entry in _objects(table))
    if isinstance(table, dict):
        return dict(_queue_and_offset(key, value) for key, value in table.items())
    raise ValueError("'offsetTable' is neither a list nor an object")


def _objects(items: list[Any]) -> Iterable[Mapping[str, Any]]:
    for item in items:
        if not isinstance(item, Mapping):
            raise ValueError(f"offsetTable entry is not an object: {item!r}")
        yield item


def _queue_and_offset(key: Any, offset: Any) -> tuple[MessageQueue, int]:
    if not isinstance(key, Mapping):
        raise ValueError(f"offsetTable key is not a queue object: {key!r}")
    topic, broker, queue_id = key.get("topic"), key.get("brokerName"), key.get("queueId")
    if not isinstance(topic, str) or not isinstance(broker, str) or not _is_int(queue_id):
        raise ValueError(f"not a message queue: {dict(key)!r}")
    if not _is_int(offset) or not 0 <= offset <= MAX_OFFSET:
        raise ValueError(f"bad offset {offset!r} for {dict(key)!r}")
    return MessageQueue(topic, broker, queue_id), offset


def _is_int(value: Any) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


def read_offsets_file(path: Path) -> dict[MessageQueue, int]:
    """The offsets in ``path``, else in its ``.bak`` (logged); ``{}`` if neither exists.

    Raises :class:`OffsetFileError` naming both files when neither is usable."""
    bak = backup_path(path)
    problems: list[str] = []
    for candidate in (path, bak):
        try:
            data = candidate.read_bytes()
        except FileNotFoundError:
            problems.append(f"{candidate}: missing")
            continue
        except OSError as exc:
            problems.append(f"{candidate}: {exc.strerror or exc}")
            continue
        try:
            table = decode_offsets(data)
        except ValueError as exc:
            problems.append(f"{candidate}: {exc}")
            continue
        if candidate is bak:
            logger.warning("offsets file unusable (%s); using its backup %s", problems[0], bak)
        return table
    if all(problem.endswith(": missing") for problem in problems):
        return {}
    raise OffsetFileError(
        f"cannot read consumer offsets from {path} nor from its backup {bak} "
        f"({'; '.join(problems)}); refusing to restart the queues from a guessed offset"
    )


# --- the store --------------------------------------------------------------------------------


@dataclass(slots=True)
class _Entry:
    offset: int
    frozen: bool = False


def _path_component(name: str, what: str) -> str:
    if not name or name in (".", "..") or "/" in name or "\\" in name or "\0" in name:
        raise ValueError(f"{what} {name!r} cannot be used as a folder name")
    return name


class LocalFileOffsetStore:
    """Offsets of one consumer group on this machine, persisted to ``offsets.json``."""

    def __init__(self, client_id: str, group: str, base_dir: str | Path | None = None) -> None:
        root = Path(base_dir) if base_dir is not None else Path.home() / DEFAULT_DIR_NAME
        self.client_id = _path_component(client_id, "client id")
        self.group = _path_component(group, "consumer group")
        self.path = root / self.client_id / self.group / FILE_NAME
        self._table: dict[MessageQueue, _Entry] = {}
        self._lock = threading.Lock()  # the in-memory table
        self._io_lock = threading.Lock()  # this instance's file reads-modify-writes
        self._file_lock = FileLock(str(self.path) + ".lock")
        self._stop = threading.Event()
        self._auto_thread: threading.Thread | None = None

    def __repr__(self) -> str:
        return f"LocalFileOffsetStore(path={str(self.path)!r})"

    # memory -----------------------------------------------------------------------------------

    @staticmethod
    def _check(offset: int) -> None:
        if not _is_int(offset) or not 0 <= offset <= MAX_OFFSET:
            raise ValueError(f"an offset is an int in [0, 2**63 - 1], got {offset!r}")

    def _set(self, queue: MessageQueue, offset: int, increase_only: bool) -> None:
        """Caller holds ``_lock``."""
        entry = self._table.get(queue)
        if entry is None:
            self._table[queue] = _Entry(offset)
        elif not entry.frozen:
            entry.offset = max(entry.offset, offset) if increase_only else offset

    def update_offset(self, queue: MessageQueue, offset: int, increase_only: bool) -> None:
        self._check(offset)
        with self._lock:
            self._set(queue, offset, increase_only)

    def update_and_freeze_offset(self, queue: MessageQueue, offset: int) -> None:
        self._check(offset)
        with self._lock:
            self._table[queue] = _Entry(offset, frozen=True)

    def remove_offset(self, queue: MessageQueue) -> None:
        with self._lock:
            self._table.pop(queue, None)

    def clone_offset_table(self, topic: str) -> dict[MessageQueue, int]:
        with self._lock:
            return {q: e.offset for q, e in self._table.items() if q.topic == topic}

    def _memory(self, queue: MessageQueue) -> int | None:
        with self._lock:
            entry = self._table.get(queue)
            return None if entry is None else entry.offset

    # the file ---------------------------------------------------------------------------------

    def load(self) -> None:
        """Read the file (or its backup) into memory; :class:`OffsetFileError` if unusable."""
        with self._io_lock:
            table = read_offsets_file(self.path)
        with self._lock:
            for queue, offset in table.items():
                self._set(queue, offset, increase_only=False)

    def read_offset(self, queue: MessageQueue, read_type: ReadOffsetType) -> ReadResult:
        if read_type is not ReadOffsetType.STORE:
            offset = self._memory(queue)
            if offset is not None:
                return offset
            if read_type is ReadOffsetType.MEMORY:
                return NOT_FOUND
        try:
            with self._io_lock:
                table = read_offsets_file(self.path)
        except OffsetStoreError:
            logger.exception("cannot read the offset of %s from %s", queue, self.path)
            return READ_FAILED
        stored = table.get(queue)
        if stored is None:
            return NOT_FOUND
        with self._lock:
            self._set(queue, stored, increase_only=False)
        return stored

    def persist(self, queue: MessageQueue) -> None:
        self.persist_all((queue,))

    def persist_all(self, queues: Iterable[MessageQueue]) -> None:
        """Write the in-memory offsets of ``queues`` to the file, keeping every other queue the
        file holds (merge under the file lock). Raises :class:`OffsetStoreError` subclasses."""
        wanted = set(queues)
        with self._lock:
            snapshot = {q: e.offset for q, e in self._table.items() if q in wanted}
        if not snapshot:
            return
        with self._io_lock:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with self._file_lock:
                for leftover in remove_stale_temp_files(self.path):
                    logger.info("removed %s, left by a writer killed mid-write", leftover)
                on_disk = read_offsets_file(self.path)
                on_disk.update(snapshot)
                write_atomically(self.path, encode_offsets(on_disk))

    def _persist_everything(self) -> None:
        with self._lock:
            queues = list(self._table)
        self.persist_all(queues)

    # periodic persistence -----------------------------------------------------------------------

    def start_auto_persist(self, interval_s: float = 5.0) -> None:
        """Persist every queue in memory every ``interval_s`` seconds on a daemon thread, until
        :meth:`close`. Failures are logged and retried at the next tick."""
        if interval_s <= 0:
            raise ValueError(f"interval_s must be positive, got {interval_s}")
        if self._auto_thread is not None:
            raise RuntimeError("auto-persist is already running")
        self._stop.clear()
        self._auto_thread = threading.Thread(
            target=self._auto_persist_loop,
            args=(interval_s,),
            name=f"offsets-persist-{self.group}",
            daemon=True,
        )
        self._auto_thread.start()

    def _auto_persist_loop(self, interval_s: float) -> None:
        while not self._stop.wait(interval_s):
            try:
                self._persist_everything()
            except Exception:
                logger.exception("periodic persist of %s failed", self.path)

    def close(self) -> None:
        """Stop auto-persistence and persist every queue in memory (errors propagate)."""
        thread, self._auto_thread = self._auto_thread, None
        if thread is not None:
            self._stop.set()
            thread.join()
        self._persist_everything()

    def __enter__(self) -> LocalFileOffsetStore:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
