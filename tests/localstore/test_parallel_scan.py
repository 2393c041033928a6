"""The CRC walk split across worker processes gives the sequential walk's answer.

Real worker processes walk real segment files; hints come from the store's own offset index.
The answers are compared with the one-process walk over the same bytes, with the log intact,
with a corrupt record in the first piece (walked here) and in a later one (walked by a worker),
with hints that are not record starts, and with workers that fail.
"""

from __future__ import annotations

import logging
import subprocess
import sys
from pathlib import Path

import pytest

from localstore import MessageStore, NewMessage
from localstore.commitlog.offset_index import stored_record_starts
from localstore.record.codec import HEADER_V4
from localstore.record.walk import (
    WALK_INVALID,
    WALK_LIMIT,
    WALK_SEGMENT_END,
    walk_marking,
    walk_segment,
)
from localstore.recovery import parallel_scan as ps
from localstore.recovery.log_scan import scan_valid_end
from localstore.recovery.recover import split_hints

from .conftest import StoreFactory

SEGMENT = 1 << 20
TOPIC = "ScanTopic"


@pytest.fixture
def filled(open_store: StoreFactory) -> MessageStore:
    """About 0.9 MiB of 150-odd byte records in one 1 MiB segment (offset index every 64 KiB)."""
    store = open_store(commitlog_file_size=SEGMENT)
    for start in range(0, 5000, 100):
        queue = start // 100 % 4
        batch = [NewMessage(TOPIC, f"body-{start + i:06d}".encode() * 4, queue) for i in range(100)]
        assert store.put_batch(batch).ok, start
    return store


def sequential(store: MessageStore) -> tuple[int, int, int, int]:
    segment = store.commitlog.segments.find(0)
    assert segment is not None
    return walk_marking(segment.view, 0, segment.size, 0, segment.size, True)


def split(store: MessageStore, hints: list[int], pieces: int = 4) -> tuple[int, int, int, int]:
    segment = store.commitlog.segments.find(0)
    assert segment is not None
    return ps.walk_split(segment.path, segment.view, 0, segment.size, 0, hints, True, pieces)


def corrupt_body_at(store: MessageStore, phys_offset: int) -> None:
    """Flip one body byte of the record at ``phys_offset`` (its CRC no longer matches)."""
    segment = store.commitlog.segments.find(phys_offset)
    assert segment is not None
    segment.view[phys_offset + HEADER_V4.size + 2] ^= 0xFF  # bodies are 48 bytes


def test_hints_are_the_offset_index_entries(filled: MessageStore) -> None:
    hints = stored_record_starts(filled.root, 0)
    assert len(hints) >= 10
    assert hints == sorted(hints)
    for position in hints:  # each names a record whose PHYSICALOFFSET field is itself
        assert filled.message_at(position).phys_offset == position


def test_split_walk_equals_sequential(filled: MessageStore) -> None:
    expected = sequential(filled)
    assert expected[1] == 5000 and expected[2] == WALK_INVALID  # zeros after the last record
    assert split(filled, stored_record_starts(filled.root, 0)) == expected


def test_scan_valid_end_splits_with_hints(
    filled: MessageStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    commitlog = filled.commitlog
    expected = scan_valid_end(commitlog, 0, check_crc=True)
    calls: list[int] = []
    real = ps.walk_split
    monkeypatch.setattr(ps, "MIN_SPLIT_BYTES", 0)
    monkeypatch.setattr(ps, "cpu_count", lambda: 3)
    monkeypatch.setattr(ps, "walk_split", lambda *a: calls.append(1) or real(*a))
    assert scan_valid_end(commitlog, 0, check_crc=True, split_hints=split_hints(commitlog)) == (
        expected
    )
    assert calls == [1]


@pytest.mark.parametrize("piece", [0, 2])
def test_a_corrupt_record_ends_the_walk_in_any_piece(filled: MessageStore, piece: int) -> None:
    hints = stored_record_starts(filled.root, 0)
    cuts = ps.choose_cuts(0, hints, 4)
    start = [0, *cuts][piece]
    victim = filled.offset_index.record_boundary_at_or_after(start + 5000)
    corrupt_body_at(filled, victim)
    expected = sequential(filled)
    assert expected[0] == victim and expected[2] == WALK_INVALID
    assert split(filled, hints) == expected


def test_hints_that_are_not_record_starts_change_nothing(filled: MessageStore) -> None:
    hints = stored_record_starts(filled.root, 0)
    wrong = [h + 7 for h in hints]
    assert split(filled, wrong) == sequential(filled)
    assert split(filled, [h - 1 for h in hints[:3]] + hints[3:]) == sequential(filled)
    assert split(filled, [*hints[:2], SEGMENT + 5, 1 << 31]) == sequential(filled)  # past the end


def test_failed_workers_leave_the_walk_to_this_process(
    filled: MessageStore, caplog: pytest.LogCaptureFixture
) -> None:
    segment = filled.commitlog.segments.find(0)
    assert segment is not None
    missing = Path(str(segment.path) + ".gone")  # the workers cannot open it
    with caplog.at_level(logging.WARNING, logger=ps.__name__):
        answer = ps.walk_split(
            missing, segment.view, 0, segment.size, 0, stored_record_starts(filled.root, 0), True, 3
        )
    assert answer == sequential(filled)
    assert "a worker failed" in caplog.text
    assert "No such file" in caplog.text


def test_walk_limits_and_segment_ends(filled: MessageStore) -> None:
    segment = filled.commitlog.segments.find(0)
    assert segment is not None
    hints = stored_record_starts(filled.root, 0)
    position, records, status = walk_segment(segment.view, 0, segment.size, 0, hints[0], True)
    assert (position, status) == (hints[0], WALK_LIMIT) and records > 0
    tail = segment.size - 4  # fewer than 8 bytes left: the segment's end, not an invalid record
    assert walk_segment(segment.view, 0, segment.size, tail, segment.size, True) == (
        tail,
        0,
        WALK_SEGMENT_END,
    )


def test_only_long_written_ranges_are_split(filled: MessageStore) -> None:
    """The decision looks at how far the hinted record starts reach, not at the segment's
    preallocated size: a small crashed store opens without starting workers."""
    hints = stored_record_starts(filled.root, 0)  # about 0.9 MiB written of a 1 MiB segment
    assert not ps.worth_splitting(0, hints)
    assert not ps.worth_splitting(0, [])
    assert ps.MIN_SPLIT_BYTES > SEGMENT


def test_a_negative_topic_length_ends_the_walk(open_store: StoreFactory) -> None:
    """A v2 record (topic over 127 bytes) stores its topic length as a signed short; a
    damaged, negative one is an invalid record, not a walk backwards."""
    store = open_store(commitlog_file_size=4096)  # shorter than the walk back: no wrap-around
    topic = "%RETRY%" + "g" * 130  # a retry topic may be that long
    first = store.put(NewMessage(topic, b"first", 0), system=True)
    second = store.put(NewMessage(topic, b"second", 0), system=True)
    assert first.ok and second.ok
    segment = store.commitlog.segments.find(0)
    assert segment is not None
    at = second.phys_offsets[0] + HEADER_V4.size + len(b"second")  # the topic length field
    segment.view[at : at + 2] = (-30000).to_bytes(2, "big", signed=True)
    assert walk_segment(segment.view, 0, segment.size, 0, segment.size, True) == (
        second.phys_offsets[0],
        1,
        WALK_INVALID,
    )
    assert first.phys_offsets == [0]


def test_the_worker_imports_the_walk_alone() -> None:
    """A worker interpreter loads the record walk and the codec, not the store."""
    code = "import sys, localstore.recovery.scan_worker; print('localstore.store' in sys.modules)"
    answer = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    )
    assert answer.stdout.strip() == "False"


def test_choose_cuts() -> None:
    hints = list(range(100, 1100, 100))  # 100, 200, ..., 1000
    assert ps.choose_cuts(0, hints, 2) == [500]
    assert ps.choose_cuts(0, hints, 4) == [200, 500, 700]  # nearest hints, the earlier on ties
    assert ps.choose_cuts(0, hints, 1) == []
    assert ps.choose_cuts(0, [], 4) == []
    assert ps.choose_cuts(950, hints, 4) == [1000]
    assert ps.choose_cuts(0, [300, 300, 100], 8) == [100, 300]  # strictly increasing
    assert ps.choose_cuts(500, hints, 3) == [700, 800]


def test_abnormal_recovery_with_split_walk(
    open_store: StoreFactory, store_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A crashed store (abort marker, zeroed checkpoint) with a torn last record recovers to the
    record before it when the walk is split."""
    store = open_store(commitlog_file_size=SEGMENT)
    for _ in range(40):
        batch = [NewMessage(TOPIC, b"x" * 120, 0) for _ in range(100)]
        assert store.put_batch(batch).ok
    last = store.put(NewMessage(TOPIC, b"the last one", 0))
    store.close()
    path = store_dir / "commitlog" / f"{0:020d}"
    with open(path, "r+b") as log:  # tear the last record's body
        log.seek(last.phys_offsets[0] + HEADER_V4.size + 2)
        log.write(b"\xff\xff")
    (store_dir / "abort").write_text("")
    (store_dir / "checkpoint").write_bytes(bytes(4096))
    monkeypatch.setattr(ps, "MIN_SPLIT_BYTES", 0)
    monkeypatch.setattr(ps, "cpu_count", lambda: 3)
    reopened = MessageStore(store_dir)
    try:
        assert reopened.recovery.abnormal
        assert reopened.recovery.end_offset == last.phys_offsets[0]
        assert reopened.recovery.records_scanned == 4000
        assert reopened.max_offset(TOPIC, 0) == 4000
    finally:
        reopened.close()
