"""Group commit under sync flush: when a put returns, what it promises, and what a failing or a
stalled disk does to the puts waiting on it.

Disk faults are injected by wrapping the commitlog's durable write (``_write_durably``): a real
disk that fails on demand is not something a test can have.
"""

from __future__ import annotations

import asyncio
import errno
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

import localstore.commitlog as commitlog_module
from localstore import MessageStore, PutStatus, StoreOptions
from localstore.async_writer import AsyncStoreWriter

from .conftest import StoreFactory, message

WriteDurably = Callable[[list[tuple[object, int, bytes]]], None]


class Disk:
    """The commitlog's durable write, made slow, failing or stalled on demand."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch):
        self._real: WriteDurably = commitlog_module._write_durably
        self.delay_s = 0.0
        self.failing = False
        self.released = threading.Event()
        self.released.set()
        self.calls = 0
        monkeypatch.setattr(commitlog_module, "_write_durably", self._write)

    def _write(self, pending: list[tuple[object, int, bytes]]) -> None:
        self.calls += 1
        self.released.wait()
        if self.delay_s:
            time.sleep(self.delay_s)
        if self.failing:
            raise OSError(errno.EIO, "Input/output error")
        self._real(pending)


@pytest.fixture
def disk(monkeypatch: pytest.MonkeyPatch) -> Disk:
    return Disk(monkeypatch)


def test_a_sync_put_returns_only_once_a_shared_flush_covers_its_bytes(
    open_store: StoreFactory, disk: Disk
) -> None:
    store = open_store(flush_mode="sync")
    assert store.put(message(body=b"first")).ok
    disk.delay_s = 0.002  # a slow disk: the puts of 16 threads queue up behind each flush
    threads_count, per_thread = 16, 20
    uncovered: list[str] = []

    def producer(n: int) -> None:
        for i in range(per_thread):
            result = store.put(message(body=f"{n}-{i}".encode(), queue_id=n % 4))
            end = result.phys_offset + store.commitlog.record_size_at(result.phys_offset)
            if not result.ok or store.commitlog.flushed_offset < end:
                uncovered.append(f"{n}-{i}: {result.status} {result.detail}")

    fsyncs_before = store.flusher.fsync_count
    threads = [threading.Thread(target=producer, args=(n,)) for n in range(threads_count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert uncovered == []
    fsyncs = store.flusher.fsync_count - fsyncs_before
    assert fsyncs <= threads_count * per_thread // 4  # flushes were shared


def test_a_failed_flush_answers_its_puts_and_the_next_flush_writes_their_bytes(
    open_store: StoreFactory, store_dir: Path, disk: Disk
) -> None:
    store = open_store(flush_mode="sync")
    assert store.put(message(body=b"before")).ok
    disk.failing = True
    failed = store.put(message(body=b"during"))
    assert failed.status is PutStatus.FLUSH_DISK_TIMEOUT
    assert "the flush that should cover it failed" in failed.detail
    assert "Input/output error" in failed.detail
    assert isinstance(store.flusher.error, OSError)
    disk.failing = False
    assert store.put(message(body=b"after")).ok
    assert store.flusher.error is None
    store.close()
    reopened = open_store(store_dir)
    bodies = [m.body for m in reopened.get_messages("TopicTest", 0, 0).messages]
    assert bodies == [b"before", b"during", b"after"]  # no hole where the failed write was


def test_a_put_waits_for_a_stalled_flush_no_longer_than_its_timeout(
    open_store: StoreFactory, disk: Disk
) -> None:
    store = open_store(flush_mode="sync", options=StoreOptions(sync_flush_timeout_ms=100))
    assert store.put(message(body=b"first")).ok
    disk.released.clear()
    started = time.monotonic()
    stalled = store.put(message(body=b"stalled"))
    waited = time.monotonic() - started
    assert stalled.status is PutStatus.FLUSH_DISK_TIMEOUT
    assert stalled.detail == "stored, but not flushed within 100 ms"
    assert 0.09 <= waited < 5
    disk.released.set()
    assert store.put(message(body=b"next")).ok
    assert [m.body for m in store.get_messages("TopicTest", 0, 0).messages] == [
        b"first",
        b"stalled",
        b"next",
    ]


def test_puts_waiting_when_the_store_closes_are_answered(
    open_store: StoreFactory, disk: Disk
) -> None:
    store = open_store(flush_mode="sync")
    assert store.put(message(body=b"first")).ok
    disk.released.clear()
    results: list[PutStatus] = []
    producers = [
        threading.Thread(target=lambda: results.append(store.put(message(body=b"x")).status))
        for _ in range(4)
    ]
    for producer in producers:
        producer.start()
    while disk.calls < 2:  # the flush of the first waiting put has begun, and stalls
        time.sleep(0.001)
    closer = threading.Thread(target=store.close)
    closer.start()
    disk.released.set()
    closer.join(10)
    for producer in producers:
        producer.join(10)
    assert not closer.is_alive()
    assert results == [PutStatus.PUT_OK] * 4  # the close flushed them
    assert store.commitlog.flushed_offset == store.commitlog.max_offset


def test_an_asyncio_put_covered_by_a_failed_flush_resolves_with_the_failure(
    open_store: StoreFactory, disk: Disk
) -> None:
    store: MessageStore = open_store(flush_mode="sync")
    assert store.put(message(body=b"first")).ok

    async def put_twice() -> tuple[PutStatus, str, PutStatus]:
        writer = AsyncStoreWriter(store)
        disk.failing = True
        failed = await writer.put(message(body=b"during"))
        disk.failing = False
        after = await writer.put(message(body=b"after"))
        writer.close()
        return failed.status, failed.detail, after.status

    status, detail, after = asyncio.run(put_twice())
    assert status is PutStatus.FLUSH_DISK_TIMEOUT
    assert "failed" in detail
    assert after is PutStatus.PUT_OK
