"""``quiver perf lookup``: key queries and seek by time on a large store, as latency figures.

* ``key_query_p50_us`` / ``key_query_p99_us``: ``query_by_key`` for random keys of a store
  holding ``--count`` messages, each indexed by its UNIQ_KEY and one business key (two index
  entries per message), in-process.
* ``seek_p50_us`` / ``seek_p99_us``: ``offset_for_timestamp`` for random times within one
  queue of ``--count`` units.

The store is filled first (untimed, batches of 100); lookups are timed one by one.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from localstore import MessageStore, NewMessage, StoreOptions, UniqKeyGenerator
from sdk.perf.report import Figure, Progress

T = TypeVar("T")
TOPIC = "LookupTopic"
FILL_BATCH = 100


@dataclass(frozen=True, slots=True)
class LookupBenchConfig:
    data_dir: Path
    count: int
    size: int
    lookups: int


def run_lookup_bench(config: LookupBenchConfig, progress: Progress) -> Iterator[Figure]:
    rng = random.Random(20261122)
    with MessageStore(
        config.data_dir / "lookup", options=StoreOptions(warm_segments=True)
    ) as store:
        keys = _fill(store, config, progress)
        samples = [keys[rng.randrange(len(keys))] for _ in range(config.lookups)]

        def query(key: str) -> None:
            found = store.query_by_key(TOPIC, key, max_count=1)
            if not found:
                raise RuntimeError(f"key {key} was not found")

        p50, p99 = _latencies(query, samples)
        progress.done("key queries")
        yield Figure("key_query_p50_us", p50, config.count, config.size, 1)
        yield Figure("key_query_p99_us", p99, config.count, config.size, 1)

        first = store.store_timestamp(TOPIC, 0, 0)
        last = store.store_timestamp(TOPIC, 0, store.max_offset(TOPIC, 0) - 1)
        times = [rng.randint(first, last) for _ in range(config.lookups)]
        p50, p99 = _latencies(lambda ts: store.offset_for_timestamp(TOPIC, 0, ts), times)
        progress.done("seek by time")
        yield Figure("seek_p50_us", p50, config.count, config.size, 1)
        yield Figure("seek_p99_us", p99, config.count, config.size, 1)


def _fill(store: MessageStore, config: LookupBenchConfig, progress: Progress) -> list[str]:
    """Put ``count`` messages into queue 0; returns their business keys."""
    ids = UniqKeyGenerator()
    body = b"x" * config.size
    keys = []
    for start in range(0, config.count, FILL_BATCH):
        batch = []
        for i in range(start, min(start + FILL_BATCH, config.count)):
            key = f"order-{i}"
            keys.append(key)
            batch.append(NewMessage(TOPIC, body, 0, {"UNIQ_KEY": ids.next(), "KEYS": key}))
        result = store.put_batch(batch)
        if not result.ok:
            raise RuntimeError(f"fill failed: {result.status.value} {result.detail}")
        if start % 100_000 == 0:
            progress.update("fill", start, config.count)
    progress.done("fill")
    return keys


def _latencies(operation: Callable[[T], object], samples: list[T]) -> tuple[float, float]:
    """(p50, p99) in microseconds of ``operation`` over ``samples``."""
    timings = []
    clock = time.perf_counter_ns
    for sample in samples:
        start = clock()
        operation(sample)
        timings.append((clock() - start) / 1000)
    timings.sort()
    return timings[len(timings) // 2], timings[min(len(timings) - 1, len(timings) * 99 // 100)]
