"""Store geometry: the sizes a store is created with, recorded in ``config/store.json``.

RocketMQ does not record its segment sizes; a broker must be configured with the sizes its files
were written with. Quiver records them when it creates a store (``config/store.json`` is a file
RocketMQ's broker never reads) and uses the recorded values on every reopen; asking for different
values is an error. A store written by RocketMQ itself has no such file: its geometry is inferred
from the files (segment lengths, index file length) or given explicitly, and then recorded.

Defaults are RocketMQ's: 1 GiB commitlog segments, 300,000 consume-queue units per file, index
files of 5,000,000 slots and 20,000,000 entries, 4 MiB maximum body (or the largest body a
segment holds, when segments are smaller than 4 MiB + 100 bytes), asynchronous flush.

Bounds (:class:`~localstore.errors.GeometryError` names the field, the value and the range):

* what the format can hold, checked on every geometry (created, recorded or inferred): every
  file is at most 2^31 - 1 bytes, as RocketMQ maps each with a Java ``int`` size, and as the
  store's own 4-byte fields need:
  ``commitlog_file_size`` in [4096, 2^31 - 1] (a record's TOTALSIZE and the blank record's
  length are 4-byte ints, the offset index's positions 4-byte); ``cq_entries_per_file`` in
  [1, (2^31 - 1) // 20] (20-byte units; the time index's 4-byte relative queue offsets);
  ``index_entries`` >= 2 (entry 0 is never used) and ``index_slots`` >= 1 with
  ``40 + 4 * index_slots + 20 * index_entries`` <= 2^31 - 1 (the header's 4-byte slot and entry
  counts); ``max_message_size`` in [1, 2^31 - 1 - 92] (the 4-byte body length and TOTALSIZE);
* sanity, checked when a store is created (:func:`new_geometry`): a segment holds the largest
  message plus the blank record that ends a segment, i.e. ``max_message_size`` <=
  ``commitlog_file_size - 100`` (91 fixed bytes, a 1-byte topic, the body, 8 blank bytes).
  A recorded geometry is not refused for it: such a store only rejects the larger messages.

A recorded ``store.json`` is written with a ``store.json.bak`` beside it; a damaged one (not
JSON, another shape, a value out of the bounds above) falls back to the ``.bak`` like every
config file (:mod:`localstore.files.json_shape`).
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import orjson

from localstore.errors import GeometryError, GeometryMismatchError
from localstore.files.atomic_file import write_atomically
from localstore.files.json_shape import (
    ShapeError,
    backup_path,
    decode_json_object,
    is_json_int,
    json_kind,
    read_with_backup,
)
from localstore.files.mapped_file import NAME_DIGITS

FlushMode = Literal["async", "sync"]
CQ_UNIT_SIZE = 20
INDEX_HEADER_SIZE = 40
INDEX_SLOT_SIZE = 4
INDEX_ENTRY_SIZE = 20
GEOMETRY_FILE = Path("config") / "store.json"
FORMAT_VERSION = 1
MAX_FILE_SIZE = 2**31 - 1  # a Java int: the largest file RocketMQ maps, the 4-byte fields' limit
MIN_COMMITLOG_FILE_SIZE = 4096
# The smallest record around a body: 91 fixed bytes (IPv4 hosts) and a 1-byte topic.
SMALLEST_RECORD_OVERHEAD = 92
BLANK_RECORD_SIZE = 8  # the record that ends a segment (localstore.record.codec)
DEFAULT_MAX_MESSAGE_SIZE = 4 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class StoreGeometry:
    """Sizes fixed for the life of a store."""

    commitlog_file_size: int = 1024 * 1024 * 1024
    cq_entries_per_file: int = 300_000
    index_slots: int = 5_000_000
    index_entries: int = 20_000_000
    max_message_size: int = DEFAULT_MAX_MESSAGE_SIZE
    flush_mode: FlushMode = "async"
    index_enabled: bool = True  # RocketMQ's messageIndexEnable: build index files on put

    def __post_init__(self) -> None:
        """Check every field against what the format can hold (see the module docstring)."""
        _check_range("commitlog_file_size", self.commitlog_file_size, MIN_COMMITLOG_FILE_SIZE)
        _check_range("cq_entries_per_file", self.cq_entries_per_file, 1)
        _check_range("index_entries", self.index_entries, 2)
        _check_range("index_slots", self.index_slots, 1, {"index_entries": self.index_entries})
        _check_range("max_message_size", self.max_message_size, 1)
        if self.flush_mode not in ("async", "sync"):
            raise GeometryError(f"flush_mode must be 'async' or 'sync', got {self.flush_mode!r}")

    @property
    def cq_file_size(self) -> int:
        return self.cq_entries_per_file * CQ_UNIT_SIZE

    @property
    def index_file_size(self) -> int:
        return (
            INDEX_HEADER_SIZE
            + self.index_slots * INDEX_SLOT_SIZE
            + self.index_entries * INDEX_ENTRY_SIZE
        )

    def to_json(self) -> dict[str, Any]:
        return {"format_version": FORMAT_VERSION, **dataclasses.asdict(self)}


def _largest(name: str, values: dict[str, int]) -> tuple[int, str]:
    """The largest value of field ``name`` the format holds, given the other fields, and why."""
    if name == "commitlog_file_size":
        return MAX_FILE_SIZE, "a record's 4-byte TOTALSIZE and a segment mapped with an int size"
    if name == "cq_entries_per_file":
        return MAX_FILE_SIZE // CQ_UNIT_SIZE, f"20-byte units in a file of at most {MAX_FILE_SIZE}"
    if name == "max_message_size":
        return MAX_FILE_SIZE - SMALLEST_RECORD_OVERHEAD, "a record's 4-byte body length"
    room = MAX_FILE_SIZE - INDEX_HEADER_SIZE
    file = f"an index file of 40 + 4*slots + 20*entries bytes, at most {MAX_FILE_SIZE}"
    if name == "index_entries":  # checked before index_slots: the least room slots leave
        return (room - INDEX_SLOT_SIZE) // INDEX_ENTRY_SIZE, file
    entries = values["index_entries"]
    return (room - INDEX_ENTRY_SIZE * entries) // INDEX_SLOT_SIZE, f"{file}, {entries} entries"


def _check_range(
    name: str, value: Any, smallest: int, values: dict[str, int] | None = None
) -> None:
    if type(value) is not int:
        raise GeometryError(f"{name} is not an integer (found {json_kind(value)})")
    largest, why = _largest(name, values or {})
    if not smallest <= value <= largest:
        raise GeometryError(
            f"{name}={value} is out of range: allowed [{smallest}, {largest}] ({why})"
        )


_FIELDS = tuple(f.name for f in dataclasses.fields(StoreGeometry))
# The JSON type of each field: that of its default (every field has one).
_FIELD_TYPES: dict[str, type] = {f.name: type(f.default) for f in dataclasses.fields(StoreGeometry)}
_TYPE_NAMES = {int: "an integer", str: "a string", bool: "a boolean"}


def resolve_geometry(root: Path, requested: dict[str, Any] | None = None) -> StoreGeometry:
    """The geometry of the store at ``root``: recorded, else inferred from its files, else the
    defaults overridden by ``requested``. Records it when it was not recorded yet.

    ``requested`` holds only the values the caller asked for explicitly; one that contradicts the
    recorded or inferred geometry raises :class:`GeometryMismatchError`, one the format cannot
    hold (or a new store that makes no sense) :class:`GeometryError`.
    """
    requested = _requested_fields(requested)
    path = root / GEOMETRY_FILE
    if path.exists() or backup_path(path).exists():
        recorded = load_geometry(path, restore=True)
        _check_agrees(recorded, requested, f"recorded in {path}")
        return recorded
    new_geometry(requested)  # the request alone: an error names the caller's value
    inferred = infer_geometry(root, requested)
    _check_agrees(inferred, requested, f"found in the files of {root}")
    values = {**dataclasses.asdict(inferred), **requested}
    values.pop("max_message_size")
    geometry = new_geometry({**values, **_requested_fields(requested, ("max_message_size",))})
    save_geometry(path, geometry)
    return geometry


def _requested_fields(
    requested: dict[str, Any] | None, names: tuple[str, ...] = _FIELDS
) -> dict[str, Any]:
    chosen = {k: v for k, v in (requested or {}).items() if v is not None}
    unknown = set(chosen) - set(_FIELDS)
    if unknown:
        raise GeometryError(f"unknown geometry settings: {', '.join(sorted(unknown))}")
    return {k: v for k, v in chosen.items() if k in names}


def new_geometry(requested: dict[str, Any]) -> StoreGeometry:
    """The geometry of a new store: the defaults overridden by ``requested``, each field checked
    against what the format holds and the whole against sanity (a segment holds the largest
    message and a blank record); :class:`GeometryError` names the field, value and range.
    Without a requested ``max_message_size`` it is 4 MiB, or the largest body a segment
    holds when that is less."""
    requested = _requested_fields(requested)
    asked = requested.pop("max_message_size", None)
    geometry = StoreGeometry(**requested)
    largest_body = geometry.commitlog_file_size - SMALLEST_RECORD_OVERHEAD - BLANK_RECORD_SIZE
    if asked is None:
        largest = min(DEFAULT_MAX_MESSAGE_SIZE, largest_body)
        return dataclasses.replace(geometry, max_message_size=largest)
    if type(asked) is not int:
        raise GeometryError(f"max_message_size is not an integer (found {json_kind(asked)})")
    if not 1 <= asked <= largest_body:
        raise GeometryError(
            f"max_message_size={asked} is out of range: allowed [1, {largest_body}] (a "
            f"commitlog segment of {geometry.commitlog_file_size} bytes holds a record of "
            f"{SMALLEST_RECORD_OVERHEAD} bytes + the body, then an {BLANK_RECORD_SIZE}-byte "
            "blank record)"
        )
    return dataclasses.replace(geometry, max_message_size=asked)


def load_geometry(path: Path, *, restore: bool = False) -> StoreGeometry:
    """The geometry recorded in ``path`` (or, when it is damaged, in its ``.bak``: a WARNING
    names both). A file that is not valid JSON, is not an object of Quiver's fields, or holds a
    value of the wrong type or out of range is damaged; when both are, :class:`CorruptStoreError`
    names both files; with ``restore`` a geometry read from the ``.bak`` is recorded in ``path``
    again. Another format version raises :class:`GeometryMismatchError`. Unknown keys
    are ignored, and a field a file lacks (one recorded before the field existed) takes its
    default."""
    try:
        loaded = read_with_backup(path, _decode_geometry)
    except GeometryMismatchError as exc:
        raise GeometryMismatchError(f"{path} (or its backup) records {exc}") from exc
    if loaded is None:
        raise GeometryMismatchError(f"{path} and its backup are both missing")
    if restore and loaded.from_backup:  # the store records its geometry again
        save_geometry(path, loaded.value)
    return loaded.value


def _decode_geometry(data: bytes) -> StoreGeometry:
    values = decode_json_object(data)
    version = values.pop("format_version", None)
    if not is_json_int(version):
        raise ShapeError(f"format_version is not an integer (found {json_kind(version)})")
    if version != FORMAT_VERSION:
        raise GeometryMismatchError(f"format version {version}, this Quiver reads {FORMAT_VERSION}")
    values = {k: v for k, v in values.items() if k in _FIELDS}
    for name, value in values.items():
        expected = _FIELD_TYPES[name]
        if type(value) is not expected:  # exact: a JSON true is no integer here
            raise ShapeError(f"{name} is not {_TYPE_NAMES[expected]} (found {json_kind(value)})")
    return StoreGeometry(**values)  # GeometryError (a ValueError) for a value out of range


def save_geometry(path: Path, geometry: StoreGeometry) -> None:
    """Record ``geometry`` in ``path`` and in its ``.bak`` (written once, at creation)."""
    data = orjson.dumps(geometry.to_json(), option=orjson.OPT_INDENT_2)
    write_atomically(backup_path(path), data, keep_backup=False)
    write_atomically(path, data, keep_backup=False)


def _check_agrees(geometry: StoreGeometry, requested: dict[str, Any], where: str) -> None:
    conflicts = [
        f"{k}={v!r} (store has {getattr(geometry, k)!r})"
        for k, v in requested.items()
        if getattr(geometry, k) != v
    ]
    if conflicts:
        raise GeometryMismatchError(
            f"requested {', '.join(conflicts)}, but the geometry {where} differs"
        )


def infer_geometry(root: Path, requested: dict[str, Any]) -> StoreGeometry:
    """Geometry of a store that did not record it (RocketMQ's own), read off its file sizes."""
    values: dict[str, Any] = {}
    commitlog = _first_segment_size(root / "commitlog")
    if commitlog is not None:
        values["commitlog_file_size"] = commitlog
    cq_size = _first_cq_file_size(root / "consumequeue")
    if cq_size is not None:
        values["cq_entries_per_file"] = cq_size // CQ_UNIT_SIZE
    index_size = _first_segment_size(root / "index", any_name=True)
    if index_size is not None:
        values.update(_infer_index(index_size, requested))
    return StoreGeometry(**{**values, **{k: v for k, v in requested.items() if k not in values}})


def _infer_index(file_size: int, requested: dict[str, Any]) -> dict[str, int]:
    """Index slots and entries from an index file's length: ``40 + 4*slots + 20*entries``.

    Given one of the two, the other follows; given neither, RocketMQ's 1:4 ratio of slots to
    entries is assumed (true of its defaults), and a length that does not fit it is an error.
    """
    body = file_size - INDEX_HEADER_SIZE
    slots = requested.get("index_slots")
    entries = requested.get("index_entries")
    if slots is None and entries is None:
        if body % (INDEX_SLOT_SIZE + 4 * INDEX_ENTRY_SIZE):
            raise GeometryMismatchError(
                f"cannot infer index slots and entries from an index file of {file_size} bytes: "
                "give index_slots or index_entries explicitly (from the command line, "
                "record them in the store once: quiver store init DIR --index-slots N "
                "--index-entries M)"
            )
        slots = body // (INDEX_SLOT_SIZE + 4 * INDEX_ENTRY_SIZE)
        return {"index_slots": slots, "index_entries": 4 * slots}
    if slots is not None:
        return {
            "index_slots": slots,
            "index_entries": (body - INDEX_SLOT_SIZE * slots) // INDEX_ENTRY_SIZE,
        }
    assert entries is not None
    return {
        "index_entries": entries,
        "index_slots": (body - INDEX_ENTRY_SIZE * entries) // INDEX_SLOT_SIZE,
    }


def _first_segment_size(directory: Path, any_name: bool = False) -> int | None:
    if not directory.is_dir():
        return None
    for name in sorted(os.listdir(directory)):
        if (any_name and name.isdigit()) or (len(name) == NAME_DIGITS and name.isdigit()):
            size = (directory / name).stat().st_size
            if size > 0:
                return size
    return None


def _first_cq_file_size(directory: Path) -> int | None:
    if not directory.is_dir():
        return None
    for topic in sorted(os.listdir(directory)):
        topic_dir = directory / topic
        if not topic_dir.is_dir():
            continue
        for queue in sorted(os.listdir(topic_dir)):
            size = _first_segment_size(topic_dir / queue)
            if size is not None:
                return size
    return None
