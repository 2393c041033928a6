"""``MessageStore.close`` is total: a reader's slice of a mapping (an exception's traceback may
keep one) never makes it fail, and a step that fails for real stops none of the others (every
file closed, the flush thread stopped, the directory released), then raises a StoreError."""

from __future__ import annotations

import errno
import gc
import os
import threading
from collections.abc import Callable
from pathlib import Path

import pytest

from localstore import MessageStore, StoreError
from localstore.errors import DamagedRecordError, StoreLockedError

from .conftest import StoreFactory, message


def fds_under(directory: Path) -> list[str]:
    """The files under ``directory`` this process holds open."""
    found = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if target.startswith(str(directory)):
            found.append(target)
    return found


def store_with_damaged_properties(open_store: StoreFactory, store_dir: Path) -> MessageStore:
    """Five messages of TopicTest/0; the KEYS property of the third made invalid UTF-8 in the
    commitlog file (no CRC covers properties, so recovery keeps it)."""
    store = open_store()
    for number in range(5):
        assert store.put(message(body=b"m%d" % number, tags="A", keys=f"key{number}")).ok
    store.close()
    segment = min((store_dir / "commitlog").iterdir())
    data = segment.read_bytes()
    at = data.index(b"key2")
    with segment.open("r+b") as file:
        file.seek(at)
        file.write(b"\xff\xfe")
    return open_store()


# Gets that start at the damaged record (queue offset 2) raise DamagedRecordError.
READS: dict[str, Callable[[MessageStore], object]] = {
    "get": lambda store: store.get_messages("TopicTest", 0, 2),
    "tag-filtered get": lambda store: store.get_messages("TopicTest", 0, 2, tags="A"),
    "tag-filtered raw get": lambda store: store.get_message_bytes("TopicTest", 0, 2, tags="A"),
}


@pytest.mark.parametrize("read", sorted(READS))
def test_a_kept_read_error_does_not_fail_the_close(
    open_store: StoreFactory, store_dir: Path, read: str
) -> None:
    store = store_with_damaged_properties(open_store, store_dir)
    with pytest.raises(DamagedRecordError) as raised:
        READS[read](store)
    kept = raised.value  # its traceback's frames may hold slices of the mappings
    store.close()  # raised BufferError, left the abort marker and open files
    assert not (store_dir / "abort").exists()
    del kept, raised
    gc.collect()
    assert fds_under(store_dir) == []
    assert open_store().crashed_last_time is False


def test_a_reader_holding_slices_of_the_mappings_does_not_fail_the_close(
    open_store: StoreFactory, store_dir: Path
) -> None:
    store = open_store()
    for number in range(3):
        assert store.put(message(body=b"m%d" % number)).ok
    queue = store.consume_queue("TopicTest", 0)
    assert queue is not None
    units = queue.read_units(0, 2)  # a slice of the consume queue's mapping
    record = store.commitlog.segments.segments[0].view[0:64]  # and of the commitlog's
    record_bytes = bytes(record)
    store.close()
    assert not (store_dir / "abort").exists()
    assert bytes(record) == record_bytes  # the holder still reads its bytes
    assert len(fds_under(store_dir)) <= 2  # only the mappings' own fds, until they go
    del units, record
    gc.collect()
    assert fds_under(store_dir) == []
    assert open_store().crashed_last_time is False


def test_a_close_step_failing_in_the_os_still_closes_everything_else(
    open_store: StoreFactory, store_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The final fdatasync of a consume-queue file fails with EIO: every later step still runs
    (every file closed, the flush and clean threads stopped, the lock released), and the
    StoreError names the step that failed."""
    store = open_store(commitlog_file_size=4096)
    for number in range(40):  # several segments
        assert store.put(message(body=bytes([65 + number % 26]) * 200)).ok
    refused: list[int] = []
    real_fdatasync = os.fdatasync

    def fdatasync(fd: int) -> None:
        if "/consumequeue/" in os.path.realpath(f"/proc/self/fd/{fd}") and not refused:
            refused.append(int(fd))
            del fd  # as a system call, keep no reference to the descriptor in the traceback
            raise OSError(errno.EIO, "Input/output error")
        real_fdatasync(fd)

    monkeypatch.setattr(os, "fdatasync", fdatasync)
    with pytest.raises(StoreError, match="flushing the consume queues") as caught:
        store.close()
    monkeypatch.undo()
    assert isinstance(caught.value.__cause__, OSError)
    assert caught.value.__cause__.errno == errno.EIO
    assert refused
    assert fds_under(store_dir) == []
    alive = {t.name for t in threading.enumerate()}
    assert not alive & {"quiver-flush", "quiver-clean"}
    assert (store_dir / "abort").exists()  # the next open recovers
    store.close()  # every step ran: nothing left, nothing raised again
    reopened = open_store()  # the directory was released
    assert reopened.crashed_last_time
    assert len(reopened.get_messages("TopicTest", 0, 0, max_count=64).messages) == 40


def test_a_close_interrupted_part_way_is_finished_by_the_next_close(
    open_store: StoreFactory, store_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = open_store()
    assert store.put(message(body=b"kept")).ok
    real_close = store.queues.close
    calls: list[int] = []

    def interrupted() -> None:
        calls.append(1)
        if len(calls) == 1:
            raise KeyboardInterrupt
        real_close()

    monkeypatch.setattr(store.queues, "close", interrupted)
    with pytest.raises(KeyboardInterrupt):
        store.close()
    with pytest.raises(StoreLockedError):  # still open: not claimed closed
        MessageStore(store_dir)
    store.close()  # runs the interrupted step and the rest
    assert len(calls) == 2
    assert not (store_dir / "abort").exists()
    assert fds_under(store_dir) == []
    assert [m.body for m in open_store().get_messages("TopicTest", 0, 0).messages] == [b"kept"]
