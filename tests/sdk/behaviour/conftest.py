"""The SDK's behaviour suite: one set of tests, run against every transport.

Every test here talks to a real broker through the public client API (:class:`sdk.Producer`,
:class:`sdk.PushConsumer` and their asyncio twins) and looks at the broker's service only to
inspect outcomes (committed offsets, dead-letter queues). The broker comes from the ``harness``
fixture, parametrized over transports; today that is ``"in-process"`` (an
:class:`sdk.EmbeddedBroker`), remote mode adds its HTTP transports as more params of the same
fixture and the whole suite runs again.

A harness offers:

* ``broker_target``: what a client is given (``Producer(harness.broker_target)``);
* ``service``: the :class:`sdk.broker.service.BrokerService` behind it, for inspection;
* ``stop()``: the broker goes away (clients then see :class:`sdk.BrokerUnavailableError`);
* ``restart()``: stop, then serve the same directory again (committed state survives);
* ``hand_over()``: a context manager for tests with a child process; it yields the Python
  source of ``open_broker()`` for that child (see :class:`ChildBroker`), and serves the
  broker again on exit. In-process, the child must own the store (a store directory is
  locked by one process), so the harness closes its broker meanwhile.

Stores always use small geometry (1 MiB commitlog segments, small consume-queue and index
files) and a short, millisecond delay table (``delay_levels_ms``; override it in a test with
``@pytest.mark.parametrize("delay_levels_ms", [...])``).
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import pytest

from sdk import (
    AsyncPushConsumer,
    BrokerOptions,
    ConsumeFrom,
    EmbeddedBroker,
    Producer,
    PushConsumer,
)
from sdk.broker.service import BrokerService
from sdk.message import ReceivedMessage

TRANSPORTS = ["in-process"]

GEOMETRY: dict[str, Any] = {
    "commitlog_file_size": 1 << 20,
    "cq_entries_per_file": 1024,
    "index_slots": 1024,
    "index_entries": 4096,
}

DELAY_LEVELS_MS: tuple[int, ...] = (300, 600) + (50,) * 16
"""Levels 1 and 2 (300 and 600 ms) for delay-timing tests; levels 3-18 (where retries start:
RocketMQ re-delivers the n-th failure at level 3 + n) 50 ms, so the retry path is quick."""

WAIT_S = 10.0


def wait_until(
    predicate: Callable[[], object], timeout_s: float = WAIT_S, interval_s: float = 0.01
) -> None:
    """Poll ``predicate`` until it is true; fail the test after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while True:
        if predicate():
            return
        if time.monotonic() >= deadline:
            pytest.fail(f"condition not met within {timeout_s} s: {predicate!r}")
        time.sleep(interval_s)


async def async_wait_until(
    predicate: Callable[[], object], timeout_s: float = WAIT_S, interval_s: float = 0.01
) -> None:
    """:func:`wait_until` for coroutines (sleeps on the loop)."""
    import asyncio

    deadline = time.monotonic() + timeout_s
    while True:
        if predicate():
            return
        if time.monotonic() >= deadline:
            pytest.fail(f"condition not met within {timeout_s} s: {predicate!r}")
        await asyncio.sleep(interval_s)


def now_ms() -> int:
    """Wall-clock ms, the clock the broker stamps messages and schedules delays with."""
    return time.time_ns() // 1_000_000


@dataclass
class Delivery:
    """One listener call's view of one message, with the time it arrived."""

    message: ReceivedMessage
    thread: str
    at_ms: int


@dataclass
class Recorder:
    """Thread-safe record of what a listener saw."""

    deliveries: list[Delivery] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def record(self, messages: list[ReceivedMessage]) -> None:
        at = now_ms()
        name = threading.current_thread().name
        with self.lock:
            self.deliveries.extend(Delivery(m, name, at) for m in messages)

    def messages(self) -> list[ReceivedMessage]:
        with self.lock:
            return [d.message for d in self.deliveries]

    def bodies(self) -> list[bytes]:
        return [m.body for m in self.messages()]

    def count(self) -> int:
        with self.lock:
            return len(self.deliveries)

    def of(self, body: bytes) -> list[Delivery]:
        with self.lock:
            return [d for d in self.deliveries if d.message.body == body]

    def listener(self, messages: list[ReceivedMessage]) -> None:
        """A listener that records and succeeds."""
        self.record(messages)


class Harness(Protocol):
    """What every transport's harness offers (see the module docstring)."""

    name: str

    @property
    def broker_target(self) -> object: ...

    @property
    def service(self) -> BrokerService: ...

    def stop(self) -> None: ...

    def restart(self) -> None: ...

    def hand_over(self) -> contextlib.AbstractContextManager[ChildBroker]: ...

    def close(self) -> None: ...


@dataclass(frozen=True)
class ChildBroker:
    """How a child process reaches the harness's broker.

    ``source`` is Python source defining ``open_broker()``, which answers
    ``(target, flush_offsets, close)``: what to hand the clients, a callable that makes the
    broker's committed offsets durable now, and a callable that releases the broker.
    """

    source: str


class InProcessHarness:
    """An :class:`EmbeddedBroker` over ``root`` in this process."""

    name = "in-process"

    def __init__(self, root: Path, delay_levels_ms: tuple[int, ...]) -> None:
        self.root = root
        self.delay_levels_ms = tuple(delay_levels_ms)
        self._broker: EmbeddedBroker | None = None
        self._open()

    def _options(self) -> BrokerOptions:
        return BrokerOptions(delay_levels=list(self.delay_levels_ms))

    def _open(self) -> None:
        self._broker = EmbeddedBroker(self.root, options=self._options(), **GEOMETRY)

    @property
    def broker(self) -> EmbeddedBroker:
        if self._broker is None:
            raise RuntimeError("the broker is not running")
        return self._broker

    @property
    def broker_target(self) -> object:
        return self.broker

    @property
    def service(self) -> BrokerService:
        return self.broker.service

    def stop(self) -> None:
        """Close the broker; clients still holding it see it unavailable."""
        if self._broker is not None:
            self._broker.close()

    def restart(self) -> None:
        self.stop()
        self._open()

    @contextlib.contextmanager
    def hand_over(self) -> Iterator[ChildBroker]:
        self.stop()
        self._broker = None
        source = CHILD_SOURCE.format(
            root=str(self.root), delays=list(self.delay_levels_ms), geometry=GEOMETRY
        )
        try:
            yield ChildBroker(source)
        finally:
            self._open()

    def close(self) -> None:
        if self._broker is not None:
            self._broker.close()
            self._broker = None


CHILD_SOURCE = """
from sdk import BrokerOptions, EmbeddedBroker


def open_broker():
    options = BrokerOptions(delay_levels={delays!r}, offset_persist_interval_s=0.1)
    broker = EmbeddedBroker({root!r}, options=options, **{geometry!r})
    return broker, broker.service.offsets.persist, broker.close
"""


@pytest.fixture
def delay_levels_ms() -> tuple[int, ...]:
    return DELAY_LEVELS_MS


@pytest.fixture(params=TRANSPORTS)
def harness(
    request: pytest.FixtureRequest, tmp_path: Path, delay_levels_ms: tuple[int, ...]
) -> Iterator[Harness]:
    if request.param != "in-process":  # pragma: no cover - remote mode adds its transports here
        raise NotImplementedError(request.param)
    built = InProcessHarness(tmp_path / "broker", delay_levels_ms)
    try:
        yield built
    finally:
        built.close()


@pytest.fixture
def producer(harness: Harness) -> Iterator[Producer]:
    with Producer(harness.broker_target) as made:
        yield made


ConsumerFactory = Callable[..., PushConsumer]


@pytest.fixture
def start_consumer(harness: Harness) -> Iterator[ConsumerFactory]:
    """Start a :class:`PushConsumer` on the harness's broker (``consume_from`` FIRST_OFFSET
    unless given); every consumer started here is closed before the broker."""
    started: list[PushConsumer] = []

    def factory(
        group: str,
        subscription: Mapping[str, str | None],
        listener: Callable[[list[ReceivedMessage]], Any],
        **settings: Any,
    ) -> PushConsumer:
        settings.setdefault("consume_from", ConsumeFrom.FIRST_OFFSET)
        consumer = PushConsumer(harness.broker_target, group, subscription, listener, **settings)
        started.append(consumer)
        consumer.start()
        return consumer

    yield factory
    for consumer in reversed(started):
        consumer.close()


def assignment(consumer: PushConsumer | AsyncPushConsumer) -> list[Any]:
    """The consumer's queues, read while its pull thread may be rebalancing."""
    return consumer.assignment()


def committed_offsets(harness: Harness, group: str, topic: str) -> dict[int, int | None]:
    """The broker's committed offset of each queue of ``topic`` for ``group``."""
    service = harness.service
    return {q: service.query_offset(group, topic, q) for q in range(service.queue_count(topic))}
