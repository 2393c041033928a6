"""``quiver perf produce|consume|e2e --broker URL``: the SDK against a broker over HTTP.

Figures, named as ``../shared/bench/peers.py`` names Redis Streams' (so ``peers.py --peer redis
--with "quiver perf ..."`` prints the ratios):

* ``produce_msgs_per_s``: ``--producers`` asyncio producers (:class:`sdk.AsyncProducer`)
  sending ``--count`` messages of ``--size`` bytes in batches of ``--batch`` (``send_batch``:
  one append each), round-robin over the topic's queues. They share one transport (one HTTP
  session), as concurrent senders of one application process would: the batches sent while
  its request is in flight leave together in the next (:mod:`sdk.transport.coalesce`).
  Before the clock starts the topic is created and one batch goes to each queue.
* ``consume_msgs_per_s``: ``--consumers`` :class:`sdk.AsyncPullConsumer` s of one group
  draining what is stored (``poll`` of up to ``--batch`` records), from their start until every
  message was received (not until the other consumers' last empty polls return); the topic
  has as many queues as consumers (at least 4). A consumer's pull fetches up to
  ``--pull-batch`` records per queue (``pull_batch_size``) and its polls hand them out, as
  Kafka's consumer fetches up to 1 MiB a partition per request whatever its
  ``max.poll.records``. The consumers commit as Kafka's and RocketMQ's do by default: their
  positions every 5 seconds during polls (``auto_commit``) and on close, not after every
  poll. ``consume`` alone first stores ``--count`` messages (not timed).
* ``e2e_p50_ms`` / ``e2e_p99_ms``: one message in flight: ``AsyncProducer.send`` of one message,
  an :class:`sdk.AsyncPullConsumer` parked in a long poll receives it; time from before the
  send to the poll's return (``--latency-samples`` samples after 100 discarded).
* the clients run on the event loop ``loop`` names (:mod:`sdk.server.event_loop`: uvloop when
  installed).
* with ``--spawn-broker``, ``broker_rss_mb``: the broker process's resident memory after the
  run (and ``broker_rss_start_mb`` before it), and ``broker_rss_anon_mb`` /
  ``broker_rss_anon_start_mb``, its anonymous part (the heap: what many clients could make
  grow; the rest is the store's mapped files, which grow with what is stored), and
  ``broker_rss_anon_half_mb``: the anonymous part when the producers had sent half of
  ``--count`` (memory that stays flat under load reads the same then and at the end).

Each run uses a topic of its own (``bench-<pid>-<n>``), so runs against one broker do not
read each other's messages.
"""

from __future__ import annotations

import asyncio
import itertools
import math
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass

from sdk import (
    AsyncAdmin,
    AsyncProducer,
    AsyncPullConsumer,
    ConsumeFrom,
    Message,
    RemoteBroker,
)
from sdk.perf.defaults import REMOTE_PULL_BATCH
from sdk.perf.report import Figure, Progress, bench_body, percentile
from sdk.server import event_loop

LATENCY_WARMUP = 100
_topics = itertools.count()


@dataclass(frozen=True, slots=True)
class RemoteBenchConfig:
    url: str
    count: int = 1_000_000
    size: int = 100
    batch: int = 100
    producers: int = 4
    consumers: int = 4
    pull_batch: int = REMOTE_PULL_BATCH  # records per queue per pull (consume)
    latency_samples: int = 2000
    broker_pid: int | None = None  # a spawned broker's process: its memory is reported
    loop: str = "auto"  # the clients' event loop (sdk.server.event_loop)


def rss_mb(pid: int, field: str = "VmRSS") -> float:
    """A process's resident memory in MiB (Linux: /proc): all of it (``VmRSS``), or its
    anonymous part (``RssAnon``: the heap, without the store's mapped files)."""
    with open(f"/proc/{pid}/status", encoding="ascii") as status:
        for line in status:
            if line.startswith(f"{field}:"):
                return int(line.split()[1]) / 1024
    return 0.0


def run_remote_bench(
    config: RemoteBenchConfig, figures: tuple[str, ...], progress: Progress
) -> Iterator[Figure]:
    """Yield the figures of the module docstring that ``figures`` names (``produce``,
    ``consume``, ``e2e``), measured against ``config.url``."""
    yield from event_loop.run(lambda: _run(config, figures, progress), config.loop)


async def _run(
    config: RemoteBenchConfig, figures: tuple[str, ...], progress: Progress
) -> list[Figure]:
    results: list[Figure] = []

    def figure(name: str, value: float, count: int) -> None:
        results.append(Figure(name, value, count, config.size, config.batch))

    if config.broker_pid is not None:
        figure("broker_rss_start_mb", rss_mb(config.broker_pid), 0)
        figure("broker_rss_anon_start_mb", rss_mb(config.broker_pid, "RssAnon"), 0)
    topic = await _new_topic(config, max(4, config.consumers))
    if "produce" in figures or "consume" in figures:
        rate, half_rss_mb = await _produce(config, topic, progress)
        if "produce" in figures:
            figure("produce_msgs_per_s", rate, config.count)
        if half_rss_mb is not None:
            figure("broker_rss_anon_half_mb", half_rss_mb, 0)
    if "consume" in figures:
        figure("consume_msgs_per_s", await _consume(config, topic, progress), config.count)
    if "e2e" in figures:
        latencies = await _latencies(config, progress)
        figure("e2e_p50_ms", percentile(latencies, 50), len(latencies))
        figure("e2e_p99_ms", percentile(latencies, 99), len(latencies))
    if config.broker_pid is not None:
        figure("broker_rss_mb", rss_mb(config.broker_pid), 0)
        figure("broker_rss_anon_mb", rss_mb(config.broker_pid, "RssAnon"), 0)
    return results


async def _new_topic(config: RemoteBenchConfig, queues: int) -> str:
    topic = f"bench-{os.getpid()}-{next(_topics)}-{time.time_ns() % 1_000_000}"
    async with AsyncAdmin(config.url) as admin:
        await admin.create_topic(topic, queues)
    return topic


async def _produce(
    config: RemoteBenchConfig, topic: str, progress: Progress
) -> tuple[float, float | None]:
    """Warm every queue, then time ``config.count`` messages from the producers; answers
    their rate and the broker's anonymous memory at half of them (None without its pid)."""
    body = bench_body(config.size)
    batch = [Message(topic, body) for _ in range(config.batch)]
    transport = RemoteBroker(config.url).async_transport()  # shared: see the docstring
    producers = [AsyncProducer(transport) for _ in range(config.producers)]
    try:
        queues = max(4, config.consumers)
        for queue_id in range(queues):  # warm-up: not timed, not counted
            await producers[0].send_batch(batch[:1], queue_id=queue_id)
        batches = -(-config.count // config.batch)
        sent = [0]
        half_rss_mb: list[float] = []
        next_batch = iter(range(batches))

        async def producer(client: AsyncProducer) -> None:
            for index in next_batch:
                size = min(config.batch, config.count - index * config.batch)
                await client.send_batch(batch[:size])
                sent[0] += size
                progress.update("produce", sent[0], config.count)
                if (
                    config.broker_pid is not None
                    and not half_rss_mb
                    and 2 * sent[0] >= config.count
                ):
                    half_rss_mb.append(rss_mb(config.broker_pid, "RssAnon"))

        started = time.perf_counter()
        await asyncio.gather(*(producer(client) for client in producers))
        elapsed = time.perf_counter() - started
    finally:
        for client in producers:
            await client.close()
        await transport.close()
    progress.done("produce")
    return config.count / elapsed, (half_rss_mb[0] if half_rss_mb else None)


async def _consume(config: RemoteBenchConfig, topic: str, progress: Progress) -> float:
    """Time the consumers of one group draining ``config.count`` messages (and the warm-up
    ones) from ``topic``."""
    total = config.count + max(4, config.consumers)
    group = f"{topic}-group"
    consumers = [
        AsyncPullConsumer(
            config.url,
            group,
            consume_from=ConsumeFrom.FIRST_OFFSET,
            max_poll_records=config.batch,
            pull_batch_size=config.pull_batch,
        )
        for _ in range(config.consumers)
    ]
    received = [0]
    finished = [math.inf]  # when the last message came: the other consumers' polls then wait
    try:
        for consumer in consumers:
            consumer.subscribe([topic])

        async def drain(consumer: AsyncPullConsumer) -> None:
            while received[0] < total:
                messages = await consumer.poll(0.5)
                if messages:
                    received[0] += len(messages)
                    progress.update("consume", received[0], total)
                    if received[0] >= total:
                        finished[0] = time.perf_counter()

        started = time.perf_counter()
        await asyncio.gather(*(drain(consumer) for consumer in consumers))
        elapsed = finished[0] - started
    finally:
        for consumer in consumers:
            await consumer.close()
    progress.done("consume")
    return received[0] / elapsed


async def _latencies(config: RemoteBenchConfig, progress: Progress) -> list[float]:
    """One message in flight: send, then the parked poll's return."""
    topic = await _new_topic(config, 1)
    body = bench_body(config.size)
    total = config.latency_samples + LATENCY_WARMUP
    samples: list[float] = []
    async with AsyncProducer(config.url) as producer:
        consumer = AsyncPullConsumer(config.url, f"{topic}-group", auto_commit=False)
        try:
            consumer.subscribe([topic])
            await consumer.poll(0)  # join and take the queue before the first send
            for index in range(total):
                waiting = asyncio.ensure_future(_receive_one(consumer))
                await asyncio.sleep(0)  # the poll is out before the send
                started = time.perf_counter()
                await producer.send(Message(topic, body))
                received_at = await waiting
                if index >= LATENCY_WARMUP:
                    samples.append((received_at - started) * 1000)
                progress.update("e2e", index + 1, total)
        finally:
            await consumer.close()
    progress.done("e2e")
    return samples


async def _receive_one(consumer: AsyncPullConsumer) -> float:
    """Poll until a message comes; when it came (``time.perf_counter``)."""
    while not await consumer.poll(10.0):
        pass
    return time.perf_counter()
