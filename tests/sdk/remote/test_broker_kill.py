"""A broker process killed with SIGKILL under load and restarted on the same port: every
message a producer was answered for is stored, and exactly once.

A producer thread sends batches over the HTTP transport, its retry deadline long enough to
cover the restart, and records what the broker acknowledged. The broker is killed mid-load;
the sends caught by the kill (stored but not answered, or not stored) and those made while it
is down are retried by the transport with their first stamp. The restarted broker recovers
its store (the abort marker was left behind) and rebuilds its idempotent-produce windows from
the commitlog's tail, so a retried batch it had stored is answered, not stored again. Reading
the topic from the first offset then finds every acknowledged message exactly once, and
nothing else. A process kill loses nothing under either flush mode: the page cache survives
it (only a machine crash can lose what async flush had not written).
"""

from __future__ import annotations

import asyncio
import itertools
import threading
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest

from sdk import Admin, AsyncProducer, ConsumeFrom, Message, Producer, PullConsumer
from sdk.transport.http_async import AsyncHttpTransport
from sdk.transport.http_sync import HttpTransport
from tests.sdk.remote.broker_process import SMALL_GEOMETRY, BrokerProcess
from tests.sdk.waiting import wait_until

TOPIC = "ledger"
QUEUES = 4
BATCH = 10
RETRY_DEADLINE_S = 60.0  # covers the restart: no acknowledged send is given up on
ABNORMAL_RECOVERY = "the abort marker was present"
WINDOWS_REBUILT = "rebuilt the idempotent-produce windows"


class Load:
    """Batches sent until :meth:`stop` by ``senders`` concurrent senders sharing one producer;
    ``acknowledged`` holds the bodies of every batch the broker answered, ``failure`` what
    ended the load early."""

    def __init__(self, senders: int) -> None:
        self.senders = senders
        self.acknowledged: list[str] = []
        self.failure: BaseException | None = None
        self.lock = threading.Lock()
        self.stopping = threading.Event()
        self._numbers = itertools.count()

    def count(self) -> int:
        with self.lock:
            return len(self.acknowledged)

    def next_batch(self) -> tuple[int, list[Message]]:
        """A batch no sender sent yet, and the queue it goes to."""
        with self.lock:
            number = next(self._numbers)
        return number % QUEUES, [Message(TOPIC, f"{number}-{i}".encode()) for i in range(BATCH)]

    def record(self, messages: list[Message]) -> None:
        with self.lock:
            self.acknowledged += [m.body.decode() for m in messages]

    def stop(self) -> None:
        self.stopping.set()


def run_sync(url: str, load: Load) -> None:
    """Blocking: ``load.senders`` threads share one :class:`Producer`."""

    def send_until_stopped(producer: Producer) -> None:
        try:
            while not load.stopping.is_set():
                queue_id, messages = load.next_batch()
                producer.send_batch(messages, queue_id=queue_id)
                load.record(messages)
        except BaseException as exc:  # the test reports it
            load.failure = exc

    transport = HttpTransport(url, retry_deadline_s=RETRY_DEADLINE_S)
    try:
        with Producer(transport) as producer:
            senders = [
                threading.Thread(target=send_until_stopped, args=(producer,))
                for _ in range(load.senders)
            ]
            for sender in senders:
                sender.start()
            for sender in senders:
                sender.join()
    finally:
        transport.close()


def run_async(url: str, load: Load) -> None:
    """asyncio: ``load.senders`` tasks share one :class:`AsyncProducer`."""

    async def send_until_stopped(producer: AsyncProducer) -> None:
        while not load.stopping.is_set():
            queue_id, messages = load.next_batch()
            await producer.send_batch(messages, queue_id=queue_id)
            load.record(messages)

    async def main() -> None:
        transport = AsyncHttpTransport(url, retry_deadline_s=RETRY_DEADLINE_S)
        try:
            async with AsyncProducer(transport) as producer:
                await asyncio.gather(*(send_until_stopped(producer) for _ in range(load.senders)))
        finally:
            await transport.close()

    try:
        asyncio.run(main())
    except BaseException as exc:  # the test reports it
        load.failure = exc


def read_all(url: str, expected: int) -> list[str]:
    """Every body of the topic from its first offset, read until the group has no lag."""
    got: list[str] = []
    with (
        PullConsumer(url, "auditors", consume_from=ConsumeFrom.FIRST_OFFSET) as consumer,
        Admin(url) as admin,
    ):
        consumer.subscribe([TOPIC])

        def caught_up() -> bool:
            got.extend(m.body.decode() for m in consumer.poll(0.2))
            consumer.commit()
            return len(got) >= expected and sum(q.lag for q in admin.lag("auditors", TOPIC)) == 0

        wait_until(caught_up, timeout_s=30)
    return got


@pytest.fixture
def data(tmp_path: Path) -> Path:
    return tmp_path / "data"


KILLS = [
    pytest.param(run_sync, "async", "mid-send", id="sync-producer-async-flush-mid-send"),
    pytest.param(run_sync, "sync", "mid-send", id="sync-producer-sync-flush-mid-send"),
    pytest.param(run_async, "async", "mid-send", id="asyncio-producer-async-flush-mid-send"),
    pytest.param(run_async, "sync", "mid-send", id="asyncio-producer-sync-flush-mid-send"),
    pytest.param(run_sync, "async", "outside", id="sync-producer-async-flush-any-time"),
    pytest.param(run_async, "sync", "outside", id="asyncio-producer-sync-flush-any-time"),
]
"""Where the kill lands: "mid-send", the broker kills itself right after storing a batch and
before answering it (its producer retries a batch that is stored: the case idempotence is for);
"outside", the test kills it whenever the load reached a count, with several senders in
flight."""
SENDS_BEFORE_KILL = 20


@pytest.mark.integration
@pytest.mark.slow
@pytest.mark.parametrize(("producer", "flush_mode", "kill"), KILLS)
def test_broker_killed_under_load_loses_and_doubles_nothing_acknowledged(
    data: Path, producer: Callable[[str, Load], None], flush_mode: str, kill: str
) -> None:
    geometry = {**SMALL_GEOMETRY, "flush_mode": flush_mode}
    first = BrokerProcess(
        data, geometry=geometry, die_after_sends=SENDS_BEFORE_KILL if kill == "mid-send" else None
    )
    with Admin(first.url) as admin:
        admin.create_topic(TOPIC, QUEUES)
    load = Load(senders=1 if kill == "mid-send" else 4)
    sender = threading.Thread(target=producer, args=(first.url, load), name="load")
    sender.start()
    brokers = [first]
    try:
        if kill == "mid-send":
            wait_until(lambda: first.process.poll() is not None, timeout_s=30)
            first.kill()  # reaps it
            assert load.count() == (SENDS_BEFORE_KILL - 1) * BATCH  # the last one unanswered
        else:
            wait_until(
                lambda: load.count() >= SENDS_BEFORE_KILL * BATCH or load.failure is not None,
                timeout_s=30,
            )
            first.kill()
        at_kill = load.count()
        first_run_chars = len(first.log())
        brokers.append(BrokerProcess(data, geometry=geometry, port=first.port))
        restarted = brokers[-1]
        wait_until(
            lambda: load.count() >= at_kill + 20 * BATCH or load.failure is not None, timeout_s=60
        )
    finally:
        load.stop()
        sender.join(timeout=RETRY_DEADLINE_S + 10)
    try:
        assert not sender.is_alive()
        assert load.failure is None, repr(load.failure)
        assert first.process.returncode == -9
        log = restarted.log()[first_run_chars:]  # the restarted broker's lines
        assert ABNORMAL_RECOVERY in log, log
        assert WINDOWS_REBUILT in log, log

        stored = Counter(read_all(restarted.url, len(load.acknowledged)))
        twice = sorted(body for body, n in stored.items() if n > 1)
        assert not twice, f"stored twice: {twice[:10]} ({len(twice)} in all)"
        assert set(load.acknowledged) - set(stored) == set(), "acknowledged but lost"
        assert set(stored) == set(load.acknowledged)  # every send ended acknowledged
    finally:
        for broker in brokers:
            if broker.process.poll() is None:
                assert broker.stop() == 0, broker.log()


@pytest.mark.integration
def test_a_broker_restarted_on_its_port_serves_the_same_url(data: Path) -> None:
    first = BrokerProcess(data)
    first.kill()
    with BrokerProcess(data, port=first.port) as again:
        assert again.url == first.url
        with Admin(again.url) as admin:
            assert admin.list_topics() == []
