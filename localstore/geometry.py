"""Store geometry: the sizes a store is created with, recorded in ``config/store.json``.

RocketMQ does not record its segment sizes; a broker must be configured with the sizes its files
were written with. Quiver records them when it creates a store (``config/store.json`` is a file
RocketMQ's broker never reads) and uses the recorded values on every reopen; asking for different
values is an error. A store written by RocketMQ itself has no such file: its geometry is inferred
from the files (segment lengths, index file length) or given explicitly, and then recorded.

Defaults are RocketMQ's: 1 GiB commitlog segments, 300,000 consume-queue units per file, index
files of 5,000,000 slots and 20,000,000 entries, 4 MiB maximum body, asynchronous flush.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import orjson

from localstore.atomic_file import write_atomically
from localstore.errors import CorruptStoreError, GeometryMismatchError
from localstore.json_shape import json_kind
from localstore.mapped_file import NAME_DIGITS

FlushMode = Literal["async", "sync"]
CQ_UNIT_SIZE = 20
INDEX_HEADER_SIZE = 40
INDEX_SLOT_SIZE = 4
INDEX_ENTRY_SIZE = 20
GEOMETRY_FILE = Path("config") / "store.json"
FORMAT_VERSION = 1


@dataclass(frozen=True, slots=True)
class StoreGeometry:
    """Sizes fixed for the life of a store."""

    commitlog_file_size: int = 1024 * 1024 * 1024
    cq_entries_per_file: int = 300_000
    index_slots: int = 5_000_000
    index_entries: int = 20_000_000
    max_message_size: int = 4 * 1024 * 1024
    flush_mode: FlushMode = "async"
    index_enabled: bool = True  # RocketMQ's messageIndexEnable: build index files on put

    def __post_init__(self) -> None:
        for name in (
            "commitlog_file_size",
            "cq_entries_per_file",
            "index_slots",
            "index_entries",
            "max_message_size",
        ):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be positive, got {getattr(self, name)}")
        if self.flush_mode not in ("async", "sync"):
            raise ValueError(f"flush_mode must be 'async' or 'sync', got {self.flush_mode!r}")
        if self.commitlog_file_size < 4096:
            raise ValueError(
                f"commitlog_file_size must be at least 4096, got {self.commitlog_file_size}"
            )

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


_FIELDS = tuple(f.name for f in dataclasses.fields(StoreGeometry))
# The JSON type of each field: that of its default (every field has one).
_FIELD_TYPES: dict[str, type] = {f.name: type(f.default) for f in dataclasses.fields(StoreGeometry)}
_TYPE_NAMES = {int: "an integer", str: "a string", bool: "a boolean"}


def resolve_geometry(root: Path, requested: dict[str, Any] | None = None) -> StoreGeometry:
    """The geometry of the store at ``root``: recorded, else inferred from its files, else the
    defaults overridden by ``requested``. Records it when it was not recorded yet.

    ``requested`` holds only the values the caller asked for explicitly; one that contradicts the
    recorded or inferred geometry raises :class:`GeometryMismatchError`.
    """
    requested = {k: v for k, v in (requested or {}).items() if v is not None}
    unknown = set(requested) - set(_FIELDS)
    if unknown:
        raise ValueError(f"unknown geometry settings: {', '.join(sorted(unknown))}")
    path = root / GEOMETRY_FILE
    if path.exists():
        recorded = load_geometry(path)
        _check_agrees(recorded, requested, f"recorded in {path}")
        return recorded
    inferred = infer_geometry(root, requested)
    _check_agrees(inferred, requested, f"found in the files of {root}")
    geometry = StoreGeometry(**{**dataclasses.asdict(inferred), **requested})
    save_geometry(path, geometry)
    return geometry


def load_geometry(path: Path) -> StoreGeometry:
    """The geometry recorded in ``path``. A file that is not valid JSON, is not an object of
    Quiver's fields, or holds a value of the wrong type or out of range raises
    :class:`CorruptStoreError` naming the file; another format version raises
    :class:`GeometryMismatchError`. Unknown keys are ignored, and a field a file lacks (one
    recorded before the field existed) takes its default."""
    try:
        data = orjson.loads(path.read_bytes())
    except orjson.JSONDecodeError as exc:
        raise CorruptStoreError(f"{path} is not valid JSON: {exc}") from exc
    if not isinstance(data, dict):
        raise CorruptStoreError(f"{path}: not a JSON object (found {json_kind(data)})")
    version = data.pop("format_version", None)
    if type(version) is not int or version != FORMAT_VERSION:
        raise GeometryMismatchError(
            f"{path} has format version {version}, this Quiver reads {FORMAT_VERSION}"
        )
    values = {k: v for k, v in data.items() if k in _FIELDS}
    for name, value in values.items():
        expected = _FIELD_TYPES[name]
        if type(value) is not expected:  # exact: a JSON true is no integer here
            raise CorruptStoreError(
                f"{path}: {name} is not {_TYPE_NAMES[expected]} (found {json_kind(value)})"
            )
    try:
        return StoreGeometry(**values)
    except ValueError as exc:
        raise CorruptStoreError(f"{path}: {exc}") from exc


def save_geometry(path: Path, geometry: StoreGeometry) -> None:
    write_atomically(
        path, orjson.dumps(geometry.to_json(), option=orjson.OPT_INDENT_2), keep_backup=False
    )


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
