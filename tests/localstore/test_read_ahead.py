"""Read-ahead advice on the store's mappings, read back from the kernel (``/proc/self/smaps``):
segments this process creates are mapped ``MADV_RANDOM`` while they are written (no zero-filled
read-ahead window over their holes), get normal read-ahead back once the writer moves on, and
segments mapped at open keep it; index files are always random access."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from .conftest import TINY_GEOMETRY, StoreFactory, message

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="reads the advice from /proc/self/smaps"
)

TOPIC = "TopicTest"


def advised_random(path: Path) -> bool:
    """Whether the one mapping of ``path`` in this process carries the random-read flag."""
    flags: list[list[str]] = []
    current = None
    with open("/proc/self/smaps") as smaps:
        for line in smaps:
            if line.startswith("VmFlags:"):
                if current == str(path):
                    flags.append(line.split()[1:])
            elif ":" not in line.split(maxsplit=1)[0]:  # a mapping's header line
                fields = line.split(maxsplit=5)
                current = fields[5].strip() if len(fields) == 6 else None
    assert len(flags) == 1, f"{path} is mapped {len(flags)} times"
    return "rr" in flags[0]


def segment_paths(directory: Path) -> list[Path]:
    return sorted(p for p in directory.iterdir() if p.name.isdigit())


def test_segments_written_here_are_random_until_the_writer_moves_on(
    open_store: StoreFactory, store_dir: Path
) -> None:
    store = open_store(**TINY_GEOMETRY)
    store.put(message(TOPIC, b"x" * 100))
    commitlog = segment_paths(store_dir / "commitlog")
    queue_dir = store_dir / "consumequeue" / TOPIC / "0"
    assert len(commitlog) == 1 and advised_random(commitlog[0])
    assert advised_random(segment_paths(queue_dir)[0])

    for _ in range(60):  # several 4 KiB commitlog segments and 4-unit queue files
        store.put(message(TOPIC, b"x" * 100))
    commitlog = segment_paths(store_dir / "commitlog")
    queue_files = segment_paths(queue_dir)
    assert len(commitlog) > 2 and len(queue_files) > 2
    assert [advised_random(p) for p in commitlog] == [False] * (len(commitlog) - 1) + [True]
    # consume-queue files are read a few units at a time: random access for life
    assert [advised_random(p) for p in queue_files] == [True] * len(queue_files)


def test_commitlog_segments_mapped_at_open_keep_read_ahead_and_queue_files_never_read_ahead(
    open_store: StoreFactory, store_dir: Path
) -> None:
    store = open_store(**TINY_GEOMETRY)
    for _ in range(10):
        store.put(message(TOPIC, b"x" * 100))
    store.close()

    reopened = open_store(**TINY_GEOMETRY)
    assert reopened.max_offset(TOPIC, 0) == 10
    assert reopened.get_messages(TOPIC, 0, 0, max_count=32).status.value == "FOUND"
    for path in segment_paths(store_dir / "commitlog"):
        assert not advised_random(path)
    for path in segment_paths(store_dir / "consumequeue" / TOPIC / "0"):
        assert advised_random(path)  # a fault over a sparse file would zero-fill its window


def test_index_files_are_random_access(open_store: StoreFactory, store_dir: Path) -> None:
    store = open_store(index_slots=64, index_entries=256)
    store.put(message(TOPIC, b"x", keys="order-1"))
    index_files = sorted((store_dir / "index").iterdir())
    assert len(index_files) == 1 and advised_random(index_files[0])
    store.close()

    reopened = open_store(index_slots=64, index_entries=256)
    assert [m.body for m in reopened.query_by_key(TOPIC, "order-1")] == [b"x"]
    assert advised_random(index_files[0])
