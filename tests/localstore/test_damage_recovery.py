"""Recovery cuts only a torn tail, and rebuilds damaged or missing consume-queue files from the
log (issue 25, items 2 and 5). Faults are real: bytes flipped in the store's files, files
deleted, the abort marker a killed process leaves."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from localstore import GetStatus, MessageStore, NewMessage
from localstore.errors import DamagedRecordError
from localstore.recovery.verify import verify_store

TOPIC = "Damage"
QUEUES = 2
GEOMETRY = {"commitlog_file_size": 8192, "cq_entries_per_file": 8}


def fill(root: Path, count: int = 160) -> list[tuple[int, int, int, bytes]]:
    """``count`` messages over two queues, about four segments; (phys, queue, offset, body)."""
    placed = []
    with MessageStore(root, **GEOMETRY) as store:
        for i in range(count):
            body = f"message-{i:05d}-".encode() * 8
            result = store.put(NewMessage(TOPIC, body, i % QUEUES, {"TAGS": "T"}))
            assert result.ok
            placed.append((result.phys_offset, result.queue_id, result.queue_offset, body))
    return placed


def segment_of(root: Path, phys: int) -> tuple[Path, int]:
    size = GEOMETRY["commitlog_file_size"]
    return root / "commitlog" / f"{phys - phys % size:020d}", phys % size


def flip(path: Path, position: int, count: int = 1) -> None:
    data = bytearray(path.read_bytes())
    for i in range(count):
        data[position + i] ^= 0xFF
    path.write_bytes(data)


def readable(store: MessageStore, placed: list[tuple[int, int, int, bytes]]) -> set[int]:
    """The phys offsets of the placed messages a get returns intact, one queue offset at a
    time (a damaged record may fail its own get, never another's)."""
    found = set()
    for phys, queue_id, queue_offset, body in placed:
        try:
            got = store.get_messages(TOPIC, queue_id, queue_offset, max_count=1)
        except Exception:
            continue
        if got.status is GetStatus.FOUND and got.messages[0].body == body:
            found.add(phys)
    return found


@pytest.mark.parametrize("crashed", [True, False])
def test_flipped_body_bytes_in_segment_2_of_4_delete_nothing(tmp_path, caplog, crashed):
    placed = fill(tmp_path)
    segments = sorted((tmp_path / "commitlog").iterdir())
    assert len(segments) >= 4
    victim = next(p for p in placed if segment_of(tmp_path, p[0])[0] == segments[1])
    path, position = segment_of(tmp_path, victim[0])
    flip(path, position + 100, 4)  # 4 body bytes
    if crashed:
        (tmp_path / "abort").write_text("4242")
    else:  # a clean close whose newest unit points at the damaged record: walked from there
        pass
    with caplog.at_level(logging.WARNING), MessageStore(tmp_path) as store:
        assert sorted((tmp_path / "commitlog").iterdir()) == segments  # nothing deleted
        if crashed:
            (damage,) = store.recovery.damaged
            assert damage.phys_offset == victim[0] and damage.file == f"commitlog/{path.name}"
            errors = [r for r in caplog.records if r.levelno == logging.ERROR]
            assert any(
                f"commitlog/{path.name}" in r.getMessage() and str(victim[0]) in r.getMessage()
                for r in errors
            )
            record = json.loads((tmp_path / "damaged.json").read_text())
            assert record["ranges"][0]["phys_offset"] == victim[0]
        everything_else = {p[0] for p in placed} - {victim[0]}
        assert everything_else <= readable(store, placed)
        for queue_id in range(QUEUES):
            assert store.max_offset(TOPIC, queue_id) == len(placed) // QUEUES
        report = verify_store(store)
        assert not report.ok and report.problems[0].phys_offset == victim[0]
        result = store.put(NewMessage(TOPIC, b"after", 0))
        assert result.queue_offset == len(placed) // QUEUES  # no offset reused


def test_a_destroyed_header_mid_log_keeps_later_records_and_queue_offsets(tmp_path):
    placed = fill(tmp_path)
    victim = placed[len(placed) // 3]
    path, position = segment_of(tmp_path, victim[0])
    flip(path, position, 8)  # size and magic: the record cannot be framed
    (tmp_path / "abort").write_text("4242")
    with MessageStore(tmp_path) as store:
        (damage,) = store.recovery.damaged
        assert damage.phys_offset == victim[0]
        assert {p[0] for p in placed} - {victim[0]} <= readable(store, placed)
        for queue_id in range(QUEUES):
            assert store.max_offset(TOPIC, queue_id) == len(placed) // QUEUES
        assert store.put(NewMessage(TOPIC, b"x", victim[1])).queue_offset == len(placed) // 2
    with MessageStore(tmp_path) as store:  # a clean open still knows the damage
        assert [d.phys_offset for d in store.damaged] == [victim[0]]


def test_a_torn_tail_is_cut_and_logged_with_its_byte_range(tmp_path, caplog):
    placed = fill(tmp_path)
    last = placed[-1]
    path, position = segment_of(tmp_path, last[0])
    flip(path, position + 100)
    (tmp_path / "abort").write_text("4242")
    with caplog.at_level(logging.WARNING), MessageStore(tmp_path) as store:
        assert store.recovery.cut_tail is not None
        start, end = store.recovery.cut_tail
        assert start == last[0] and end > start
        assert any(f"[{start}, {end})" in r.getMessage() for r in caplog.records)
        assert not store.recovery.damaged
        assert store.max_offset(TOPIC, last[1]) == last[2]
        assert verify_store(store).ok


def _queue_files(root: Path, queue_id: int) -> list[Path]:
    return sorted((root / "consumequeue" / TOPIC / str(queue_id)).iterdir())


@pytest.mark.parametrize("which", ["first", "middle", "last"])
def test_a_deleted_consume_queue_file_is_rebuilt_from_the_log(tmp_path, caplog, which):
    placed = fill(tmp_path)
    files = _queue_files(tmp_path, 1)
    assert len(files) >= 3
    {"first": files[0], "middle": files[1], "last": files[-1]}[which].unlink()
    with caplog.at_level(logging.WARNING), MessageStore(tmp_path) as store:
        assert f"{TOPIC}/1" in store.recovery.rebuilt_queues
        assert any(f"{TOPIC}/1" in r.getMessage() for r in caplog.records)
        assert store.min_offset(TOPIC, 1) == 0
        assert store.max_offset(TOPIC, 1) == len(placed) // 2
        assert {p[0] for p in placed} <= readable(store, placed)
        assert verify_store(store).ok
        assert store.put(NewMessage(TOPIC, b"x", 1)).queue_offset == len(placed) // 2


@pytest.mark.parametrize("length", [0, 3 * 20])
def test_a_truncated_last_consume_queue_file_is_rebuilt(tmp_path, length):
    """A last file cut to nothing (the loader drops it) or to a wrong length (the loader
    refuses it): the queue would end early and the next put reuse its offsets."""
    placed = fill(tmp_path)
    last = _queue_files(tmp_path, 0)[-1]
    last.write_bytes(last.read_bytes()[:length])
    with MessageStore(tmp_path) as store:
        assert f"{TOPIC}/0" in store.recovery.rebuilt_queues
        assert store.max_offset(TOPIC, 0) == len(placed) // 2
        assert {p[0] for p in placed} <= readable(store, placed)
        assert store.put(NewMessage(TOPIC, b"x", 0)).queue_offset == len(placed) // 2


def test_a_placeholder_unit_never_reads_as_another_queues_record(tmp_path: Path) -> None:
    """Queue 0's record (a flipped body byte, header intact) and, right after it, queue 1's
    record whose header is destroyed form one damaged range; queue 1's files disagree with the
    log, so it is rebuilt with a placeholder for queue offset 1. The placeholder must not
    point at the range's first byte, where queue 0's record still decodes: its get raises
    DamagedRecordError instead of handing out queue 0's message."""
    root = tmp_path / "store"
    placed = []
    with MessageStore(root, **GEOMETRY) as store:
        for queue_id in (1, 0, 1, 1):
            result = store.put(NewMessage(TOPIC, f"for-{queue_id}-".encode() * 8, queue_id))
            placed.append(result.phys_offset)
    path, _ = segment_of(root, 0)
    flip(path, placed[1] + 110)  # queue 0's body
    flip(path, placed[2], 8)  # queue 1's size and magic
    units = root / "consumequeue" / TOPIC / "1" / f"{0:020d}"
    data = bytearray(units.read_bytes())
    data[40:48] = placed[0].to_bytes(8, "big")  # its last unit now disagrees: rebuilt
    units.write_bytes(data)
    (root / "abort").write_text("")
    with MessageStore(root) as store:
        assert store.recovery.rebuilt_queues == [f"{TOPIC}/1"]
        assert [(r.phys_offset, r.end) for r in store.damaged] == [(placed[1], placed[3])]
        with pytest.raises(DamagedRecordError) as raised:
            store.get_messages(TOPIC, 1, 1, max_count=1)
        assert raised.value.queue_id == 1 and raised.value.queue_offset == 1
        got = store.get_messages(TOPIC, 1, 2, max_count=1)
        assert [(m.queue_id, m.queue_offset) for m in got.messages] == [(1, 2)]


def test_an_open_after_a_damaged_open_rebuilds_nothing_again(tmp_path: Path) -> None:
    """A queue whose last unit is a placeholder is sound as recovery left it: later clean
    opens neither rebuild it nor walk the whole log again."""
    root = tmp_path / "store"
    with MessageStore(root, **GEOMETRY) as store:
        placed = [store.put(NewMessage(TOPIC, b"x" * 100, q)).phys_offset for q in (1, 0, 1, 0)]
    path, _ = segment_of(root, 0)
    flip(path, placed[2], 8)  # queue 1's last record: header destroyed
    (root / "abort").write_text("")
    with MessageStore(root) as store:
        assert store.max_offset(TOPIC, 1) == 2
    for _ in range(2):
        with MessageStore(root) as store:
            assert store.recovery.rebuilt_queues == [] and not store.recovery.abnormal
            assert store.max_offset(TOPIC, 1) == 2


def test_an_open_after_a_crash_says_so_at_warning_and_a_clean_one_does_not(tmp_path, caplog):
    """A broker's log must tell an operator that the store recovered from a crash."""
    fill(tmp_path)
    with caplog.at_level(logging.WARNING), MessageStore(tmp_path):
        pass
    assert not [r for r in caplog.records if "abort marker" in r.getMessage()]
    (tmp_path / "abort").write_text("4242")  # what a killed process leaves
    caplog.clear()
    with caplog.at_level(logging.WARNING), MessageStore(tmp_path) as store:
        assert store.recovery.abnormal
    said = [r.getMessage() for r in caplog.records if "abort marker was present" in r.getMessage()]
    assert len(said) == 1, caplog.text
    assert "records) and" in said[0] and str(store.recovery.end_offset) in said[0]
