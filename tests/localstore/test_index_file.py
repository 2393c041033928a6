"""The bytes of the index files (``{store}/index/{yyyyMMddHHmmssSSS}``), read back with struct at
the offsets RocketMQ's IndexFile uses: header, hash slots, entries, file naming, size and roll.
Rebuilt index files are compared byte for byte with RocketMQ's and the reference encoder's."""

from __future__ import annotations

import os
import shutil
import struct
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from localstore import MessageStore, PutResult

from .conftest import (
    REFERENCE_DIR,
    StoreFactory,
    copy_reference_store,
    extract_rocketmq_stores,
    message,
    reference_geometry,
)

SLOTS, ENTRIES = 8, 16
GEOMETRY = {"index_slots": SLOTS, "index_entries": ENTRIES}
HEADER = struct.Struct(">qqqqii")
ENTRY = struct.Struct(">iqii")
ROCKETMQ_GEOMETRY = {
    "commitlog_file_size": 262144,
    "cq_entries_per_file": 50,
    "index_slots": 64,
    "index_entries": 256,
}


@dataclass
class IndexDump:
    """One index file decoded at RocketMQ's offsets."""

    name: str
    size: int
    begin_timestamp: int
    end_timestamp: int
    begin_phy_offset: int
    end_phy_offset: int
    hash_slot_count: int
    index_count: int
    slots: list[int]
    entries: list[tuple[int, int, int, int]]  # (keyHash, phyOffset, timeDiff, prevIndex)


def read_index(path: Path, slots: int = SLOTS, entries: int = ENTRIES) -> IndexDump:
    data = path.read_bytes()
    header = HEADER.unpack_from(data, 0)
    slot_values = list(struct.unpack_from(f">{slots}i", data, 40))
    entries_at = 40 + 4 * slots
    rows = [ENTRY.unpack_from(data, entries_at + 20 * i) for i in range(entries)]
    return IndexDump(path.name, len(data), *header, slot_values, rows)


def index_files(root: Path) -> list[Path]:
    directory = root / "index"
    return sorted(directory.iterdir()) if directory.is_dir() else []


def java_string_hash(text: str) -> int:
    """Java's String.hashCode over UTF-16 code units, signed 32-bit."""
    h = 0
    units = text.encode("utf-16-be")
    for i in range(0, len(units), 2):
        h = (31 * h + int.from_bytes(units[i : i + 2], "big")) & 0xFFFFFFFF
    return h - (1 << 32) if h >= 1 << 31 else h


def key_hash(index_key: str) -> int:
    h = java_string_hash(index_key)
    return 0 if h == -(1 << 31) else abs(h)


def name_to_ms(name: str) -> int:
    """Inverse of the local-time ``yyyyMMddHHmmssSSS`` file name."""
    assert len(name) == 17 and name.isdigit(), name
    seconds = time.mktime(time.strptime(name[:14], "%Y%m%d%H%M%S"))
    return int(seconds) * 1000 + int(name[14:])


def put(store: MessageStore, keys: str | None = None, **kwargs: Any) -> PutResult:
    result = store.put(message(keys=keys, **kwargs))
    assert result.ok, result
    return result


@pytest.fixture
def utc_local_time() -> Iterator[None]:
    """File names are local time: pin the zone the fixtures were named in."""
    saved = os.environ.get("TZ")
    os.environ["TZ"] = "UTC"
    time.tzset()
    try:
        yield
    finally:
        if saved is None:
            del os.environ["TZ"]
        else:
            os.environ["TZ"] = saved
        time.tzset()


# -- one file ----------------------------------------------------------------------------------


def test_first_message_creates_the_first_file_even_without_keys(
    open_store: StoreFactory, store_dir: Path
) -> None:
    store = open_store(**GEOMETRY)
    assert index_files(store_dir) == []
    before = time.time_ns() // 1_000_000
    put(store)  # no KEYS, no UNIQ_KEY
    after = time.time_ns() // 1_000_000
    store.close()

    [path] = index_files(store_dir)
    assert before <= name_to_ms(path.name) <= after
    dump = read_index(path)
    assert dump.size == 40 + 4 * SLOTS + 20 * ENTRIES == 392
    header = (dump.begin_timestamp, dump.end_timestamp, dump.begin_phy_offset, dump.end_phy_offset)
    assert header == (0, 0, 0, 0)
    assert dump.hash_slot_count == 0
    assert dump.index_count in (0, 1)  # 0 on disk until the first key in RocketMQ's files
    assert dump.slots == [0] * SLOTS
    assert set(dump.entries) == {(0, 0, 0, 0)}


def test_header_slots_and_entries(open_store: StoreFactory, store_dir: Path) -> None:
    store = open_store(**GEOMETRY)
    put(store)  # creates the file, indexes nothing
    m1 = put(store, "k1", properties={"UNIQ_KEY": "U1"})
    m2 = put(store, " k2  k3 ")  # empty tokens are skipped
    m3 = put(store, "k1", topic="OtherTopic")
    put(store, "rb", properties={"UNIQ_KEY": "U4"}, sys_flag=0xC)  # ROLLBACK: not indexed
    m5 = put(store, "prep", sys_flag=0x4)  # PREPARED: indexed
    m6 = put(store, "commit", sys_flag=0x8, prepared_transaction_offset=m5.phys_offset)
    put(store, tags="only-tags")
    m8 = put(store, "last one")
    put(store)  # after the last indexed message: not the header's end
    store.close()

    indexed = [
        (m1, "TopicTest#U1"),  # UNIQ_KEY first, then each KEYS token
        (m1, "TopicTest#k1"),
        (m2, "TopicTest#k2"),
        (m2, "TopicTest#k3"),
        (m3, "OtherTopic#k1"),
        (m5, "TopicTest#prep"),
        (m6, "TopicTest#commit"),
        (m8, "TopicTest#last"),
        (m8, "TopicTest#one"),
    ]
    [path] = index_files(store_dir)
    dump = read_index(path)
    assert dump.begin_timestamp == m1.store_timestamp
    assert dump.end_timestamp == m8.store_timestamp
    assert dump.begin_phy_offset == m1.phys_offset
    assert dump.end_phy_offset == m8.phys_offset  # where the last indexed message starts
    assert dump.index_count == 1 + len(indexed)

    # Entries in put order from number 1; each chains to the previous entry of its slot.
    assert dump.entries[0] == (0, 0, 0, 0)
    newest_in_slot = [0] * SLOTS
    for number, (result, index_key) in enumerate(indexed, start=1):
        h = key_hash(index_key)
        slot = h % SLOTS
        time_diff = (result.store_timestamp - m1.store_timestamp) // 1000
        assert dump.entries[number] == (h, result.phys_offset, time_diff, newest_in_slot[slot]), (
            number,
            index_key,
        )
        newest_in_slot[slot] = number
    assert dump.slots == newest_in_slot
    assert dump.hash_slot_count == sum(1 for v in newest_in_slot if v)
    assert set(dump.entries[len(indexed) + 1 :]) == {(0, 0, 0, 0)}


def test_key_hash_is_abs_java_hash_of_topic_hash_key(
    open_store: StoreFactory, store_dir: Path
) -> None:
    # "TopicTest#key1" is the documented example; the unicode key hashes UTF-16 code units.
    store = open_store(**GEOMETRY)
    put(store, "key1")
    put(store, "键-😀")
    store.close()
    dump = read_index(index_files(store_dir)[0])
    assert java_string_hash("TopicTest#key1") == -1655984460
    assert dump.entries[1][0] == 1655984460
    assert dump.entries[2][0] == key_hash("TopicTest#键-😀")


def test_colliding_keys_share_a_slot_chain(open_store: StoreFactory, store_dir: Path) -> None:
    """ "Aa" and "BB" have the same Java hash: one slot, entry 2 chaining to entry 1."""
    store = open_store(**GEOMETRY)
    aa = put(store, "Aa")
    bb = put(store, "BB")
    store.close()
    dump = read_index(index_files(store_dir)[0])
    h = key_hash("TopicTest#Aa")
    assert h == key_hash("TopicTest#BB")
    assert dump.entries[1][:2] == (h, aa.phys_offset)
    assert dump.entries[2] == (h, bb.phys_offset, 0, 1)
    assert dump.slots[h % SLOTS] == 2
    assert dump.hash_slot_count == 1


def test_files_roll_when_full(open_store: StoreFactory, store_dir: Path) -> None:
    """A file of 4 entries holds 3 keys; the next file starts preset to the previous one's end.

    timeDiff of a new file's first key is computed before its beginTimestamp is set, against the
    preset (the previous file's end), as RocketMQ does."""
    store = open_store(index_slots=SLOTS, index_entries=4)
    start = time.time_ns() // 1_000_000
    m1 = put(store, "a")
    time.sleep(1.05)
    m2 = put(store, "b c")  # fills file 1
    m3 = put(store)  # no keys, still creates file 2 (preset, empty)
    after_m3 = time.time_ns() // 1_000_000

    files = index_files(store_dir)
    assert len(files) == 2
    preset = read_index(files[1], entries=4)
    assert (preset.begin_timestamp, preset.end_timestamp) == (m2.store_timestamp,) * 2
    assert (preset.begin_phy_offset, preset.end_phy_offset) == (m2.phys_offset,) * 2
    assert preset.index_count in (0, 1)
    assert preset.hash_slot_count == 0

    time.sleep(1.05)
    m4 = put(store, "d e f g")  # d, e, f fill file 2; g starts file 3
    end = time.time_ns() // 1_000_000
    store.close()

    first, second, third = (read_index(path, entries=4) for path in index_files(store_dir))
    assert start <= name_to_ms(first.name) <= m3.store_timestamp
    assert m3.store_timestamp - 1 <= name_to_ms(second.name) <= after_m3
    assert name_to_ms(second.name) < name_to_ms(third.name) <= end + 1
    for dump in (first, second, third):
        assert dump.size == 40 + 4 * SLOTS + 20 * 4

    d1 = (m2.store_timestamp - m1.store_timestamp) // 1000
    assert d1 >= 1
    assert first.index_count == 4  # full: 3 keys
    assert (first.begin_timestamp, first.end_timestamp) == (m1.store_timestamp, m2.store_timestamp)
    assert (first.begin_phy_offset, first.end_phy_offset) == (m1.phys_offset, m2.phys_offset)
    assert [e[1:3] for e in first.entries[1:]] == [
        (m1.phys_offset, 0),
        (m2.phys_offset, d1),
        (m2.phys_offset, d1),
    ]

    d2 = (m4.store_timestamp - m2.store_timestamp) // 1000  # against the preset begin
    assert d2 >= 1
    assert second.index_count == 4
    assert (second.begin_timestamp, second.end_timestamp) == (m4.store_timestamp,) * 2
    assert (second.begin_phy_offset, second.end_phy_offset) == (m4.phys_offset,) * 2
    assert [e[:3] for e in second.entries[1:]] == [
        (key_hash("TopicTest#d"), m4.phys_offset, d2),
        (key_hash("TopicTest#e"), m4.phys_offset, 0),
        (key_hash("TopicTest#f"), m4.phys_offset, 0),
    ]

    assert third.index_count == 2
    assert (third.begin_timestamp, third.end_timestamp) == (m4.store_timestamp,) * 2
    assert (third.begin_phy_offset, third.end_phy_offset) == (m4.phys_offset,) * 2
    assert third.entries[1] == (key_hash("TopicTest#g"), m4.phys_offset, 0, 0)


# -- rebuilt files against RocketMQ's ----------------------------------------------------------


def test_rebuilt_reference_index_is_byte_identical(
    open_store: StoreFactory, tmp_path: Path, utc_local_time: None
) -> None:
    """Index files rebuilt by recovery equal the reference encoder's (checked against RocketMQ's
    IndexFile), names included: each file is named by the store time of the message that
    created it."""
    root = copy_reference_store(tmp_path)
    shutil.rmtree(root / "index")
    open_store(root, **reference_geometry()).close()
    expected = sorted((REFERENCE_DIR / "store" / "index").iterdir())
    assert [p.name for p in index_files(root)] == [p.name for p in expected]
    for got, want in zip(index_files(root), expected, strict=True):
        assert got.read_bytes() == want.read_bytes(), got.name


def test_rebuilt_rocketmq_index_matches_rocketmq_bytes(
    open_store: StoreFactory, tmp_path: Path
) -> None:
    """RocketMQ 4.9.8's own index files, rebuilt from its commitlog: the same bytes file by file
    (names differ: RocketMQ names a file by the wall clock when its reput thread created it)."""
    stores = extract_rocketmq_stores(tmp_path / "rocketmq")
    root = stores / "store"
    original = tmp_path / "original-index"
    shutil.move(root / "index", original)
    open_store(root, **ROCKETMQ_GEOMETRY).close()
    rebuilt = index_files(root)
    expected = sorted(original.iterdir())
    assert len(rebuilt) == len(expected) == 10
    for got, want in zip(rebuilt, expected, strict=True):
        assert got.read_bytes() == want.read_bytes(), (got.name, want.name)


def _reference_entries(
    hashes: list[int], offsets: list[int], slots: int, first_number: int, first_diff: int
) -> tuple[dict[int, int], list[tuple[int, int, int, int]]]:
    """RocketMQ's putKey, one key at a time: the slots and entries the keys should leave."""
    slot_values: dict[int, int] = {}
    entries = []
    number = first_number
    for key_hash, phys in zip(hashes, offsets, strict=True):
        slot = key_hash % slots
        head = slot_values.get(slot, 0)
        diff = first_diff if number == first_number else 0
        entries.append((key_hash, phys, diff, head))
        slot_values[slot] = number
        number += 1
    return slot_values, entries


@pytest.mark.parametrize("count", [1, 127, 128, 129, 300])
def test_a_batch_of_keys_leaves_each_entry_and_slot_as_one_by_one(
    tmp_path: Path, count: int
) -> None:
    """``put_keys`` writes a batch's entries in runs of up to 128 per call: every entry of a
    batch of any size (a file's first entry with its own time diff included) and every slot
    must read back as RocketMQ's one-key-at-a-time putKey leaves them."""
    from localstore.index.index_file import HEADER_SIZE, SLOT_SIZE, IndexFile

    slots, entries = 7, 400
    index = IndexFile.create(
        tmp_path, slots, entries, now_ms=0, previous_end_phy_offset=10, previous_end_timestamp=5_000
    )
    hashes = [(i * 7_919 + 3) % 0x7FFFFFFF for i in range(count + 5)]
    offsets = [1_000 + 250 * i for i in range(count + 5)]
    stored_at = 9_000  # 4 s after the preset begin: the first entry's diff
    assert index.put_keys(hashes, offsets, 5, stored_at) == count + 5  # the first five skipped

    slot_values, expected = _reference_entries(hashes[5:], offsets[5:], slots, 1, 4)
    mapped = index._map
    entries_at = HEADER_SIZE + slots * SLOT_SIZE
    written = [ENTRY.unpack_from(mapped, entries_at + (1 + i) * ENTRY.size) for i in range(count)]
    assert written == expected
    for slot in range(slots):
        (value,) = struct.unpack_from(">i", mapped, HEADER_SIZE + slot * SLOT_SIZE)
        assert value == slot_values.get(slot, 0)
    assert ENTRY.unpack_from(mapped, entries_at + (1 + count) * ENTRY.size) == (0, 0, 0, 0)
    assert (index.index_count, index.hash_slot_count) == (1 + count, len(slot_values))
    assert (index.begin_phy_offset, index.end_phy_offset) == (offsets[5], offsets[-1])
    assert (index.begin_timestamp, index.end_timestamp) == (stored_at, stored_at)
    index.close()
