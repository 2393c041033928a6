"""Where a get's rebuild of a damaged consume-queue unit looks for the unit's record
(:mod:`localstore.recovery.unit_repair`): never before the queue's topic was last deleted, and
not past what the log shows yet."""

from __future__ import annotations

import struct
import threading
from pathlib import Path
from typing import Any

from localstore import MessageStore, NewMessage

WAIT_S = 30


def _point_unit_at(root: Path, topic: str, queue_offset: int, phys_offset: int) -> None:
    unit_file = root / "consumequeue" / topic / "0" / f"{0:020d}"
    with open(unit_file, "r+b") as units:
        units.seek(queue_offset * 20)
        units.write(struct.pack(">q", phys_offset))


def test_a_rebuild_never_takes_a_record_of_the_topic_before_it_was_deleted(tmp_path: Path) -> None:
    root = tmp_path / "s"
    with MessageStore(root, commitlog_file_size=1 << 20, cq_entries_per_file=64) as store:
        for index in range(5):
            assert store.put(NewMessage("Tomb", b"old %d" % index, 0)).ok
        store.delete_topic("Tomb")
        placed = [store.put(NewMessage("Tomb", b"new %d" % index, 0)) for index in range(5)]
        assert [result.queue_offset for result in placed] == [0, 1, 2, 3, 4]
        _point_unit_at(root, "Tomb", 0, placed[2].phys_offset)  # the old topic's 0 lies before
        got = store.get_messages("Tomb", 0, 0, max_count=1)
        assert [message.body for message in got.messages] == [b"new 0"]


def test_a_rebuild_waits_for_no_put_in_flight_under_sync_flush(tmp_path: Path) -> None:
    """Unit 9, the last the log shows, points at unit 8's record while a put (unit 10) waits
    for its flush: unit 10 points past the log's visible end, so it does not count as a
    damaged neighbour, and the get rebuilds unit 9."""
    root = tmp_path / "s"
    with MessageStore(
        root, flush_mode="sync", commitlog_file_size=1 << 20, cq_entries_per_file=64
    ) as store:
        placed = [store.put(NewMessage("Sync", b"m%d" % index, 0)) for index in range(10)]
        _point_unit_at(root, "Sync", 9, placed[8].phys_offset)
        flushing, release = threading.Event(), threading.Event()
        commitlog = store.commitlog
        begin_flush = commitlog.begin_flush

        def held_flush(*args: Any, **kwargs: Any) -> Any:
            flushing.set()
            assert release.wait(WAIT_S)
            return begin_flush(*args, **kwargs)

        commitlog.begin_flush = held_flush  # type: ignore[method-assign]
        late = threading.Thread(target=store.put, args=(NewMessage("Sync", b"late", 0),))
        late.start()
        try:
            assert flushing.wait(WAIT_S)  # unit 10 written, its record not flushed
            queue = store.queues.get("Sync", 0)
            assert queue is not None and queue.max_offset == 11  # the unit is there
            got = store.get_messages("Sync", 0, 9, max_count=1)
        finally:
            release.set()
            late.join(WAIT_S)
            commitlog.begin_flush = begin_flush  # type: ignore[method-assign]
        assert [message.body for message in got.messages] == [b"m9"]
