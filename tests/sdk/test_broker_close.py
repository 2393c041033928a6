"""``EmbeddedBroker.close()`` is total: a config file that cannot be written (a patched write
raising ENOSPC, or a real full tmpfs when root) stops neither the threads nor the store's close;
the directory is released and the first error is raised as a CloseError (a QuiverError)."""

from __future__ import annotations

import contextlib
import errno
import gc
import os
import threading
from pathlib import Path

import pytest

from offsetstore.base import OffsetWriteError
from sdk import (
    CloseError,
    ConsumeFrom,
    EmbeddedBroker,
    Message,
    Producer,
    PullConsumer,
    QuiverError,
)
from tests.disks import fill, small_tmpfs

# every thread a broker and its store run (the store's index runs in process by default)
BROKER_THREADS = {
    "quiver-flush",
    "quiver-clean",
    "quiver-schedule",
    "quiver-transaction-check",
    "consumer-offsets",
    "quiver-groups",
    "quiver-group-snapshot",
}
SMALL = {"commitlog_file_size": 64 * 1024, "cq_entries_per_file": 64, "index_slots": 64,
         "index_entries": 256}  # fmt: skip


def running_broker_threads() -> set[str]:
    return {t.name for t in threading.enumerate() if t.is_alive()} & BROKER_THREADS


def used_broker(root: Path) -> EmbeddedBroker:
    """A broker with a stored message and a committed offset not yet persisted."""
    broker = EmbeddedBroker(root, **SMALL)
    with Producer(broker) as producer:
        producer.send(Message("orders", b"kept"), queue_id=0)
    broker.service.offsets.commit("g", "orders", 0, 1)
    return broker


def assert_closed_and_released(broker: EmbeddedBroker, error: CloseError, root: Path) -> None:
    assert isinstance(error, QuiverError)
    assert isinstance(error.__cause__, OffsetWriteError)
    assert error.__cause__.errno == errno.ENOSPC
    assert [step for step, _ in error.errors] == [
        "stopping the schedule and persisting its progress failed",
        "persisting the consumer offsets failed",
    ]
    assert all(isinstance(each, OffsetWriteError) for _, each in error.errors)
    assert running_broker_threads() == set()  # every thread stopped
    assert not (root / "abort").exists()  # the store itself closed cleanly
    broker.close()  # every step ran: nothing left to do, nothing raised again
    with EmbeddedBroker(root, **SMALL) as again:  # the directory was released
        assert not again.service.store.crashed_last_time
        assert again.service.store.get_messages("orders", 0, 0).messages[0].body == b"kept"


def test_an_offsets_file_that_cannot_be_written_stops_nothing_else(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = tmp_path / "broker"
    broker = used_broker(root)
    config = str(root / "config")
    real_write = os.write

    def write(fd: int, data: bytes) -> int:  # the disk under config/ is full
        if os.readlink(f"/proc/self/fd/{fd}").startswith(config):
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_write(fd, data)

    monkeypatch.setattr(os, "write", write)
    with pytest.raises(CloseError, match=r"schedule .* failed: .*delayOffset.json") as caught:
        broker.close()
    monkeypatch.undo()
    assert_closed_and_released(broker, caught.value, root)


def test_a_full_disk_at_close_stops_nothing_else(tmp_path: Path) -> None:
    with small_tmpfs(tmp_path / "disk", "4m") as disk:
        filler = disk / "filler"
        root = disk / "broker"
        broker = used_broker(root)
        fill(filler)  # the disk is full now: the config files cannot be written
        with pytest.raises(CloseError) as caught:
            broker.close()
        filler.unlink()
        assert_closed_and_released(broker, caught.value, root)


def test_a_consumer_that_met_a_damaged_record_leaves_nothing_open_at_close(
    tmp_path: Path,
) -> None:
    """A tag-filtered pull over a record whose properties are damaged: the consumer steps over
    it, and the broker's close then leaves no abort marker and no open file (a read error
    whose traceback held slices of the store's mappings used to make the close raise
    BufferError)."""
    root = tmp_path / "broker"
    with EmbeddedBroker(root, commitlog_file_size=1 << 20) as broker, Producer(broker) as producer:
        for number in range(5):
            sent = Message("orders", b"m%d" % number, keys=[f"key{number}"], tags="A")
            producer.send(sent, queue_id=0)
    segment = min((root / "commitlog").iterdir())
    at = segment.read_bytes().index(b"key2")
    with segment.open("r+b") as file:
        file.seek(at)
        file.write(b"\xff\xfe")  # invalid UTF-8 in the third record's properties
    broker = EmbeddedBroker(root, commitlog_file_size=1 << 20)
    consumer = PullConsumer(broker, "g", consume_from=ConsumeFrom.FIRST_OFFSET)
    bodies: list[bytes] = []
    try:
        consumer.subscribe({"orders": "A"})
        for _ in range(10):
            bodies += [m.body for m in consumer.poll(1.0)]
            if len(bodies) == 4:
                break
        assert bodies == [b"m0", b"m1", b"m3", b"m4"]
        assert consumer.stats.damaged_skipped == 1
    finally:
        consumer.close()
    broker.close()
    assert not (root / "abort").exists()
    gc.collect()
    assert open_files_under(root) == []
    with EmbeddedBroker(root, commitlog_file_size=1 << 20) as again:
        assert not again.service.store.crashed_last_time


def open_files_under(directory: Path) -> list[str]:
    found = []
    for fd in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError):
            target = os.readlink(f"/proc/self/fd/{fd}")
            if target.startswith(str(directory)):
                found.append(target)
    return found
