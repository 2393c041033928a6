"""Retention on real stores: which commitlog, consume-queue and index files a run deletes, the
min offsets it leaves, reads and reopens after it, and readers running while it deletes."""

from __future__ import annotations

import os
import random
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from localstore import GetStatus, MessageStore
from localstore.files.retired import RetiredFiles
from localstore.queue.consume_queue import UNIT, UNIT_SIZE
from localstore.record.codec import decode_record
from localstore.retention import (
    CleanReport,
    RetentionPolicy,
    clean,
    correct_min_offset,
    decide,
    delete_expired_segments,
    parse_delete_when,
)

from .conftest import TINY_GEOMETRY, StoreFactory, message

HOUR_S = 3600
INDEX_GEOMETRY: dict[str, Any] = {**TINY_GEOMETRY, "index_slots": 16, "index_entries": 6}
TOPIC = "TopicTest"
QUEUES = 3
NO_HOUR = RetentionPolicy(delete_when="")  # due only through the disk, manual or forced runs


@dataclass
class Written:
    """What a test put: per queue, (queue offset, phys offset, body) in queue order."""

    units: dict[int, list[tuple[int, int, bytes]]] = field(default_factory=dict)

    def expected_min(self, queue_id: int, commitlog_min: int) -> int:
        units = self.units[queue_id]
        return next((qo for qo, phys, _ in units if phys >= commitlog_min), len(units))


def body_for(topic: str, number: int) -> bytes:
    return f"{topic}-{number:05d}-".encode() + bytes([number % 251]) * 250


def fill(
    store: MessageStore, count: int, written: Written | None = None, topic: str = TOPIC
) -> Written:
    """``count`` more messages of about 330 bytes over QUEUES queues: ~12 per 4 KiB segment.
    Message n (counted over every fill into ``written``) has key ``key{n}``."""
    written = written if written is not None else Written()
    for _ in range(count):
        number = sum(len(units) for units in written.units.values())
        queue_id = number % QUEUES
        body = body_for(topic, number)
        result = store.put(message(topic, body, queue_id=queue_id, keys=f"key{number}"))
        assert result.ok
        written.units.setdefault(queue_id, []).append(
            (result.queue_offset, result.phys_offset, body)
        )
    return written


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def set_ages(store: MessageStore, ages_h: list[float], now: int) -> None:
    """Age the commitlog segments (mtime = now - age), oldest first; later ones are left alone."""
    for segment, age in zip(store.commitlog.segments.segments, ages_h, strict=False):
        stamp = now / 1000 - age * HOUR_S
        os.utime(segment.path, (stamp, stamp))


def run(
    store: MessageStore,
    policy: RetentionPolicy = NO_HOUR,
    *,
    at: int | None = None,
    usage: float = 10.0,
    **kwargs: Any,
) -> CleanReport:
    """One cleanup run under the put lock, as the store will call it."""
    with store._put_lock:
        return clean(
            store.commitlog,
            store.queues,
            store.index,
            policy,
            at if at is not None else now_ms(),
            disk_usage=lambda _: usage,
            **kwargs,
        )


def segment_names(store: MessageStore) -> list[str]:
    return sorted(os.listdir(store.root / "commitlog"))


def read_all(store: MessageStore, queue_id: int, topic: str = TOPIC) -> list[tuple[int, bytes]]:
    """(queue offset, body) of every message from the queue's min offset to its end."""
    out: list[tuple[int, bytes]] = []
    offset = store.min_offset(topic, queue_id)
    while offset < store.max_offset(topic, queue_id):
        result = store.get_messages(topic, queue_id, offset)
        assert result.status is GetStatus.FOUND, (offset, result.status)
        out += [(m.queue_offset, m.body) for m in result.messages]
        offset = result.next_offset
    return out


def cq_files(store: MessageStore, queue_id: int, topic: str = TOPIC) -> list[int]:
    return sorted(int(n) for n in os.listdir(store.root / "consumequeue" / topic / str(queue_id)))


@pytest.fixture
def filled(open_store: StoreFactory) -> tuple[MessageStore, Written]:
    """About eight 4 KiB segments, tiny consume-queue and index files."""
    store = open_store(**INDEX_GEOMETRY)
    return store, fill(store, 90)


# -- policy and trigger ----------------------------------------------------------------------


def test_policy_defaults_clamping_and_hours() -> None:
    policy = RetentionPolicy()
    assert (policy.file_reserved_hours, policy.delete_when, policy.delete_batch_max) == (
        72,
        "04",
        10,
    )
    assert (policy.disk_max_used_ratio, policy.disk_clean_forcibly_ratio) == (75, 85)
    assert (policy.disk_warning_ratio, policy.clean_forcibly_enable) == (90, True)
    assert policy.delete_hours == {4}
    high = RetentionPolicy(
        disk_max_used_ratio=99, disk_clean_forcibly_ratio=99, disk_warning_ratio=99
    )
    assert (high.disk_max_used_ratio, high.disk_clean_forcibly_ratio, high.disk_warning_ratio) == (
        95,
        85,
        90,
    )
    low = RetentionPolicy(disk_max_used_ratio=1, disk_clean_forcibly_ratio=1, disk_warning_ratio=1)
    assert (low.disk_max_used_ratio, low.disk_clean_forcibly_ratio, low.disk_warning_ratio) == (
        10,
        30,
        35,
    )
    assert parse_delete_when("04;16; 23;") == {4, 16, 23}
    assert parse_delete_when("") == frozenset()
    for bad in ("24", "4am", "-1"):
        with pytest.raises(ValueError, match="hour"):
            RetentionPolicy(delete_when=bad)
    with pytest.raises(ValueError):
        RetentionPolicy(delete_batch_max=0)


@pytest.mark.parametrize(
    ("usage", "due", "immediately", "full"),
    [
        (50.0, False, False, False),
        (75.0, False, False, False),  # thresholds are strict (>), as RocketMQ's
        (80.0, True, False, False),
        (85.0, True, False, False),
        (88.0, True, True, False),
        (95.0, True, True, True),
        (-1.0, True, False, False),  # usage unknown: RocketMQ cleans expired files
    ],
)
def test_disk_usage_thresholds(usage: float, due: bool, immediately: bool, full: bool) -> None:
    trigger = decide(NO_HOUR, now_ms(), usage)
    assert (trigger.due, trigger.clean_immediately, trigger.disk_full) == (due, immediately, full)
    assert trigger.reason == ("disk" if due else "")


def test_forcible_cleaning_can_be_disabled() -> None:
    policy = RetentionPolicy(delete_when="", clean_forcibly_enable=False)
    trigger = decide(policy, now_ms(), 95.0)
    assert (trigger.due, trigger.clean_immediately, trigger.disk_full) == (True, False, True)
    assert decide(policy, now_ms(), 10.0, force=True).clean_immediately  # an explicit force wins


def test_delete_when_matches_the_local_hour() -> None:
    at = now_ms()
    hour = time.localtime(at / 1000).tm_hour
    other = (hour + 7) % 24
    assert decide(RetentionPolicy(delete_when=f"{other:02d};{hour:02d}"), at, 10.0).reason == "time"
    assert not decide(RetentionPolicy(delete_when=f"{other:02d}"), at, 10.0).due
    assert decide(RetentionPolicy(delete_when=f"{other:02d}"), at, 10.0, manual=True).reason == (
        "manual"
    )


# -- commitlog segments ----------------------------------------------------------------------


def test_expired_segments_are_deleted_oldest_first_but_never_the_last(
    filled: tuple[MessageStore, Written],
) -> None:
    store, _ = filled
    at = now_ms()
    segments = list(store.commitlog.segments.segments)
    assert len(segments) >= 6
    set_ages(store, [200.0] * len(segments), at)  # every segment expired, the last one included
    report = run(store, at=at, manual=True)
    assert report.trigger.reason == "manual"
    assert report.commitlog_files == [s.path for s in segments[:-1]]
    assert segment_names(store) == [segments[-1].path.name]
    assert store.commitlog.min_offset == report.commitlog_min_offset == segments[-1].start_offset
    assert run(store, at=at, force=True).commitlog_files == []  # the last one stays, even forced


def test_a_young_segment_stops_the_walk(filled: tuple[MessageStore, Written]) -> None:
    store, _ = filled
    at = now_ms()
    segments = list(store.commitlog.segments.segments)
    set_ages(store, [100.0, 80.0, 71.0, 100.0, 100.0], at)  # 71 h < 72 h: the third is young
    report = run(store, at=at, manual=True)
    assert [p.name for p in report.commitlog_files] == [s.path.name for s in segments[:2]]
    assert store.commitlog.min_offset == segments[2].start_offset
    assert segments[3].path.exists()  # old, but after a young one: never deleted from the middle
    # Once the young one expires, the walk goes on.
    report = run(store, at=at + 2 * HOUR_S * 1000, manual=True)
    assert [p.name for p in report.commitlog_files] == [s.path.name for s in segments[2:5]]


def test_not_due_deletes_nothing(filled: tuple[MessageStore, Written]) -> None:
    store, _ = filled
    at = now_ms()
    set_ages(store, [200.0] * 10, at)
    before = segment_names(store)
    report = run(store, at=at)  # hour not listed, disk at 10 %, not manual
    assert not report.trigger.due
    assert report.deleted == []
    assert segment_names(store) == before


def test_at_most_a_batch_per_run(filled: tuple[MessageStore, Written]) -> None:
    store, _ = filled
    at = now_ms()
    set_ages(store, [200.0] * 10, at)
    count = len(store.commitlog.segments.segments)
    policy = RetentionPolicy(delete_when="", delete_batch_max=2)
    deleted = [len(run(store, policy, at=at, manual=True).commitlog_files) for _ in range(5)]
    assert deleted[:2] == [2, 2]
    assert sum(deleted) == count - 1
    assert len(store.commitlog.segments.segments) == 1


@pytest.mark.parametrize(
    ("usage", "forcibly", "deleted_young"),
    [(80.0, True, False), (88.0, True, True), (95.0, True, True), (95.0, False, False)],
)
def test_disk_usage_decides_whether_young_segments_go(
    filled: tuple[MessageStore, Written], usage: float, forcibly: bool, deleted_young: bool
) -> None:
    store, _ = filled
    at = now_ms()
    count = len(store.commitlog.segments.segments)
    policy = RetentionPolicy(delete_when="", clean_forcibly_enable=forcibly)
    set_ages(store, [1.0] * count, at)  # all young
    report = run(store, policy, at=at, usage=usage)
    assert report.trigger.due
    assert len(report.commitlog_files) == (count - 1 if deleted_young else 0)
    assert report.trigger.disk_full == (usage > 90)
    set_ages(store, [100.0] * count, at)  # old ones go once the disk is over 75 %
    run(store, policy, at=at, usage=usage)
    assert len(store.commitlog.segments.segments) == 1


def test_delete_when_hour_triggers_a_run(filled: tuple[MessageStore, Written]) -> None:
    store, _ = filled
    at = now_ms()
    hour = time.localtime(at / 1000).tm_hour
    set_ages(store, [100.0, 100.0], at)
    other = RetentionPolicy(delete_when=f"{(hour + 1) % 24:02d}")
    assert run(store, other, at=at).commitlog_files == []
    report = run(store, RetentionPolicy(delete_when=f"{hour}"), at=at)
    assert report.trigger.reason == "time"
    assert len(report.commitlog_files) == 2


# -- consume queues and index ----------------------------------------------------------------


def test_queue_files_follow_and_min_offsets_are_corrected(
    filled: tuple[MessageStore, Written],
) -> None:
    store, written = filled
    before = {q: cq_files(store, q) for q in range(QUEUES)}
    report = run(store, force=True, policy=RetentionPolicy(delete_when="", delete_batch_max=4))
    floor = report.commitlog_min_offset
    assert floor == store.commitlog.min_offset > 0
    file_bytes = store.geometry.cq_file_size
    for q in range(QUEUES):
        units = written.units[q]
        new_min = written.expected_min(q, floor)
        assert store.min_offset(TOPIC, q) == new_min
        assert report.queue_min_offsets[(TOPIC, q)] == new_min
        # A file goes when its last unit points below the floor (and it is not the last).
        kept = [
            start
            for start in before[q]
            if start == before[q][-1]
            or units[min((start + file_bytes) // UNIT_SIZE, len(units)) - 1][1] >= floor
        ]
        assert cq_files(store, q) == kept
        assert kept[0] <= new_min * UNIT_SIZE < kept[0] + file_bytes or new_min == len(units)
        assert len(kept) < len(before[q])
    assert {p.parent.name for p in report.queue_files} == {"0", "1", "2"}


def test_queue_wholly_below_the_floor_is_empty_but_keeps_its_max(
    open_store: StoreFactory,
) -> None:
    store = open_store(**TINY_GEOMETRY)
    early = fill(store, 3, topic="Early")  # one message in each queue, in the first segment
    fill(store, 80)
    report = run(store, force=True)
    for q in range(QUEUES):
        assert store.min_offset("Early", q) == store.max_offset("Early", q) == 1
        result = store.get_messages("Early", q, 0)
        assert (result.status, result.next_offset) == (GetStatus.OFFSET_TOO_SMALL, 1)
        assert store.get_messages("Early", q, 1).status is GetStatus.OFFSET_OVERFLOW_ONE
    assert len(cq_files(store, 0, "Early")) == 1  # the last file stays
    assert report.queue_min_offsets[("Early", 0)] == 1
    # New messages continue the queue's offsets and read back.
    result = store.put(message("Early", b"late", queue_id=0))
    assert result.queue_offset == 1
    assert [m.body for m in store.get_messages("Early", 0, 1).messages] == [b"late"]
    assert early.units[0][0][0] == 0


def test_index_files_follow(filled: tuple[MessageStore, Written]) -> None:
    store, written = filled
    assert store.index is not None
    files = list(store.index.files)
    assert len(files) > 5
    report = run(store, force=True)
    floor = report.commitlog_min_offset
    expected = []
    for f in files[:-1]:
        if f.end_phy_offset >= floor:
            break
        expected.append(f.path)
    assert report.index_files == expected != []
    assert store.index.files == files[len(expected) :]
    assert all(not p.exists() for p in expected)
    assert store.index.files[0].end_phy_offset >= floor or len(store.index.files) == 1
    # A key whose message is gone finds nothing; one after the floor is found.
    assert store.query_by_key(TOPIC, "key0") == []
    last = sum(len(units) for units in written.units.values()) - 1
    assert [m.body[:16] for m in store.query_by_key(TOPIC, f"key{last}")] == [
        f"{TOPIC}-{last:05d}-".encode()
    ]


# -- reads after cleaning --------------------------------------------------------------------


def test_reads_after_cleaning(filled: tuple[MessageStore, Written]) -> None:
    store, written = filled
    floor = run(store, force=True, policy=RetentionPolicy(delete_when="", delete_batch_max=3))
    for q in range(QUEUES):
        new_min = written.expected_min(q, floor.commitlog_min_offset)
        assert new_min > 0
        for offset in (0, new_min - 1):
            result = store.get_messages(TOPIC, q, offset)
            assert (result.status, result.next_offset) == (GetStatus.OFFSET_TOO_SMALL, new_min)
            assert store.get_message_bytes(TOPIC, q, offset).status is GetStatus.OFFSET_TOO_SMALL
        expected = [(qo, body) for qo, _, body in written.units[q][new_min:]]
        assert read_all(store, q) == expected
        raw = store.get_message_bytes(TOPIC, q, new_min, max_count=4).raw
        assert decode_record(raw, 0).body == expected[0][1]


def test_unit_of_a_deleted_record_reads_as_removing_until_min_is_corrected(
    filled: tuple[MessageStore, Written],
) -> None:
    store, written = filled
    set_ages(store, [100.0, 100.0], now_ms())
    retired = RetiredFiles(grace_s=0.0)
    deleted = delete_expired_segments(store.commitlog, NO_HOUR, now_ms(), False, retired)
    assert len(deleted) == 2
    retired.reap()
    queue = store.consume_queue(TOPIC, 0)
    assert queue is not None and queue.min_offset == 0
    result = store.get_messages(TOPIC, 0, 0, max_count=1)
    assert (result.status, result.next_offset) == (GetStatus.MESSAGE_WAS_REMOVING, 1)
    assert store.get_message_bytes(TOPIC, 0, 0, max_count=1).status is (
        GetStatus.MESSAGE_WAS_REMOVING
    )
    new_min = correct_min_offset(queue, store.commitlog.min_offset)
    assert new_min == written.expected_min(0, store.commitlog.min_offset) > 0
    result = store.get_messages(TOPIC, 0, 0)
    assert (result.status, result.next_offset) == (GetStatus.OFFSET_TOO_SMALL, new_min)


# -- reopen ----------------------------------------------------------------------------------


def clean_and_reopen(
    open_store: StoreFactory, flush_mode: str, batch: int = 4
) -> tuple[MessageStore, Written, CleanReport, dict[int, int]]:
    store = open_store(**INDEX_GEOMETRY, flush_mode=flush_mode)
    written = fill(store, 90)
    report = run(store, force=True, policy=RetentionPolicy(delete_when="", delete_batch_max=batch))
    mins = {q: store.min_offset(TOPIC, q) for q in range(QUEUES)}
    store.close()
    return open_store(), written, report, mins


@pytest.mark.parametrize("flush_mode", ["async", "sync"])
def test_reopen_after_cleaning(open_store: StoreFactory, flush_mode: str) -> None:
    store, written, report, _ = clean_and_reopen(open_store, flush_mode)
    assert not store.crashed_last_time
    assert store.commitlog.min_offset == report.commitlog_min_offset
    assert segment_names(store)[0] == f"{report.commitlog_min_offset:020d}"
    for q in range(QUEUES):
        new_min = written.expected_min(q, report.commitlog_min_offset)
        assert store.max_offset(TOPIC, q) == len(written.units[q])
        # Everything from the new min on reads back (reading from the true min, not the store's).
        offset, bodies = new_min, []
        while offset < store.max_offset(TOPIC, q):
            result = store.get_messages(TOPIC, q, offset)
            assert result.status is GetStatus.FOUND
            bodies += [m.body for m in result.messages]
            offset = result.next_offset
        assert bodies == [body for _, _, body in written.units[q][new_min:]]
    result = store.put(message(TOPIC, b"after", queue_id=0))
    assert result.queue_offset == len(written.units[0])
    assert store.get_messages(TOPIC, 0, result.queue_offset).messages[0].body == b"after"


@pytest.mark.parametrize("flush_mode", ["async", "sync"])
def test_reopen_after_cleaning_keeps_queue_min_offsets(
    open_store: StoreFactory, flush_mode: str
) -> None:
    """Fails while the store computes min offsets from the files alone on open: the first
    remaining consume-queue file's leading units point below the commitlog's min offset. The store
    must call retention's ``correct_min_offset`` for every queue after recovery."""
    store, written, report, mins = clean_and_reopen(open_store, flush_mode)
    assert {q: written.expected_min(q, report.commitlog_min_offset) for q in range(QUEUES)} == mins
    assert {q: store.min_offset(TOPIC, q) for q in range(QUEUES)} == mins
    for q in range(QUEUES):
        result = store.get_messages(TOPIC, q, 0)
        assert (result.status, result.next_offset) == (GetStatus.OFFSET_TOO_SMALL, mins[q])


def test_a_run_after_reopen_repairs_min_offsets(open_store: StoreFactory) -> None:
    store, _, report, mins = clean_and_reopen(open_store, "async")
    again = run(store)  # not due: only the follow-up steps run
    assert again.commitlog_files == []
    assert again.commitlog_min_offset == report.commitlog_min_offset
    assert {q: store.min_offset(TOPIC, q) for q in range(QUEUES)} == mins
    for q in range(QUEUES):
        assert read_all(store, q)[0][0] == mins[q]


# -- concurrency -----------------------------------------------------------------------------


def test_a_held_slice_defers_the_close(filled: tuple[MessageStore, Written]) -> None:
    store, _ = filled
    queue = store.consume_queue(TOPIC, 0)
    assert queue is not None
    units = queue.read_units(0, 2)  # a reader holding units of the first queue file
    first_unit = bytes(units[:UNIT_SIZE])
    first_segment = store.commitlog.segments.segments[0]
    record = first_segment.view[0:64]  # and bytes of the first segment
    record_bytes = bytes(record)
    retired = RetiredFiles(grace_s=0.0)
    report = run(store, force=True, retired=retired)
    assert first_segment.path in report.commitlog_files
    assert not first_segment.path.exists()  # unlinked at once
    assert report.still_mapped == len(retired) == 2
    assert set(retired.paths) == {first_segment.path, queue.segments.directory / f"{0:020d}"}
    assert bytes(units[:UNIT_SIZE]) == first_unit  # the holders still read their bytes
    assert bytes(record) == record_bytes
    assert UNIT.unpack_from(units, 0)[0] == 0
    del units, record
    assert retired.reap() == 0
    assert retired.close() == []


def test_a_reader_mid_read_keeps_its_segment_view(filled: tuple[MessageStore, Written]) -> None:
    """A reader that located a segment's view just before the deletion decodes from it after:
    the view is released only when the grace period is over."""
    store, written = filled
    located = store.commitlog.segment_view(0)
    assert located is not None
    retired = RetiredFiles(grace_s=60.0)
    run(store, force=True, retired=retired)
    assert store.commitlog.segment_view(0) is None
    assert decode_record(*located).body == written.units[0][0][2]
    assert retired.close() == []  # force-closed at store close
    with pytest.raises(ValueError, match="released"):
        decode_record(*located)


def test_grace_period_keeps_mappings_open() -> None:
    clock = [100.0]
    closed: list[str] = []
    retired = RetiredFiles(grace_s=5.0, clock=lambda: clock[0])
    retired.retire(Path("/nonexistent/a"), lambda: closed.append("a"))
    assert retired.reap() == 1 and closed == []
    clock[0] += 5.0
    assert retired.reap() == 0 and closed == ["a"]

    def busy() -> None:
        raise BufferError("cannot close exported pointers exist")

    retired.retire(Path("/nonexistent/b"), busy)
    assert retired.close() == [Path("/nonexistent/b")]


def test_readers_keep_working_while_files_are_deleted(open_store: StoreFactory) -> None:
    """Decoding readers on four threads while the main thread puts and cleans (raw reads have a
    race of their own: see the next test)."""
    store = open_store(**INDEX_GEOMETRY)
    written = fill(store, 60)
    retired = RetiredFiles(grace_s=5.0)
    stop = threading.Event()
    errors: list[BaseException] = []
    ok = {GetStatus.FOUND, GetStatus.OFFSET_TOO_SMALL, GetStatus.MESSAGE_WAS_REMOVING}
    ok |= {GetStatus.NO_MATCHED_MESSAGE, GetStatus.OFFSET_OVERFLOW_ONE}
    reads = [0]

    def reader(seed: int) -> None:
        rng = random.Random(seed)
        try:
            while not stop.is_set():
                q = rng.randrange(QUEUES)
                offset = rng.randrange(store.max_offset(TOPIC, q) + 1)
                result = store.get_messages(TOPIC, q, offset, max_count=8)
                assert result.status in ok, result.status
                for m in result.messages:
                    assert (m.topic, m.queue_id) == (TOPIC, q)
                    assert m.body == body_for(TOPIC, int(m.body.split(b"-")[1]))
                reads[0] += 1
                time.sleep(0.0002)  # leave the writer some of the GIL
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=reader, args=(i,)) for i in range(4)]
    for thread in threads:
        thread.start()
    runs = 0
    try:
        for _ in range(40):
            fill(store, 12, written)
            policy = RetentionPolicy(delete_when="", delete_batch_max=2)
            runs += bool(run(store, policy, force=True, retired=retired).commitlog_files)
    finally:
        stop.set()
        for thread in threads:
            thread.join()
    assert errors == []
    assert runs > 30 and reads[0] > 100
    assert len(store.commitlog.segments.segments) <= 3
    assert retired.close() == []
    for q in range(QUEUES):
        new_min = written.expected_min(q, store.commitlog.min_offset)
        assert store.min_offset(TOPIC, q) == new_min
        assert [b for _, b in read_all(store, q)] == [b for _, _, b in written.units[q][new_min:]]


def test_raw_read_racing_a_deletion_does_not_raise(
    filled: tuple[MessageStore, Written], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A raw get notes record ranges, then copies them by commitlog offset: a deletion in between
    makes ``commitlog.read`` raise RecordError (reader.py ``_Scan.raw_bytes``). Fails until the
    scan copies from the segment views it located while collecting (kept mapped by
    RetiredFiles' grace period) or treats a vanished segment as removed."""
    from localstore import reader

    store, written = filled
    retired = RetiredFiles(grace_s=60.0)
    original = reader._Scan.raw_bytes

    def deleting_first(scan: Any) -> bytes:
        run(store, force=True, retired=retired)  # lands between collect_ranges and raw_bytes
        return original(scan)

    monkeypatch.setattr(reader._Scan, "raw_bytes", deleting_first)
    try:
        result = store.get_message_bytes(TOPIC, 0, 0, max_count=2)
    finally:
        monkeypatch.undo()
        retired.close()
    assert store.commitlog.min_offset > written.units[0][1][1]  # both records were deleted
    if result.status is GetStatus.FOUND:
        assert decode_record(result.raw, 0).body == written.units[0][0][2]
    else:
        assert result.status is GetStatus.MESSAGE_WAS_REMOVING


def test_a_damaged_unit_is_not_taken_for_a_deleted_record(tmp_path: Path) -> None:
    """Unit 9 of a queue (the last of its first file) gets a negative commitlog offset; then
    retention deletes the log's first two segments, so records 8 and up remain. The queue must
    keep units 8 and 9's file: record 8 is still in the log and stays readable, before and
    after a reopen (the damaged unit alone may not be)."""
    root = tmp_path / "store"
    geometry = {"commitlog_file_size": 4096, "cq_entries_per_file": 10}
    bodies = [bytes([65 + i]) * 900 for i in range(12)]  # 4 records a segment
    with MessageStore(root, **geometry) as store:
        phys = [store.put(message("Damaged", body)).phys_offset for body in bodies]
    assert phys[8] == 2 * 4096
    unit_file = root / "consumequeue" / "Damaged" / "0" / ("0" * 20)
    raw = bytearray(unit_file.read_bytes())
    raw[9 * UNIT_SIZE] ^= 0x80
    unit_file.write_bytes(raw)
    with MessageStore(root, **geometry) as store:
        store.clean(force=True)
        assert store.commitlog.min_offset == phys[8]
        assert store.min_offset("Damaged", 0) == 8
        got = store.get_messages("Damaged", 0, 8, max_count=1)
        assert got.status is GetStatus.FOUND and got.messages[0].body == bodies[8]
    with MessageStore(root, **geometry) as store:
        assert store.min_offset("Damaged", 0) == 8
        got = store.get_messages("Damaged", 0, 8, max_count=1)
        assert got.status is GetStatus.FOUND and got.messages[0].body == bodies[8]
