"""``quiver perf store``: the embedded store's hot paths, as JSON figures.

Figures whose meaning matches one of ``../shared/bench/peers.py``'s use its name, so that
``peers.py --peer limits --with "quiver perf store ... --json"`` prints ratios:

* ``batch_append_records_per_s``: batch put (``--batch`` messages per put), async flush.
* ``batch_append_columns_records_per_s``: the same batch puts given as
  :class:`localstore.UniformBatch` columns, as a producer's ``send_batch`` gives them.
* ``append_records_per_s``: one message per put, async flush.
* ``read_crc_records_per_s``: sequential get in batches of 32, fully decoded (properties dict).
* ``get_raw_records_per_s``: the same gets answered as the stored bytes (what a pull sends).
* ``sync_threads_msgs_per_s`` / ``sync_threads_puts_per_fsync``: sync flush, 16 producer threads.
* ``sync_threads_pinned_msgs_per_s`` / ``sync_threads_pinned_puts_per_fsync`` (with
  ``--pin-cpu``): the same 16 threads held on one CPU (see :mod:`sdk.perf.affinity`).
* ``sync_asyncio_msgs_per_s`` / ``sync_asyncio_puts_per_fsync``: sync flush, 64 asyncio producers.
* ``sync_uvloop_msgs_per_s`` / ``sync_uvloop_puts_per_fsync`` (with ``uvloop``): the same 64
  producers on uvloop's event loop, which runs asyncio's callbacks and handles in C.
* ``rss_anon_growth_kb``: anonymous resident memory after the last put chunk less after the
  first; mapped segment pages are file cache, not counted.

Every put figure times the whole put path at steady state (validation, record, consume-queue
unit). Stores are opened with ``warm_segments``: commitlog segments are preallocated and their
pages touched ahead of the writer, as RocketMQ's warm mapped files are (the limits peer warms its
segment the same way). Messages carry a producer ``UNIQ_KEY`` like real ones; they are built
outside the timed sections.
"""

from __future__ import annotations

import asyncio
import os
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from localstore import MessageStore, NewMessage, StoreOptions, UniformBatch, UniqKeyGenerator
from localstore.put.async_writer import AsyncStoreWriter
from localstore.record.codec import encode_properties
from sdk.perf.affinity import pinned
from sdk.perf.report import Figure, Progress

TOPIC = "PerfTopic"
CHUNK = 50_000
GET_BATCH = 32
SYNC_THREADS = 16
SYNC_TASKS = 64


@dataclass(frozen=True, slots=True)
class StoreBenchConfig:
    data_dir: Path
    count: int
    size: int
    batch: int
    sync_count: int
    commitlog_file_size: int
    index_enabled: bool = True
    uvloop: bool = False  # also measure the 64 asyncio producers on uvloop
    pin_cpu: int | None = None  # also measure the 16 producer threads held on this CPU


def run_store_bench(config: StoreBenchConfig, progress: Progress) -> Iterator[Figure]:
    """Yield figures as they are measured."""
    async_dir = config.data_dir / "async"
    options = StoreOptions(warm_segments=True)
    with MessageStore(
        async_dir,
        options=options,
        flush_mode="async",
        commitlog_file_size=config.commitlog_file_size,
        index_enabled=config.index_enabled,
    ) as store:
        rate, rss_growth = _timed_puts(store, config, config.batch, progress, "batch put")
        yield _figure("batch_append_records_per_s", rate, config)
        yield _figure("rss_anon_growth_kb", rss_growth, config)
        rate, _ = _timed_puts(store, config, config.batch, progress, "batch put, columns", True)
        yield _figure("batch_append_columns_records_per_s", rate, config)
        rate, _ = _timed_puts(store, config, 1, progress, "single put")
        yield _figure("append_records_per_s", rate, config)
        yield _figure("read_crc_records_per_s", _timed_gets(store, config, False, progress), config)
        yield _figure("get_raw_records_per_s", _timed_gets(store, config, True, progress), config)
    sync_dir = config.data_dir / "sync"
    with MessageStore(
        sync_dir,
        options=options,
        flush_mode="sync",
        commitlog_file_size=config.commitlog_file_size,
        index_enabled=config.index_enabled,
    ) as store:
        yield from _sync_figures("threads", _sync_threads(store, config, progress), config)
        if config.pin_cpu is not None:
            with pinned(config.pin_cpu):  # the producer threads inherit the CPU
                measured = _sync_threads(store, config, progress, "pinned")
            yield from _sync_figures("threads_pinned", measured, config)
        measured = asyncio.run(_sync_asyncio(store, config, progress))
        yield from _sync_figures("asyncio", measured, config)
        if config.uvloop:
            import uvloop  # noqa: PLC0415 (optional: quiver[uvloop]; the CLI checked it is there)

            with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
                measured = runner.run(_sync_asyncio(store, config, progress, "uvloop"))
            yield from _sync_figures("uvloop", measured, config)


def _sync_figures(
    name: str, measured: tuple[float, float], config: StoreBenchConfig
) -> Iterator[Figure]:
    """``sync_{name}_msgs_per_s`` and ``sync_{name}_puts_per_fsync`` of one sync-flush run."""
    rate, per_fsync = measured
    yield _figure(f"sync_{name}_msgs_per_s", rate, config, count=config.sync_count)
    yield _figure(f"sync_{name}_puts_per_fsync", per_fsync, config, count=config.sync_count)


def _figure(name: str, value: float, config: StoreBenchConfig, count: int | None = None) -> Figure:
    return Figure(
        name, value, count if count is not None else config.count, config.size, config.batch
    )


def _messages(count: int, size: int, keys: UniqKeyGenerator, queue_id: int = 0) -> list[NewMessage]:
    body = os.urandom(size)
    return [NewMessage(TOPIC, body, queue_id, {"UNIQ_KEY": keys.next()}) for _ in range(count)]


def _as_columns(messages: list[NewMessage], batch: int) -> list[UniformBatch]:
    """``messages`` (one queue, properties only a UNIQ_KEY) as UniformBatches of ``batch``."""
    batches = []
    for i in range(0, len(messages), batch):
        run = messages[i : i + batch]
        ids = [m.properties["UNIQ_KEY"] for m in run]
        batches.append(
            UniformBatch(
                TOPIC,
                run[0].queue_id,
                [m.body for m in run],
                [encode_properties(m.properties).encode() for m in run],
                ids,
                [None] * len(run),
                plain=True,
            )
        )
    return batches


def _timed_puts(
    store: MessageStore,
    config: StoreBenchConfig,
    batch: int,
    progress: Progress,
    label: str,
    columns: bool = False,
) -> tuple[float, float]:
    """Put ``config.count`` messages ``batch`` at a time (``columns``: as UniformBatches, made
    before the clock starts); returns (msgs/s, anon RSS growth KiB)."""
    keys = UniqKeyGenerator()
    store.put_batch(_messages(batch, config.size, keys))  # warm the path
    elapsed = 0.0
    done = 0
    rss_first = rss_last = 0
    put_batch = store.put_batch
    put = store.put
    while done < config.count:
        chunk = _messages(min(CHUNK, config.count - done), config.size, keys)
        batches = _as_columns(chunk, batch) if columns else []
        start = time.perf_counter()
        if columns:
            for uniform in batches:
                put_batch(uniform)
        elif batch == 1:
            for message in chunk:
                put(message)
        else:
            for i in range(0, len(chunk), batch):
                put_batch(chunk[i : i + batch])
        elapsed += time.perf_counter() - start
        done += len(chunk)
        del chunk, batches
        rss_last = _rss_anon_kb()
        rss_first = rss_first or rss_last
        progress.update(label, done, config.count)
    progress.done(label)
    return config.count / elapsed, float(rss_last - rss_first)


def _timed_gets(
    store: MessageStore, config: StoreBenchConfig, raw: bool, progress: Progress
) -> float:
    """Read queue 0 from its start in batches of 32 up to ``config.count`` messages."""
    get = store.get_message_bytes if raw else store.get_messages
    label = "get raw" if raw else "get decoded"
    offset = store.min_offset(TOPIC, 0)
    read = 0
    start = time.perf_counter()
    while read < config.count:
        result = get(TOPIC, 0, offset, max_count=GET_BATCH)
        if not result.count:
            break
        read += result.count
        offset = result.next_offset
        if read % 65536 < GET_BATCH:
            progress.update(label, read, config.count)
    elapsed = time.perf_counter() - start
    progress.done(label)
    return read / elapsed


def _sync_threads(
    store: MessageStore, config: StoreBenchConfig, progress: Progress, how: str = ""
) -> tuple[float, float]:
    """16 threads each put single messages; returns (msgs/s, puts per fsync)."""
    keys = UniqKeyGenerator()
    per_thread = max(1, config.sync_count // SYNC_THREADS)
    store.put(_messages(1, config.size, keys)[0])  # steady state: the first segment exists
    work = [_messages(per_thread, config.size, keys, queue_id=i % 4) for i in range(SYNC_THREADS)]
    barrier = threading.Barrier(SYNC_THREADS + 1)
    failures: list[str] = []

    def producer(messages: list[NewMessage]) -> None:
        barrier.wait()
        for message in messages:
            result = store.put(message)
            if not result.ok:
                failures.append(result.detail)
                return

    threads = [threading.Thread(target=producer, args=(w,)) for w in work]
    for thread in threads:
        thread.start()
    fsyncs_before = store.flusher.fsync_count
    barrier.wait()
    start = time.perf_counter()
    for thread in threads:
        thread.join()
    elapsed = time.perf_counter() - start
    progress.done(f"sync put, 16 threads {how}".rstrip())
    if failures:
        raise RuntimeError(f"sync put failed: {failures[0]}")
    total = per_thread * SYNC_THREADS
    fsyncs = max(1, store.flusher.fsync_count - fsyncs_before)
    return total / elapsed, total / fsyncs


async def _sync_asyncio(
    store: MessageStore, config: StoreBenchConfig, progress: Progress, loop_name: str = "asyncio"
) -> tuple[float, float]:
    """64 asyncio producers each await single-message puts; returns (msgs/s, puts per fsync)."""
    keys = UniqKeyGenerator()
    per_task = max(1, config.sync_count // SYNC_TASKS)
    work = [_messages(per_task, config.size, keys, queue_id=i % 4) for i in range(SYNC_TASKS)]
    writer = AsyncStoreWriter(store)

    async def producer(messages: list[NewMessage]) -> None:
        for message in messages:
            result = await writer.put(message)
            if not result.ok:
                raise RuntimeError(f"sync put failed: {result.status.value} {result.detail}")

    fsyncs_before = store.flusher.fsync_count
    start = time.perf_counter()
    try:
        await asyncio.gather(*(producer(w) for w in work))
    finally:
        writer.close()
    elapsed = time.perf_counter() - start
    progress.done(f"sync put, 64 producers on {loop_name}")
    total = per_task * SYNC_TASKS
    fsyncs = max(1, store.flusher.fsync_count - fsyncs_before)
    return total / elapsed, total / fsyncs


def _rss_anon_kb() -> int:
    """RssAnon from /proc/self/status (0 where there is no /proc)."""
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("RssAnon:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0
