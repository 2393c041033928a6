"""The sparse offset index (``localstore.commitlog.offset_index``) as the store runs it: layout, the
entry rule against a scan of the records, record boundaries, split points, retention, and repair of
damaged files when the store is opened again.

The store owns the :class:`CommitLogOffsetIndex` (``store.offset_index``), so these tests use
that instance while the store is open and never map its files a second time; a load is a reopen
of the store. The interval the store opens the index with is set per test (the default, 64 KiB,
gives 4 KiB segments no entries; one test checks the default).
"""

from __future__ import annotations

import itertools
import os
import shutil
import struct
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from localstore import MessageStore, NewMessage, pack_host
from localstore.commitlog.log import CommitLog
from localstore.commitlog.offset_index import (
    DEFAULT_INTERVAL_BYTES,
    DIRECTORY_NAME,
    ENTRY_SIZE,
    CommitLogOffsetIndex,
)
from localstore.record.batch_encoder import encode_batch
from localstore.record.codec import BLANK_MAGIC, SYSFLAG_TRANSACTION_PREPARED, decode_record
from localstore.record.put_mark import mark_pair

from .conftest import StoreFactory, message

SEGMENT = 4096
SMALL: dict[str, Any] = {
    "commitlog_file_size": SEGMENT,
    "cq_entries_per_file": 8,
    "index_slots": 64,
    "index_entries": 256,
}
ENTRY = struct.Struct(">II")
HEAD = struct.Struct(">ii")
_REAL_OPEN = CommitLogOffsetIndex.open.__func__  # type: ignore[attr-defined]

Layout = dict[int, list[tuple[int, int]]]


def set_interval(monkeypatch: pytest.MonkeyPatch, interval: int) -> None:
    """Make the store open its offset index (``CommitLogOffsetIndex.open(root, commitlog)``)
    with an interval of ``interval`` bytes."""

    def open_with(
        cls: type[CommitLogOffsetIndex],
        root: Path,
        commitlog: CommitLog,
        interval_bytes: int = interval,
    ) -> CommitLogOffsetIndex:
        return _REAL_OPEN(cls, root, commitlog, interval_bytes)  # type: ignore[no-any-return]

    monkeypatch.setattr(CommitLogOffsetIndex, "open", classmethod(open_with))


@pytest.fixture
def small(open_store: StoreFactory, monkeypatch: pytest.MonkeyPatch) -> Any:
    """``small(interval)``: open a small store (4 KiB segments) whose offset index has that
    interval (reopen: ``small(interval)`` again)."""

    def factory(interval: int) -> MessageStore:
        set_interval(monkeypatch, interval)
        return open_store(**SMALL)

    return factory


def put(
    store: MessageStore,
    count: int,
    body_size: int = 60,
    *,
    queue_id: int = 0,
    sys_flag: int = 0,
) -> list[int]:
    """Put a batch through the store (which tells its offset index): records of one size (the
    first body is shorter by the put's mark, which its record carries), bodies allowing."""
    mark = len(mark_pair(count)) if count > 1 else 0
    batch = [
        message(
            body=b"b" * max(1, body_size - (mark if i == 0 else 0)),
            queue_id=queue_id,
            sys_flag=sys_flag,
        )
        for i in range(count)
    ]
    result = store.put_batch(batch)
    assert result.ok, result.detail
    return result.phys_offsets


def muted(store: MessageStore, monkeypatch: pytest.MonkeyPatch) -> None:
    """The store's offset index hears of no batch (until ``monkeypatch`` is undone)."""
    monkeypatch.setattr(store.offset_index, "append_batch", lambda *args: None)


def record_starts(commitlog: CommitLog) -> dict[int, list[int]]:
    """Every record start by segment, found by walking the records (size field + magic)."""
    starts: dict[int, list[int]] = {}
    end = commitlog.confirmed_offset
    for segment in commitlog.segments.segments:
        found = starts[segment.start_offset] = []
        position = 0
        while segment.start_offset + position < end and position + 8 <= segment.size:
            size, magic = HEAD.unpack_from(segment.view, position)
            if magic == BLANK_MAGIC or size <= 0:
                break
            found.append(position)
            position += size
    return starts


def rule_entries(positions: list[int], interval: int) -> list[tuple[int, int]]:
    """The documented rule applied record by record: (message number, position)."""
    entries: list[tuple[int, int]] = []
    last = 0
    for number, position in enumerate(positions):
        if position >= last + interval:
            entries.append((number, position))
            last = position
    return entries


def all_entries(store: MessageStore) -> Layout:
    """The store's offset index, segment by segment."""
    index = store.offset_index
    return {
        s.start_offset: index.entries(s.start_offset) for s in store.commitlog.segments.segments
    }


def expected_entries(commitlog: CommitLog, interval: int) -> Layout:
    return {start: rule_entries(p, interval) for start, p in record_starts(commitlog).items()}


def assert_lookups_exact(store: MessageStore, step: int = 7) -> None:
    """Record boundaries against a scan of the records; split points are record starts."""
    commitlog = store.commitlog
    starts = [s + p for s, positions in record_starts(commitlog).items() for p in positions]
    low, high = commitlog.min_offset, commitlog.confirmed_offset
    for phys in range(low - 20, high + 50, step):
        expected = next((s for s in starts if s >= phys), high)
        assert store.offset_index.record_boundary_at_or_after(phys) == expected, phys
    for n in (1, 2, 3, 7, 30):
        points = store.split_points(n)
        assert points[0] == low and points[-1] == high
        assert all(a < b for a, b in itertools.pairwise(points))
        assert set(points[:-1]) <= set(starts)


def index_files(store_dir: Path) -> list[Path]:
    return sorted((store_dir / DIRECTORY_NAME).iterdir())


def rebuilt_reference(store_dir: Path, copy: Path) -> Layout:
    """The entries a store opened on a copy of the (closed) store without its offset index
    files builds from scratch."""
    shutil.copytree(store_dir, copy)
    shutil.rmtree(copy / DIRECTORY_NAME, ignore_errors=True)
    with MessageStore(copy) as reference:
        return all_entries(reference)


@pytest.fixture
def scratch() -> Iterator[Path]:
    with tempfile.TemporaryDirectory() as directory:
        yield Path(directory)


# -- layout ----------------------------------------------------------------------------------


def test_entries_name_records_by_number_and_position(small: Any, store_dir: Path) -> None:
    store = small(interval=500)
    assert not (store_dir / DIRECTORY_NAME).exists() or not index_files(store_dir)
    offsets = put(store, 28, body_size=60)  # 160-byte records, 25 per segment
    size = offsets[1] - offsets[0]
    assert 3 * size < 500 <= 4 * size
    files = index_files(store_dir)
    assert [f.name for f in files] == ["00000000000000000000.index", "00000000000000004096.index"]
    capacity = SEGMENT // 500 + 1
    assert files[1].stat().st_size == capacity * ENTRY_SIZE  # preallocated while written
    store.close()
    data = files[0].read_bytes()
    # records at 0, 160, ...: an entry is due 500 bytes after the last one (the segment start
    # at first) and goes to the first record from there: records 4, 8, ... 24
    assert data[:8] == (4).to_bytes(4, "big") + (4 * size).to_bytes(4, "big")
    assert list(ENTRY.iter_unpack(data)) == [(4 * k, 4 * k * size) for k in range(1, 7)]
    assert files[1].stat().st_size == 0  # trimmed: its 3 records lie within the first interval
    reopened = small(interval=500)
    assert reopened.offset_index.entries(0) == [(4 * k, 4 * k * size) for k in range(1, 7)]
    assert reopened.offset_index.entries(SEGMENT) == []


def test_the_store_opens_its_index_with_the_default_interval(
    open_store: StoreFactory, store_dir: Path, tmp_path: Path
) -> None:
    """No interval set: 64 KiB, segments of 256 KiB (3 entries each, the first implicit)."""
    store = open_store(**{**SMALL, "commitlog_file_size": 256 * 1024})
    for i in range(60):
        put(store, 50, body_size=100 + i % 50)  # ~700 KiB: 3 segments
    assert store.offset_index.interval == DEFAULT_INTERVAL_BYTES
    assert len(store.commitlog.segments.segments) == 3
    expected = expected_entries(store.commitlog, DEFAULT_INTERVAL_BYTES)
    assert all_entries(store) == expected
    assert [len(entries) for entries in expected.values()][:2] == [3, 3]
    assert_lookups_exact(store, step=997)
    store.close()
    assert rebuilt_reference(store_dir, tmp_path / "copy") == expected


def test_a_batch_running_into_the_next_segment_starts_its_file(small: Any) -> None:
    """The put path must start the next segment's file when a batch crosses the segment end,
    also when the next entry would only be due past that end."""
    store = small(interval=1000)
    offsets = put(store, 22)  # 160-byte records: entries at records 7, 14, 21 (3360)
    assert offsets[-1] == 21 * 160 and store.offset_index.entries(0)[-1] == (21, 3360)
    # records 22-24 end the segment (a blank record from 4000), 2 more start the next one;
    # the next entry would be due at 4360, past the segment end
    assert put(store, 5)[-2:] == [SEGMENT, SEGMENT + 160]
    while store.commitlog.max_offset < SEGMENT + 3000:
        put(store, 3)
    expected = expected_entries(store.commitlog, 1000)
    assert expected[SEGMENT] == [(7, 1120), (14, 2240)]
    assert all_entries(store) == expected
    store.close()
    reopened = small(interval=1000)
    assert all_entries(reopened) == expected


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    batches=st.lists(
        st.tuples(st.integers(1, 12), st.integers(1, 400), st.booleans()), min_size=1, max_size=20
    ),
    interval=st.sampled_from([1, 100, 333, 1000, 5000]),
)
@example(  # a batch runs into the next segment before the next entry is due (see the test above)
    batches=[
        (1, 2, False),
        (1, 143, False),
        (8, 127, False),
        (1, 5, False),
        (2, 34, False),
        (2, 34, False),
        (4, 40, False),
        (8, 12, False),
        (1, 5, False),
        (5, 121, False),
    ],
    interval=1000,
)
def test_put_path_rebuild_and_rule_agree(
    scratch: Path, batches: list[tuple[int, int, bool]], interval: int
) -> None:
    root = Path(tempfile.mkdtemp(dir=scratch))
    with pytest.MonkeyPatch.context() as monkeypatch:
        set_interval(monkeypatch, interval)
        with MessageStore(root, **SMALL) as store:
            for count, body_size, prepared in batches:
                flag = SYSFLAG_TRANSACTION_PREPARED if prepared else 0  # records without a unit
                put(store, count, body_size, sys_flag=flag, queue_id=count % 2)
            expected = expected_entries(store.commitlog, interval)
            assert all_entries(store) == expected
            store.offset_index.rebuild()  # the store's own instance, rebuilt from the log
            assert all_entries(store) == expected
            assert_lookups_exact(store, step=61)
        with MessageStore(root) as store:  # a load of the files the store wrote
            assert all_entries(store) == expected
        shutil.rmtree(root / DIRECTORY_NAME)
        with MessageStore(root) as store:  # the files gone: the store's load rebuilds them
            assert all_entries(store) == expected


def test_single_puts_keep_the_entries_the_rule_gives(small: Any) -> None:
    """The single put notes its record itself when no entry is due (see the module docstring):
    numbering and entries stay what the rule gives, across entries due and segment rolls."""
    store = small(interval=300)
    put(store, 1)  # the queue's first put takes the general path; the rest take the fast path
    for i in range(120):
        assert store.put(message(body=b"s" * (20 + (i * 53) % 200))).ok
    assert len(store.commitlog.segments.segments) >= 3
    assert all_entries(store) == expected_entries(store.commitlog, 300)
    assert_lookups_exact(store, step=37)


# -- lookups ---------------------------------------------------------------------------------


@pytest.fixture
def rolled(small: Any) -> MessageStore:
    """About 5 segments of records of varied sizes (blank records at every roll)."""
    store = small(interval=300)
    for i in range(40):
        put(store, 1 + i % 4, body_size=20 + (i * 37) % 300, queue_id=i % 3)
    while store.commitlog.max_offset % SEGMENT < 1500:  # 2+ entries in the last file
        put(store, 1, body_size=100)
    assert len(store.commitlog.segments.segments) >= 4
    return store


def test_record_boundary_at_or_after_matches_a_scan(rolled: MessageStore) -> None:
    store = rolled
    commitlog = store.commitlog
    starts = [s + p for s, positions in record_starts(commitlog).items() for p in positions]
    high = commitlog.confirmed_offset
    for phys in range(0, high + 50, 7):
        expected = next((s for s in starts if s >= phys), high)
        assert store.offset_index.record_boundary_at_or_after(phys) == expected, phys
    assert store.offset_index.record_boundary_at_or_after(-5) == 0


@pytest.mark.parametrize("n", [1, 2, 3, 5, 8, 13, 40])
def test_split_points_are_record_starts_covering_the_log_evenly(
    rolled: MessageStore, n: int
) -> None:
    store = rolled
    commitlog = store.commitlog
    low, high = commitlog.min_offset, commitlog.max_offset
    points = store.split_points(n)
    assert points == store.offset_index.split_points(n)
    assert points[0] == low and points[-1] == high
    assert all(a < b for a, b in itertools.pairwise(points))
    assert len(points) <= n + 1
    for boundary in points[:-1]:
        view, position = commitlog.segment_view(boundary) or (memoryview(b""), 0)
        assert decode_record(view, position).phys_offset == boundary
    # each inner boundary is within an interval plus a record (plus a segment's blank tail)
    # of its even cut; when cuts are far enough apart none is merged
    slack = 300 + 2 * 430  # records are at most 88 + 319 + 12 bytes
    if (high - low) // n > 2 * slack:
        assert len(points) == n + 1
        for k, boundary in enumerate(points[1:-1], start=1):
            assert abs(boundary - (low + (high - low) * k // n)) <= slack


def test_split_points_of_an_empty_log_and_bad_n(small: Any) -> None:
    store = small(interval=300)
    assert store.split_points(4) == [0]
    assert store.offset_index.record_boundary_at_or_after(100) == 0
    with pytest.raises(ValueError, match="positive"):
        store.split_points(0)
    put(store, 1)
    assert store.split_points(4) == [0, store.commitlog.max_offset]  # one record


def test_sync_flush_lookups_stop_at_the_flushed_offset(tmp_path: Path) -> None:
    """The index on a commitlog of its own (no store): lookups see only flushed bytes."""
    commitlog = CommitLog(tmp_path / "commitlog", SEGMENT, sync_flush=True)
    index = CommitLogOffsetIndex(tmp_path / DIRECTORY_NAME, commitlog, 200)
    index.load()
    encoded = encode_batch(
        [NewMessage("T", b"x" * 100)] * 10,
        "T",
        0,
        0,
        0,
        SEGMENT,
        1_700_000_000_000,
        pack_host("127.0.0.1", 1),
        1 << 20,
    )
    commitlog.write_runs(encoded.runs, encoded.heads, encoded.end_offset, 1_700_000_000_000)
    index.append_batch(encoded.phys_offsets, encoded.end_offset)
    assert index.entries(0)  # indexed at put time
    assert index.split_points(3) == [0]  # nothing readable yet (the bytes are not written)
    assert index.record_boundary_at_or_after(500) == 0
    commitlog.flush()
    points = index.split_points(3)
    assert points[0] == 0 and points[-1] == encoded.end_offset and len(points) == 4
    assert set(points[1:-1]) <= set(encoded.phys_offsets)
    index.close()
    commitlog.close()


def test_sync_flush_store_splits_what_its_puts_made_durable(
    open_store: StoreFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    set_interval(monkeypatch, 200)
    store = open_store(**SMALL, flush_mode="sync")
    offsets = put(store, 10, body_size=100)  # returns once durable
    end = store.commitlog.max_offset
    points = store.split_points(3)
    assert points[0] == 0 and points[-1] == end and len(points) == 4
    assert set(points[1:-1]) <= set(offsets)
    assert_lookups_exact(store)


# -- load (a reopen): laziness, repair, completion --------------------------------------------


def test_old_files_are_read_on_first_use_only(rolled: MessageStore, small: Any) -> None:
    store = rolled
    store_dir = store.root
    expected = all_entries(store)
    store.close()
    files = index_files(store_dir)
    files[0].unlink()
    reopened = small(interval=300)
    assert not files[0].exists()  # a load reads only the segment the put path writes to
    assert reopened.offset_index.entries(0) == expected[0]
    assert files[0].exists()
    assert all_entries(reopened) == expected


@pytest.mark.parametrize(
    "damage",
    [
        "missing",
        "empty",
        "odd_length",
        "garbage",
        "decreasing",
        "not_a_record",
        "truncated_by_entries",
        "untrimmed_after_crash",
    ],
)
@pytest.mark.parametrize("which", [0, -1])
def test_damaged_files_are_rebuilt_or_completed(
    rolled: MessageStore, small: Any, tmp_path: Path, damage: str, which: int
) -> None:
    store = rolled
    store_dir = store.root
    expected = all_entries(store)
    store.close()
    assert rebuilt_reference(store_dir, tmp_path / "copy") == expected
    path = index_files(store_dir)[which]
    data = path.read_bytes()
    assert len(data) >= 2 * ENTRY_SIZE
    number, position = ENTRY.unpack_from(data, 0)
    damaged = {
        "missing": None,
        "empty": b"",
        "odd_length": data[:-3],
        "garbage": os.urandom(len(data)),
        "decreasing": data[8:16] + data[:8] + data[16:],
        "not_a_record": ENTRY.pack(number, position + 1) + data[8:],
        "truncated_by_entries": data[:8],
        "untrimmed_after_crash": data + bytes(4 * ENTRY_SIZE),
    }[damage]
    if damaged is None:
        path.unlink()
    else:
        path.write_bytes(damaged)
    reopened = small(interval=300)
    assert all_entries(reopened) == expected
    assert_lookups_exact(reopened)
    reopened.close()
    assert path.read_bytes() == data


def test_entries_past_the_log_end_and_orphan_files_are_dropped(
    rolled: MessageStore, small: Any
) -> None:
    store = rolled
    store_dir = store.root
    expected = all_entries(store)
    store.close()
    last = index_files(store_dir)[-1]
    last.write_bytes(last.read_bytes() + ENTRY.pack(900, 4000))  # beyond the written data
    orphan = last.with_name("00000000000000999424.index")
    orphan.write_bytes(ENTRY.pack(3, 400))
    reopened = small(interval=300)
    assert all_entries(reopened) == expected
    assert not orphan.exists()
    assert_lookups_exact(reopened)


def test_a_missed_batch_stops_numbering_until_load_completes_it(
    small: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = small(interval=300)
    put(store, 3)
    with monkeypatch.context() as patched:
        muted(store, patched)
        put(store, 4)  # the index never hears of this batch
    put(store, 5)
    assert store.offset_index.entries(0) == [(2, 320)]  # only what came before the gap
    while len(store.commitlog.segments.segments) < 3:
        put(store, 4)  # the next segment is indexed normally
    expected = expected_entries(store.commitlog, 300)
    assert store.offset_index.entries(SEGMENT) == expected[SEGMENT]
    assert_lookups_exact(store)  # lookups walk the records where entries are missing
    store.close()
    reopened = small(interval=300)
    assert all_entries(reopened) == expected


def test_index_survives_a_store_reopen(small: Any) -> None:
    store = small(interval=250)
    for i in range(12):
        put(store, 3, body_size=50 + 20 * i)
    expected = all_entries(store)
    store.close()
    reopened = small(interval=250)
    assert all_entries(reopened) == expected
    for _ in range(6):
        put(reopened, 5)  # numbering carries on from the load's scan
    assert all_entries(reopened) == expected_entries(reopened.commitlog, 250)
    assert_lookups_exact(reopened)


def test_drop_before_deletes_old_files_but_never_the_active_one(rolled: MessageStore) -> None:
    store = rolled
    index = store.offset_index
    count = len(index_files(store.root))
    index.drop_before(2 * SEGMENT + 1)
    assert len(index_files(store.root)) == count - 2
    assert index.entries(0) == []
    index.drop_before(1 << 40)
    assert len(index_files(store.root)) == 1


def test_retention_drops_the_files_of_deleted_segments(
    rolled: MessageStore, small: Any, tmp_path: Path
) -> None:
    store = rolled
    store_dir = store.root
    expected = all_entries(store)
    report = store.clean(force=True)
    assert report.commitlog_files
    low = store.commitlog.min_offset
    starts = [s.start_offset for s in store.commitlog.segments.segments]
    assert starts == [low] and low > 0  # every segment but the last went
    assert [int(f.name[:20]) for f in index_files(store_dir)] == starts
    assert all_entries(store) == {low: expected[low]}
    assert store.offset_index.entries(0) == []
    assert_lookups_exact(store)
    put(store, 30)  # the put path carries on into the next segment
    assert all_entries(store) == expected_entries(store.commitlog, 300)
    store.close()
    reference = rebuilt_reference(store_dir, tmp_path / "copy")
    reopened = small(interval=300)
    assert all_entries(reopened) == reference
    assert_lookups_exact(reopened)


def test_an_index_joining_mid_segment_starts_numbering_at_the_next_one(
    small: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = small(interval=300)
    with monkeypatch.context() as patched:
        muted(store, patched)
        put(store, 5)  # records the index never heard of (and no load since)
    put(store, 5)
    assert store.offset_index.entries(0) == []  # numbering in this segment is unknown
    while len(store.commitlog.segments.segments) < 2:
        put(store, 4)
    expected = expected_entries(store.commitlog, 300)
    assert store.offset_index.entries(SEGMENT) == expected[SEGMENT]
    store.offset_index.append_batch([10], 200)  # older than anything the index holds: ignored
    assert store.offset_index.entries(0) == []
    store.close()
    reopened = small(interval=300)
    assert all_entries(reopened) == expected


def test_a_file_that_cannot_be_created_stops_indexing_not_puts(
    small: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = small(interval=300)
    put(store, 10)

    def disk_full(*args: object, **kwargs: object) -> object:
        raise OSError(28, "No space left on device")

    with monkeypatch.context() as patched:
        patched.setattr("localstore.commitlog.offset_index.SparseIndexFile", disk_full)
        while len(store.commitlog.segments.segments) < 3:
            put(store, 7)  # the puts succeed
    assert isinstance(store.offset_index.error, OSError)
    assert_lookups_exact(store)  # lookups walk the records of the unindexed segments
    expected = expected_entries(store.commitlog, 300)
    store.close()
    reopened = small(interval=300)  # the next load completes the index
    assert reopened.offset_index.error is None
    assert all_entries(reopened) == expected
