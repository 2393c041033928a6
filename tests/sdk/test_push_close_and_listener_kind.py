"""Push consumers: close() hands queues over only after the running listener calls finished
and were committed (on the pool and inline on the pull thread), within ``release_timeout_s``;
a listener of the wrong kind is refused when the consumer is built."""

from __future__ import annotations

import asyncio
import functools
import threading
import time
from pathlib import Path

import pytest

from offsetstore import MessageQueue
from sdk import (
    AsyncPushConsumer,
    BrokerOptions,
    ConsumeFrom,
    ConsumeResult,
    EmbeddedBroker,
    Message,
    Producer,
    PushConsumer,
)

from .waiting import wait_until


@pytest.fixture
def broker(tmp_path: Path):
    options = BrokerOptions(delay_levels=[30] * 18, schedule_poll_interval_s=0.01)
    with EmbeddedBroker(tmp_path / "b", options=options, commitlog_file_size=1 << 20) as b:
        yield b


def orders(consumer: PushConsumer | AsyncPushConsumer) -> set[MessageQueue]:
    return {q for q in consumer.assignment() if q.topic == "orders"}


class Blocking:
    """c1's listener: quick, except for the first call that runs where ``block_on`` wants
    ("pull": on the pull thread, inline; "pool": on a listener thread), which blocks for
    ``hold_s`` (or until ``release`` is set)."""

    def __init__(self, block_on: str, hold_s: float, slow_s: float = 0.0) -> None:
        self.block_on = block_on
        self.hold_s = hold_s
        self.slow_s = slow_s  # a pool listener must stay slower than the inline threshold
        self.release = threading.Event()
        self.started = threading.Event()
        self.blocked_body: bytes | None = None
        self.blocked_offset = -1
        self.finished_at: float | None = None
        self.seen: list[bytes] = []

    def __call__(self, messages):
        on_pull = threading.current_thread().name.startswith("quiver-pull")
        wanted = on_pull if self.block_on == "pull" else not on_pull
        if self.slow_s:
            time.sleep(self.slow_s)
        for message in messages:
            self.seen.append(message.body)
            if wanted and not self.started.is_set():
                self.blocked_body, self.blocked_offset = message.body, message.queue_offset
                self.started.set()
                self.release.wait(self.hold_s)
                self.finished_at = time.monotonic()
        return ConsumeResult.SUCCESS


class Recorder:
    def __init__(self) -> None:
        self.got: list[tuple[bytes, float]] = []

    def __call__(self, messages):
        now = time.monotonic()
        self.got.extend((m.body, now) for m in messages)

    def bodies(self) -> list[bytes]:
        return [body for body, _ in self.got]


def _block_one_call(producer: Producer, queue: MessageQueue, listener: Blocking) -> None:
    """Send messages to ``queue`` one at a time (each consumed before the next) until one
    listener call blocks where the listener wants it."""
    for i in range(400):
        body = b"m%d" % i
        producer.send(Message("orders", body), queue_id=queue.queue_id)
        wait_until(lambda body=body: body in listener.seen)
        if listener.started.is_set():
            return
    raise AssertionError(f"no listener call ran on the {listener.block_on} thread")


def _two_members(broker, c1_listener, c2_listener, **settings):
    c1 = PushConsumer(broker, "g", {"orders": None}, c1_listener, instance_name="c1", **settings)
    c1.start()
    c2 = PushConsumer(broker, "g", {"orders": None}, c2_listener, instance_name="c2", **settings)
    c2.start()
    wait_until(lambda: len(orders(c1)) == 2 and len(orders(c2)) == 2)
    return c1, c2


@pytest.mark.parametrize("block_on", ["pull", "pool"])
def test_close_waits_for_the_running_listener_call_and_commits_it(broker, block_on):
    """c1 is closed while a listener call runs, inline on its pull thread (a warmed-up quick
    listener) or on its pool: c2 gets c1's queues only after that call finished and its offset
    was committed, so c2 never receives that message."""
    c1_listener = Blocking(block_on, hold_s=1.5, slow_s=0 if block_on == "pull" else 0.003)
    c2_listener = Recorder()
    c1, c2 = _two_members(broker, c1_listener, c2_listener)
    try:
        queue = min(orders(c1))
        with Producer(broker) as producer:
            _block_one_call(producer, queue, c1_listener)
            c1.close()  # while the listener call runs
            closed_at = time.monotonic()
            committed = broker.service.query_offset("g", "orders", queue.queue_id)
            wait_until(lambda: queue in c2.assignment())
            producer.send(Message("orders", b"after"), queue_id=queue.queue_id)
            wait_until(lambda: b"after" in c2_listener.bodies())  # c2 consumes the queue now
        finished_at = c1_listener.finished_at
        assert finished_at is not None and finished_at <= closed_at  # close() waited for it
        overlapping = [
            t for body, t in c2_listener.got if body == c1_listener.blocked_body and t < finished_at
        ]
        assert overlapping == [], "c2 consumed the message while c1's listener still ran it"
        assert c1_listener.blocked_body not in c2_listener.bodies(), "delivered again"
        # what the call finished was committed before the queue changed hands
        assert committed is not None and committed > c1_listener.blocked_offset
    finally:
        c1_listener.release.set()
        c1.close()
        c2.close()


@pytest.mark.parametrize("block_on", ["pull", "pool"])
def test_close_is_bounded_by_the_release_timeout(broker, block_on):
    """A listener call stuck past ``release_timeout_s`` does not hold close() up: c1 leaves
    the group without committing it, and the next owner consumes the message again."""
    c1_listener = Blocking(block_on, hold_s=8.0, slow_s=0 if block_on == "pull" else 0.003)
    c2_listener = Recorder()
    c1, c2 = _two_members(broker, c1_listener, c2_listener, release_timeout_s=0.5)
    try:
        queue = min(orders(c1))
        with Producer(broker) as producer:
            _block_one_call(producer, queue, c1_listener)
        started = time.monotonic()
        c1.close()
        assert time.monotonic() - started < 3.0
        assert c1_listener.finished_at is None  # still stuck: nothing of it was committed
        wait_until(lambda: c1_listener.blocked_body in c2_listener.bodies())
    finally:
        c1_listener.release.set()
        c1.close()
        c2.close()


def test_async_close_is_bounded_and_commits_nothing_it_cancels(broker):
    """AsyncPushConsumer.close() waits for running listener tasks at most
    ``release_timeout_s``; a task still running then is cancelled and its message is
    consumed again by the next consumer."""
    started = asyncio.Event()
    got: list[bytes] = []

    async def stuck(messages):
        started.set()
        await asyncio.sleep(6)

    async def records(messages):
        got.extend(m.body for m in messages)

    async def scenario() -> float:
        consumer = AsyncPushConsumer(
            broker, "g", {"orders": None}, stuck,
            consume_from=ConsumeFrom.FIRST_OFFSET, release_timeout_s=0.3,
        )  # fmt: skip
        await consumer.start()
        with Producer(broker) as producer:
            producer.send(Message("orders", b"stuck"), queue_id=0)
        await asyncio.wait_for(started.wait(), 10)
        began = time.monotonic()
        await consumer.close()
        took = time.monotonic() - began
        async with AsyncPushConsumer(
            broker, "g", {"orders": None}, records, consume_from=ConsumeFrom.FIRST_OFFSET
        ):
            deadline = time.monotonic() + 10
            while b"stuck" not in got and time.monotonic() < deadline:
                await asyncio.sleep(0.01)
        return took

    took = asyncio.run(scenario())
    assert took < 3.0
    assert got == [b"stuck"]


def test_async_close_waits_for_a_running_listener_task_and_commits_it(broker):
    finished: list[float] = []
    started = asyncio.Event()

    async def slow(messages):
        started.set()
        await asyncio.sleep(0.5)
        finished.append(time.monotonic())

    async def scenario() -> None:
        consumer = AsyncPushConsumer(
            broker, "g", {"orders": None}, slow, consume_from=ConsumeFrom.FIRST_OFFSET
        )
        await consumer.start()
        with Producer(broker) as producer:
            producer.send(Message("orders", b"slow"), queue_id=0)
        await asyncio.wait_for(started.wait(), 10)
        await consumer.close()

    asyncio.run(scenario())
    assert len(finished) == 1
    assert broker.service.query_offset("g", "orders", 0) == 1


def lease_keeper_of(group: str) -> asyncio.Task[None]:
    """The async consumer's lease keeper: a task of the running loop, not a thread."""
    (keeper,) = [t for t in asyncio.all_tasks() if t.get_name() == f"quiver-leases-{group}"]
    return keeper


def pull_task_of(group: str) -> asyncio.Task[None]:
    (task,) = [t for t in asyncio.all_tasks() if t.get_name() == f"quiver-pull-{group}"]
    return task


async def stopped(keeper: asyncio.Task[None]) -> bool:
    """Whether ``keeper`` ends (within a generous bound)."""
    await asyncio.wait({keeper}, timeout=5)
    return keeper.done()


def test_async_close_stops_the_lease_keeper_even_when_the_shutdown_fails(broker):
    """Persisting the offsets at close fails: close raises that failure, and the lease keeper
    task is stopped all the same (it would otherwise renew the closed core's leases
    forever)."""

    async def quick(messages):
        return None

    def failing_persist(queues, drop_others=False):
        raise OSError("disk full")

    async def scenario() -> None:
        consumer = AsyncPushConsumer(
            broker, "g-failing", {"orders": None}, quick, lease_renew_interval_s=0.02
        )
        await consumer.start()
        keeper = lease_keeper_of("g-failing")
        consumer.core.offsets.commits_due = failing_persist  # type: ignore[method-assign]
        with pytest.raises(OSError, match="disk full"):
            await consumer.close()
        assert await stopped(keeper)

    asyncio.run(scenario())


def test_a_cancelled_async_close_still_leaves_the_group_and_stops_the_lease_keeper(broker):
    """A close cancelled while it waits for a stuck listener task cancels that task, leaves
    the group and stops the lease keeper task before the cancellation reaches the caller."""
    started = asyncio.Event()
    cancelled = asyncio.Event()

    async def stuck(messages):
        started.set()
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            cancelled.set()
            raise

    async def scenario() -> None:
        consumer = AsyncPushConsumer(
            broker, "g-cancel", {"orders": None}, stuck,
            consume_from=ConsumeFrom.FIRST_OFFSET, release_timeout_s=60,
            lease_renew_interval_s=0.02,
        )  # fmt: skip
        await consumer.start()
        keeper = lease_keeper_of("g-cancel")
        with Producer(broker) as producer:
            producer.send(Message("orders", b"stuck"), queue_id=0)
        await asyncio.wait_for(started.wait(), 10)
        pulling = pull_task_of("g-cancel")
        closing = asyncio.create_task(consumer.close())
        await asyncio.wait({pulling}, timeout=10)  # close's first step: pulling stopped
        await asyncio.sleep(0)  # one more turn: close is now waiting for the listener task
        assert pulling.done() and not closing.done()  # (for up to its 60 s)
        closing.cancel()
        with pytest.raises(asyncio.CancelledError):
            await closing
        assert cancelled.is_set()
        assert await stopped(keeper)

    asyncio.run(scenario())
    assert broker.service.group_view("g-cancel").members == ()


# -- listener kinds --------------------------------------------------------------------------
def plain(messages):
    return None


async def coroutine(messages):
    return None


class SyncCallable:
    def __call__(self, messages):
        return None

    def method(self, messages):
        return None


class AsyncCallable:
    async def __call__(self, messages):
        return None

    async def method(self, messages):
        return None


@pytest.mark.parametrize(
    ("listener", "match"),
    [
        (None, "callable"),
        ("not callable", "callable"),
        (coroutine, "async def"),
        (functools.partial(coroutine), "async def"),
        (AsyncCallable(), "async def"),
        (AsyncCallable().method, "async def"),
        (functools.partial(AsyncCallable()), "async def"),
    ],
    ids=["none", "string", "async-def", "partial-async", "async-call", "async-method", "p-call"],
)
def test_push_consumer_refuses_a_listener_it_cannot_run(broker, listener, match):
    with pytest.raises(TypeError, match=match):
        PushConsumer(broker, "g", {"orders": None}, listener)


@pytest.mark.parametrize(
    ("listener", "match"),
    [
        (None, "callable"),
        ("not callable", "callable"),
        (plain, "async def"),
        (lambda messages: None, "async def"),
        (functools.partial(plain), "async def"),
        (SyncCallable(), "async def"),
        (SyncCallable().method, "async def"),
        (SyncCallable, "async def"),
        ([].extend, "async def"),
    ],
    ids=["none", "string", "plain", "lambda", "partial", "call", "method", "class", "builtin"],
)
def test_async_push_consumer_refuses_a_listener_it_cannot_run(broker, listener, match):
    with pytest.raises(TypeError, match=match):
        AsyncPushConsumer(broker, "g", {"orders": None}, listener)


@pytest.mark.parametrize(
    "listener",
    [plain, functools.partial(plain), SyncCallable(), SyncCallable().method, [].extend],
    ids=["plain", "partial", "call", "method", "builtin"],
)
def test_push_consumer_takes_any_plain_callable(broker, listener):
    PushConsumer(broker, "g", {"orders": None}, listener).close()


@pytest.mark.parametrize(
    "listener",
    [
        coroutine,
        functools.partial(coroutine),
        AsyncCallable(),
        AsyncCallable().method,
        functools.partial(AsyncCallable()),
    ],
    ids=["async-def", "partial", "async-call", "async-method", "partial-call"],
)
def test_async_push_consumer_takes_coroutine_functions(broker, listener):
    asyncio.run(AsyncPushConsumer(broker, "g", {"orders": None}, listener).close())


def test_a_partial_of_a_coroutine_function_is_consumed_by_the_async_consumer(broker):
    got: list[tuple[str, bytes]] = []

    async def tagged(tag: str, messages):
        got.extend((tag, m.body) for m in messages)

    async def scenario() -> None:
        async with AsyncPushConsumer(
            broker, "g", {"orders": None}, functools.partial(tagged, "p"),
            consume_from=ConsumeFrom.FIRST_OFFSET,
        ):  # fmt: skip
            with Producer(broker) as producer:
                producer.send(Message("orders", b"x"), queue_id=0)
            deadline = time.monotonic() + 10
            while not got and time.monotonic() < deadline:
                await asyncio.sleep(0.01)

    asyncio.run(scenario())
    assert got == [("p", b"x")]
