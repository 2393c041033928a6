"""localstore.recovery.verify on real files: clean stores pass, corrupted bytes are found and
located.

Files are corrupted while the store is closed. A clean close means the next open scans only past
the last dispatched record, so damage in the middle of the log survives the open and must be
found by verify (damage to the last record may be cut off by recovery instead).
"""

from __future__ import annotations

import json
import shutil
import struct
import tarfile
from pathlib import Path

import pytest

from localstore import MessageStore, NewMessage
from localstore.recovery.verify import Problem, VerifyReport, verify_store

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
GEOMETRY = {"commitlog_file_size": 8192, "cq_entries_per_file": 16}
SEGMENT = GEOMETRY["commitlog_file_size"]
CQ_FILE = GEOMETRY["cq_entries_per_file"] * 20
TOPIC = "VerifyTopic"
COUNT = 120  # 4 queues x 30; about 4 commitlog segments and 2 consume-queue files per queue
BODY_AT = 88  # the body of a record with IPv4 hosts starts 88 bytes into it
PREPARED = 0x4


def build_store(root: Path) -> list[tuple[int, int, int]]:
    """A closed store of COUNT messages round-robin over 4 queues; returns (phys, queue id,
    queue offset) per message in put order."""
    placed = []
    with MessageStore(root, **GEOMETRY) as store:
        for index in range(COUNT):
            queue_id = index % 4
            tags = "even" if index % 2 == 0 else "odd"
            body = f"message {index} ".encode() * 3
            result = store.put(
                NewMessage(TOPIC, body, queue_id, {"TAGS": tags, "KEYS": f"k{index}"})
            )
            assert result.ok, result
            placed.append((result.phys_offset, queue_id, result.queue_offset))
    return placed


def patch_commitlog(root: Path, phys: int, data: bytes) -> None:
    start = phys - phys % SEGMENT
    with open(root / "commitlog" / f"{start:020d}", "r+b") as handle:
        handle.seek(phys - start)
        handle.write(data)


def flip_commitlog_byte(root: Path, phys: int) -> None:
    start = phys - phys % SEGMENT
    path = root / "commitlog" / f"{start:020d}"
    raw = bytearray(path.read_bytes())
    raw[phys - start] ^= 0xFF
    path.write_bytes(bytes(raw))


def patch_unit(root: Path, queue_id: int, queue_offset: int, field_at: int, data: bytes) -> None:
    position = queue_offset * 20
    start = position - position % CQ_FILE
    path = root / "consumequeue" / TOPIC / str(queue_id) / f"{start:020d}"
    with open(path, "r+b") as handle:
        handle.seek(position - start + field_at)
        handle.write(data)


def verify_path(root: Path, max_problems: int = 100, **geometry: int) -> VerifyReport:
    """Open the store at ``root``, verify it, close it."""
    with MessageStore(root, **geometry) as store:
        return verify_store(store, max_problems=max_problems)


def verify(root: Path, **kwargs: int) -> VerifyReport:
    return verify_path(root, **GEOMETRY, **kwargs)


@pytest.fixture
def built(tmp_path: Path) -> tuple[Path, list[tuple[int, int, int]]]:
    root = tmp_path / "store"
    return root, build_store(root)


def messages_of(report: VerifyReport) -> list[str]:
    return [str(problem) for problem in report.problems]


def test_a_clean_store_passes_and_counts_what_it_checked(built):
    root, _ = built
    report = verify(root)
    assert report.ok, messages_of(report)
    assert report.records == report.units == COUNT
    assert report.queues == 4
    assert report.segments >= 3 and report.blank_records == report.segments - 1
    assert report.stopped_at is None and report.valid_to == report.max_offset
    document = report.to_json()
    assert document["ok"] is True and document["problems"] == []
    assert {"records", "units", "queues", "valid_to"} <= set(document)
    json.dumps(document)


def test_progress_is_reported_for_both_passes(built):
    root, _ = built
    calls: list[tuple[str, int, int]] = []
    with MessageStore(root, **GEOMETRY) as store:
        span = store.commitlog.max_offset - store.commitlog.min_offset
        report = verify_store(store, on_progress=lambda *call: calls.append(call))
    assert report.ok
    assert calls[0] == ("commitlog bytes", 0, span)
    units = [call for call in calls if call[0] == "consume-queue units"]
    assert units[0] == ("consume-queue units", 0, COUNT)
    done = [count for _, count, _ in units]
    assert done == sorted(done) and len(set(done)) >= 4  # at least one call per queue


def test_a_flipped_body_byte_is_a_crc_problem_and_the_walk_goes_on(built):
    root, placed = built
    phys = placed[COUNT // 2][0]
    flip_commitlog_byte(root, phys + BODY_AT + 3)
    report = verify(root)
    assert not report.ok
    assert report.problem_count == 1
    problem = report.problems[0]
    assert problem.area == "commitlog" and problem.phys_offset == phys
    assert "CRC" in problem.message
    assert report.records == COUNT and report.stopped_at is None
    assert report.valid_to == phys


def test_an_overwritten_unit_size_is_found_in_its_queue(built):
    root, placed = built
    _, queue_id, queue_offset = placed[41]
    patch_unit(root, queue_id, queue_offset, 8, struct.pack(">i", 77))
    report = verify(root)
    assert not report.ok
    problem = report.problems[0]
    assert (problem.area, problem.topic, problem.queue_id, problem.queue_offset) == (
        "consumequeue",
        TOPIC,
        queue_id,
        queue_offset,
    )
    assert "unit size 77" in problem.message
    assert str(problem).startswith(f"consume queue {TOPIC}/{queue_id} offset {queue_offset}: ")


def test_a_bad_magic_code_is_listed_and_the_walk_goes_on(built):
    root, placed = built
    phys, after = placed[30][0], placed[31][0]
    patch_commitlog(root, phys + 4, b"\x12\x34\x56\x78")
    report = verify(root)
    assert report.stopped_at is None  # the walk once stopped here, hiding what followed
    assert report.records == COUNT - 1
    first = report.problems[0]
    assert first.phys_offset == phys and "bad magic code" in first.message
    assert f"damaged bytes [{phys}, {after}) ({after - phys} bytes)" in first.message
    unit_problems = [p for p in report.problems if p.area == "consumequeue"]
    assert any("no record starts" in p.message for p in unit_problems)


def test_a_size_beyond_the_segment_is_listed_and_the_walk_goes_on(built):
    root, placed = built
    phys = placed[10][0]
    patch_commitlog(root, phys, struct.pack(">i", SEGMENT * 2))
    report = verify(root)
    assert report.stopped_at is None and report.records == COUNT - 1
    assert "does not fit the" in report.problems[0].message


def test_every_malformed_record_is_listed_not_only_the_first(built):
    root, placed = built
    damaged = [placed[i][0] for i in (5, 40, 80)]
    for phys in damaged:
        patch_commitlog(root, phys, struct.pack(">i", SEGMENT * 2))
    report = verify(root)
    frames = [p for p in report.problems if p.area == "commitlog"]
    assert [p.phys_offset for p in frames] == damaged
    assert all("damaged bytes" in p.message for p in frames)
    assert report.records == COUNT - 3


def test_a_wrong_physical_offset_field_is_found(built):
    root, placed = built
    phys = placed[5][0]
    patch_commitlog(root, phys + 28, struct.pack(">q", phys + 1))
    report = verify(root)
    assert report.problem_count == 1  # the unit is fine: the record is the problem
    assert report.problems[0].phys_offset == phys
    assert "PHYSICALOFFSET field says" in report.problems[0].message


def test_a_wrong_tags_code_is_found(built):
    root, placed = built
    _, queue_id, queue_offset = placed[7]
    patch_unit(root, queue_id, queue_offset, 12, struct.pack(">q", 12345))
    report = verify(root)
    assert report.problem_count == 1
    assert "tagsCode 12345" in report.problems[0].message
    assert "'odd'" in report.problems[0].message


def test_swapped_units_are_found(built):
    root, placed = built
    q0 = [(phys, offset) for phys, queue_id, offset in placed if queue_id == 0]
    (phys_a, offset_a), (phys_b, offset_b) = q0[3], q0[4]
    patch_unit(root, 0, offset_a, 0, struct.pack(">q", phys_b))
    patch_unit(root, 0, offset_b, 0, struct.pack(">q", phys_a))
    report = verify(root)
    text = "\n".join(messages_of(report))
    assert "does not increase" in text or "has queue offset" in text


def test_a_record_whose_unit_is_gone_is_found(built):
    root, placed = built
    phys, queue_id, queue_offset = next(p for p in reversed(placed) if p[1] == 0)
    patch_unit(root, queue_id, queue_offset, 0, bytes(20))  # the queue now ends before it
    report = verify(root)
    assert not report.ok
    problem = report.problems[0]
    assert problem.phys_offset == phys and "has no unit" in problem.message


def test_prepared_transactions_need_no_unit_and_schedule_codes_are_delivery_times(tmp_path):
    root = tmp_path / "store"
    with MessageStore(root, **GEOMETRY) as store:
        assert store.put(NewMessage(TOPIC, b"half", sys_flag=PREPARED)).ok
        delayed = NewMessage(
            "SCHEDULE_TOPIC_XXXX", b"later", 2, {"DELAY": "3", "REAL_TOPIC": TOPIC, "REAL_QID": "0"}
        )
        assert store.put(delayed, system=True).ok
        assert store.put(NewMessage(TOPIC, b"plain", properties={"TAGS": "t"})).ok
        report = verify_store(store)
    assert report.ok, messages_of(report)
    assert (report.records, report.units) == (3, 2)
    path = root / "consumequeue" / "SCHEDULE_TOPIC_XXXX" / "2" / f"{0:020d}"
    with open(path, "r+b") as handle:
        handle.seek(12)  # the tagsCode of the schedule queue's first unit
        handle.write(struct.pack(">q", 1))
    report = verify(root)
    assert "the delivery time" in report.problems[0].message


def test_max_problems_caps_the_list_but_not_the_count(built):
    root, placed = built
    for phys, _, _ in placed[10:20]:
        flip_commitlog_byte(root, phys + BODY_AT)
    report = verify(root, max_problems=3)
    assert report.problem_count == 10 and len(report.problems) == 3
    assert isinstance(report.problems[0], Problem)


def test_a_corrupt_last_record_is_cut_off_and_never_served(built):
    """Whether the store closed cleanly or crashed, opening it checks the tail's CRCs and cuts
    off a damaged last record: verify then passes, and no read returns the damaged message."""
    root, placed = built
    phys, queue_id, queue_offset = placed[-1]
    flip_commitlog_byte(root, phys + BODY_AT + 1)
    for crashed in (False, True):
        if crashed:
            (root / "abort").write_text("1")  # as if the process had crashed
        with MessageStore(root, **GEOMETRY) as store:
            assert store.commitlog.max_offset == phys
            report = verify_store(store)
            assert report.ok, messages_of(report)
            assert store.get_messages(TOPIC, queue_id, queue_offset).messages == []
            assert store.max_offset(TOPIC, queue_id) == queue_offset


def test_a_unit_pointing_at_another_queues_record_is_found(built):
    root, placed = built
    other = next(p for p in placed if p[1] == 1)
    _, queue_id, queue_offset = placed[8]  # queue 0
    patch_unit(root, queue_id, queue_offset, 0, struct.pack(">q", other[0]))
    report = verify(root)
    text = "\n".join(messages_of(report))
    assert f"the unit there points at {other[0]}" in text  # the record lost its unit
    assert "belongs to" in text or "does not increase" in text  # the unit is wrong


def _copy_fixture(tmp_path: Path, which: str) -> tuple[Path, dict[str, int]]:
    if which == "reference":
        root = tmp_path / "reference"
        shutil.copytree(FIXTURES / "reference-encoder" / "store", root)
        geometry = json.loads((FIXTURES / "reference-encoder" / "geometry.json").read_text())
        return root, geometry
    with tarfile.open(FIXTURES / "rocketmq-4.9.8" / "stores.tar.gz") as archive:
        archive.extractall(tmp_path, filter="data")
    geometry = {
        "commitlog_file_size": 262144,
        "cq_entries_per_file": 50,
        "index_slots": 64,
        "index_entries": 256,
    }
    return tmp_path / which, geometry


@pytest.mark.parametrize("which", ["reference", "store", "crashed-store"])
def test_stores_written_by_others_pass(tmp_path, which):
    root, geometry = _copy_fixture(tmp_path, which)
    report = verify_path(root, **geometry)
    assert report.ok, messages_of(report)
    assert report.records > 100 and report.units > 100 and report.blank_records > 0
