"""Group commit under sync flush: when a put returns, what it promises, and what a failing or a
stalled disk does to the puts waiting on it.

Disk faults are injected by wrapping the commitlog's write (``_write_through``): a real
disk that fails on demand is not something a test can have.
"""

from __future__ import annotations

import asyncio
import errno
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

import localstore.commitlog.log as commitlog_module
from localstore import MessageStore, PutResult, PutStatus, StoreError, StoreOptions
from localstore.put.async_writer import AsyncStoreWriter
from localstore.record.codec import RecordError

from .conftest import TINY_GEOMETRY, StoreFactory, message

WriteThrough = Callable[..., bool]


class Disk:
    """The commitlog's durable write, made slow, failing or stalled on demand."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch):
        self._real: WriteThrough = commitlog_module._write_through
        self.delay_s = 0.0
        self.failing = False
        self.error: Exception = OSError(errno.EIO, "Input/output error")  # raised while failing
        self.released = threading.Event()
        self.released.set()
        self.calls = 0
        monkeypatch.setattr(commitlog_module, "_write_through", self._write)

    def _write(self, pending: list[tuple[object, int, bytes]], *, durably: bool) -> bool:
        self.calls += 1
        self.released.wait()
        if self.delay_s:
            time.sleep(self.delay_s)
        if self.failing:
            raise self.error
        return self._real(pending, durably=durably)


@pytest.fixture
def disk(monkeypatch: pytest.MonkeyPatch) -> Iterator[Disk]:
    faulty = Disk(monkeypatch)
    yield faulty
    faulty.failing = False
    faulty.released.set()  # a failed test must not leave the flush thread stalled


def wait_for(condition: Callable[[], bool], what: str, timeout_s: float = 10) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.005)


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
            flushed = store.commitlog.flushed_offset
            if not result.ok:
                uncovered.append(f"{n}-{i}: {result.status} {result.detail}")
                continue
            try:  # raises for a record not yet confirmed (under sync flush: flushed)
                end = result.phys_offset + store.commitlog.record_size_at(result.phys_offset)
            except RecordError as exc:
                uncovered.append(f"{n}-{i}: {exc}")
                continue
            if flushed < end:
                uncovered.append(f"{n}-{i}: flushed to {flushed}, the record ends at {end}")

    fsyncs_before = store.flusher.fsync_count
    threads = [threading.Thread(target=producer, args=(n,)) for n in range(threads_count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert uncovered == []
    fsyncs = store.flusher.fsync_count - fsyncs_before
    assert fsyncs <= threads_count * per_thread // 4  # flushes were shared


def test_a_put_whose_request_is_late_for_an_idle_round_still_waits_for_its_flush(
    open_store: StoreFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A put reads the flusher's gate, then queues its request. Should the flusher pass an
    idle round in between, it must not open that gate: the put has not been flushed."""
    store = open_store(flush_mode="sync", options=StoreOptions(flush_interval_ms=10))
    assert store.put(message(body=b"first")).ok
    queue = store.flusher._queue
    real_put = queue.put

    class LateQueue:
        def put(self, item: object) -> None:
            time.sleep(0.1)  # several idle rounds pass before the request is queued
            real_put(item)  # type: ignore[arg-type]

        def __getattr__(self, name: str) -> object:
            return getattr(queue, name)

    monkeypatch.setattr(store.flusher, "_queue", LateQueue())
    result = store.put(message(body=b"late"))
    assert result.status is PutStatus.PUT_OK, result.detail
    assert store.commitlog.flushed_offset == store.commitlog.max_offset


def test_a_failed_flush_answers_its_puts_refuses_puts_and_retries_until_it_succeeds(
    open_store: StoreFactory, store_dir: Path, disk: Disk
) -> None:
    store = open_store(flush_mode="sync", options=StoreOptions(flush_interval_ms=20))
    assert store.put(message(body=b"before")).ok
    disk.failing = True
    failed = store.put(message(body=b"during"))
    assert failed.status is PutStatus.FLUSH_DISK_TIMEOUT
    assert failed.detail == (
        "stored, but the flush that should cover it failed: [Errno 5] Input/output error"
    )
    assert isinstance(store.flusher.error, OSError)
    refused = store.put(message(body=b"refused"))  # the kept bytes must not keep growing
    assert refused.status is PutStatus.SERVICE_NOT_AVAILABLE
    assert "the last commitlog flush failed" in refused.detail
    assert "Input/output error" in refused.detail
    calls = disk.calls
    wait_for(lambda: disk.calls >= calls + 2, "the flusher to retry on its own")
    disk.failing = False
    wait_for(lambda: store.flusher.error is None, "a retry to succeed")
    assert store.commitlog.flushed_offset == store.commitlog.max_offset  # no put needed
    assert store.put(message(body=b"after")).ok
    store.close()
    assert (store_dir / "abort").exists()  # a flush failed in this run: the next open recovers
    reopened = open_store(store_dir)
    bodies = [m.body for m in reopened.get_messages("TopicTest", 0, 0).messages]
    assert bodies == [b"before", b"during", b"after"]  # no hole where the failed write was


def test_an_unexpected_error_in_the_write_keeps_its_bytes_for_the_next_flush(
    open_store: StoreFactory, store_dir: Path, disk: Disk
) -> None:
    store = open_store(flush_mode="sync", options=StoreOptions(flush_interval_ms=20))
    assert store.put(message(body=b"before")).ok
    disk.error = MemoryError("no memory to join the runs")
    disk.failing = True
    failed = store.put(message(body=b"during"))
    assert failed.status is PutStatus.FLUSH_DISK_TIMEOUT
    assert "MemoryError('no memory to join the runs')" in failed.detail
    disk.failing = False
    wait_for(lambda: store.flusher.error is None, "a retry to succeed")
    assert store.commitlog.flushed_offset == store.commitlog.max_offset
    assert store.put(message(body=b"after")).ok
    store.close()
    reopened = open_store(store_dir)
    bodies = [m.body for m in reopened.get_messages("TopicTest", 0, 0).messages]
    assert bodies == [b"before", b"during", b"after"]


def test_a_close_step_that_raises_still_releases_the_directory(
    open_store: StoreFactory, store_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = open_store()
    assert store.put(message(body=b"kept")).ok

    def broken_close() -> None:
        raise ValueError("a bug in closing the consume queues")

    monkeypatch.setattr(store.queues, "close", broken_close)
    with pytest.raises(StoreError, match=r"consume queues .*a bug in closing") as caught:
        store.close()
    assert isinstance(caught.value.__cause__, ValueError)
    assert store.closed
    assert (store_dir / "abort").exists()
    reopened = open_store(store_dir)  # the same process opens it again: the lock was released
    assert [m.body for m in reopened.get_messages("TopicTest", 0, 0).messages] == [b"kept"]


def test_retention_keeps_a_segment_whose_bytes_a_failed_flush_kept(
    open_store: StoreFactory, store_dir: Path, disk: Disk
) -> None:
    store = open_store(
        flush_mode="sync", options=StoreOptions(flush_interval_ms=20), **TINY_GEOMETRY
    )
    assert store.put(message(body=b"first")).ok
    disk.failing = True
    batch = [message(body=bytes([65 + i]) * 1000) for i in range(6)]  # rolls a 4 KiB segment
    assert store.put_batch(batch).status is PutStatus.FLUSH_DISK_TIMEOUT
    segments = store.commitlog.segments.segments
    assert len(segments) == 2
    assert store.clean(force=True).commitlog_files == []  # its bytes are not written yet
    disk.failing = False
    wait_for(lambda: store.flusher.error is None, "a retry to succeed")
    assert len(store.clean(force=True).commitlog_files) == 1
    store.close()
    reopened = open_store(store_dir, **TINY_GEOMETRY)
    result = reopened.get_messages("TopicTest", 0, reopened.min_offset("TopicTest", 0))
    assert [m.body for m in result.messages] == [m.body for m in batch[-len(result.messages) :]]
    assert len(result.messages) >= 1


def test_a_failed_final_flush_makes_close_raise_and_keeps_the_abort_marker(
    open_store: StoreFactory, store_dir: Path, disk: Disk
) -> None:
    store = open_store(flush_mode="sync")
    assert store.put(message(body=b"durable")).ok
    disk.failing = True
    assert store.put(message(body=b"lost")).status is PutStatus.FLUSH_DISK_TIMEOUT
    with pytest.raises(StoreError, match=r"final flush .* failed .*Input/output error"):
        store.close()
    assert store.closed
    assert (store_dir / "abort").exists()
    disk.failing = False
    reopened = open_store(store_dir)  # recovers what reached the disk
    assert [m.body for m in reopened.get_messages("TopicTest", 0, 0).messages] == [b"durable"]


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
    assert 0.09 <= waited < 1.0  # its own timeout, not the stalled disk's
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
    assert store.put(message(body=b"x")).ok
    record_size = store.commitlog.max_offset  # each put below writes a record of this size
    disk.released.clear()
    results: list[PutStatus] = []
    producers = [
        threading.Thread(target=lambda: results.append(store.put(message(body=b"x")).status))
        for _ in range(4)
    ]
    for producer in producers:
        producer.start()
    wait_for(lambda: store.commitlog.max_offset == 5 * record_size, "the four appends")
    closer = threading.Thread(target=store.close)
    closer.start()
    wait_for(lambda: store.flusher._stopping, "the close to begin")
    disk.released.set()
    closer.join(10)
    for producer in producers:
        producer.join(10)
    assert not closer.is_alive()
    assert results == [PutStatus.PUT_OK] * 4  # the close flushed them
    assert store.commitlog.flushed_offset == store.commitlog.max_offset


def test_a_failing_flush_callback_stops_neither_the_flush_thread_nor_other_puts(
    open_store: StoreFactory,
) -> None:
    store = open_store(flush_mode="sync", options=StoreOptions(sync_flush_timeout_ms=2000))
    called = threading.Event()

    def raising(failure: str | None) -> None:
        called.set()
        raise RuntimeError("a callback's own bug")

    result, _ = store.append([message(body=b"with a bad callback")], on_durable=raising)
    assert result.ok
    assert called.wait(5)  # the flush thread ran it
    # Puts in rounds after the bad callback: a dead flush thread would time them out.
    for body in (b"next", b"after"):
        assert store.put(message(body=body)).ok
    assert store.flusher._thread.is_alive()


def test_an_asyncio_put_covered_by_a_failed_flush_resolves_with_the_failure(
    open_store: StoreFactory, disk: Disk
) -> None:
    store: MessageStore = open_store(flush_mode="sync", options=StoreOptions(flush_interval_ms=20))
    assert store.put(message(body=b"first")).ok

    async def put_during_failure() -> PutResult:
        writer = AsyncStoreWriter(store)
        try:
            return await writer.put(message(body=b"during"))
        finally:
            writer.close()

    disk.failing = True
    failed = asyncio.run(put_during_failure())
    assert failed.status is PutStatus.FLUSH_DISK_TIMEOUT
    assert failed.detail == (
        "stored, but the flush that should cover it failed: [Errno 5] Input/output error"
    )
    disk.failing = False
    wait_for(lambda: store.flusher.error is None, "a retry to succeed")
    assert asyncio.run(put_during_failure()).status is PutStatus.PUT_OK


def test_a_bug_in_booking_a_flush_is_logged_and_neither_fails_its_durable_puts_nor_stops_flushing(
    open_store: StoreFactory, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    store = open_store(flush_mode="sync", options=StoreOptions(flush_interval_ms=20))
    assert store.put(message(body=b"first")).ok
    real_hook = store.flusher._on_flushed
    raised: list[int] = []

    def buggy_once(offset: int, timestamp: int) -> None:
        if not raised:
            raised.append(offset)
            raise RuntimeError("a bug in a flush hook")
        real_hook(offset, timestamp)

    monkeypatch.setattr(store.flusher, "_on_flushed", buggy_once)
    during = store.put(message(body=b"during"))
    assert during.status is PutStatus.PUT_OK  # its bytes were synced: only the booking failed
    assert store.commitlog.flushed_offset > during.phys_offsets[0]
    assert "a bug in a flush hook" in caplog.text
    assert store.flusher._thread.is_alive()
    assert store.put(message(body=b"after")).ok
