"""Store geometry is checked when a store is created against what the format can hold and
against sanity; each bound is tried just inside (the store is created) and just outside (a
one-line :class:`GeometryError` naming the field, the value and the allowed range; from
``quiver store init`` one line on stderr and exit status 2, nothing created).

The limits (localstore/geometry.py): every file at most 2^31 - 1 bytes (RocketMQ maps each with
a Java int size; a record's TOTALSIZE, the blank record's length and the offset index's positions
are 4-byte ints); consume-queue files of 20-byte units; index files of
``40 + 4 * slots + 20 * entries`` bytes with at least 2 entries (entry 0 is never used); a
segment holds a record of the largest body (92 bytes around it) and the 8-byte blank record.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from localstore import GeometryError, MessageStore, NewMessage
from localstore.geometry import StoreGeometry, new_geometry
from tests.sdk.test_cli import quiver
from tests.sdk.test_cli_argument_checks import refused

INT32_MAX = 2**31 - 1
SMALL = {"commitlog_file_size": 65536, "cq_entries_per_file": 50}
SMALL |= {"index_slots": 64, "index_entries": 256}
OPTION = {
    "commitlog_file_size": "--commitlog-file-size",
    "cq_entries_per_file": "--cq-entries-per-file",
    "index_slots": "--index-slots",
    "index_entries": "--index-entries",
    "max_message_size": "--max-message-size",
}

# (field, value just inside, value just outside, the allowed range as the error states it);
# the other fields are SMALL's unless the case says otherwise.
BOUNDS: list[tuple[dict[str, int], str, int, int, str]] = [
    ({}, "commitlog_file_size", 4096, 4095, "[4096, 2147483647]"),
    ({}, "commitlog_file_size", INT32_MAX, INT32_MAX + 1, "[4096, 2147483647]"),
    ({}, "commitlog_file_size", INT32_MAX, 99 << 30, "[4096, 2147483647]"),  # 99 GiB
    ({}, "cq_entries_per_file", 1, 0, "[1, 107374182]"),
    ({}, "cq_entries_per_file", INT32_MAX // 20, INT32_MAX // 20 + 1, "[1, 107374182]"),
    ({}, "index_entries", 2, 1, "[2, 107374180]"),
    ({"index_slots": 1}, "index_entries", 107374180, 107374181, "[2, 107374180]"),
    ({}, "index_slots", 1, 0, "[1, 536869621]"),  # with SMALL's 256 entries
    ({}, "index_slots", 536869621, 536869622, "[1, 536869621]"),
    # the defaults' 20,000,000 entries leave room for this many slots
    ({"index_entries": 20_000_000}, "index_slots", 436870901, 436870902, "[1, 436870901]"),
    ({}, "max_message_size", 1, 0, "[1, 65436]"),
    # a 64 KiB segment: 92 bytes of record around the body, 8 of blank record after it
    ({}, "max_message_size", 65436, 65437, "[1, 65436]"),
    ({"commitlog_file_size": INT32_MAX}, "max_message_size", INT32_MAX - 100, INT32_MAX - 99, ""),
]
IDS = [f"{field}={outside}" for _, field, _, outside, _ in BOUNDS]


def geometry_of(others: dict[str, int], field: str, value: int) -> dict[str, Any]:
    return {**SMALL, **others, field: value}


@pytest.mark.parametrize(("others", "field", "inside", "outside", "allowed"), BOUNDS, ids=IDS)
def test_library_creates_just_inside_and_refuses_just_outside(
    tmp_path: Path, others: dict[str, int], field: str, inside: int, outside: int, allowed: str
):
    with MessageStore(tmp_path / "in", **geometry_of(others, field, inside)) as store:
        assert getattr(store.geometry, field) == inside
    with pytest.raises(GeometryError) as raised:
        MessageStore(tmp_path / "out", **geometry_of(others, field, outside))
    message = str(raised.value)
    assert f"{field}={outside} is out of range: allowed {allowed}" in message
    assert "\n" not in message
    assert not (tmp_path / "out" / "config" / "store.json").exists()  # nothing recorded


@pytest.mark.integration
@pytest.mark.parametrize(("others", "field", "inside", "outside", "allowed"), BOUNDS, ids=IDS)
def test_store_init_creates_just_inside_and_refuses_just_outside(
    tmp_path: Path, others: dict[str, int], field: str, inside: int, outside: int, allowed: str
):
    def init(directory: Path, value: int) -> Any:
        options = [
            part
            for name, number in geometry_of(others, field, value).items()
            for part in (OPTION[name], str(number))
        ]
        return quiver("store", "init", directory, *options)

    done = init(tmp_path / "in", inside)
    assert done.returncode == 0, done.stderr
    recorded = json.loads((tmp_path / "in" / "config" / "store.json").read_text())
    assert recorded[field] == inside
    if outside < 1:  # argparse refuses it first (a size or count must be positive)
        refused(init(tmp_path / "out", outside), OPTION[field])
    else:
        refused(init(tmp_path / "out", outside), f"{field}={outside} is out of range", allowed)
    assert not (tmp_path / "out").exists()  # refused before anything is created


def test_a_store_at_the_largest_geometry_takes_a_message(tmp_path: Path):
    """Not only recorded: the largest consume-queue files and index entries work (files are
    sparse where nothing was written)."""
    geometry = {"commitlog_file_size": 65536, "cq_entries_per_file": INT32_MAX // 20}
    geometry |= {"index_slots": 1, "index_entries": 107374180}
    with MessageStore(tmp_path / "s", **geometry) as store:
        assert store.put(NewMessage("T", b"body", queue_id=0, properties={"KEYS": "k"})).ok
        assert store.get_messages("T", 0, 0).messages[0].body == b"body"


def test_default_max_message_size_is_what_a_small_segment_holds():
    assert new_geometry({"commitlog_file_size": 4096}).max_message_size == 3996
    assert new_geometry({}).max_message_size == 4 * 1024 * 1024
    assert new_geometry({"commitlog_file_size": 8 << 20}).max_message_size == 4 * 1024 * 1024


def test_a_recorded_small_segment_with_a_large_max_message_size_still_opens(tmp_path: Path):
    """Stores recorded before the sanity rule (a 64 KiB segment, a 4 MiB limit) open as they
    were: only the format's limits are checked on a recorded geometry."""
    root = tmp_path / "s"
    (root / "config").mkdir(parents=True)
    recorded = StoreGeometry(**SMALL).to_json()
    assert recorded["max_message_size"] == 4 * 1024 * 1024
    (root / "config" / "store.json").write_text(json.dumps(recorded))
    with MessageStore(root) as store:
        assert store.geometry.max_message_size == 4 * 1024 * 1024
        assert store.put(NewMessage("T", b"x", queue_id=0)).ok


@pytest.mark.parametrize(
    ("field", "value", "fragment"),
    [
        ("flush_mode", "never", "flush_mode must be 'async' or 'sync'"),
        ("commitlog_file_size", True, "commitlog_file_size is not an integer (found true)"),
        ("cq_entries_per_file", 1.5, "cq_entries_per_file is not an integer (found 1.5)"),
    ],
)
def test_library_refuses_values_of_another_type(field: str, value: Any, fragment: str):
    with pytest.raises(GeometryError, match=fragment.replace("(", r"\(").replace(")", r"\)")):
        new_geometry({**SMALL, field: value})
