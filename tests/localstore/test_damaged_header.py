"""A record whose header names another topic, queue id or queue offset than its unit's.

No CRC covers a record's header, so one flipped bit there leaves a record that decodes, stored
where its unit says, of the unit's size, that claims to belong elsewhere. The consume queue is
right and the record is damaged: its neighbours in the queue vouch for the unit. Whether the
record is the queue's first, a middle one or its last (the ones recovery checks), after a clean
close or a crash, the open keeps the queue (no rebuild from the damaged header, which would
drop the record's queue offset), every other record stays readable at its offset, the damaged
one is reported by its get, and verify lists it. After a clean close no queue is made for the
topic or queue id the damaged header names; after a crash the records recovery re-dispatches
are taken as their headers say, so one may be.
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
        if not crashed:  # after a crash the log's tail is dispatched as its headers say
            assert sorted(store.queues.queues) == [(TOPIC, q) for q in range(QUEUES)]
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
