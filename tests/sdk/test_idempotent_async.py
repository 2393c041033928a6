"""``idempotent()`` around an ``async def`` listener: the wrapper stays awaitable and dedupes as the
synchronous one does, through a real :class:`AsyncPushConsumer` on a real broker, with the
in-memory store (called inline on the event loop) and the SQLite one (called in a worker
thread)."""

from __future__ import annotations

import asyncio
import inspect
import threading
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from sdk import (
    AsyncProducer,
    AsyncPushConsumer,
    BrokerOptions,
    ConsumeFrom,
    ConsumeResult,
    EmbeddedBroker,
    Message,
)
from sdk.idempotency import (
    ClaimStatus,
    DedupState,
    DedupStore,
    MemoryDedupStore,
    SqliteDedupStore,
    first_key,
    idempotent,
)
from sdk.message import ReceivedMessage

TOPIC = "orders"


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[EmbeddedBroker]:
    # Short delay levels: a message answered RECONSUME_LATER comes back within ~50 ms.
    options = BrokerOptions(delay_levels=[50] * 18, schedule_poll_interval_s=0.01)
    with EmbeddedBroker(tmp_path / "b", options=options, commitlog_file_size=1 << 20) as b:
        yield b


@pytest.fixture(params=["memory", "sqlite"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[DedupStore]:
    if request.param == "memory":
        yield MemoryDedupStore()
        return
    with SqliteDedupStore(tmp_path / "dedup.db") as sqlite_store:
        yield sqlite_store


def consumed(store: DedupStore, key: str) -> bool:
    record = store.get(key)
    return record is not None and record.state is DedupState.CONSUMED


async def wait_for(predicate: Callable[[], bool], timeout_s: float = 10.0) -> None:
    """Yield to the loop every 10 ms until ``predicate`` holds; fail the test past ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, f"condition not reached within {timeout_s} s"
        await asyncio.sleep(0.01)


def consume(
    broker: EmbeddedBroker,
    group: str,
    listener: Callable[[list[ReceivedMessage]], Awaitable[ConsumeResult]],
    scenario: Callable[[AsyncProducer], Awaitable[None]],
) -> None:
    """Run ``scenario`` with a producer while an AsyncPushConsumer of ``group`` runs
    ``listener``; the consumer is closed (running calls finished and committed) afterwards."""

    async def main() -> None:
        consumer = AsyncPushConsumer(
            broker, group, {TOPIC: None}, listener, consume_from=ConsumeFrom.FIRST_OFFSET
        )
        async with consumer, AsyncProducer(broker) as producer:
            await scenario(producer)

    asyncio.run(main())


def test_a_business_duplicate_is_skipped(broker: EmbeddedBroker, store: DedupStore) -> None:
    effects: list[bytes] = []
    skipped: list[ClaimStatus] = []
    answers: list[ConsumeResult] = []

    async def notify(messages: list[ReceivedMessage]) -> None:
        await asyncio.sleep(0)  # a real await inside the listener
        effects.extend(m.body for m in messages)

    def on_skip(message: ReceivedMessage, status: ClaimStatus) -> None:
        skipped.append(status)

    once = idempotent(notify, store, key=first_key, namespace="mailer:", on_skip=on_skip)
    assert inspect.iscoroutinefunction(once)

    async def listener(messages: list[ReceivedMessage]) -> ConsumeResult:
        answer = await once(messages)
        answers.append(answer)
        return answer

    async def scenario(producer: AsyncProducer) -> None:
        await producer.send(Message(TOPIC, b"first", keys=["order-7"]), queue_id=0)
        await wait_for(lambda: len(answers) >= 1)
        assert consumed(store, "mailer:order-7")
        # the same order again: the live CONSUMED record skips it
        await producer.send(Message(TOPIC, b"again", keys=["order-7"]), queue_id=0)
        await wait_for(lambda: len(answers) >= 2)

    consume(broker, "mailer", listener, scenario)
    assert effects == [b"first"]
    assert skipped == [ClaimStatus.DUPLICATE]
    assert answers == [ConsumeResult.SUCCESS, ConsumeResult.SUCCESS]
    assert broker.service.query_offset("mailer", TOPIC, 0) == 2


FAILURES: dict[str, Callable[[], object]] = {
    "RECONSUME_LATER": lambda: ConsumeResult.RECONSUME_LATER,
    "True": lambda: True,  # not a ConsumeResult: logged, treated as failure
}


def _raise() -> object:
    raise RuntimeError("the mail server is away")


FAILURES["raises"] = _raise


@pytest.mark.parametrize("failure", sorted(FAILURES))
def test_a_failed_call_releases_the_claim_and_the_retry_consumes_it(
    broker: EmbeddedBroker, store: DedupStore, failure: str
) -> None:
    deliveries: list[tuple[str | None, int]] = []
    effects: list[bytes] = []

    async def notify(messages: list[ReceivedMessage]) -> object:
        deliveries.extend((m.msg_id, m.reconsume_times) for m in messages)
        if messages[0].reconsume_times == 0:
            return FAILURES[failure]()
        effects.extend(m.body for m in messages)
        return None  # success

    wrapped = idempotent(notify, store)
    sent: list[str] = []

    async def scenario(producer: AsyncProducer) -> None:
        receipt = await producer.send(Message(TOPIC, b"mail"), queue_id=0)
        sent.append(receipt.msg_id)
        await wait_for(lambda: len(effects) >= 1)

    consume(broker, "mailer", wrapped, scenario)
    assert deliveries == [(sent[0], 0), (sent[0], 1)]
    assert effects == [b"mail"]
    assert consumed(store, sent[0])


class _Msg:
    """A minimal received message."""

    def __init__(self, msg_id: str) -> None:
        self.msg_id = msg_id
        self.keys: list[str] = []
        self.topic = TOPIC
        self.properties: dict[str, str] = {}


def note_threads(store: DedupStore) -> list[tuple[str, int]]:
    """Make ``store`` note the name and thread of each claim, mark_consumed and release call."""
    threads: list[tuple[str, int]] = []
    for name in ("claim", "mark_consumed", "release"):
        method = getattr(store, name)

        def call(*args: Any, _name: str = name, _method: Any = method, **kwargs: Any) -> Any:
            threads.append((_name, threading.get_ident()))
            return _method(*args, **kwargs)

        setattr(store, name, call)
    return threads


def test_memory_store_calls_run_on_the_loop_and_sqlite_ones_in_a_worker_thread(
    store: DedupStore,
) -> None:
    threads = note_threads(store)

    async def listener(messages: list[ReceivedMessage]) -> None:
        pass

    wrapped = idempotent(listener, store)

    async def main() -> int:
        assert await wrapped([_Msg("m1")]) is ConsumeResult.SUCCESS  # type: ignore[list-item]
        return threading.get_ident()

    loop_thread = asyncio.run(main())
    assert [name for name, _ in threads] == ["claim", "mark_consumed"]
    on_loop = [thread == loop_thread for _, thread in threads]
    assert on_loop == ([True, True] if isinstance(store, MemoryDedupStore) else [False, False])


def test_a_cancelled_call_releases_its_claim(store: DedupStore) -> None:
    started = asyncio.Event()

    async def stuck(messages: list[ReceivedMessage]) -> None:
        started.set()
        await asyncio.Event().wait()  # never set: only cancellation ends it

    wrapped = idempotent(stuck, store)

    async def main() -> None:
        task = asyncio.create_task(wrapped([_Msg("m1")]))  # type: ignore[list-item]
        await started.wait()
        record = store.get("m1")
        assert record is not None and record.state is DedupState.CONSUMING
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(main())
    assert store.get("m1") is None  # released: the redelivery can claim it
