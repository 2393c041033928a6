"""Transactional messages: half messages, commit / rollback, the check-back, restarts and a
producer killed between its half message and its commit.

Real embedded brokers with small geometry and real threads; brokers that the check-back should
drive on its own use a 200 ms transaction timeout and a 50 ms check interval, the others a 60 s
interval (only the first round at start runs by itself) and call ``run_once`` directly. Most
brokers read a :class:`ManualClock`: a test moves it past the timeout to have the check-back
run (:func:`pass_timeout`) and never waits for time to pass; the asyncio producers' brokers
keep the system clock (their check request parks a thread of the loop's executor, which
``asyncio.run`` joins).
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import sdk.transaction as transaction_module
from localstore import NewMessage
from localstore.record.codec import (
    SYSFLAG_TRANSACTION_COMMIT,
    SYSFLAG_TRANSACTION_MASK,
    SYSFLAG_TRANSACTION_NOT,
)
from sdk import (
    AsyncTransactionalProducer,
    BrokerOptions,
    ClientClosedError,
    ConsumeFrom,
    EmbeddedBroker,
    InvalidMessageError,
    Message,
    PushConsumer,
    ReceivedMessage,
    TransactionalProducer,
    TransactionState,
)
from sdk.broker.service import BrokerService
from sdk.broker.transactions import CHECK_GROUP, HALF_TOPIC, OP_TOPIC, committed_message
from sdk.clock import ManualClock
from sdk.transport.transaction_models import (
    ALREADY_RESOLVED,
    COMMITTED,
    NOT_FOUND,
    ROLLED_BACK,
)

from .brokers import SMALL_GEOMETRY
from .waiting import wait_until

GEOMETRY = SMALL_GEOMETRY
TOPIC = "payments"
GROUP = "tx-payments"
REPO = Path(__file__).resolve().parents[2]
FIXTURES = REPO / "tests" / "fixtures"
COMMIT, ROLLBACK, UNKNOWN = (
    TransactionState.COMMIT,
    TransactionState.ROLLBACK,
    TransactionState.UNKNOWN,
)


def fast_options(max_checks: int = 3) -> BrokerOptions:
    return BrokerOptions(
        transaction_timeout_ms=200,
        transaction_check_interval_ms=50,
        transaction_max_checks=max_checks,
    )


def manual_options(max_checks: int = 2) -> BrokerOptions:
    return BrokerOptions(
        transaction_timeout_ms=200,
        transaction_check_interval_ms=60_000,
        transaction_max_checks=max_checks,
    )


def open_broker(root: Path, options: BrokerOptions, **extra: Any) -> EmbeddedBroker:
    return EmbeddedBroker(root, options=options, **{**GEOMETRY, **extra})


def pass_timeout(service: BrokerService, clock: ManualClock) -> None:
    """Move ``clock`` past the transaction timeout of every half message stored so far and at
    least one check interval on, so a check round comes (``fast_options``' times)."""
    newest_ms = max(m.store_timestamp for m in stored(service, HALF_TOPIC))
    clock.advance(max(newest_ms + 200 + 50 - clock.time_ms(), 50) / 1000)


def next_round(clock: ManualClock) -> None:
    """Move ``clock`` one check interval (``fast_options``') on: a check round comes."""
    clock.advance(0.05)


class Checker:
    """A checker answering ``answer`` (or ``answer(message)``), recording what it was asked."""

    def __init__(self, answer: TransactionState | Callable[[ReceivedMessage], Any]) -> None:
        self.answer = answer
        self.asked: list[ReceivedMessage] = []
        self.lock = threading.Lock()

    def __call__(self, message: ReceivedMessage) -> Any:
        with self.lock:
            self.asked.append(message)
        if callable(self.answer):
            return self.answer(message)
        return self.answer

    def ids(self) -> list[str | None]:
        with self.lock:
            return [m.msg_id for m in self.asked]


class AsyncChecker(Checker):
    """:class:`Checker` for the asyncio producer."""

    async def __call__(self, message: ReceivedMessage) -> Any:  # type: ignore[override]
        return super().__call__(message)


async def commit_locally(message: Message) -> TransactionState:
    return COMMIT


async def stay_unknown(message: Message) -> TransactionState:
    return UNKNOWN


class Collected:
    """A push consumer's deliveries of the real topic."""

    def __init__(self) -> None:
        self.messages: list[ReceivedMessage] = []
        self.lock = threading.Lock()

    def listener(self, messages: list[ReceivedMessage]) -> None:
        with self.lock:
            self.messages.extend(messages)

    def bodies(self) -> list[bytes]:
        with self.lock:
            return sorted(m.body for m in self.messages)


@pytest.fixture
def collected(tmp_path: Path) -> Collected:
    return Collected()


def consume(broker: EmbeddedBroker, collected: Collected) -> PushConsumer:
    return PushConsumer(
        broker,
        "billing",
        {TOPIC: "*"},
        collected.listener,
        consume_from=ConsumeFrom.FIRST_OFFSET,
    )


def stored(service: BrokerService, topic: str) -> list[ReceivedMessage]:
    """Every message of ``topic`` in the store, whatever consumers did."""
    found = []
    for queue_id in service.store.queue_ids(topic):
        found.extend(service.store.get_messages(topic, queue_id, 0, max_count=1000).messages)
    return found


def settle(service: BrokerService) -> None:
    """Let a round pass (the check thread commits progress at each round)."""
    service.transactions.run_once()


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[EmbeddedBroker]:
    """A broker on the system clock (for the asyncio producers)."""
    with open_broker(tmp_path / "broker", fast_options()) as made:
        yield made


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
def manual_broker(tmp_path: Path, clock: ManualClock) -> Iterator[EmbeddedBroker]:
    """A broker whose check-back runs when ``clock`` moves."""
    with open_broker(tmp_path / "broker", fast_options(), clock=clock) as made:
        yield made


# -- commit and rollback by the local transaction ----------------------------------------------


def test_commit_makes_the_message_visible_once_in_rocketmqs_shapes(
    manual_broker: EmbeddedBroker, collected: Collected, clock: ManualClock
):
    broker = manual_broker
    checker = Checker(UNKNOWN)
    with consume(broker, collected), TransactionalProducer(broker, GROUP, checker) as producer:
        seen_in_local: list[list[ReceivedMessage]] = []

        def local(message: Message) -> TransactionState:
            seen_in_local.append(stored(broker.service, TOPIC))  # invisible while it runs
            return COMMIT

        message = Message(TOPIC, b"paid 42", tags="paid", keys=["order-42"])
        receipt = producer.send_in_transaction(message, local, sharding_key="order-42")
        assert seen_in_local == [[]]
        assert receipt.state is COMMIT and receipt.end_status == COMMITTED
        assert receipt.topic == TOPIC and receipt.queue_offset == 0
        wait_until(lambda: collected.bodies() == [b"paid 42"])
        pass_timeout(broker.service, clock)
        assert broker.service.transactions.run_once() == 0  # resolved: never asked about
        assert collected.bodies() == [b"paid 42"]
    assert checker.asked == []

    service = broker.service
    (half,) = stored(service, HALF_TOPIC)
    assert half.queue_id == 0 and half.sys_flag & SYSFLAG_TRANSACTION_MASK == (
        SYSFLAG_TRANSACTION_NOT
    )
    assert half.properties["REAL_TOPIC"] == TOPIC
    assert half.properties["REAL_QID"] == str(receipt.queue_id)
    assert half.properties["TRAN_MSG"] == "true" and half.properties["PGROUP"] == GROUP
    assert half.properties["__transactionId__"] == receipt.transaction_id == half.msg_id
    (committed,) = stored(service, TOPIC)
    assert committed.sys_flag & SYSFLAG_TRANSACTION_MASK == SYSFLAG_TRANSACTION_COMMIT
    assert committed.prepared_transaction_offset == half.phys_offset
    assert committed.msg_id == receipt.msg_id and committed.keys == ["order-42"]
    assert committed.tags == "paid" and committed.queue_id == receipt.queue_id
    assert not {"REAL_TOPIC", "REAL_QID", "TRAN_MSG"} & set(committed.properties)
    (op,) = stored(service, OP_TOPIC)
    assert op.tags == "d" and op.body == b"0"
    settle(service)
    assert service.offsets.offsets(CHECK_GROUP, HALF_TOPIC) == {0: 1}


def test_rollback_is_never_delivered(
    manual_broker: EmbeddedBroker, collected: Collected, clock: ManualClock
):
    broker = manual_broker
    checker = Checker(COMMIT)
    with consume(broker, collected), TransactionalProducer(broker, GROUP, checker) as producer:
        receipt = producer.send_in_transaction(Message(TOPIC, b"x"), lambda m: ROLLBACK)
        assert receipt.state is ROLLBACK and receipt.end_status == ROLLED_BACK
        producer.send(Message(TOPIC, b"plain"))
        wait_until(lambda: collected.bodies() == [b"plain"])
        pass_timeout(broker.service, clock)  # past the transaction timeout: nothing is asked
        assert broker.service.transactions.run_once() == 0
        assert collected.bodies() == [b"plain"]
    assert checker.asked == []
    assert [m.body for m in stored(broker.service, TOPIC)] == [b"plain"]
    assert [m.body for m in stored(broker.service, OP_TOPIC)] == [b"0"]


# -- the check-back ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("local", "local_state"),
    [
        (lambda message: UNKNOWN, UNKNOWN),
        (lambda message: 1 / 0, UNKNOWN),  # an exception counts as UNKNOWN
        (lambda message: "yes", UNKNOWN),  # so does an answer that is not a TransactionState
    ],
    ids=["unknown", "raises", "not-a-state"],
)
def test_unknown_then_the_checker_commits(
    manual_broker: EmbeddedBroker,
    collected: Collected,
    clock: ManualClock,
    local: Any,
    local_state: TransactionState,
):
    broker = manual_broker
    checker = Checker(COMMIT)
    with consume(broker, collected), TransactionalProducer(broker, GROUP, checker) as producer:
        message = Message(TOPIC, b"maybe", keys=["order-7"])
        receipt = producer.send_in_transaction(message, local)
        assert receipt.state is local_state and receipt.end_status == "UNKNOWN"
        assert broker.service.transactions.run_once() == 0  # younger than the timeout
        assert stored(broker.service, TOPIC) == [] and checker.asked == []
        pass_timeout(broker.service, clock)
        wait_until(lambda: collected.bodies() == [b"maybe"])
        next_round(clock)  # more rounds: the resolved half message is not asked about again
        assert broker.service.transactions.run_once() == 0
        assert collected.bodies() == [b"maybe"]
    assert checker.ids() == [receipt.transaction_id]
    (asked,) = checker.asked
    assert asked.topic == TOPIC and asked.queue_id == receipt.queue_id  # as consumers see it
    assert asked.keys == ("order-7",) and asked.body == b"maybe"
    assert len(stored(broker.service, TOPIC)) == 1


def test_unknown_then_the_checker_rolls_back(
    manual_broker: EmbeddedBroker, collected: Collected, clock: ManualClock
):
    broker = manual_broker
    checker = Checker(ROLLBACK)
    with consume(broker, collected), TransactionalProducer(broker, GROUP, checker) as producer:
        receipt = producer.send_in_transaction(Message(TOPIC, b"no"), lambda m: UNKNOWN)
        pass_timeout(broker.service, clock)
        wait_until(lambda: broker.service.transactions.rolled_back == 1)
        producer.send(Message(TOPIC, b"plain"))
        wait_until(lambda: collected.bodies() == [b"plain"])
    assert checker.ids() == [receipt.transaction_id]
    assert [m.body for m in stored(broker.service, TOPIC)] == [b"plain"]


def test_a_checker_that_never_decides_gets_the_message_rolled_back_after_max_checks(
    tmp_path: Path, collected: Collected, clock: ManualClock
):
    checker = Checker(lambda message: UNKNOWN if len(checker.asked) % 2 else 1 / 0)
    with (
        open_broker(tmp_path / "b", fast_options(max_checks=3), clock=clock) as broker,
        TransactionalProducer(broker, GROUP, checker) as producer,
    ):
        receipt = producer.send_in_transaction(Message(TOPIC, b"?"), lambda m: UNKNOWN)
        transactions = broker.service.transactions
        pass_timeout(broker.service, clock)
        for asked in (1, 2, 3):  # each round asks again, once the last check was collected
            wait_until(lambda n=asked: len(checker.asked) == n)  # type: ignore[misc]
            assert transactions.expired == 0
            next_round(clock)
        wait_until(lambda: transactions.expired == 1)
        assert transactions.is_resolved(0) and transactions.rolled_back == 1
        next_round(clock)
        assert transactions.run_once() == 0
        assert checker.ids() == [receipt.transaction_id] * 3  # max_checks, then no more
        assert stored(broker.service, TOPIC) == []
        assert producer.send_in_transaction(Message(TOPIC, b"!"), lambda m: COMMIT).end_status == (
            COMMITTED
        )


def test_checks_wait_for_a_producer_of_the_group_and_count_when_collected(tmp_path: Path):
    with BrokerService(tmp_path / "b", _service_options(manual_options(max_checks=2))) as service:
        result = service.send_half(GROUP, new_message(b"half"))
        assert result.stored and result.topic == HALF_TOPIC
        transactions = service.transactions
        later = time.time_ns() // 1_000_000 + 10_000
        assert transactions.run_once(later) == 1
        for _ in range(3):  # nobody collects: the request waits, no check is counted
            transactions.run_once(later)
        assert transactions.pending_checks(GROUP) == [0]
        assert transactions.check_count(0) == 0
        assert service.fetch_transaction_checks("other-group", "c", 0).count == 0
        for count in (1, 2):
            checks = service.fetch_transaction_checks(GROUP, "client-1", 0)
            assert checks.count == 1 and transactions.check_count(0) == count
            assert service.fetch_transaction_checks(GROUP, "client-1", 0).count == 0
            transactions.run_once(later)  # asked again: the answer did not come
        assert transactions.expired == 1 and transactions.is_resolved(0)
        assert service.fetch_transaction_checks(GROUP, "client-1", 0).count == 0
        assert list(transactions.producers(GROUP)) == ["client-1"]
        assert stored(service, "orders") == []


def test_a_young_half_message_is_not_asked_about(tmp_path: Path):
    with BrokerService(tmp_path / "b", _service_options(manual_options())) as service:
        service.send_half(GROUP, new_message(b"half"))
        assert service.transactions.run_once() == 0  # younger than the 200 ms timeout
        assert service.transactions.pending_checks(GROUP) == []


def test_a_waiting_fetch_is_answered_when_a_check_is_queued(tmp_path: Path, clock: ManualClock):
    options = _service_options(manual_options())
    options.clock = clock
    with BrokerService(tmp_path / "b", options) as service:
        service.send_half(GROUP, new_message(b"half"))
        answers = []
        fetcher = threading.Thread(
            target=lambda: answers.append(service.fetch_transaction_checks(GROUP, "c", 10_000))
        )
        fetcher.start()
        # Known once the fetch holds the lock it waits under: the round's wake-up finds it parked.
        wait_until(lambda: "c" in service.transactions.producers(GROUP))
        service.transactions.run_once(clock.time_ms() + 10_000)
        fetcher.join(5)
        assert not fetcher.is_alive() and answers[0].count == 1


# -- idempotent end-transaction ------------------------------------------------------------------


def test_a_second_end_of_the_same_half_message_does_nothing(tmp_path: Path):
    with BrokerService(tmp_path / "b", _service_options(manual_options())) as service:
        message = new_message(b"once")
        half = service.send_half(GROUP, message)
        phys = int(half.offset_msg_ids[0][-16:], 16)
        tx = message.properties["UNIQ_KEY"]
        first = service.end_transaction(GROUP, phys, tx, "COMMIT")
        assert first.status == COMMITTED and first.topic == "orders"
        for verdict, from_check in (("COMMIT", True), ("ROLLBACK", False), ("COMMIT", False)):
            again = service.end_transaction(GROUP, phys, tx, verdict, from_check=from_check)
            assert again.status == ALREADY_RESOLVED
        assert service.end_transaction(GROUP, phys, tx, "UNKNOWN").status == "UNKNOWN"
        assert [m.body for m in stored(service, "orders")] == [b"once"]
        assert len(stored(service, OP_TOPIC)) == 1


def test_racing_ends_commit_once(tmp_path: Path):
    with BrokerService(tmp_path / "b", _service_options(manual_options())) as service:
        message = new_message(b"race")
        half = service.send_half(GROUP, message)
        phys = int(half.offset_msg_ids[0][-16:], 16)
        tx = message.properties["UNIQ_KEY"]
        barrier = threading.Barrier(8)
        statuses: list[str] = []

        def end() -> None:
            barrier.wait()
            statuses.append(service.end_transaction(GROUP, phys, tx, "COMMIT").status)

        threads = [threading.Thread(target=end) for _ in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert sorted(statuses) == [ALREADY_RESOLVED] * 7 + [COMMITTED]
        assert [m.body for m in stored(service, "orders")] == [b"race"]


def test_a_half_message_stored_twice_by_a_retry_is_committed_once(tmp_path: Path):
    with BrokerService(tmp_path / "b", _service_options(manual_options())) as service:
        message = new_message(b"retried")  # same UNIQ_KEY both times, as a producer's retry
        first = service.send_half(GROUP, message)
        second = service.send_half(GROUP, message)
        tx = message.properties["UNIQ_KEY"]
        phys = [int(r.offset_msg_ids[0][-16:], 16) for r in (first, second)]
        assert service.end_transaction(GROUP, phys[1], tx, "COMMIT").status == COMMITTED
        # the check-back later asks about the first copy; the checker says COMMIT as well
        again = service.end_transaction(GROUP, phys[0], tx, "COMMIT", from_check=True)
        assert again.status == ALREADY_RESOLVED and again.topic == "orders"
        assert [m.body for m in stored(service, "orders")] == [b"retried"]
        assert service.transactions.is_resolved(0) and service.transactions.is_resolved(1)


def test_end_transaction_refuses_what_it_cannot_match(tmp_path: Path):
    with BrokerService(tmp_path / "b", _service_options(manual_options())) as service:
        message = new_message(b"m")
        half = service.send_half(GROUP, message)
        phys = int(half.offset_msg_ids[0][-16:], 16)
        tx = message.properties["UNIQ_KEY"]
        assert service.end_transaction("other", phys, tx, "COMMIT").status == NOT_FOUND
        assert service.end_transaction(GROUP, phys, "nope", "COMMIT").status == NOT_FOUND
        assert service.end_transaction(GROUP, phys + 1, tx, "COMMIT").status == NOT_FOUND
        assert service.end_transaction(GROUP, phys, tx, "MAYBE").status == "MESSAGE_ILLEGAL"
        plain = service.send([new_message(b"plain")])
        plain_phys = int(plain.offset_msg_ids[0][-16:], 16)
        assert service.end_transaction(GROUP, plain_phys, tx, "COMMIT").status == NOT_FOUND
        assert [m.body for m in stored(service, "orders")] == [b"plain"]


def test_send_half_refuses_bad_messages(tmp_path: Path):
    with BrokerService(tmp_path / "b", _service_options(manual_options())) as service:
        assert service.send_half("", new_message(b"m")).status == "MESSAGE_ILLEGAL"
        assert service.send_half(GROUP, new_message(b"m", DELAY="1")).status == "MESSAGE_ILLEGAL"
        no_id = NewMessage("orders", b"m", 0, {})
        assert service.send_half(GROUP, no_id).status == "MESSAGE_ILLEGAL"
        forbidden = NewMessage(HALF_TOPIC, b"m", 0, {"UNIQ_KEY": "U1"})
        assert service.send_half(GROUP, forbidden).status == "MESSAGE_ILLEGAL"
        service.send([new_message(b"create the topic")])
        assert service.send_half(GROUP, new_message(b"m", queue_id=9)).status == "MESSAGE_ILLEGAL"
        assert stored(service, HALF_TOPIC) == []


def test_a_transactional_message_cannot_be_delayed(broker: EmbeddedBroker):
    with TransactionalProducer(broker, GROUP, Checker(COMMIT)) as producer:
        with pytest.raises(InvalidMessageError, match="cannot be delayed"):
            producer.send_in_transaction(Message(TOPIC, b"x", delay_level=1), lambda m: COMMIT)
        with pytest.raises(ValueError, match="group"):
            TransactionalProducer(broker, "bad group!", Checker(COMMIT))
    assert stored(broker.service, HALF_TOPIC) == []


# -- restarts ------------------------------------------------------------------------------------


@pytest.mark.parametrize("progress_lost", [False, True], ids=["progress-kept", "progress-lost"])
def test_resolution_survives_a_restart(tmp_path: Path, collected: Collected, progress_lost: bool):
    root = tmp_path / "b"
    quiet = Checker(UNKNOWN)
    with (
        open_broker(root, manual_options()) as broker,
        TransactionalProducer(broker, GROUP, quiet) as producer,
    ):
        pending = producer.send_in_transaction(Message(TOPIC, b"pending"), lambda m: UNKNOWN)
        producer.send_in_transaction(Message(TOPIC, b"committed"), lambda m: COMMIT)
        producer.send_in_transaction(Message(TOPIC, b"rolled back"), lambda m: ROLLBACK)
        assert broker.service.transactions.progress == 0  # held by the pending one
    if progress_lost:  # only the op messages tell what was resolved
        for name in ("consumerOffset.json", "consumerOffset.json.bak"):
            (root / "config" / name).unlink(missing_ok=True)
    checker = Checker(COMMIT)
    clock = ManualClock()
    with (
        open_broker(root, fast_options(), clock=clock) as broker,
        consume(broker, collected),
        TransactionalProducer(broker, GROUP, checker) as producer,
    ):
        transactions = broker.service.transactions
        assert transactions.is_resolved(1) and transactions.is_resolved(2)
        pass_timeout(broker.service, clock)
        wait_until(lambda: collected.bodies() == [b"committed", b"pending"])
        next_round(clock)
        assert transactions.run_once() == 0  # more rounds: nothing more is asked
        assert collected.bodies() == [b"committed", b"pending"]
        assert checker.ids() == [pending.transaction_id]  # never the resolved ones
        wait_until(lambda: transactions.progress == 3)
    with open_broker(root, manual_options()) as broker:
        service = broker.service
        assert service.offsets.offsets(CHECK_GROUP, HALF_TOPIC) == {0: 3}
        assert service.offsets.offsets(CHECK_GROUP, OP_TOPIC) == {0: 3}
        assert service.transactions.progress == 3
        assert sorted(m.body for m in stored(service, TOPIC)) == [b"committed", b"pending"]


def test_a_commit_whose_op_message_was_lost_is_not_repeated(tmp_path: Path):
    """A crash between the commit record and its op message: after the restart the check-back
    finds the commit by its transaction id and marks the half message resolved."""
    root = tmp_path / "b"
    with BrokerService(root, _service_options(manual_options())) as service:
        message = new_message(b"committed, then a crash")
        service.send_half(GROUP, message)
        (half,) = stored(service, HALF_TOPIC)
        commit = committed_message(half)
        assert commit is not None
        assert service.store.put(commit).status.stored  # the op message never got written
    with BrokerService(root, _service_options(fast_options())) as service:
        wait_until(lambda: service.transactions.is_resolved(0))
        # Resolved from the log: no check-back for the producer, no second commit.
        assert service.fetch_transaction_checks(GROUP, "c", 0).count == 0
        assert [m.body for m in stored(service, "orders")] == [b"committed, then a crash"]
        assert [m.body for m in stored(service, OP_TOPIC)] == [b"0"]


def test_commit_under_sync_flush(tmp_path: Path, collected: Collected):
    with (
        open_broker(tmp_path / "b", fast_options(), flush_mode="sync") as broker,
        consume(broker, collected),
        TransactionalProducer(broker, GROUP, Checker(COMMIT)) as producer,
    ):
        receipt = producer.send_in_transaction(Message(TOPIC, b"durable"), lambda m: COMMIT)
        assert receipt.end_status == COMMITTED
        wait_until(lambda: collected.bodies() == [b"durable"])


def test_a_rocketmq_written_store_resolves_its_transactions(tmp_path: Path):
    """The reference store holds a half message, its commit and its op message as RocketMQ
    writes them: Quiver's broker sees the half message resolved and asks nobody about it."""
    root = tmp_path / "reference"
    shutil.copytree(FIXTURES / "reference-encoder" / "store", root)
    (root / "lock").unlink(missing_ok=True)
    options = fast_options()
    options.geometry = json.loads((FIXTURES / "reference-encoder" / "geometry.json").read_text())
    with BrokerService(root, options) as service:
        transactions = service.transactions
        assert transactions.is_resolved(0)
        settle(service)
        assert transactions.progress == 1
        assert service.fetch_transaction_checks("tx_producer", "c", 0).count == 0
        assert service.offsets.offsets(CHECK_GROUP, HALF_TOPIC) == {0: 1}
        assert service.offsets.offsets(CHECK_GROUP, OP_TOPIC) == {0: 1}


def test_op_messages_naming_several_half_messages_are_read(tmp_path: Path):
    """RocketMQ 5 may join several half offsets in one op message: "0,1"."""
    root = tmp_path / "b"
    with BrokerService(root, _service_options(manual_options())) as service:
        for body in (b"a", b"b", b"c"):
            service.send_half(GROUP, new_message(body))
        op = NewMessage(OP_TOPIC, b"0,1", 0, {"TAGS": "d"})
        assert service.store.put(op, system=True).status.stored
        other = NewMessage(OP_TOPIC, b"2", 0, {"TAGS": "x"})  # not a removal
        assert service.store.put(other, system=True).status.stored
    with BrokerService(root, _service_options(manual_options())) as service:
        transactions = service.transactions
        assert transactions.is_resolved(0) and transactions.is_resolved(1)
        assert not transactions.is_resolved(2)
        assert transactions.progress == 2


# -- a producer killed between its half message and its commit -----------------------------------

CHILD = """
import sys
import time

from sdk import BrokerOptions, EmbeddedBroker, Message, TransactionalProducer, TransactionState

root, topic, group = sys.argv[1:4]
options = BrokerOptions(transaction_check_interval_ms=60_000)
broker = EmbeddedBroker(root, options=options, flush_mode="sync", **{geometry!r})
producer = TransactionalProducer(broker, group, lambda message: TransactionState.UNKNOWN)


def local_transaction(message):
    # the half message is stored: tell the parent its transaction id, then hang until killed
    (half,) = broker.service.store.get_messages("RMQ_SYS_TRANS_HALF_TOPIC", 0, 0).messages
    print(half.msg_id, flush=True)
    time.sleep(60)
    return TransactionState.COMMIT


producer.send_in_transaction(Message(topic, b"from a dead producer"), local_transaction)
print("not killed", flush=True)
"""


@pytest.mark.integration
def test_a_producer_killed_between_half_message_and_commit(tmp_path: Path, collected: Collected):
    root = tmp_path / "b"
    script = tmp_path / "child.py"
    script.write_text(textwrap.dedent(CHILD.format(geometry=GEOMETRY)))
    with subprocess.Popen(
        [sys.executable, str(script), str(root), TOPIC, GROUP],
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    ) as child:
        try:
            assert child.stdout is not None
            transaction = child.stdout.readline().strip()
        finally:
            child.send_signal(signal.SIGKILL)
            _, errors = child.communicate(timeout=10)
        assert len(transaction) == 32, errors
    assert child.returncode == -signal.SIGKILL

    checker = Checker(lambda message: COMMIT if message.msg_id == transaction else UNKNOWN)
    clock = ManualClock()
    with (
        open_broker(root, fast_options(), clock=clock) as broker,  # recovery, then check-back
        consume(broker, collected),
        TransactionalProducer(broker, GROUP, checker),
    ):
        pass_timeout(broker.service, clock)
        wait_until(lambda: collected.bodies() == [b"from a dead producer"])
        next_round(clock)
        wait_until(lambda: broker.service.transactions.progress == 1)
        assert broker.service.transactions.run_once() == 0  # more rounds: nothing more asked
        assert collected.bodies() == [b"from a dead producer"]
        assert [m.msg_id for m in collected.messages] == [transaction]
    assert checker.ids() == [transaction]


# -- asyncio -------------------------------------------------------------------------------------


def test_async_producer_commits_and_answers_checks(broker: EmbeddedBroker, collected: Collected):
    checker = AsyncChecker(COMMIT)

    async def main() -> tuple[str, str]:
        async with AsyncTransactionalProducer(
            broker, GROUP, checker, check_wait_ms=100
        ) as producer:
            first = await producer.send_in_transaction(Message(TOPIC, b"a"), commit_locally)
            second = await producer.send_in_transaction(Message(TOPIC, b"b"), stay_unknown)
            assert first.end_status == COMMITTED and second.end_status == "UNKNOWN"
            for _ in range(500):
                if checker.ids():
                    break
                await asyncio.sleep(0.01)
            return first.transaction_id, second.transaction_id

    with consume(broker, collected):
        _, unknown_id = asyncio.run(main())
        wait_until(lambda: collected.bodies() == [b"a", b"b"])
    assert checker.ids() == [unknown_id]


# -- the check thread never dies ---------------------------------------------------------------


class FailOnce:
    """Wraps ``real``: the first call raises RuntimeError (not a QuiverError), the others pass."""

    def __init__(self, real: Callable[..., Any]) -> None:
        self.real = real
        self.calls = 0

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        self.calls += 1
        if self.calls == 1:
            raise RuntimeError("boom (test)")
        return self.real(*args, **kwargs)


@pytest.mark.parametrize("failing", ["end_transaction", "decode_records"])
def test_the_check_thread_survives_a_failure_and_answers_the_next_check(
    tmp_path: Path,
    collected: Collected,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    failing: str,
):
    checker = Checker(COMMIT)
    with (
        open_broker(tmp_path / "b", fast_options(max_checks=10)) as broker,
        consume(broker, collected),
        TransactionalProducer(broker, GROUP, checker, check_wait_ms=100) as producer,
    ):
        if failing == "end_transaction":
            failure = FailOnce(producer.transport.end_transaction)
            monkeypatch.setattr(producer.transport, "end_transaction", failure)
        else:
            failure = FailOnce(transaction_module.decode_records)
            monkeypatch.setattr(transaction_module, "decode_records", failure)
        receipt = producer.send_in_transaction(Message(TOPIC, b"late"), lambda m: UNKNOWN)
        wait_until(lambda: collected.bodies() == [b"late"])
        assert failure.calls >= 2 and producer._check_thread.is_alive()
    assert set(checker.ids()) == {receipt.transaction_id}
    assert "boom (test)" in caplog.text  # logged with its traceback


def test_checks_that_arrive_while_closing_are_not_answered(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
):
    checker = Checker(COMMIT)
    with open_broker(tmp_path / "b", manual_options(max_checks=5)) as broker:
        producer = TransactionalProducer(broker, GROUP, checker, check_wait_ms=100)
        real_fetch = producer.transport.fetch_transaction_checks
        waiting, go = threading.Event(), threading.Event()
        fetches: list[int] = []

        def held_fetch(group: str, client_id: str, wait_ms: int) -> Any:
            fetches.append(wait_ms)
            waiting.set()
            go.wait(10)  # the request is out at the broker while close() begins
            return real_fetch(group, client_id, 1000)

        monkeypatch.setattr(producer.transport, "fetch_transaction_checks", held_fetch)
        producer.send_in_transaction(Message(TOPIC, b"?"), lambda m: UNKNOWN)
        assert waiting.wait(10)
        transactions = broker.service.transactions
        assert transactions.run_once(time.time_ns() // 1_000_000 + 10_000) == 1
        with caplog.at_level(logging.DEBUG, logger="sdk.transaction"):
            producer.close()
            go.set()
            producer._check_thread.join(10)
        assert not producer._check_thread.is_alive()
        assert checker.asked == [] and len(fetches) == 1  # no request after close() began
        assert "arrived while closing: not answered" in caplog.text
        assert transactions.check_count(0) == 1  # the broker asks again at its next round


def test_async_check_task_survives_a_failure_and_answers_the_next_check(
    broker: EmbeddedBroker, collected: Collected, monkeypatch: pytest.MonkeyPatch
):
    checker = AsyncChecker(COMMIT)

    async def main() -> str:
        async with AsyncTransactionalProducer(
            broker, GROUP, checker, check_wait_ms=100
        ) as producer:
            failure = FailOnce(producer.transport.end_transaction)
            monkeypatch.setattr(producer.transport, "end_transaction", failure)
            receipt = await producer.send_in_transaction(Message(TOPIC, b"late"), stay_unknown)
            for _ in range(1000):
                if failure.calls >= 2:
                    break
                await asyncio.sleep(0.01)
            task = producer._check_task
            assert failure.calls >= 2 and task is not None and not task.done()
            return receipt.transaction_id

    with consume(broker, collected):
        transaction_id = asyncio.run(main())
        wait_until(lambda: collected.bodies() == [b"late"])
    assert set(checker.ids()) == {transaction_id} and len(checker.ids()) >= 2


def test_async_close_closes_even_when_the_check_task_died(
    broker: EmbeddedBroker, monkeypatch: pytest.MonkeyPatch
):
    async def main() -> None:
        producer = AsyncTransactionalProducer(
            broker, GROUP, AsyncChecker(COMMIT), check_wait_ms=100
        )

        async def dead() -> None:
            raise RuntimeError("boom (test)")

        monkeypatch.setattr(producer, "_collect_checks", dead)
        await producer.start()
        await asyncio.sleep(0.05)  # the task is done, with an exception
        await producer.close()  # does not raise it, and closes
        with pytest.raises(ClientClosedError):
            await producer.send(Message(TOPIC, b"after close"))

    asyncio.run(main())


def test_async_close_lets_a_check_being_answered_finish(
    broker: EmbeddedBroker, collected: Collected
):
    async def main() -> None:
        answering = asyncio.Event()

        async def slow_checker(message: ReceivedMessage) -> TransactionState:
            answering.set()
            await asyncio.sleep(0.2)
            return COMMIT

        producer = AsyncTransactionalProducer(broker, GROUP, slow_checker, check_wait_ms=100)
        await producer.send_in_transaction(Message(TOPIC, b"slow"), stay_unknown)
        await asyncio.wait_for(answering.wait(), 10)
        await producer.close()  # the checker call in progress is not cancelled

    with consume(broker, collected):
        asyncio.run(main())
        wait_until(lambda: collected.bodies() == [b"slow"])


# -- helpers -------------------------------------------------------------------------------------


def _service_options(options: BrokerOptions) -> BrokerOptions:
    options.geometry = dict(GEOMETRY)
    return options


def new_message(body: bytes, queue_id: int = 0, **properties: str) -> NewMessage:
    return NewMessage(
        "orders", body, queue_id, {"UNIQ_KEY": f"U{time.monotonic_ns()}", **properties}
    )
