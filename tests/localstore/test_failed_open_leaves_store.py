"""A cleanly closed store whose commitlog was damaged under a queue's last unit: that queue must
be rebuilt from the log, and the damaged record stops the rebuild. The open must then refuse
without changing a file, every time, and never go on to show the queue empty."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from localstore import MessageStore
from localstore.errors import StoreError

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


def test_an_open_that_cannot_rebuild_a_queue_refuses_and_changes_nothing(damaged):
    root, offset = damaged
    before = _files(root)
    for _ in range(2):  # the second open meets exactly what the first did
        with pytest.raises(StoreError, match=rf"TopicTest/1 .* offset {offset} cannot be read"):
            MessageStore(root, **GEOMETRY)
        assert _files(root) == before


def test_once_the_record_is_mended_the_store_opens_whole(damaged):
    root, offset = damaged
    with pytest.raises(StoreError):
        MessageStore(root, **GEOMETRY)
    segment = root / "commitlog" / "00000000000000000000"
    data = bytearray(segment.read_bytes())
    data[offset + 1] ^= 0xFF
    segment.write_bytes(data)
    with MessageStore(root, **GEOMETRY) as store:
        assert store.max_offset("TopicTest", 0) == 4
        assert store.max_offset("TopicTest", 1) == 3
        bodies = [m.body for m in store.get_messages("TopicTest", 1, 0).messages]
        assert bodies == [b"one 0", b"one 1", b"one 2"]
