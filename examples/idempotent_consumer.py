"""Idempotent consumers: duplicates delivered, each deposit credited exactly once.

A producer sends four deposit events through an embedded broker; the broker's answers to the
first two are lost after it stored them (a timeout), so the producer retries them: the broker
stores them twice, with the same ``UNIQ_KEY`` (the ``msg_id`` consumers see). Two consumer
groups read the topic with push consumers made idempotent by ``sdk.idempotency``:

* ``bank`` credits accounts in SQLite, in the same database and the same transaction as its
  dedup records (``idempotent_in_transaction``): a credit and its ``CONSUMED`` record commit
  together, so a failure rolls both back and a re-delivery finds the record (exactly-once
  effect). One batch fails once on the way (rolled back, sent back, retried).
* ``notifier`` sends one notification per deposit with ``idempotent`` and an in-memory dedup
  store, keyed by a business key (the message's first key, ``deposit-N``).

Then the bank "restarts" from an old offset: the broker is closed, the group's offsets are reset
to the earliest with ``quiver offsets reset``, and the whole queue is delivered again; every
message is skipped as a duplicate.

    .venv/bin/python examples/idempotent_consumer.py [DIR]

``DIR`` (default: a temporary directory, removed afterwards) receives the store (``DIR/store``)
and ``DIR/bank.db``; a directory holding a Quiver store from an earlier run is deleted first, any
other non-empty directory is left alone.
"""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from _example import run_example, say

from sdk import (
    BrokerOptions,
    BrokerUnavailableError,
    ConsumeFrom,
    ConsumeResult,
    EmbeddedBroker,
    Message,
    Producer,
    PushConsumer,
    ReceivedMessage,
)
from sdk.idempotency import (
    ClaimStatus,
    MemoryDedupStore,
    SqliteDedupStore,
    first_key,
    idempotent,
    idempotent_in_transaction,
)

TOPIC = "deposits"
DEPOSITS = [("alice", 100), ("bob", 50), ("alice", 25), ("carol", 10)]
EXPECTED = {"alice": 125, "bob": 50, "carol": 10}
LOST_ANSWERS = 2
WAIT_S = 10.0

Handler = Callable[[list[ReceivedMessage]], ConsumeResult]


class LostAnswers:
    """A transport to the broker that loses the answer to each of the first ``losses`` sends
    *after* the broker stored the message, as a timeout would; the producer then retries the
    same message (same ``UNIQ_KEY``), and that answer arrives. Every other call goes to
    ``transport`` as it is."""

    def __init__(self, transport: Any, losses: int) -> None:
        self.transport = transport
        self.losses = losses
        self.retrying = False
        self.stored = 0

    def send(self, messages: Sequence[Any]) -> Any:
        result = self.transport.send(messages)
        self.stored += len(messages) if result.stored else 0
        if self.losses > 0 and not self.retrying:
            self.losses -= 1
            self.retrying = True
            raise BrokerUnavailableError("timed out waiting for the broker's answer")
        self.retrying = False
        return result

    def __getattr__(self, name: str) -> Any:
        return getattr(self.transport, name)


def produce(broker: EmbeddedBroker) -> int:
    """Send the deposits (all to queue 0); answers how many messages the broker stored."""
    lossy = LostAnswers(broker.transport(), LOST_ANSWERS)
    with Producer(lossy, retries=2) as producer:
        for number, (account, amount) in enumerate(DEPOSITS):
            body = json.dumps({"account": account, "amount": amount}).encode()
            producer.send(Message(TOPIC, body, keys=[f"deposit-{number}"]), queue_id=0)
    return lossy.stored


class Bank:
    """The business side: accounts in SQLite, credited by the listener."""

    def __init__(self) -> None:
        self.credited = 0
        self.fail_once = True

    def listener(self, messages: list[ReceivedMessage], conn: sqlite3.Connection) -> ConsumeResult:
        """Credit each deposit through the transaction's connection."""
        for message in messages:
            event = json.loads(message.body)
            conn.execute(
                "INSERT INTO accounts (name, balance) VALUES (?, ?) ON CONFLICT (name)"
                " DO UPDATE SET balance = balance + excluded.balance",
                (event["account"], event["amount"]),
            )
            if self.fail_once and event["account"] == "carol":
                self.fail_once = False
                raise RuntimeError("simulated crash after a partial write")
        self.credited += len(messages)
        return ConsumeResult.SUCCESS


class Deliveries:
    """Counts what a push consumer delivered and what the wrapper skipped."""

    def __init__(self, label: str) -> None:
        self.label = label
        self.handle: Handler | None = None  # the idempotent listener, set once built
        self.delivered = 0
        self.skipped: list[str] = []
        self.changed = threading.Condition()

    def on_skip(self, message: ReceivedMessage, status: ClaimStatus) -> None:
        self.skipped.append(f"{message.keys[0]}:{status.value}")

    def listener(self, messages: list[ReceivedMessage]) -> ConsumeResult:
        """The push consumer's listener: the idempotent handler, reporting a failed batch."""
        assert self.handle is not None, "set the handler first"
        try:
            result = self.handle(messages)
        except RuntimeError as exc:
            first = messages[0]
            say(
                f"   {self.label}: batch at {first.topic}/{first.queue_id} offset "
                f"{first.queue_offset} failed ({exc}): rolled back, retrying"
            )
            result = ConsumeResult.RECONSUME_LATER
        with self.changed:
            self.delivered += len(messages)
            self.changed.notify_all()
        return result

    def wait(self, done: Callable[[], bool]) -> bool:
        """Wait until ``done()`` is true (up to ``WAIT_S``)."""
        with self.changed:
            return self.changed.wait_for(done, WAIT_S)


def balances(conn: sqlite3.Connection) -> dict[str, int]:
    """Every account's balance."""
    rows = conn.execute("SELECT name, balance FROM accounts ORDER BY name").fetchall()
    return {str(name): int(balance) for name, balance in rows}


def bank_consumer(broker: EmbeddedBroker, deliveries: Deliveries) -> PushConsumer:
    """Group ``bank``: batches of 3 on one listener thread (so the output is repeatable)."""
    return PushConsumer(
        broker,
        "bank",
        {TOPIC: "*"},
        deliveries.listener,
        consume_from=ConsumeFrom.FIRST_OFFSET,
        consume_batch_size=3,
        consume_threads=1,
    )


def reset_offsets(store: Path) -> None:
    """``quiver offsets reset``: rewind group ``bank`` to the earliest offsets (broker closed)."""
    arguments = ["offsets", "reset", "--data", str(store), "--group", "bank"]
    arguments += ["--topic", TOPIC, "--to", "earliest"]
    command = [sys.executable, "-m", "sdk.cli.main", *arguments]
    done = subprocess.run(command, capture_output=True, text=True, timeout=60, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"quiver {' '.join(arguments)} failed: {done.stderr.strip()}")
    say(f"   rewound group bank: quiver {' '.join(arguments)}")


def run(data: Path) -> int:
    """Produce, consume with both groups, restart the bank from offset 0, check the balances."""
    bank = Bank()
    options = BrokerOptions(delay_levels=[100] * 18)  # a failed batch comes back after 100 ms
    with SqliteDedupStore(data / "bank.db") as dedup:
        with dedup.transaction() as conn:
            conn.execute(
                "CREATE TABLE IF NOT EXISTS accounts (name TEXT PRIMARY KEY, balance INTEGER)"
            )
        first = Deliveries("first pass")
        first.handle = idempotent_in_transaction(bank.listener, dedup, on_skip=first.on_skip)
        notified: list[str] = []

        def notify(messages: list[ReceivedMessage]) -> ConsumeResult:
            notified.extend(m.keys[0] for m in messages)  # e.g. send an e-mail
            return ConsumeResult.SUCCESS

        notifier = Deliveries("notifier")
        notifier.handle = idempotent(
            notify, MemoryDedupStore(), key=first_key, on_skip=notifier.on_skip
        )

        with EmbeddedBroker(data / "store", options=options) as broker:
            count = produce(broker)
            say(
                f"1. produced {count} messages: {len(DEPOSITS)} deposits, "
                f"{count - len(DEPOSITS)} re-sent (same UNIQ_KEY)"
            )
            with (
                bank_consumer(broker, first),
                PushConsumer(
                    broker,
                    "notifier",
                    {TOPIC: "*"},
                    notifier.listener,
                    consume_from=ConsumeFrom.FIRST_OFFSET,
                    consume_threads=1,
                ),
            ):
                first.wait(lambda: bank.credited >= len(DEPOSITS))
                notifier.wait(lambda: notifier.delivered >= count)
        say(
            f"2. first pass: {first.delivered} deliveries, {bank.credited} credited, "
            f"{len(first.skipped)} skipped as duplicates ({', '.join(first.skipped)})"
        )
        say(
            f"   notifier (idempotent, in-memory, key=first_key): {notifier.delivered} "
            f"deliveries, {len(notified)} notifications, {len(notifier.skipped)} skipped"
        )

        reset_offsets(data / "store")
        credited_before = bank.credited
        again = Deliveries("restart")
        again.handle = idempotent_in_transaction(bank.listener, dedup, on_skip=again.on_skip)
        with (
            EmbeddedBroker(data / "store", options=options) as broker,
            bank_consumer(broker, again),
        ):
            again.wait(lambda: again.delivered >= count)
        say(
            f"3. restart from offset 0: {again.delivered} deliveries, "
            f"{bank.credited - credited_before} credited, "
            f"{len(again.skipped)} skipped as duplicates"
        )
        with dedup.transaction() as conn:
            final = balances(conn)
        say("4. balances: " + ", ".join(f"{name}={amount}" for name, amount in final.items()))
    if final != EXPECTED or bank.credited != len(DEPOSITS) or len(notified) != len(DEPOSITS):
        say(f"exactly-once: FAILED (expected {EXPECTED}, {len(DEPOSITS)} credits)")
        return 1
    say(f"exactly-once: OK ({len(DEPOSITS)} deposits credited once each)")
    return 0


if __name__ == "__main__":
    sys.exit(run_example(run, default_name="demo", store="store", make=True))
