"""An event loop's group commit through its sync process (``localstore.commitlog.sync_process``):
puts resolve only once durable, one commitlog flush runs at a time whoever runs it, and a failing,
killed or hung process fails only its own flushes while the flush thread takes over."""

from __future__ import annotations

import asyncio
import gc
import os
import signal
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from localstore import MessageStore, PutResult, PutStatus, StoreOptions
from localstore.commitlog.log import FlushBusyError, TakenFlush
from localstore.commitlog.sync_worker import CLOSE, ERROR, SEQUENCE, SYNC, serve
from localstore.put.async_writer import AsyncStoreWriter
from localstore.runtime.pipe_frames import frame, read_frame

from .conftest import GatheredFlushRequests, RunOnLoop, StoreFactory, message

Check = Callable[[PutResult], None]


def wait_for(condition: Callable[[], bool], what: str, timeout_s: float = 10) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.005)


def _process_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


async def _produce(
    writer: AsyncStoreWriter, producers: int, per_producer: int, check: Check
) -> list[PutResult]:
    async def producer(n: int) -> list[PutResult]:
        results = []
        for i in range(per_producer):
            result = await writer.put(message(body=f"{n}-{i}".encode(), queue_id=n % 4))
            check(result)
            results.append(result)
        return results

    groups = await asyncio.gather(*(producer(n) for n in range(producers)))
    return [result for group in groups for result in group]


def test_puts_resolve_only_once_the_sync_process_made_them_durable(
    open_store: StoreFactory, run_on_loop: RunOnLoop
) -> None:
    store = open_store(flush_mode="sync")
    assert store.put(message(body=b"first")).ok
    seen: list[tuple[int, int]] = []  # (phys offset, flushed offset when it resolved)

    def check(result: PutResult) -> None:
        seen.append((result.phys_offsets[0], store.commitlog.flushed_offset))

    async def main() -> tuple[list[PutResult], int | None, int]:
        writer = AsyncStoreWriter(store)
        syncer = writer.sync_process
        assert syncer is not None
        pid = syncer.pid
        try:
            results = await _produce(writer, 64, 10, check)
        finally:
            writer.close()
        return results, pid, syncer.syncs_requested

    results, pid, syncs = run_on_loop(main())
    assert all(result.status is PutStatus.PUT_OK for result in results)
    assert all(phys < flushed for phys, flushed in seen), "a put resolved before its flush"
    assert syncs >= 10  # the flushes went through the process, in groups
    assert len(results) / syncs >= 8
    assert pid is not None and not _process_alive(pid)  # closing the writer ended it
    bodies = {
        m.body
        for q in range(4)
        for m in store.get_messages("TopicTest", q, 0, max_count=500).messages
    }
    assert len(bodies) == 64 * 10 + 1


def test_a_killed_sync_process_fails_only_its_flushes_and_the_flush_thread_takes_over(
    open_store: StoreFactory, store_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    store = open_store(flush_mode="sync", options=StoreOptions(flush_interval_ms=20))
    assert store.put(message(body=b"first")).ok

    async def main() -> tuple[list[PutResult], list[PutResult], str | None]:
        writer = AsyncStoreWriter(store)
        syncer = writer.sync_process
        assert syncer is not None and syncer.pid is not None
        try:
            before = await _produce(writer, 8, 5, lambda result: None)
            os.kill(syncer.pid, signal.SIGKILL)
            after = await _produce(writer, 8, 5, lambda result: None)
            deadline = time.monotonic() + 10
            while after[-1].status is not PutStatus.PUT_OK:  # refused until a retry succeeds
                assert time.monotonic() < deadline, "puts are still refused"
                await asyncio.sleep(0.005)
                after.append(await writer.put(message(body=b"later")))
        finally:
            writer.close()
        return before, after, syncer.failure

    before, after, failure = asyncio.run(main())
    assert all(result.status is PutStatus.PUT_OK for result in before)
    assert failure is not None and "the sync process" in failure
    assert "can no longer be used" in caplog.text
    allowed = {PutStatus.PUT_OK, PutStatus.FLUSH_DISK_TIMEOUT, PutStatus.SERVICE_NOT_AVAILABLE}
    assert {result.status for result in after} <= allowed
    for result in after:
        if result.status is PutStatus.FLUSH_DISK_TIMEOUT:
            assert "sync process" in result.detail
    stored = [r for r in before + after if r.status is not PutStatus.SERVICE_NOT_AVAILABLE]
    store.close()
    with MessageStore(store_dir, flush_mode="sync") as reopened:
        for result in stored:
            got = reopened.get_messages(
                "TopicTest", result.queue_id, result.queue_offset, max_count=1
            )
            assert got.messages, f"lost {result}"


def test_a_sync_the_process_fails_fails_its_puts_until_the_flush_thread_retry_succeeds(
    open_store: StoreFactory,
) -> None:
    store = open_store(flush_mode="sync", options=StoreOptions(flush_interval_ms=20))
    assert store.put(message(body=b"first")).ok
    segment = store.commitlog.segments.last
    assert segment is not None
    real_path = segment.path

    async def main() -> tuple[PutResult, PutResult, AsyncStoreWriter]:
        writer = AsyncStoreWriter(store)
        try:
            segment.path = real_path.with_name("gone")  # the process cannot open it
            failed = await writer.put(message(body=b"during"))
            segment.path = real_path
            await asyncio.to_thread(wait_for, lambda: store.flusher.error is None, "a retry")
            recovered = await writer.put(message(body=b"after"))
        finally:
            segment.path = real_path
            writer.close()
        return failed, recovered, writer

    failed, recovered, writer = asyncio.run(main())
    assert failed.status is PutStatus.FLUSH_DISK_TIMEOUT
    assert failed.detail.startswith(
        "stored, but the flush that should cover it failed: [Errno 2] No such file"
    )
    assert recovered.status is PutStatus.PUT_OK
    syncer = writer.sync_process
    assert syncer is not None and syncer.failure is None  # the process itself carried on
    assert syncer.syncs_requested >= 1
    got = store.get_messages("TopicTest", 0, 0, max_count=10)
    assert [m.body for m in got.messages] == [b"first", b"during", b"after"]


def test_the_sync_worker_answers_each_request_in_order(tmp_path: Path) -> None:
    present = tmp_path / "segment"
    present.write_bytes(b"x" * 100)
    requests_read, requests_write = os.pipe()
    replies_read, replies_write = os.pipe()
    worker = threading.Thread(target=serve, args=(requests_read, replies_write))
    worker.start()
    try:
        for sequence, path in ((1, present), (2, tmp_path / "missing"), (3, present)):
            payload = SEQUENCE.pack(sequence) + os.fsencode(path)
            os.write(requests_write, frame(SYNC, payload))
        os.write(requests_write, frame(CLOSE))
        replies = [read_frame(replies_read) for _ in range(4)]
    finally:
        worker.join(10)
        for fd in (requests_read, requests_write, replies_read, replies_write):
            os.close(fd)
    assert replies[0] == (SYNC, SEQUENCE.pack(1))
    kind, payload = replies[1] or (b"", b"")
    assert kind == ERROR and payload[: SEQUENCE.size] == SEQUENCE.pack(2)
    assert b"No such file" in payload
    assert replies[2] == (SYNC, SEQUENCE.pack(3))
    assert replies[3] == (CLOSE, b"")


def _append(store: MessageStore, body: bytes, gathered: GatheredFlushRequests) -> None:
    result, _ = store.append(
        [message(body=body)], on_durable=lambda failure: None, flushed_by=gathered
    )
    assert result.ok


def test_one_flush_runs_at_a_time_and_a_failed_one_is_written_again_by_the_next(
    open_store: StoreFactory,
) -> None:
    store = open_store(flush_mode="sync")
    assert store.put(message(body=b"first")).ok
    commitlog = store.commitlog
    commitlog.flush_hook = None  # the flush thread would retry the failure below on its own
    gathered = GatheredFlushRequests()
    start = commitlog.flushed_offset
    _append(store, b"a", gathered)
    failing = commitlog.begin_flush(wait_s=0)
    assert failing is not None
    _append(store, b"b", gathered)
    with pytest.raises(FlushBusyError):
        commitlog.begin_flush(wait_s=0)  # the next group waits for the one in flight
    assert not commitlog.end_flush(failing, OSError(5, "EIO"))
    assert commitlog.flushed_offset == start
    retry = commitlog.begin_flush(wait_s=0)
    assert retry is not None
    assert retry.writes[0] == failing.writes[0]  # the failed bytes, written again first
    for segment in retry.to_sync:
        segment.sync()
    assert commitlog.end_flush(retry, None)
    assert commitlog.flushed_offset == commitlog.max_offset


def test_a_blocking_put_waits_for_a_loops_flush_of_its_bytes_and_is_answered_durable(
    open_store: StoreFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = open_store(flush_mode="sync")
    assert store.put(message(body=b"first")).ok
    commitlog = store.commitlog
    real_begin = commitlog.begin_flush
    loops_flush: list[TakenFlush | None] = []

    def end_later(taken: TakenFlush) -> None:
        time.sleep(0.05)  # the loop's sync takes a while; the flush thread waits for it
        for segment in taken.to_sync:
            segment.sync()
        assert store.flusher.finish_elsewhere(taken, None) is None

    def flush_thread_begin(**options: Any) -> TakenFlush | None:
        if not loops_flush:  # a loop's flush takes the put's bytes first
            taken = real_begin(wait_s=0)
            assert taken is not None
            loops_flush.append(taken)
            threading.Thread(target=end_later, args=(taken,)).start()
        return real_begin(**options)

    monkeypatch.setattr(commitlog, "begin_flush", flush_thread_begin)
    result = store.put(message(body=b"blocking"))
    assert result.status is PutStatus.PUT_OK, result.detail
    assert commitlog.flushed_offset > result.phys_offsets[0]


def test_a_flush_a_dropped_writer_left_unended_is_taken_over(
    open_store: StoreFactory, caplog: pytest.LogCaptureFixture
) -> None:
    store = open_store(flush_mode="sync", options=StoreOptions(sync_flush_timeout_ms=300))
    assert store.put(message(body=b"first")).ok

    async def drop_a_writer() -> None:
        writer = AsyncStoreWriter(store)
        writer.put(message(body=b"unawaited"))
        await asyncio.sleep(0)  # its flush is sent; the loop ends before the answer is read

    asyncio.run(drop_a_writer())
    gc.collect()
    result = store.put(message(body=b"later"))  # the flush thread takes the token over
    assert result.status is PutStatus.PUT_OK, result.detail
    assert "did not end within" in caplog.text
    got = store.get_messages("TopicTest", 0, 0, max_count=10)
    assert [m.body for m in got.messages] == [b"first", b"unawaited", b"later"]


def test_the_flush_thread_is_not_starved_by_a_busy_loop(
    open_store: StoreFactory, caplog: pytest.LogCaptureFixture
) -> None:
    store = open_store(flush_mode="sync", options=StoreOptions(sync_flush_timeout_ms=400))
    blocking: list[PutResult] = []
    stop = threading.Event()

    def blocking_producer() -> None:
        while not stop.is_set():
            blocking.append(store.put(message(body=b"blocking", queue_id=3)))
            time.sleep(0.005)

    async def busy_loop() -> list[PutResult]:
        writer = AsyncStoreWriter(store)
        try:
            return await _produce(writer, 64, 60, lambda result: None)
        finally:
            writer.close()

    thread = threading.Thread(target=blocking_producer)
    thread.start()
    try:
        looped = asyncio.run(busy_loop())
    finally:
        stop.set()
        thread.join()
    assert blocking and all(result.status is PutStatus.PUT_OK for result in blocking)
    assert all(result.status is PutStatus.PUT_OK for result in looped)
    assert "did not end within" not in caplog.text  # no healthy flush was taken over


def test_a_hung_sync_process_is_given_up_and_its_puts_answered(open_store: StoreFactory) -> None:
    store = open_store(flush_mode="sync", options=StoreOptions(sync_flush_timeout_ms=400))

    async def main() -> tuple[PutResult, PutResult, float]:
        writer = AsyncStoreWriter(store)
        syncer = writer.sync_process
        assert syncer is not None and syncer.pid is not None
        try:
            assert (await writer.put(message(body=b"first"))).ok
            os.kill(syncer.pid, signal.SIGSTOP)
            started = time.monotonic()
            hung = await asyncio.wait_for(writer.put(message(body=b"hung")), 5)
            waited = time.monotonic() - started
            later = await writer.put(message(body=b"later"))
            deadline = time.monotonic() + 5
            while later.status is not PutStatus.PUT_OK:  # refused until the retry succeeds
                assert time.monotonic() < deadline
                await asyncio.sleep(0.01)
                later = await writer.put(message(body=b"later"))
        finally:
            writer.close()
        return hung, later, waited

    hung, later, waited = asyncio.run(main())
    assert hung.status is PutStatus.FLUSH_DISK_TIMEOUT
    assert "did not answer a sync within 0.2 s" in hung.detail
    assert waited < 1.0  # given up by the watchdog, not by the put's own 5 s
    assert later.status is PutStatus.PUT_OK


def test_an_error_between_taking_the_token_and_the_write_gives_the_token_back(
    open_store: StoreFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = open_store(flush_mode="sync")
    commitlog = store.commitlog
    assert store.put(message(body=b"first")).ok
    real = commitlog._segments_between
    raised: list[bool] = []

    def fails_once(start: int, end: int) -> list[Any]:
        if not raised:
            raised.append(True)
            raise KeyboardInterrupt  # anything, even not an Exception
        return real(start, end)

    monkeypatch.setattr(commitlog, "_segments_between", fails_once)
    _append(store, b"kept", GatheredFlushRequests())
    with pytest.raises(KeyboardInterrupt):
        commitlog.begin_flush(wait_s=0)
    taken = commitlog.begin_flush(wait_s=0)  # the token is free, the bytes were kept
    assert taken is not None and taken.writes
    for segment in taken.to_sync:
        segment.sync()
    assert commitlog.end_flush(taken, None)
    assert commitlog.flushed_offset == commitlog.max_offset
