"""The sparse time index (``localstore.queue.time_index``) as the store runs it: layout, the entry
rule, lookups by time against a brute-force answer, retention, and repair of missing, truncated and
damaged files when the store is opened again.

The store owns one :class:`QueueTimeIndex` per consume queue (``store.time_indexes``), so these
tests use that instance while the store is open and never map its files a second time; a load
is a reopen of the store. Two things are set per test: the interval the store opens its time
indexes with (the default, 1024 units, would give a few dozen units no entries but each file's
first; one test checks the default), and the store's clock, so puts get chosen store times.
"""

from __future__ import annotations

import os
import shutil
import struct
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from localstore import MessageStore, NewMessage, PutResult, pack_host
from localstore.queue.consume_queue import ConsumeQueue
from localstore.queue.time_index import (
    DEFAULT_INTERVAL_UNITS,
    ENTRY_SIZE,
    QueueTimeIndex,
    SparseIndexFile,
    offset_for_timestamp,
    time_index_directory,
)
from localstore.record.batch_encoder import encode_batch

from .conftest import STORE_CLOCK_READERS, StoreFactory, message

TOPIC = "TopicTest"
KEY = (TOPIC, 0)
HOST = pack_host("127.0.0.1", 10911)
BASE_TS = 1_700_000_000_000
ENTRY = struct.Struct(">qi")
SMALL: dict[str, Any] = {
    "commitlog_file_size": 4096,
    "cq_entries_per_file": 8,
    "index_slots": 64,
    "index_entries": 256,
}

Entries = list[tuple[int, int]]
_REAL_OPEN = QueueTimeIndex.open.__func__  # type: ignore[attr-defined]


class Clock:
    """Stands in for the ``time`` module of ``localstore.store``: puts are stored at ``now``."""

    def __init__(self) -> None:
        self.now = BASE_TS

    def time_ns(self) -> int:
        return self.now * 1_000_000


def set_interval(monkeypatch: pytest.MonkeyPatch, units: int) -> None:
    """Make the store open its time indexes (``QueueTimeIndex.open(root, queue, commitlog)``)
    with an interval of ``units``."""

    def open_with(
        cls: type[QueueTimeIndex],
        root: Path,
        queue: ConsumeQueue,
        commitlog: Any,
        interval_units: int = units,
    ) -> QueueTimeIndex:
        return _REAL_OPEN(cls, root, queue, commitlog, interval_units)

    monkeypatch.setattr(QueueTimeIndex, "open", classmethod(open_with))


def set_clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    clock = Clock()
    for reader in STORE_CLOCK_READERS:
        monkeypatch.setattr(reader, clock)
    return clock


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    return set_clock(monkeypatch)


@pytest.fixture
def small(open_store: StoreFactory, monkeypatch: pytest.MonkeyPatch, clock: Clock) -> Any:
    """``small(interval)``: open a small store (8 units per queue file) whose time indexes
    have that interval (reopen: ``small(interval)`` again, the interval stays set)."""

    def factory(interval: int) -> MessageStore:
        set_interval(monkeypatch, interval)
        return open_store(**SMALL)

    return factory


def put_at(
    store: MessageStore, clock: Clock, timestamp: int, count: int, *, queue_id: int = 0
) -> PutResult:
    """Put ``count`` messages in one batch through the store, stored at ``timestamp``."""
    clock.now = timestamp
    result = store.put_batch([NewMessage(TOPIC, b"m" * 40, queue_id=queue_id)] * count)
    assert result.ok, result.detail
    assert result.store_timestamp == timestamp
    return result


def fill(store: MessageStore, clock: Clock, batches: list[tuple[int, int]]) -> ConsumeQueue:
    """Put (store timestamp, count) batches through the store (which tells its time index)."""
    for timestamp, count in batches:
        put_at(store, clock, timestamp, count)
    queue = store.consume_queue(TOPIC, 0)
    assert queue is not None
    return queue


def write_batch(
    store: MessageStore, timestamp: int, count: int, *, queue_id: int = 0, first: int | None = None
) -> tuple[ConsumeQueue, int]:
    """Append ``count`` messages stored at ``timestamp`` straight into the commitlog and the
    consume queue, behind the store's back (its time index is not told, as for units recovery
    dispatches); returns the queue and the batch's first queue offset."""
    queue = store.queues.get_or_create(TOPIC, queue_id)
    if first is None:
        first = queue.max_offset
    commitlog = store.commitlog
    encoded = encode_batch(
        [NewMessage(TOPIC, b"m" * 40, queue_id=queue_id)] * count,
        TOPIC,
        queue_id,
        first,
        commitlog.max_offset,
        commitlog.segment_size,
        timestamp,
        HOST,
        1 << 20,
    )
    commitlog.write_runs(encoded.runs, encoded.heads, encoded.end_offset, timestamp)
    queue.append(first, encoded.units, encoded.last_unit_phys_end)
    return queue, first


def time_index(store: MessageStore, queue_id: int = 0) -> QueueTimeIndex:
    return store.time_indexes[(TOPIC, queue_id)]


def unit_times(store: MessageStore, queue: ConsumeQueue) -> list[int]:
    return [
        store.store_timestamp(TOPIC, queue.queue_id, q)
        for q in range(queue.min_offset, queue.max_offset)
    ]


def first_at_or_after(times: list[int], target: int, low: int = 0) -> int:
    return next((low + i for i, ts in enumerate(times) if ts >= target), low + len(times))


def rule_entries(times: list[int], units_per_file: int, interval: int) -> Entries:
    """The documented entry rule applied unit by unit: (timestamp, queue offset)."""
    entries: Entries = []
    last_ts = due = 0
    for offset, ts in enumerate(times):
        if offset % units_per_file == 0 or (offset >= due and ts > last_ts):
            entries.append((ts, offset))
            last_ts, due = ts, offset + interval
        due = min(due, offset - offset % units_per_file + units_per_file)
    return entries


def assert_lookups_exact(store: MessageStore, queue_id: int = 0) -> None:
    """``store.offset_for_timestamp`` against a scan of the queue's store times, for every
    time around the queue's (and a few outside it)."""
    queue = store.consume_queue(TOPIC, queue_id)
    assert queue is not None
    times = unit_times(store, queue)
    low = queue.min_offset
    targets = {0, 1 << 62, *times, *(t - 1 for t in times), *(t + 1 for t in times)}
    for target in sorted(targets):
        expected = first_at_or_after(times, target, low)
        assert store.offset_for_timestamp(TOPIC, queue_id, target) == expected, target


def index_files(store_dir: Path, queue_id: int = 0) -> list[Path]:
    return sorted(time_index_directory(store_dir, TOPIC, queue_id).iterdir())


def rebuilt_reference(store_dir: Path, copy: Path, queue_id: int = 0) -> Entries:
    """The entries a store opened on a copy of the (closed) store without its time index
    files builds from scratch."""
    shutil.copytree(store_dir, copy)
    shutil.rmtree(copy / "timeindex", ignore_errors=True)
    with MessageStore(copy) as reference:
        return time_index(reference, queue_id).entries()


@pytest.fixture
def scratch() -> Iterator[Path]:
    """A directory for stores made inside hypothesis examples."""
    with tempfile.TemporaryDirectory() as directory:
        yield Path(directory)


# -- layout ----------------------------------------------------------------------------------


def test_files_sit_beside_the_consume_queue_with_kafka_entries(
    small: Any, clock: Clock, store_dir: Path
) -> None:
    store = small(interval=3)
    assert KEY not in store.time_indexes
    fill(store, clock, [(BASE_TS + 10 * i, 2) for i in range(10)])  # 20 units, 3 files
    assert KEY in store.time_indexes  # created by the put path for the new queue
    entries = time_index(store).entries()
    store.close()
    files = index_files(store_dir)
    assert [f.name for f in files] == [
        "00000000000000000000.timeindex",
        "00000000000000000008.timeindex",
        "00000000000000000016.timeindex",
    ]
    assert not any(p.suffix == ".timeindex" for p in (store_dir / "consumequeue").rglob("*"))
    # units 0-1 at +0, 2-3 at +10, ...: an entry is due 3 units after the last one and goes
    # to the first unit from there whose time is later
    first = files[0].read_bytes()
    assert first[:12] == BASE_TS.to_bytes(8, "big") + (0).to_bytes(4, "big")
    assert first[12:24] == (BASE_TS + 10).to_bytes(8, "big") + (3).to_bytes(4, "big")
    assert list(ENTRY.iter_unpack(first)) == [(BASE_TS, 0), (BASE_TS + 10, 3), (BASE_TS + 30, 6)]
    # every file starts with its first unit; offsets are relative to the file's base
    assert list(ENTRY.iter_unpack(files[1].read_bytes())) == [
        (BASE_TS + 40, 0),
        (BASE_TS + 50, 3),
        (BASE_TS + 70, 6),
    ]
    assert list(ENTRY.iter_unpack(files[2].read_bytes())) == [(BASE_TS + 80, 0), (BASE_TS + 90, 3)]
    assert entries == [
        (ts, base + relative)
        for base, f in zip((0, 8, 16), files, strict=True)
        for ts, relative in ENTRY.iter_unpack(f.read_bytes())
    ]


def test_file_is_preallocated_while_written_and_trimmed_on_close(
    small: Any, clock: Clock, store_dir: Path
) -> None:
    store = small(interval=2)
    fill(store, clock, [(BASE_TS + i, 1) for i in range(11)])
    index = time_index(store)
    files = index_files(store_dir)
    capacity = -(-8 // 2) + 1
    assert files[0].stat().st_size == 4 * ENTRY_SIZE  # sealed when the queue moved on
    assert files[1].stat().st_size == capacity * ENTRY_SIZE  # being written
    store.close()
    assert files[1].stat().st_size == 2 * ENTRY_SIZE  # units 8 and 10
    assert [e[1] for e in index.entries()] == []  # closed with the store: forgotten
    reopened = small(interval=2)
    assert [e[1] for e in time_index(reopened).entries()] == [0, 2, 4, 6, 8, 10]


def test_equal_timestamps_never_make_an_entry(small: Any, clock: Clock) -> None:
    store = small(interval=1)
    fill(store, clock, [(BASE_TS, 3), (BASE_TS, 2), (BASE_TS + 5, 1), (BASE_TS + 5, 1)])
    # 7 units in the first file: only the first unit and the first later time get entries
    assert time_index(store).entries() == [(BASE_TS, 0), (BASE_TS + 5, 5)]


def test_the_store_opens_its_indexes_with_the_default_interval(
    open_store: StoreFactory, clock: Clock, store_dir: Path, tmp_path: Path
) -> None:
    """No interval set: 1024 units, files of 2048 units (2 entries due per file)."""
    geometry = {**SMALL, "commitlog_file_size": 256 * 1024, "cq_entries_per_file": 2048}
    store = open_store(**geometry)
    for i in range(50):
        put_at(store, clock, BASE_TS + 7 * i, 100)  # 5,000 units, 3 queue files
    index = time_index(store)
    assert index.interval == DEFAULT_INTERVAL_UNITS
    queue = store.consume_queue(TOPIC, 0)
    assert queue is not None
    times = unit_times(store, queue)
    entries = index.entries()
    assert entries == rule_entries(times, 2048, DEFAULT_INTERVAL_UNITS)
    assert [offset for _, offset in entries] == [0, 1024, 2048, 3072, 4096]
    for target in (0, BASE_TS, BASE_TS + 1, BASE_TS + 77, BASE_TS + 200, BASE_TS + 343, 1 << 62):
        expected = first_at_or_after(times, target)
        assert store.offset_for_timestamp(TOPIC, 0, target) == expected
    store.close()
    assert rebuilt_reference(store_dir, tmp_path / "copy") == entries


# -- the rule: put path, rebuild and model agree ---------------------------------------------

batches_strategy = st.lists(
    st.tuples(st.integers(0, 3), st.integers(1, 9)), min_size=1, max_size=25
)  # (store-time step, batch size)


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(steps=batches_strategy, interval=st.integers(1, 5), data=st.data())
def test_put_path_rebuild_and_rule_agree_and_lookups_are_exact(
    scratch: Path, steps: list[tuple[int, int]], interval: int, data: st.DataObject
) -> None:
    root = Path(tempfile.mkdtemp(dir=scratch))
    with pytest.MonkeyPatch.context() as monkeypatch:
        set_interval(monkeypatch, interval)
        clock = set_clock(monkeypatch)
        with MessageStore(root, **SMALL) as store:
            timestamp, batches = BASE_TS, []
            for step, count in steps:
                timestamp += step
                batches.append((timestamp, count))
            queue = fill(store, clock, batches)
            index = time_index(store)
            times = unit_times(store, queue)
            put_path = index.entries()
            assert put_path == rule_entries(times, 8, interval)
            targets = {times[0] - 1, times[-1] + 1, *times, *(t + 1 for t in times)}
            targets.add(data.draw(st.integers(times[0] - 5, times[-1] + 5)))
            for target in sorted(targets):
                expected = first_at_or_after(times, target)
                assert store.offset_for_timestamp(TOPIC, 0, target) == expected
                assert offset_for_timestamp(queue, store.commitlog, None, target) == expected
                floor = index.floor_entry(target)
                below = [e for e in put_path if e[0] <= target]
                assert floor == (below[-1] if below else None)
            index.rebuild()  # the store's own instance, rebuilt from its queue
            assert index.entries() == put_path
        shutil.rmtree(root / "timeindex")
        with MessageStore(root) as store:  # the files gone: the store's load rebuilds them
            assert time_index(store).entries() == put_path
            assert store.offset_for_timestamp(TOPIC, 0, times[-1]) == times.index(times[-1])


@settings(
    max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    times=st.lists(st.integers(0, 40), min_size=1, max_size=40),
    interval=st.integers(1, 4),
    target=st.integers(-2, 42),
)
def test_clock_steps_back_give_a_crossing_point(
    scratch: Path, times: list[int], interval: int, target: int
) -> None:
    """Store times that go down: the answer r has time(r - 1) < target <= time(r)."""
    root = Path(tempfile.mkdtemp(dir=scratch))
    with pytest.MonkeyPatch.context() as monkeypatch:
        set_interval(monkeypatch, interval)
        clock = set_clock(monkeypatch)
        with MessageStore(root, **SMALL) as store:
            fill(store, clock, [(BASE_TS + t, 1) for t in times])
            index = time_index(store)
            assert index.entries() == rule_entries([BASE_TS + t for t in times], 8, interval)
            got = store.offset_for_timestamp(TOPIC, 0, BASE_TS + target)
            extended = [-(1 << 62), *(BASE_TS + t for t in times), 1 << 62]
            assert extended[got] < BASE_TS + target <= extended[got + 1]
            index.rebuild()  # a rebuild may choose other crossings; its entries still name units
            for ts, offset in index.entries():
                assert ts == BASE_TS + times[offset]
            got = store.offset_for_timestamp(TOPIC, 0, BASE_TS + target)
            assert extended[got] < BASE_TS + target <= extended[got + 1]


# -- lookups: clamping and edges -------------------------------------------------------------


def test_lookup_edges(small: Any, clock: Clock) -> None:
    store = small(interval=2)
    fill(store, clock, [(BASE_TS, 3), (BASE_TS + 10, 4), (BASE_TS + 10, 2), (BASE_TS + 20, 5)])

    def lookup(ts: int) -> int:
        return store.offset_for_timestamp(TOPIC, 0, ts)

    assert lookup(0) == 0  # before the first: the min offset
    assert lookup(BASE_TS) == 0
    assert lookup(BASE_TS + 1) == 3
    assert lookup(BASE_TS + 10) == 3  # equal times: the earliest
    assert lookup(BASE_TS + 11) == 9
    assert lookup(BASE_TS + 20) == 9
    assert lookup(BASE_TS + 21) == 14  # after the last: the max offset
    assert lookup(1 << 62) == 14
    assert store.offset_for_timestamp("NoSuchTopic", 0, BASE_TS) == 0  # unknown queue
    assert store.offset_for_timestamp(TOPIC, 3, BASE_TS) == 0
    store.queues.get_or_create(TOPIC, 3)  # a queue without units (and without a time index)
    assert (TOPIC, 3) not in store.time_indexes
    assert store.offset_for_timestamp(TOPIC, 3, BASE_TS) == 0


def test_queue_starting_past_zero_clamps_to_its_min_offset(
    small: Any, store_dir: Path, tmp_path: Path
) -> None:
    store = small(interval=2)
    queue, _ = write_batch(store, BASE_TS, 3, queue_id=1, first=13)  # filler units 8-12
    write_batch(store, BASE_TS + 7, 4, queue_id=1)
    assert (queue.min_offset, queue.max_offset) == (13, 20)
    store.close()
    store = small(interval=2)  # the store loads the queue's index
    queue = store.consume_queue(TOPIC, 1)
    assert queue is not None
    assert (queue.min_offset, queue.max_offset) == (13, 20)
    index = time_index(store, 1)
    assert index.entries() == [(BASE_TS, 13), (BASE_TS + 7, 16)]
    assert store.offset_for_timestamp(TOPIC, 1, 0) == 13
    assert store.offset_for_timestamp(TOPIC, 1, BASE_TS + 1) == 16
    assert store.offset_for_timestamp(TOPIC, 1, BASE_TS + 8) == 20
    assert_lookups_exact(store, 1)
    store.close()
    reference = rebuilt_reference(store_dir, tmp_path / "copy", 1)
    assert reference == [(BASE_TS, 13), (BASE_TS + 7, 16)]
    reopened = small(interval=2)
    assert time_index(reopened, 1).entries() == reference


def test_index_behind_or_ahead_of_the_queue_still_answers_exactly(small: Any, clock: Clock) -> None:
    store = small(interval=2)
    queue = fill(store, clock, [(BASE_TS + i, 2) for i in range(5)])
    for i in range(8):  # not told: the store's index lags
        write_batch(store, BASE_TS + 5 + i, 2)
    assert time_index(store).entries()[-1][1] < 10
    times = unit_times(store, queue)
    assert len(times) == 26
    for target in range(BASE_TS - 1, BASE_TS + 15):
        got = store.offset_for_timestamp(TOPIC, 0, target)
        assert got == first_at_or_after(times, target)


def test_store_put_path_with_real_clock(small: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    store = small(interval=2)
    for reader in STORE_CLOCK_READERS:
        monkeypatch.setattr(reader, time)  # the real clock again
    results = []
    for i in range(6):
        result = store.put_batch([message(body=bytes([i]) * 30) for _ in range(3)])
        assert result.ok
        results.append(result)
        time.sleep(0.003)
    for result in results:
        got = store.offset_for_timestamp(TOPIC, 0, result.store_timestamp)
        assert got == result.queue_offset
    stamps = [ts for ts, _ in time_index(store).entries()]
    assert stamps == sorted(stamps)  # strictly rising within a file, equal across files at most


def test_append_is_one_comparison_unless_an_entry_is_due(
    small: Any, clock: Clock, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = small(interval=64)
    put_at(store, clock, BASE_TS, 1)  # creates the queue and its index (loaded: unit 0)
    index = time_index(store)
    slow_calls = 0
    slow = index._append_due

    def counting(first: int, end: int, timestamp: int) -> None:
        nonlocal slow_calls
        slow_calls += 1
        slow(first, end, timestamp)

    def no_reads(*args: object) -> int:
        raise AssertionError("the put path read a store time")

    monkeypatch.setattr(index, "_append_due", counting)
    monkeypatch.setattr("localstore.queue.time_index._store_time", no_reads)
    for offset in range(1, 400):
        put_at(store, clock, BASE_TS + offset, 1)
    monkeypatch.undo()
    # once per file (8 units) after the first, the interval never comes due
    assert slow_calls == 400 // 8 - 1
    assert [offset for _, offset in index.entries()] == list(range(0, 400, 8))


# -- load (a reopen): repair and completion ----------------------------------------------------


@pytest.fixture
def built(small: Any, clock: Clock, store_dir: Path) -> tuple[Any, list[tuple[int, int]]]:
    """A queue of 3 files (20 units, times rising by 1 per batch of 2), its index's entries;
    the store is closed. Returns ``reopen`` (opens the store again) and the entries."""
    store = small(interval=2)
    fill(store, clock, [(BASE_TS + i, 2) for i in range(10)])
    entries = time_index(store).entries()
    assert entries == rule_entries(unit_times(store, store.queues.get_or_create(TOPIC, 0)), 8, 2)
    store.close()
    return (lambda: small(interval=2)), entries


def test_reload_keeps_intact_files_untouched(
    built: tuple[Any, list[tuple[int, int]]], store_dir: Path
) -> None:
    reopen, entries = built
    files = index_files(store_dir)
    before = {f: (f.stat().st_mtime_ns, f.read_bytes()) for f in files[:-1]}
    time.sleep(0.01)
    store = reopen()
    assert time_index(store).entries() == entries
    assert {f: (f.stat().st_mtime_ns, f.read_bytes()) for f in files[:-1]} == before
    assert_lookups_exact(store)


@pytest.mark.parametrize(
    "damage",
    [
        "missing",
        "empty",
        "odd_length",
        "garbage",
        "decreasing",
        "wrong_first_entry",
        "wrong_timestamp",
        "truncated_by_entries",
        "untrimmed_after_crash",
    ],
)
@pytest.mark.parametrize("which", [1, -1])
def test_damaged_files_are_rebuilt_or_completed(
    built: tuple[Any, list[tuple[int, int]]],
    store_dir: Path,
    tmp_path: Path,
    damage: str,
    which: int,
) -> None:
    reopen, entries = built
    reference = rebuilt_reference(store_dir, tmp_path / "copy")
    assert reference == entries
    path = index_files(store_dir)[which]
    data = path.read_bytes()
    assert len(data) == (4 if which == 1 else 2) * ENTRY_SIZE
    ts0, rel0 = ENTRY.unpack_from(data, 0)
    damaged = {
        "missing": None,
        "empty": b"",
        "odd_length": data[:-5],
        "garbage": os.urandom(len(data)),
        "decreasing": data[12:24] + data[:12] + data[24:],
        "wrong_first_entry": ENTRY.pack(ts0, rel0 + 1) + data[12:],
        "wrong_timestamp": ENTRY.pack(ts0 - 1, rel0) + data[12:],
        "truncated_by_entries": data[:12],
        "untrimmed_after_crash": data + bytes(5 * ENTRY_SIZE),
    }[damage]
    if damaged is None:
        path.unlink()
    else:
        path.write_bytes(damaged)
    store = reopen()
    assert time_index(store).entries() == reference
    assert_lookups_exact(store)
    store.close()
    assert path.read_bytes() == data


def test_units_dispatched_while_the_index_was_closed_are_indexed_on_load(
    built: tuple[Any, list[tuple[int, int]]], store_dir: Path, tmp_path: Path
) -> None:
    reopen, _ = built
    store = reopen()
    for i in range(4):  # into the queue behind the index's back, as recovery dispatches
        write_batch(store, BASE_TS + 20 + i, 3)
    store.close()
    store = reopen()
    queue = store.consume_queue(TOPIC, 0)
    assert queue is not None and queue.max_offset == 32
    entries = time_index(store).entries()
    assert entries == rule_entries(unit_times(store, queue), 8, 2)
    assert_lookups_exact(store)
    store.close()
    assert rebuilt_reference(store_dir, tmp_path / "copy") == entries


def test_entries_past_the_queue_end_and_orphan_files_are_dropped(
    built: tuple[Any, list[tuple[int, int]]], store_dir: Path
) -> None:
    reopen, entries = built
    files = index_files(store_dir)
    last = files[-1]  # units 16-19; pretend the index had gone further before a crash
    last.write_bytes(last.read_bytes() + ENTRY.pack(BASE_TS + 50, 6))
    orphan = last.with_name("00000000000000000024.timeindex")
    orphan.write_bytes(ENTRY.pack(BASE_TS + 60, 0))
    unrelated = last.with_name("notes.txt")
    unrelated.write_text("kept")
    store = reopen()
    assert time_index(store).entries() == entries
    assert not orphan.exists()
    assert unrelated.exists()
    assert_lookups_exact(store)


def test_index_survives_a_store_reopen(small: Any, clock: Clock) -> None:
    store = small(interval=2)
    fill(store, clock, [(BASE_TS + i, 3) for i in range(7)])
    entries = time_index(store).entries()
    store.close()
    reopened = small(interval=2)
    index = time_index(reopened)
    assert index.entries() == entries
    assert reopened.offset_for_timestamp(TOPIC, 0, BASE_TS + 3) == 9
    put_at(reopened, clock, BASE_TS + 100, 2)  # the put path carries on after a load
    assert index.entries()[-1] == (BASE_TS + 100, 21)
    assert_lookups_exact(reopened)


def test_drop_before_deletes_whole_files_but_never_the_active_one(
    built: tuple[Any, list[tuple[int, int]]], store_dir: Path
) -> None:
    reopen, _ = built
    store = reopen()
    index = time_index(store)
    index.drop_before(17)
    assert [f.name[:20] for f in index_files(store_dir)] == [
        "00000000000000000016",
    ]
    assert index.entries()[0][1] == 16
    index.drop_before(100)
    assert len(index_files(store_dir)) == 1


def test_retention_drops_the_files_of_deleted_queue_files(
    small: Any, clock: Clock, store_dir: Path, tmp_path: Path
) -> None:
    store = small(interval=2)
    fill(store, clock, [(BASE_TS + i, 1) for i in range(100)])  # 3+ commitlog segments
    assert len(store.commitlog.segments.segments) >= 3
    report = store.clean(force=True)
    assert report.commitlog_files
    queue = store.consume_queue(TOPIC, 0)
    assert queue is not None
    low = queue.min_offset
    assert low > 8 and report.queue_min_offsets[KEY] == low
    bases = [int(f.name[:20]) for f in index_files(store_dir)]
    assert bases == list(range(low - low % 8, queue.max_offset, 8))
    entries = time_index(store).entries()
    assert entries[0][1] == low - low % 8
    assert_lookups_exact(store)
    for target in (0, BASE_TS, BASE_TS + low):  # older than the min offset: clamped to it
        assert store.offset_for_timestamp(TOPIC, 0, target) == low
    store.close()
    reference = rebuilt_reference(store_dir, tmp_path / "copy")
    assert reference[0] == (BASE_TS + low, low)
    reopened = small(interval=2)
    assert time_index(reopened).entries() == reference
    assert_lookups_exact(reopened)


def test_sparse_file_seal_keeps_readers_safe(tmp_path: Path) -> None:
    path = tmp_path / "x.timeindex"
    file = SparseIndexFile(path, ENTRY_SIZE, ENTRY.pack(1, 0), capacity=4)
    held = file.buf  # a reader holding the mapping across the seal
    assert file.append(ENTRY.pack(2, 1))
    file.seal()
    assert path.stat().st_size == 2 * ENTRY_SIZE
    assert bytes(held[:24]) == ENTRY.pack(1, 0) + ENTRY.pack(2, 1)
    assert file.buf == ENTRY.pack(1, 0) + ENTRY.pack(2, 1)
    assert not file.append(ENTRY.pack(3, 2))  # sealed: read-only
    file.seal()  # idempotent


def test_a_file_that_cannot_be_created_stops_indexing_not_puts(
    small: Any, clock: Clock, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = small(interval=2)
    queue = fill(store, clock, [(BASE_TS + i, 2) for i in range(4)])  # file 0 complete
    index = time_index(store)

    def disk_full(*args: object, **kwargs: object) -> SparseIndexFile:
        raise OSError(28, "No space left on device")

    with monkeypatch.context() as patched:
        patched.setattr("localstore.queue.time_index.SparseIndexFile", disk_full)
        fill(store, clock, [(BASE_TS + 4 + i, 2) for i in range(6)])  # would start file 8
    assert isinstance(index.error, OSError)
    assert [offset for _, offset in index.entries()] == [0, 2, 4, 6]
    times = unit_times(store, queue)
    for target in range(BASE_TS - 1, BASE_TS + 12):
        got = store.offset_for_timestamp(TOPIC, 0, target)
        assert got == first_at_or_after(times, target)
    store.close()
    reopened = small(interval=2)  # the next load completes the index
    index = time_index(reopened)
    assert index.error is None
    assert index.entries() == rule_entries(times, 8, 2)
    assert_lookups_exact(reopened)
