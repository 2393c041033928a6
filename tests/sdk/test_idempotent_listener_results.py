"""What an idempotent wrapper does with each listener answer, through a real broker and a real
:class:`sdk.PushConsumer`: ``None`` is ``SUCCESS`` (the README's listener contract), so its
writes commit and its keys are marked consumed; ``RECONSUME_LATER`` and answers that are not a
:class:`ConsumeResult` roll back and are delivered again; ``idempotent_in_transaction`` refuses
``async def`` listeners (``idempotent`` wraps them: see test_idempotent_async.py)."""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from sdk import (
    BrokerOptions,
    ConsumeFrom,
    ConsumeResult,
    EmbeddedBroker,
    Message,
    Producer,
    PushConsumer,
)
from sdk.idempotency import (
    ClaimStatus,
    DedupState,
    MemoryDedupStore,
    SqliteDedupStore,
    first_key,
    idempotent,
    idempotent_in_transaction,
)
from sdk.message import ReceivedMessage

from .waiting import wait_until

TOPIC = "deposits"


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[EmbeddedBroker]:
    # Short delay levels: a message answered RECONSUME_LATER comes back within ~50 ms.
    options = BrokerOptions(delay_levels=[50] * 18, schedule_poll_interval_s=0.01)
    with EmbeddedBroker(tmp_path / "b", options=options, commitlog_file_size=1 << 20) as b:
        yield b


@pytest.fixture
def bank(tmp_path: Path) -> Iterator[SqliteDedupStore]:
    with SqliteDedupStore(tmp_path / "bank.db") as store:
        with store.transaction() as conn:
            conn.execute("CREATE TABLE accounts (name TEXT PRIMARY KEY, balance INT)")
            conn.execute("INSERT INTO accounts VALUES ('alice', 0)")
        yield store


def balance(store: SqliteDedupStore) -> int:
    with store.transaction() as conn:
        return int(conn.execute("SELECT balance FROM accounts").fetchone()[0])


def consumed(store: SqliteDedupStore, key: str) -> bool:
    record = store.get(key)
    return record is not None and record.state is DedupState.CONSUMED


def consumer(broker: EmbeddedBroker, group: str, listener: Callable[[Any], Any]) -> PushConsumer:
    return PushConsumer(
        broker, group, {TOPIC: None}, listener, consume_from=ConsumeFrom.FIRST_OFFSET
    )


class Deliveries:
    """Every message the push consumer handed over, with its reconsume count (thread-safe)."""

    def __init__(self) -> None:
        self.seen: list[tuple[str | None, int]] = []
        self.lock = threading.Lock()

    def record(self, messages: list[ReceivedMessage]) -> None:
        with self.lock:
            self.seen.extend((m.msg_id, m.reconsume_times) for m in messages)

    def count(self) -> int:
        with self.lock:
            return len(self.seen)


def test_none_in_transaction_commits_writes_and_marks_consumed(
    broker: EmbeddedBroker, bank: SqliteDedupStore
) -> None:
    deliveries = Deliveries()

    def credit(messages: list[ReceivedMessage], conn: sqlite3.Connection) -> None:
        deliveries.record(messages)
        for _ in messages:
            conn.execute("UPDATE accounts SET balance = balance + 1 WHERE name = 'alice'")
        # no return value: None counts as SUCCESS

    with consumer(broker, "bank", idempotent_in_transaction(credit, bank)):
        with Producer(broker) as producer:
            receipts = [producer.send(Message(TOPIC, b"+1"), queue_id=0) for _ in range(3)]
        wait_until(lambda: deliveries.count() >= 3)
    # closing waited for the running listeners and committed the offset

    assert balance(bank) == 3
    assert all(consumed(bank, receipt.msg_id) for receipt in receipts)
    assert broker.service.query_offset("bank", TOPIC, 0) == 3
    assert sorted(times for _, times in deliveries.seen) == [0, 0, 0]  # none re-delivered


def test_none_in_idempotent_marks_consumed_so_a_duplicate_is_skipped(
    broker: EmbeddedBroker,
) -> None:
    store = MemoryDedupStore()
    effects: list[bytes] = []
    skipped: list[ClaimStatus] = []
    answers: list[ConsumeResult] = []
    lock = threading.Lock()

    def notify(messages: list[ReceivedMessage]) -> None:
        with lock:
            effects.extend(m.body for m in messages)

    def on_skip(message: ReceivedMessage, status: ClaimStatus) -> None:
        with lock:
            skipped.append(status)

    once = idempotent(notify, store, key=first_key, namespace="mailer:", on_skip=on_skip)

    def listener(messages: list[ReceivedMessage]) -> ConsumeResult:
        answer = once(messages)
        with lock:
            answers.append(answer)
        return answer

    with consumer(broker, "mailer", listener), Producer(broker) as producer:
        producer.send(Message(TOPIC, b"first", keys=["order-7"]), queue_id=0)
        wait_until(lambda: len(answers) >= 1)
        record = store.get("mailer:order-7")
        assert record is not None and record.state is DedupState.CONSUMED
        # the same order again (a business duplicate): the live CONSUMED record skips it
        producer.send(Message(TOPIC, b"again", keys=["order-7"]), queue_id=0)
        wait_until(lambda: len(answers) >= 2)

    assert effects == [b"first"]
    assert skipped == [ClaimStatus.DUPLICATE]
    assert answers == [ConsumeResult.SUCCESS, ConsumeResult.SUCCESS]


def test_reconsume_later_rolls_back_and_the_message_is_redelivered(
    broker: EmbeddedBroker, bank: SqliteDedupStore
) -> None:
    deliveries = Deliveries()

    def credit(messages: list[ReceivedMessage], conn: sqlite3.Connection) -> ConsumeResult | None:
        deliveries.record(messages)
        conn.execute("UPDATE accounts SET balance = balance + 1 WHERE name = 'alice'")
        if any(m.reconsume_times == 0 for m in messages):
            return ConsumeResult.RECONSUME_LATER  # rolled back, delivered again
        return None  # the retry succeeds

    with consumer(broker, "bank", idempotent_in_transaction(credit, bank)):
        with Producer(broker) as producer:
            receipt = producer.send(Message(TOPIC, b"+1"), queue_id=0)
        wait_until(lambda: deliveries.count() >= 2)
    # closing waited for the retry's listener call to finish

    assert deliveries.seen == [(receipt.msg_id, 0), (receipt.msg_id, 1)]
    assert balance(bank) == 1  # the first attempt's write was rolled back, the retry's kept
    assert consumed(bank, receipt.msg_id)
    assert broker.service.query_offset("bank", TOPIC, 0) == 1


def test_an_answer_that_is_not_a_consume_result_rolls_back_and_is_retried(
    broker: EmbeddedBroker, bank: SqliteDedupStore
) -> None:
    deliveries = Deliveries()
    answers: list[ConsumeResult] = []

    def credit(messages: list[ReceivedMessage], conn: sqlite3.Connection) -> object:
        deliveries.record(messages)
        conn.execute("UPDATE accounts SET balance = balance + 1 WHERE name = 'alice'")
        return "ok" if any(m.reconsume_times == 0 for m in messages) else None

    wrapped = idempotent_in_transaction(credit, bank)  # type: ignore[arg-type]

    def listener(messages: list[ReceivedMessage]) -> ConsumeResult:
        answer = wrapped(messages)
        answers.append(answer)
        return answer

    with consumer(broker, "bank", listener):
        with Producer(broker) as producer:
            receipt = producer.send(Message(TOPIC, b"+1"), queue_id=0)
        wait_until(lambda: len(answers) >= 2)

    assert answers == [ConsumeResult.RECONSUME_LATER, ConsumeResult.SUCCESS]
    assert [times for _, times in deliveries.seen] == [0, 1]
    assert balance(bank) == 1
    assert consumed(bank, receipt.msg_id)


class _Msg:
    """A minimal received message."""

    def __init__(self, msg_id: str) -> None:
        self.msg_id = msg_id
        self.keys: list[str] = []
        self.topic = TOPIC
        self.properties: dict[str, str] = {}


def test_a_returned_coroutine_is_not_acknowledged(bank: SqliteDedupStore) -> None:
    async def credit_async(messages: list[ReceivedMessage], conn: sqlite3.Connection) -> None:
        conn.execute("UPDATE accounts SET balance = balance + 1 WHERE name = 'alice'")

    async def notify_async(messages: list[ReceivedMessage]) -> None:
        pass

    # Plain functions handing back a coroutine slip past the build-time check.
    def credit(messages: list[ReceivedMessage], conn: sqlite3.Connection) -> object:
        return credit_async(messages, conn)

    def notify(messages: list[ReceivedMessage]) -> object:
        return notify_async(messages)

    store = MemoryDedupStore()
    sent: list[Any] = [_Msg("m1")]
    assert idempotent(notify, store)(sent) is ConsumeResult.RECONSUME_LATER  # type: ignore[arg-type]
    assert store.get("m1") is None  # the claim was released: the retry processes it
    wrapped = idempotent_in_transaction(credit, bank)  # type: ignore[arg-type]
    assert wrapped(sent) is ConsumeResult.RECONSUME_LATER
    assert bank.get("m1") is None
    assert balance(bank) == 0


def test_async_def_listeners_are_refused_by_the_transactional_wrapper(
    bank: SqliteDedupStore,
) -> None:
    async def credit(messages: list[ReceivedMessage], conn: sqlite3.Connection) -> None:
        pass

    class AsyncCallable:
        async def __call__(self, messages: list[ReceivedMessage], conn: sqlite3.Connection) -> None:
            pass

    with pytest.raises(TypeError, match=r"idempotent_in_transaction\(\).*coroutine function"):
        idempotent_in_transaction(credit, bank)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"idempotent_in_transaction\(\).*coroutine function"):
        idempotent_in_transaction(AsyncCallable(), bank)  # type: ignore[arg-type]
