"""The SDK's behaviour suite: one set of tests, run against every transport.

Every test here talks to a real broker through the public client API (:class:`sdk.Producer`,
:class:`sdk.PushConsumer` and their asyncio twins) and looks at the broker's service only to
inspect outcomes (committed offsets, dead-letter queues). The broker comes from the ``harness``
fixture, parametrized over transports: ``"in-process"`` (an :class:`sdk.EmbeddedBroker`) and
``"http"`` (a real broker server process on a loopback port, reached by every client over HTTP:
the blocking clients through httpx, the asyncio ones through aiohttp), so the whole suite runs
against both.

A harness offers:

* ``broker_target``: what a client is given (``Producer(harness.broker_target)``);
* ``service``: the :class:`sdk.broker.service.BrokerService` behind it, for inspection (over
  HTTP: a view that asks the broker the same questions, and reads its store directory
  read-only);
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
    RemoteBroker,
)
from sdk.broker.service import BrokerService
from sdk.message import ReceivedMessage

TRANSPORTS = ["in-process", "http"]

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


class RemoteStoreView:
    """What tests read of a remote broker's store: its records (read-only, from the directory
    the broker process holds) and its topic configs (asked of the broker)."""

    def __init__(self, root: Path, transport: Any) -> None:
        self.root = root
        self._transport = transport

    def get_messages(self, *args: Any, **kwargs: Any) -> Any:
        from localstore import ReadOnlyStore

        with ReadOnlyStore(self.root) as store:
            return store.get_messages(*args, **kwargs)

    @property
    def topics(self) -> dict[str, Any]:
        return {info.name: info for info in self._transport.list_topics()}


class RemoteScheduleView:
    """A remote broker's delay schedule as tests read it: its delay table, and its progress
    from ``config/delayOffset.json`` (written after every round that delivered something)."""

    def __init__(self, root: Path, delays: tuple[int, ...]) -> None:
        self.root = root
        self.delays = delays

    @property
    def offsets(self) -> dict[int, int]:
        from sdk.broker.schedule import DELAY_OFFSET_FILE, parse_delay_offsets

        try:
            return parse_delay_offsets((self.root / DELAY_OFFSET_FILE).read_bytes())[0]
        except FileNotFoundError:
            return {}


class RemoteServiceView:
    """The questions tests ask a broker service, asked of a broker process over HTTP."""

    def __init__(self, root: Path, transport: Any, delays: tuple[int, ...]) -> None:
        self._transport = transport
        self.store = RemoteStoreView(root, transport)
        self.schedule = RemoteScheduleView(root, delays)

    def query_offset(self, group: str, topic: str, queue_id: int) -> int | None:
        transport = self._transport
        return transport.query_offset(transport.broker_name, group, topic, queue_id)

    def max_offset(self, topic: str, queue_id: int) -> int:
        return self._transport.max_offset(topic, queue_id)

    def queue_count(self, topic: str) -> int:
        return self._transport.queue_count(topic)

    def group_view(self, group: str) -> Any:
        return self._transport.group_view(group)


class HttpHarness:
    """A broker server process over ``root`` on a loopback port; clients get a
    :class:`sdk.RemoteBroker` whose calls give up 2 s after the broker went away (not the
    default 30 s), so the tests of a stopped broker stay short."""

    name = "http"

    def __init__(self, root: Path, delay_levels_ms: tuple[int, ...]) -> None:
        from tests.sdk.remote.broker_process import BrokerProcess

        self.root = root
        self.delay_levels_ms = tuple(delay_levels_ms)
        self._make = BrokerProcess
        self._process: Any = None
        self._port = 0
        self._open()
        self._view = RemoteServiceView(
            root, RemoteBroker(self._process.url).transport(), self.delay_levels_ms
        )

    def _open(self) -> None:
        self._process = self._make(
            self.root,
            port=self._port,
            geometry=GEOMETRY,
            delay_levels=list(self.delay_levels_ms),
        )
        self._port = self._process.port

    @property
    def broker_target(self) -> object:
        return RemoteBroker(self._process.url, retry_deadline_s=2.0)

    @property
    def service(self) -> Any:
        return self._view

    def stop(self) -> None:
        """SIGTERM: a clean stop; clients then find nothing listening."""
        if self._process is not None:
            assert self._process.stop() == 0, self._process.log()

    def restart(self) -> None:
        self.stop()
        self._open()  # the same port: clients made before reach it again

    @contextlib.contextmanager
    def hand_over(self) -> Iterator[ChildBroker]:
        """The child reaches the same broker by URL; afterwards the broker is restarted, as
        the in-process harness reopens its own, so that a member the child left behind (a
        killed consumer) does not hold queues until it expires."""
        try:
            yield ChildBroker(REMOTE_CHILD_SOURCE.format(url=self._process.url))
        finally:
            self.restart()

    def close(self) -> None:
        if self._process is not None:
            self.stop()
            self._process = None
        self._view._transport.close()


REMOTE_CHILD_SOURCE = """
def open_broker():
    return {url!r}, lambda: None, lambda: None
"""


@pytest.fixture
def delay_levels_ms() -> tuple[int, ...]:
    return DELAY_LEVELS_MS


@pytest.fixture(params=TRANSPORTS)
def harness(
    request: pytest.FixtureRequest, tmp_path: Path, delay_levels_ms: tuple[int, ...]
) -> Iterator[Harness]:
    built: InProcessHarness | HttpHarness
    if request.param == "http":
        built = HttpHarness(tmp_path / "broker", delay_levels_ms)
    else:
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
