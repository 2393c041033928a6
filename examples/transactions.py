"""Transactional messages: a payment event is published only if the payment was recorded.

A transactional producer of group ``payments-tx`` sends three payment events. For each, the
broker first stores a *half message* (invisible to consumers), then the producer runs the local
transaction, here a write to a small in-memory "database" of orders:

* ``order-1``: the write succeeds, the transaction answers COMMIT: the event is delivered;
* ``order-2``: the write fails, the transaction answers ROLLBACK: the event is never delivered;
* ``order-3``: the write is in doubt (the transaction answers UNKNOWN); it lands a moment later.
  The broker's check-back then asks the producer group's checker, which looks the order up in
  the database and answers COMMIT: the event is delivered, once.

The broker runs with a short transaction timeout (``BrokerOptions(transaction_timeout_ms=300,
transaction_check_interval_ms=100)``; RocketMQ's are 6 s and 60 s), so the example takes about
a second. A push consumer of the payment topic prints what it receives.

    .venv/bin/python examples/transactions.py [DIR]

``DIR`` (default: a temporary directory, removed afterwards) receives the store; a Quiver store
already there is deleted first, any other non-empty directory is left alone.
"""

from __future__ import annotations

import functools
import sys
import threading
import time
from pathlib import Path

from _example import run_example, say

from sdk import (
    BrokerOptions,
    ConsumeFrom,
    EmbeddedBroker,
    Message,
    PushConsumer,
    ReceivedMessage,
    TransactionalProducer,
    TransactionState,
)

TOPIC = "payments"
PRODUCER_GROUP = "payments-tx"
CONSUMER_GROUP = "ledger"
WAIT_S = 10.0


class Orders:
    """The application's own database: order id -> "paid" (thread-safe)."""

    def __init__(self) -> None:
        self.paid: set[str] = set()
        self.lock = threading.Lock()

    def record_payment(self, order: str) -> None:
        with self.lock:
            self.paid.add(order)

    def is_paid(self, order: str) -> bool:
        with self.lock:
            return order in self.paid


class Ledger:
    """The consumer's side: every payment event received, in order."""

    def __init__(self) -> None:
        self.received: list[str] = []
        self.lock = threading.Lock()
        self.changed = threading.Condition(self.lock)

    def listener(self, messages: list[ReceivedMessage]) -> None:
        with self.changed:
            for message in messages:
                self.received.append(message.keys[0])
                say(f"     ledger received {message.keys[0]}: {message.body.decode()}")
            self.changed.notify_all()

    def wait_for(self, count: int, timeout_s: float) -> bool:
        with self.changed:
            return self.changed.wait_for(lambda: len(self.received) >= count, timeout_s)


def run(data: Path) -> int:
    """Send three payment events in transactions: a commit, a rollback, an UNKNOWN."""
    orders = Orders()
    ledger = Ledger()
    asked: list[str] = []

    def checker(message: ReceivedMessage) -> TransactionState:
        """The broker asks about a half message left open: look the order up."""
        order = message.keys[0]
        verdict = TransactionState.COMMIT if orders.is_paid(order) else TransactionState.UNKNOWN
        asked.append(order)
        say(f"3. checker asked about {order} (transaction {message.msg_id}): {verdict.value}")
        return verdict

    def pay(message: Message, outcome: str) -> TransactionState:
        """The local transaction: record the payment, answer what happened."""
        order = message.keys[0]
        if outcome == "fails":
            return TransactionState.ROLLBACK
        if outcome == "in doubt":  # e.g. the database did not confirm in time; it lands later
            threading.Timer(0.2, orders.record_payment, (order,)).start()
            return TransactionState.UNKNOWN
        orders.record_payment(order)
        return TransactionState.COMMIT

    options = BrokerOptions(transaction_timeout_ms=300, transaction_check_interval_ms=100)
    with EmbeddedBroker(data, options=options) as broker:
        say(f"1. embedded broker over {data}/, transaction timeout 300 ms, checks every 100 ms")
        with (
            PushConsumer(
                broker,
                CONSUMER_GROUP,
                {TOPIC: "*"},
                ledger.listener,
                consume_from=ConsumeFrom.FIRST_OFFSET,
            ),
            TransactionalProducer(broker, PRODUCER_GROUP, checker, check_wait_ms=200) as producer,
        ):
            say("2. sent in transactions:")
            for order, outcome in (
                ("order-1", "succeeds"),
                ("order-2", "fails"),
                ("order-3", "in doubt"),
            ):
                message = Message(TOPIC, f"{order} paid".encode(), keys=[order])
                local = functools.partial(pay, outcome=outcome)
                receipt = producer.send_in_transaction(message, local)
                say(
                    f"     {order}: local transaction {outcome:<8} -> {receipt.state.value:<8} "
                    f"broker: {receipt.end_status}"
                )
            if not ledger.wait_for(2, WAIT_S):
                say(f"only {ledger.received} arrived in {WAIT_S} s")
                return 1
            time.sleep(0.5)  # a few more check rounds: nothing else may arrive
    say(f"4. the ledger received {', '.join(ledger.received)}")
    ok = ledger.received == ["order-1", "order-3"] and set(asked) == {"order-3"}
    say(f"transactions: {'OK' if ok else 'FAILED'} (order-2 rolled back, never delivered)")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(run_example(run, default_name="store"))
