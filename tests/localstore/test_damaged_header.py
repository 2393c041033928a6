"""A record whose header names another topic, queue id or queue offset than its unit's.

No CRC covers a record's header, so one flipped bit there leaves a record that decodes, stored
where its unit says, of the unit's size, that claims to belong elsewhere. The consume queue is
right and the record is damaged: its neighbours in the queue vouch for the unit. Whether the
record is the queue's first, a middle one or its last (the ones recovery checks), after a clean
close or a crash, the open keeps the queue (no rebuild from the damaged header, which would
drop the record's queue offset), every other record stays readable at its offset, the damaged
one is reported by its get, and verify lists it. After a clean close no queue is made for the
topic or queue id the damaged header names; after a crash the records recovery re-dispatches
are taken as their headers say, so one may be, and recovery says so at WARNING.
"""

from __future__ import annotations

import logging
import struct
from pathlib import Path

import pytest

from localstore import DamagedRecordError, GetStatus, MessageStore, NewMessage
from localstore.recovery.verify import verify_store

TOPIC = "Header"
QUEUES = 2
PER_QUEUE = 10
BAD_QUEUE = 1

# Where each field lies in a v1 record, and the bytes written over it.
QUEUE_ID_AT, QUEUE_OFFSET_AT = 12, 20
FIELDS = {
    "queue-id": (QUEUE_ID_AT, struct.pack(">i", 7)),
    "queue-offset": (QUEUE_OFFSET_AT, struct.pack(">q", 1 << 56)),
    "topic": (None, b"X"),  # the topic's last byte: written from the record's end
}


def _fill(root: Path) -> dict[tuple[int, int], tuple[int, int, bytes]]:
    """Both queues, round-robin; answers (queue, offset) -> (phys, size, body)."""
    placed = {}
    with MessageStore(root, commitlog_file_size=1 << 20) as store:
        for i in range(PER_QUEUE * QUEUES):
            body = f"header-{i:03d}".encode() * 4
            result = store.put(NewMessage(TOPIC, body, i % QUEUES, {"TAGS": "T"}))
            assert result.ok
            size = store.message_at(result.phys_offset).store_size
            placed[(result.queue_id, result.queue_offset)] = (result.phys_offset, size, body)
    return placed


@pytest.mark.parametrize("crashed", [False, True], ids=["clean", "crashed"])
@pytest.mark.parametrize("which", [0, PER_QUEUE // 2, PER_QUEUE - 1], ids=["first", "mid", "last"])
@pytest.mark.parametrize("field", list(FIELDS))
def test_a_damaged_header_is_reported_and_its_queue_kept(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, field: str, which: int, crashed: bool
) -> None:
    root = tmp_path / "store"
    placed = _fill(root)
    phys, size, _ = placed[(BAD_QUEUE, which)]
    at, patch = FIELDS[field]
    properties_and_length = len("TAGS\x01T\x02") + 2
    start = phys + (at if at is not None else size - properties_and_length - len(patch))
    segment = root / "commitlog" / ("0" * 20)
    with open(segment, "r+b") as handle:
        handle.seek(start)
        handle.write(patch)
    if crashed:
        (root / "abort").write_text("4242")

    with caplog.at_level(logging.WARNING), MessageStore(root) as store:
        assert not any("rebuilding" in r.getMessage() for r in caplog.records)
        made = set(store.queues.queues) - {(TOPIC, q) for q in range(QUEUES)}
        if not crashed:
            assert not made
        for topic, queue_id in made:  # after a crash the log's tail is dispatched as its
            # headers say: a queue made for a record below the others' end is said so
            assert any(
                f"made consume queue {topic}/{queue_id} for the commitlog record at {phys}"
                in r.getMessage()
                for r in caplog.records
            )
        for (queue_id, offset), (_, _, body) in placed.items():
            if (queue_id, offset) == (BAD_QUEUE, which):
                with pytest.raises(DamagedRecordError) as raised:
                    store.get_messages(TOPIC, queue_id, offset, max_count=1)
                assert (raised.value.queue_offset, raised.value.phys_offset) == (offset, phys)
                with pytest.raises(DamagedRecordError):  # the tag-filtered get alike
                    store.get_messages(TOPIC, queue_id, offset, max_count=1, tags="T")
                continue
            got = store.get_messages(TOPIC, queue_id, offset, max_count=1)
            assert got.status is GetStatus.FOUND
            assert (got.messages[0].queue_offset, got.messages[0].body) == (offset, body)
        # A get that runs into it answers the records before it and names it.
        if which:
            got = store.get_messages(TOPIC, BAD_QUEUE, 0, max_count=32)
            assert len(got.messages) == which
            assert got.damaged is not None and got.damaged.phys_offset == phys
        report = verify_store(store)
        assert not report.ok
        assert any(p.phys_offset == phys for p in report.problems), report.summary()
    if which in (0, PER_QUEUE - 1):  # a unit recovery checks: it says what it found
        assert any(
            r.levelno == logging.ERROR and "header is damaged" in r.getMessage()
            for r in caplog.records
        )


def test_a_unit_pointing_at_another_queues_record_is_rebuilt_not_blamed_on_the_record(
    tmp_path: Path,
) -> None:
    """Queue 1's first unit is made to point at queue 0's first record (of the same size):
    that record is genuine (queue 0 claims it at the offset it names), so the unit is wrong,
    and queue 1 is rebuilt from the log with every message readable."""
    root = tmp_path / "store"
    placed = _fill(root)
    phys_0, size_0, _ = placed[(0, 0)]
    assert size_0 == placed[(BAD_QUEUE, 0)][1]
    unit_file = root / "consumequeue" / TOPIC / str(BAD_QUEUE) / ("0" * 20)
    with open(unit_file, "r+b") as handle:
        handle.write(struct.pack(">q", phys_0))  # unit 0's PHYSICALOFFSET
    with MessageStore(root) as store:
        for (queue_id, offset), (_, _, body) in placed.items():
            got = store.get_messages(TOPIC, queue_id, offset, max_count=1)
            assert got.status is GetStatus.FOUND, (queue_id, offset)
            assert got.messages[0].body == body
        assert verify_store(store).ok


def test_a_queues_only_record_with_a_damaged_header_keeps_its_queue(tmp_path: Path) -> None:
    """A queue of one message has no neighbour to vouch for its unit; its record's header
    names a queue offset no queue claims, so the header is what was damaged."""
    root = tmp_path / "store"
    with MessageStore(root, commitlog_file_size=1 << 20) as store:
        for i in range(6):
            assert store.put(NewMessage(TOPIC, f"other-{i}".encode() * 4, 0)).ok
        solo = store.put(NewMessage("Solo", b"the only one" * 4, 0))
        assert store.put(NewMessage(TOPIC, b"after" * 4, 0)).ok
    segment = root / "commitlog" / ("0" * 20)
    with open(segment, "r+b") as handle:
        handle.seek(solo.phys_offset + QUEUE_OFFSET_AT)
        handle.write(struct.pack(">q", 1 << 56))
    with MessageStore(root) as store:
        assert (store.min_offset("Solo", 0), store.max_offset("Solo", 0)) == (0, 1)
        with pytest.raises(DamagedRecordError):
            store.get_messages("Solo", 0, 0, max_count=1)
        assert set(store.queues.queues) == {("Solo", 0), (TOPIC, 0)}
