"""A cleanly closed store whose commitlog was damaged under a queue's last unit: that queue must
be rebuilt from the log. The damaged record no longer stops the rebuild (the open once refused):
it is kept on disk and recorded, the rebuild steps over it, the queue keeps its queue offsets
(none reused), and once the record is mended it reads again."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from localstore import MessageStore

from .conftest import message

GEOMETRY = {"commitlog_file_size": 1 << 16, "cq_entries_per_file": 10}


def _files(root: Path) -> dict[str, str]:
    """Every file of the store but its lock (which names the last opener's pid), hashed."""
    return {
        str(path.relative_to(root)): hashlib.sha256(path.read_bytes()).hexdigest()
        for path in sorted(root.rglob("*"))
        if path.is_file() and path.name != "lock"
    }


@pytest.fixture
def damaged(tmp_path: Path) -> tuple[Path, int]:
    """A store with two queues of three messages each, closed cleanly; then the size field of
    queue 1's last record (not the log's last) is damaged. Returns the root and that offset."""
    root = tmp_path / "store"
    with MessageStore(root, **GEOMETRY) as store:
        for i in range(3):
            store.put(message(body=b"zero %d" % i, queue_id=0))
        last_of_queue_1 = [store.put(message(body=b"one %d" % i, queue_id=1)) for i in range(3)][-1]
        store.put(message(body=b"after", queue_id=0))  # so it is not the log's last record
    segment = root / "commitlog" / "00000000000000000000"
    data = bytearray(segment.read_bytes())
    data[last_of_queue_1.phys_offset + 1] ^= 0xFF  # a size of megabytes: no record fits it
    segment.write_bytes(data)
    return root, last_of_queue_1.phys_offset


def test_the_open_rebuilds_the_queue_around_the_damaged_record(damaged):
    root, offset = damaged
    segment = root / "commitlog" / "00000000000000000000"
    log_before = segment.read_bytes()
    for _ in range(2):  # the second open meets what the first left
        with MessageStore(root, **GEOMETRY) as store:
            assert [(d.phys_offset, d.file) for d in store.damaged] == [
                (offset, "commitlog/00000000000000000000")
            ]
            assert store.max_offset("TopicTest", 0) == 4
            assert store.max_offset("TopicTest", 1) == 3  # the damaged one's offset is kept
            bodies = [m.body for m in store.get_messages("TopicTest", 1, 0, max_count=2).messages]
            assert bodies == [b"one 0", b"one 1"]
        assert segment.read_bytes() == log_before  # nothing of the log was cut


def test_a_put_after_the_damage_gets_a_new_queue_offset(damaged):
    root, _ = damaged
    with MessageStore(root, **GEOMETRY) as store:
        assert store.put(message(body=b"one 3", queue_id=1)).queue_offset == 3
        assert store.get_messages("TopicTest", 1, 3).messages[0].body == b"one 3"


def test_once_the_record_is_mended_the_store_opens_whole(damaged):
    root, offset = damaged
    MessageStore(root, **GEOMETRY).close()
    segment = root / "commitlog" / "00000000000000000000"
    data = bytearray(segment.read_bytes())
    data[offset + 1] ^= 0xFF
    segment.write_bytes(data)
    (root / "abort").touch()  # a walk over the mended record: as after a crash
    with MessageStore(root, **GEOMETRY) as store:
        assert not store.damaged
        assert store.max_offset("TopicTest", 0) == 4
        assert store.max_offset("TopicTest", 1) == 3
