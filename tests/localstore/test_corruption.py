"""Garbage written into store files is recovered from (rebuilt from the commitlog) or refused
with a clear error; the store always opens again and keeps accepting writes."""

from __future__ import annotations

import random
import struct
from pathlib import Path

import pytest

from localstore import CorruptStoreError, GetStatus, MessageStore, NewMessage, PutStatus
from localstore.record.layout import QUEUE_OFFSET_AT
from localstore.recovery.verify import verify_store

TOPIC = "Damaged"
GEOMETRY = {
    "commitlog_file_size": 16384,
    "cq_entries_per_file": 16,
    "index_slots": 16,
    "index_entries": 32,
}


def fill(root: Path, count: int = 60) -> list[int]:
    """Put ``count`` keyed messages into queue 0; returns their phys offsets."""
    with MessageStore(root, **GEOMETRY) as store:
        offsets = []
        for i in range(count):
            result = store.put(
                NewMessage(
                    TOPIC, f"body-{i:04d}".encode() * 4, 0, {"KEYS": f"key-{i}", "TAGS": "T"}
                )
            )
            assert result.ok
            offsets.append(result.phys_offset)
        return offsets


def scribble(path: Path, position: int, data: bytes = b"\xde\xad\xbe\xef" * 4) -> None:
    with open(path, "r+b") as handle:
        handle.seek(position)
        handle.write(data)


def mark_crashed(root: Path) -> None:
    (root / "abort").write_text("4242")


def assert_healthy_and_writable(store: MessageStore) -> None:
    report = verify_store(store)
    assert report.ok, report.problems[:3]
    result = store.put(NewMessage(TOPIC, b"after the damage", 0, {"KEYS": "after"}))
    assert result.status is PutStatus.PUT_OK
    got = store.get_messages(TOPIC, 0, result.queue_offset, max_count=1)
    assert got.messages[0].body == b"after the damage"


def commitlog_file(root: Path, phys: int) -> tuple[Path, int]:
    size = GEOMETRY["commitlog_file_size"]
    start = phys - phys % size
    return root / "commitlog" / str(start).zfill(20), phys - start


@pytest.mark.parametrize("crashed", [True, False])
def test_garbage_in_the_last_record_truncates_it(tmp_path: Path, crashed: bool):
    offsets = fill(tmp_path)
    path, position = commitlog_file(tmp_path, offsets[-1])
    scribble(path, position + 100)  # inside the body
    if crashed:
        mark_crashed(tmp_path)
    with MessageStore(tmp_path) as store:
        assert store.recovery.abnormal
        assert store.max_offset(TOPIC, 0) == len(offsets) - 1  # the damaged record is gone
        got = store.get_messages(TOPIC, 0, len(offsets) - 2, max_count=1)
        assert got.messages[0].body == b"body-0058" * 4
        assert_healthy_and_writable(store)


def test_garbage_in_the_tail_of_a_consume_queue_is_rebuilt(tmp_path: Path):
    offsets = fill(tmp_path)
    cq_dir = tmp_path / "consumequeue" / TOPIC / "0"
    last_file = sorted(cq_dir.iterdir())[-1]
    units_in_last = (len(offsets) % 16) or 16
    scribble(last_file, (units_in_last - 1) * 20)  # the last unit
    with MessageStore(tmp_path) as store:
        recovery = (
            store.recovery
        )  # the damaged unit was cut, or the queue rebuilt, then re-dispatched
        assert recovery.records_dispatched or recovery.rebuilt_queues
        assert store.max_offset(TOPIC, 0) == len(offsets)
        for queue_offset, phys in enumerate(offsets):
            got = store.get_messages(TOPIC, 0, queue_offset, max_count=1)
            assert got.messages[0].phys_offset == phys
        assert_healthy_and_writable(store)


@pytest.mark.parametrize("units", [1, 3], ids=["one-unit", "three-units"])
def test_garbage_in_the_middle_of_a_consume_queue_is_rebuilt_by_the_get(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, units: int
):
    """Garbage over units 5.. of a queue: the get that meets each rebuilds it from the log
    (its record lies between its sound neighbours') and says so; nothing is lost."""
    offsets = fill(tmp_path)
    first_file = sorted((tmp_path / "consumequeue" / TOPIC / "0").iterdir())[0]
    scribble(first_file, 5 * 20, struct.pack(">qiq", 12345, 999, 0) * units)
    with MessageStore(tmp_path) as store:
        assert not verify_store(store).ok  # verify names it
        got = store.get_messages(TOPIC, 0, 4, max_count=32)
        assert [m.phys_offset for m in got.messages] == offsets[4:16]  # to its file's end
        assert got.damaged is None
        for queue_offset in range(5, 5 + units):
            assert f"consume queue {TOPIC}/0 offset {queue_offset} was damaged" in caplog.text
        assert_healthy_and_writable(store)


def test_a_unit_the_log_cannot_rebuild_is_a_clear_error(tmp_path: Path):
    """Garbage over unit 5, and its record's QUEUEOFFSET damaged too: no record of the log
    names unit 5, so the get cannot rebuild it and says so, naming queue, offset and verify."""
    offsets = fill(tmp_path)
    first_file = sorted((tmp_path / "consumequeue" / TOPIC / "0").iterdir())[0]
    scribble(first_file, 5 * 20, struct.pack(">qiq", 12345, 999, 0))
    path, position = commitlog_file(tmp_path, offsets[5])
    scribble(path, position + QUEUE_OFFSET_AT, struct.pack(">q", 55))
    with MessageStore(tmp_path) as store:
        for _ in range(2):  # the second get remembers the first's answer
            with pytest.raises(CorruptStoreError, match=rf"{TOPIC}/0 queue offset 5") as raised:
                store.get_messages(TOPIC, 0, 5, max_count=1)
            assert "cannot be rebuilt from the log" in str(raised.value)
            assert "quiver store verify" in str(raised.value)
        assert store.get_messages(TOPIC, 0, 6, max_count=1).status is GetStatus.FOUND
        assert not verify_store(store).ok  # verify names it too


def test_garbage_in_an_index_file_header_drops_and_rebuilds_it(tmp_path: Path):
    fill(tmp_path)
    files = sorted((tmp_path / "index").iterdir())
    assert len(files) >= 2
    scribble(files[0], 32, struct.pack(">ii", -5, 10**9))  # slot count and index count
    with MessageStore(tmp_path) as store:
        for i in (0, 30, 59):
            found = store.query_by_key(TOPIC, f"key-{i}")
            assert [m.body for m in found] == [f"body-{i:04d}".encode() * 4]
        assert_healthy_and_writable(store)


def test_garbage_in_index_entries_never_returns_another_key(tmp_path: Path):
    fill(tmp_path)
    newest = sorted((tmp_path / "index").iterdir())[-1]
    entries_at = 40 + GEOMETRY["index_slots"] * 4
    scribble(newest, entries_at + 20, random.Random(11).randbytes(20 * 6))
    with MessageStore(tmp_path) as store:
        for i in range(60):
            for message in store.query_by_key(TOPIC, f"key-{i}"):
                assert message.keys == [f"key-{i}"]
        assert_healthy_and_writable(store)


@pytest.mark.parametrize(
    "garbage",
    [b"\xff" * 40, b"\x00" * 40, random.Random(7).randbytes(40)],
    ids=["ones", "zeros", "random"],
)
def test_garbage_in_the_checkpoint_after_a_crash(tmp_path: Path, garbage: bytes):
    offsets = fill(tmp_path)
    scribble(tmp_path / "checkpoint", 0, garbage)
    mark_crashed(tmp_path)
    with MessageStore(tmp_path) as store:
        assert store.max_offset(TOPIC, 0) == len(offsets)
        for i in (0, 59):
            assert [m.phys_offset for m in store.query_by_key(TOPIC, f"key-{i}")] == [offsets[i]]
        assert_healthy_and_writable(store)


def test_a_truncated_checkpoint_file_is_tolerated(tmp_path: Path):
    offsets = fill(tmp_path)
    with open(tmp_path / "checkpoint", "r+b") as handle:
        handle.truncate(10)
    mark_crashed(tmp_path)
    with MessageStore(tmp_path) as store:
        assert store.max_offset(TOPIC, 0) == len(offsets)
        assert_healthy_and_writable(store)
