"""``quiver perf e2e``: the SDK end to end on an embedded broker (local mode).

Figures (the shape ``../shared/bench/peers.py --with`` reads, names as its embedded peers'):

* ``put_msgs_per_s``: a :class:`sdk.Producer` sending ``--count`` messages of ``--size`` bytes in
  batches of ``--batch`` (``send_batch``: one request, one append), round-robin over the topic's
  queues; every message indexed (keys and ``UNIQ_KEY``), async flush. The key index is built by
  its child process (``StoreOptions.index_process``; ``--in-process-index`` builds it in the put
  path instead), and the clock stops once the index holds every message (``wait_indexed``).
  Before the clock starts, one message goes to each queue: as a deployment creates its topics
  before it sends, the topic and its consume-queue files exist when the timed sends begin.
* ``get_msgs_per_s``: a :class:`sdk.PushConsumer` (clustering, FIRST_OFFSET) draining that backlog
  (the warm-up messages included):
  from its start until its listener has seen every message and the offsets of all of them are
  committed in memory (listener batches of ``--consume-batch``; ``--pull-batch`` per queue and
  pull).
* ``e2e_p50_ms`` / ``e2e_p99_ms``: one message in flight: ``Producer.send`` of one message, a
  push consumer parked in a long poll receives it; time from before the send to the listener
  holding it (``--latency-samples`` samples after 100 discarded).
* ``put_pinned_msgs_per_s``, ``get_pinned_msgs_per_s``, ``e2e_pinned_p50_ms`` and
  ``e2e_pinned_p99_ms`` (with ``--pin-cpu``): the three measured again, after the unpinned ones
  and on a topic of their own (``bench-pinned``, its queues created first), with the threads
  the benchmark starts held on one CPU (see :mod:`sdk.perf.affinity`); the broker's own threads
  and the store's key-index process keep the CPUs they had.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from localstore import StoreOptions
from sdk import (
    ConsumeFrom,
    ConsumeResult,
    EmbeddedBroker,
    Message,
    Producer,
    PushConsumer,
    ReceivedMessage,
)
from sdk.perf.affinity import pinned
from sdk.perf.report import Figure, Progress, bench_body, percentile

LATENCY_WARMUP = 100
TOPIC = "bench"


@dataclass(frozen=True, slots=True)
class E2EBenchConfig:
    data_dir: Path
    count: int = 1_000_000
    size: int = 100
    batch: int = 100
    latency_samples: int = 2000
    consume_batch: int = 32
    pull_batch: int = 64
    consume_threads: int = 2
    commitlog_file_size: int = 1 << 30
    index_process: bool = True
    pin_cpu: int | None = None  # also measure put, get and latency with the threads on this CPU


def run_e2e_bench(config: E2EBenchConfig, progress: Progress) -> Iterator[Figure]:
    """Yield the figures of the module docstring, measured in ``config.data_dir / "e2e"``."""
    root = config.data_dir / "e2e"
    with (
        EmbeddedBroker(
            root,
            store_options=StoreOptions(index_process=config.index_process),
            commitlog_file_size=config.commitlog_file_size,
        ) as broker,
        Producer(broker, "bench-producer") as producer,
    ):
        yield from _phase(broker, producer, config, progress)
        if config.pin_cpu is not None:  # the same again, on a topic of its own
            with pinned(config.pin_cpu):  # the consumers' threads inherit the CPU
                yield from _phase(broker, producer, config, progress, "_pinned")


def _phase(
    broker: EmbeddedBroker,
    producer: Producer,
    config: E2EBenchConfig,
    progress: Progress,
    how: str = "",
) -> Iterator[Figure]:
    """Put, drain and latency on the phase's topic (``how`` names both, see :func:`_topic`)."""
    warm_up = _create_queues(broker, producer, config, how)
    broker.service.store.wait_indexed()  # the index process is up before the clock starts
    yield _produce(broker, producer, config, progress, how)
    yield _drain(broker, config, config.count + warm_up, progress, how)
    yield from _latency(broker, producer, config, progress, how)


def _topic(how: str) -> str:
    """The topic a phase produces to and drains (``bench``, ``bench-pinned``)."""
    return TOPIC + how.replace("_", "-")


def _create_queues(
    broker: EmbeddedBroker, producer: Producer, config: E2EBenchConfig, how: str = ""
) -> int:
    """Send one message to each of the topic's queues, which creates the topic and its queue
    files (a few milliseconds, once); returns how many were sent."""
    body = bench_body(config.size)
    topic = _topic(how)
    queues = broker.service.queue_count(topic)
    for queue_id in range(queues):
        producer.send(Message(topic, body, keys=("warm-up",)), queue_id=queue_id)
    return queues


def _produce(
    broker: EmbeddedBroker,
    producer: Producer,
    config: E2EBenchConfig,
    progress: Progress,
    how: str = "",
) -> Figure:
    body = bench_body(config.size)
    topic = _topic(how)
    started = time.perf_counter()
    sent = 0
    while sent < config.count:
        n = min(config.batch, config.count - sent)
        producer.send_batch([Message(topic, body, keys=(f"k{sent + i}",)) for i in range(n)])
        sent += n
        progress.update(f"put{how}", sent, config.count)
    broker.service.store.wait_indexed()  # indexing is part of the put
    elapsed = time.perf_counter() - started
    progress.done(f"put{how}")
    rate = config.count / elapsed
    return Figure(f"put{how}_msgs_per_s", rate, config.count, config.size, config.batch)


def _drain(
    broker: EmbeddedBroker,
    config: E2EBenchConfig,
    backlog: int,
    progress: Progress,
    how: str = "",
) -> Figure:
    """Drain the ``backlog`` messages stored so far on the phase's topic; the rate counts all
    of them."""
    topic = _topic(how)
    received = 0
    lock = threading.Lock()
    all_seen = threading.Event()

    def count(messages: list[ReceivedMessage]) -> ConsumeResult:
        nonlocal received
        with lock:
            received += len(messages)
            if received >= backlog:
                all_seen.set()
        return ConsumeResult.SUCCESS

    started = time.perf_counter()
    with PushConsumer(
        broker,
        f"bench-drain{how}",
        {topic: None},
        count,
        consume_threads=config.consume_threads,
        consume_from=ConsumeFrom.FIRST_OFFSET,
        consume_batch_size=config.consume_batch,
        pull_batch_size=config.pull_batch,
    ) as consumer:
        while not all_seen.wait(0.2):
            progress.update(f"get{how}", received, backlog)
        while sum(consumer.core.offsets.clone_offset_table(topic).values()) < backlog:
            time.sleep(0.001)  # the last batches' offsets are being committed
        elapsed = time.perf_counter() - started
    progress.done(f"get{how}")
    rate = backlog / elapsed
    return Figure(f"get{how}_msgs_per_s", rate, config.count, config.size, config.batch)


def _latency(
    broker: EmbeddedBroker,
    producer: Producer,
    config: E2EBenchConfig,
    progress: Progress,
    how: str = "",
) -> Iterator[Figure]:
    arrived = threading.Event()
    arrival = [0.0]

    def hold(messages: list[ReceivedMessage]) -> ConsumeResult:
        arrival[0] = time.perf_counter()
        arrived.set()
        return ConsumeResult.SUCCESS

    body = bench_body(config.size)
    samples: list[float] = []
    total = config.latency_samples + LATENCY_WARMUP
    with PushConsumer(broker, f"bench-latency{how}", {"latency": None}, hold, consume_threads=1):
        for index in range(total):
            arrived.clear()
            before = time.perf_counter()
            producer.send(Message("latency", body))
            if not arrived.wait(5.0):
                raise RuntimeError(f"message {index} not received within 5 s")
            if index >= LATENCY_WARMUP:
                samples.append((arrival[0] - before) * 1000)
            progress.update(f"e2e{how} latency", index + 1, total)
    progress.done(f"e2e{how} latency")
    yield Figure(f"e2e{how}_p50_ms", percentile(samples, 50), len(samples), config.size, 1)
    yield Figure(f"e2e{how}_p99_ms", percentile(samples, 99), len(samples), config.size, 1)
