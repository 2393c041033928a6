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

* Reading never silently restarts from 0: a missing, empty or unparsable main file, or one of
  another shape (an offset that is not a non-negative integer, a queue that is not an object of
  ``topic``, ``brokerName`` and ``queueId``, ...), falls back to ``.bak`` with a logged warning
  (:func:`offsetstore.atomic_file.read_with_backup`); if both are unusable
  :class:`OffsetFileError` names both files. Only when neither file exists is the table empty
  (a new consumer). A write after loading from ``.bak`` leaves ``.bak`` as it is.
* Writers merge: :meth:`persist_all` reads the file under the file lock, overlays the in-memory
  offsets of the given queues and writes the result atomically, so processes of one group that
  persist different queues never erase each other's queues.
* Offsets are "next to consume"; entries frozen by :meth:`update_and_freeze_offset` ignore every
  update (including :meth:`load` and READ_FROM_STORE) until :meth:`remove_offset`.
* Thread-safe: one lock guards the in-memory table, another serialises this instance's file I/O.
"""

from __future__ import annotations

import errno
import logging
import threading
from collections.abc import Iterable, Mapping
from pathlib import Path
from types import TracebackType
from typing import Any

import orjson
from filelock import FileLock

from offsetstore.atomic_file import read_with_backup, remove_stale_temp_files, write_atomically
from offsetstore.base import (
    NOT_FOUND,
    READ_FAILED,
    MessageQueue,
    OffsetStoreError,
    OffsetWriteError,
    ReadOffsetType,
    ReadResult,
)
from offsetstore.fastjson import loads as fastjson_loads
from offsetstore.json_shape import (
    INT32_MAX,
    ShapeError,
    expect_int,
    expect_object,
    expect_str,
    json_kind,
)
from offsetstore.memory import MAX_OFFSET, MemoryOffsets, PeriodicPersister
from quiver_errors import IllegalStateError, InvalidArgumentError

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
    """Parse an offsets file in Quiver's or RocketMQ's format; :class:`ValueError` if unusable
    (not JSON, or JSON of another shape: :class:`~offsetstore.json_shape.ShapeError`)."""
    if not data.strip():
        raise ValueError("empty file")
    try:
        document: Any = orjson.loads(data)
    except orjson.JSONDecodeError:
        document = fastjson_loads(data)  # RocketMQ's dialect; raises ValueError on garbage
    if not isinstance(document, Mapping) or "offsetTable" not in document:
        raise ShapeError(f"not an object with an offsetTable (found {json_kind(document)})")
    table = document["offsetTable"]
    if isinstance(table, list):
        return dict(
            _queue_and_offset(f"offsetTable[{index}]", entry, "offset")
            for index, entry in enumerate(table)
        )
    if isinstance(table, Mapping):
        return dict(
            _queue_and_offset(f"offsetTable key {json_kind(key)}", key, offset)
            for key, offset in table.items()
        )
    raise ShapeError(f"offsetTable is neither an array nor an object (found {json_kind(table)})")


def _queue_and_offset(where: str, queue: Any, offset: Any) -> tuple[MessageQueue, int]:
    """A queue object (``topic``, ``brokerName``, ``queueId``) and its offset; ``offset`` is the
    value itself, or the string ``"offset"``: the field of ``queue`` that holds it."""
    fields = expect_object(where, queue)
    if offset == "offset":
        offset = fields.get("offset")
    return (
        MessageQueue(
            expect_str(f"{where}.topic", fields.get("topic"), non_empty=True),
            expect_str(f"{where}.brokerName", fields.get("brokerName")),
            expect_int(f"{where}.queueId", fields.get("queueId"), 0, INT32_MAX),
        ),
        expect_int(f"{where} offset", offset, 0, MAX_OFFSET),
    )


def read_offsets_file(path: Path) -> dict[MessageQueue, int]:
    """The offsets in ``path``, else in its ``.bak`` (logged); ``{}`` if neither exists.

    Raises :class:`OffsetFileError` naming both files when neither is usable."""
    return _read_offsets(path)[0]


def _read_offsets(path: Path) -> tuple[dict[MessageQueue, int], bool]:
    """The offsets and whether they came from the ``.bak`` (the main file is damaged)."""
    loaded = read_with_backup(path, decode_offsets, "consumer offsets")
    if loaded is None:
        return {}, False
    return loaded.value, loaded.from_backup


# --- the store --------------------------------------------------------------------------------


def _path_component(name: str, what: str) -> str:
    if not name or name in (".", "..") or "/" in name or "\\" in name or "\0" in name:
        raise InvalidArgumentError(f"{what} {name!r} cannot be used as a folder name")
    return name


class LocalFileOffsetStore:
    """Offsets of one consumer group on this machine, persisted to ``offsets.json``."""

    def __init__(self, client_id: str, group: str, base_dir: str | Path | None = None) -> None:
        root = Path(base_dir) if base_dir is not None else Path.home() / DEFAULT_DIR_NAME
        self.client_id = _path_component(client_id, "client id")
        self.group = _path_component(group, "consumer group")
        self.path = root / self.client_id / self.group / FILE_NAME
        self._memory = MemoryOffsets()
        self._io_lock = threading.Lock()  # this instance's file reads-modify-writes
        self._file_lock = FileLock(str(self.path) + ".lock")
        self._persister: PeriodicPersister | None = None

    def __repr__(self) -> str:
        return f"LocalFileOffsetStore(path={str(self.path)!r})"

    # memory -----------------------------------------------------------------------------------

    def update_offset(self, queue: MessageQueue, offset: int, increase_only: bool) -> None:
        self._memory.update(queue, offset, increase_only)

    def update_and_freeze_offset(self, queue: MessageQueue, offset: int) -> None:
        self._memory.freeze(queue, offset)

    def remove_offset(self, queue: MessageQueue) -> None:
        self._memory.remove(queue)

    def discard(self, queue: MessageQueue) -> None:
        self._memory.remove(queue)  # nothing waits for a retry: a failed write raises

    def pending(self) -> dict[MessageQueue, int]:
        return {}

    def clone_offset_table(self, topic: str) -> dict[MessageQueue, int]:
        return self._memory.of_topic(topic)

    # the file ---------------------------------------------------------------------------------

    def load(self) -> None:
        """Read the file (or its backup) into memory; :class:`OffsetFileError` if unusable."""
        with self._io_lock:
            table = read_offsets_file(self.path)
        self._memory.update_all(table)

    def read_offset(self, queue: MessageQueue, read_type: ReadOffsetType) -> ReadResult:
        if read_type is not ReadOffsetType.STORE:
            offset = self._memory.get(queue)
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
        self._memory.update(queue, stored, increase_only=False)
        return stored

    def persist(self, queue: MessageQueue) -> None:
        self.persist_all((queue,))

    def persist_all(self, queues: Iterable[MessageQueue]) -> None:
        """Write the in-memory offsets of ``queues`` to the file, keeping every other queue the
        file holds (merge under the file lock). Raises :class:`OffsetStoreError` subclasses."""
        snapshot = self._memory.of_queues(queues)
        if not snapshot:
            return
        with self._io_lock:
            _make_folder_of(self.path)
            with self._file_lock:
                for leftover in remove_stale_temp_files(self.path):
                    logger.info("removed %s, left by a writer killed mid-write", leftover)
                on_disk, main_damaged = _read_offsets(self.path)
                on_disk.update(snapshot)
                # Loaded from .bak: the damaged main file must not replace that good backup.
                data = encode_offsets(on_disk)
                write_atomically(self.path, data, keep_backup=not main_damaged)

    def _persist_everything(self) -> None:
        self.persist_all(self._memory.queues())

    # periodic persistence -----------------------------------------------------------------------

    def start_auto_persist(self, interval_s: float = 5.0) -> None:
        """Persist every queue in memory every ``interval_s`` seconds on a daemon thread, until
        :meth:`close`. Failures are logged and retried at the next tick."""
        if self._persister is not None:
            raise IllegalStateError("auto-persist is already running")
        self._persister = PeriodicPersister(
            f"offsets-persist-{self.group}", self._persist_everything, interval_s
        )

    def close(self) -> None:
        """Stop auto-persistence and persist every queue in memory (errors propagate)."""
        persister, self._persister = self._persister, None
        if persister is not None:
            persister.stop()
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


def _make_folder_of(path: Path) -> None:
    """Create the folder of offsets file ``path``; :class:`OffsetWriteError` when it cannot be
    (a file stands where a folder should, no permission, ...)."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        reason = exc.strerror or str(exc)
        raise OffsetWriteError(
            exc.errno or errno.EIO,
            f"cannot create the folder of offsets file {path}: {reason}",
            str(path),
        ) from exc
