"""``quiver perf rebalance``: how fast a consumer group settles after a member joins or leaves.

Scenario (one process, an embedded broker, local mode): a topic with ``queues`` queues (16)
under continuous load from a producer thread; the members of one clustering group
(:class:`sdk.PushConsumer`) join and leave following ``sizes`` (e.g. 1 -> 3 -> 2 -> 4 -> ...,
between 1 and 8 members), one member at a time. For each membership change:

* ``rebalance time``: from just before the joining member's ``start()`` (or the leaving member's
  ``close()``) until every queue is owned by exactly one current member (its lease held, per the
  members' rebalance listeners) *and* each queue has had a message consumed by that owner after
  the change began;
* ownership intervals (``on_assigned`` .. ``on_revoked``) of all members are recorded; an
  *overlap* is two members' intervals on one queue intersecting in time.

At the end the producer stops, the last members drain the topic, and every produced message
must have been consumed at least once (``rebalance_lost`` counts the ones that were not).

Figures: ``rebalance_p50_ms``, ``rebalance_p99_ms``, ``rebalance_changes``,
``rebalance_overlaps``, ``rebalance_lost``.
"""

from __future__ import annotations

import threading
import time
from collections import defaultdict
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from localstore import StoreOptions
from offsetstore import MessageQueue
from sdk import (
    BrokerOptions,
    ConsumeFrom,
    EmbeddedBroker,
    Message,
    Producer,
    PushConsumer,
    ReceivedMessage,
)
from sdk.perf.defaults import DEFAULT_SIZES
from sdk.perf.report import Figure, Progress

TOPIC = "rebalance"
GROUP = "rebalance-bench"


@dataclass(frozen=True, slots=True)
class RebalanceBenchConfig:
    data_dir: Path
    queues: int = 16
    sizes: Sequence[int] = DEFAULT_SIZES
    rate_msgs_per_s: int = 2000
    settle_timeout_s: float = 30.0
    commitlog_file_size: int = 64 * 1024 * 1024


@dataclass
class Observations:
    """What members report, stamped with the monotonic clock (thread-safe)."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    owner: dict[int, str] = field(default_factory=dict)  # queue id -> current owner
    intervals: dict[int, list[tuple[str, float, float]]] = field(
        default_factory=lambda: defaultdict(list)
    )
    opened: dict[tuple[str, int], float] = field(default_factory=dict)
    last_consumed: dict[tuple[str, int], float] = field(default_factory=dict)
    consumed: set[tuple[int, int]] = field(default_factory=set)

    def assigned(self, member: str, queues: list[MessageQueue]) -> None:
        now = time.monotonic()
        with self.lock:
            for queue in queues:
                if queue.topic == TOPIC:
                    self.opened[(member, queue.queue_id)] = now
                    self.owner[queue.queue_id] = member

    def revoked(self, member: str, queues: list[MessageQueue]) -> None:
        now = time.monotonic()
        with self.lock:
            for queue in queues:
                if queue.topic != TOPIC:
                    continue
                started = self.opened.pop((member, queue.queue_id), None)
                if started is not None:
                    self.intervals[queue.queue_id].append((member, started, now))
                if self.owner.get(queue.queue_id) == member:
                    del self.owner[queue.queue_id]

    def consumed_by(self, member: str, messages: list[ReceivedMessage]) -> None:
        now = time.monotonic()
        with self.lock:
            for message in messages:
                self.last_consumed[(member, message.queue_id)] = now
                self.consumed.add((message.queue_id, message.queue_offset))

    def settled(self, members: set[str], queues: int, since: float) -> bool:
        with self.lock:
            if len(self.owner) != queues or not set(self.owner.values()) <= members:
                return False
            return all(
                self.last_consumed.get((owner, q), 0.0) >= since for q, owner in self.owner.items()
            )

    def overlaps(self) -> int:
        with self.lock:
            intervals = {q: list(v) for q, v in self.intervals.items()}
            for (member, queue_id), started in self.opened.items():
                intervals.setdefault(queue_id, []).append((member, started, float("inf")))
        count = 0
        for spans in intervals.values():
            spans.sort(key=lambda span: span[1])
            holder, held_until = "", float("-inf")
            for member, start, end in spans:
                if start < held_until and member != holder:
                    count += 1  # starts while another member still holds the queue
                if end > held_until:
                    holder, held_until = member, end
        return count


class _Member:
    """One PushConsumer of the group, reporting to the observations."""

    def __init__(self, broker: EmbeddedBroker, name: str, seen: Observations) -> None:
        self.name = name
        self.seen = seen
        self.consumer = PushConsumer(
            broker,
            GROUP,
            {TOPIC: None},
            self._consume,
            consume_from=ConsumeFrom.FIRST_OFFSET,
            consume_batch_size=16,
            instance_name=name,
            rebalance_listener=self,
        )

    def _consume(self, messages: list[ReceivedMessage]) -> None:
        self.seen.consumed_by(self.consumer.client_id, messages)

    def on_assigned(self, queues: list[MessageQueue]) -> None:
        self.seen.assigned(self.consumer.client_id, queues)

    def on_revoked(self, queues: list[MessageQueue]) -> None:
        self.seen.revoked(self.consumer.client_id, queues)


class _Load(threading.Thread):
    """Sends to every queue round-robin at about ``rate`` messages a second."""

    def __init__(self, broker: EmbeddedBroker, queues: int, rate: int) -> None:
        super().__init__(name="quiver-rebalance-load", daemon=True)
        self.producer = Producer(broker, "rebalance-load")
        self.queues = queues
        self.rate = rate
        self.stop = threading.Event()
        self.sent = 0

    def run(self) -> None:
        batch = max(1, self.rate // (self.queues * 50))  # ~50 rounds a second
        started = time.monotonic()
        while not self.stop.is_set():
            for queue_id in range(self.queues):
                self.producer.send_batch([Message(TOPIC, b"x" * 100)] * batch, queue_id=queue_id)
                self.sent += batch
            ahead = self.sent / self.rate - (time.monotonic() - started)
            if ahead > 0:
                self.stop.wait(ahead)
        self.producer.close()


def run_rebalance_scenario(config: RebalanceBenchConfig, progress: Progress) -> dict[str, float]:
    """Run the scenario of the module docstring; answers the figures by name."""
    options = BrokerOptions(store=StoreOptions(default_queue_count=config.queues))
    root = config.data_dir / "rebalance"
    seen = Observations()
    timings: list[float] = []
    with EmbeddedBroker(
        root, options=options, commitlog_file_size=config.commitlog_file_size
    ) as broker:
        load = _Load(broker, config.queues, config.rate_msgs_per_s)
        load.start()
        members: list[_Member] = []
        names = (f"m{n}" for n in range(1_000_000))
        try:
            for index, size in enumerate(config.sizes):
                while len(members) != size:
                    began = time.monotonic()
                    if len(members) < size:
                        member = _Member(broker, next(names), seen)
                        member.consumer.start()
                        members.append(member)
                    else:
                        members.pop(0).consumer.close()
                    current = {m.consumer.client_id for m in members}
                    deadline = began + config.settle_timeout_s
                    while not seen.settled(current, config.queues, began):
                        if time.monotonic() > deadline:
                            raise RuntimeError(
                                f"the group did not settle within {config.settle_timeout_s} s"
                            )
                        time.sleep(0.001)
                    if index > 0:  # the first member's start is not a rebalance
                        timings.append((time.monotonic() - began) * 1000)
                progress.update("membership changes", index + 1, len(config.sizes))
            load.stop.set()
            load.join()
            total = sum(broker.service.max_offset(TOPIC, q) for q in range(config.queues))
            deadline = time.monotonic() + config.settle_timeout_s
            while len(seen.consumed) < total and time.monotonic() < deadline:
                time.sleep(0.01)
        finally:
            load.stop.set()
            for member in members:
                member.consumer.close()
    progress.done("membership changes")
    timings.sort()
    return {
        "rebalance_p50_ms": timings[len(timings) // 2] if timings else 0.0,
        "rebalance_p99_ms": timings[min(len(timings) - 1, round(0.99 * (len(timings) - 1)))]
        if timings
        else 0.0,
        "rebalance_changes": float(len(timings)),
        "rebalance_overlaps": float(seen.overlaps()),
        "rebalance_lost": float(total - len(seen.consumed)),
    }


def run_rebalance_bench(config: RebalanceBenchConfig, progress: Progress) -> Iterator[Figure]:
    figures = run_rebalance_scenario(config, progress)
    for name, value in figures.items():
        yield Figure(
            name, value, int(figures["rebalance_changes"]), config.queues, max(config.sizes)
        )
