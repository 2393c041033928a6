"""Idempotent consumer: duplicates delivered, each deposit credited exactly once.

Puts deposit events into an embedded store (``localstore``), two of them sent twice with the same
``UNIQ_KEY`` (a producer retrying after a timeout), then consumes the queue with a listener made
idempotent by ``sdk.idempotency``. The listener credits accounts in SQLite, in the same database
and the same transaction as the dedup records (``idempotent_in_transaction``), so a credit and its
``CONSUMED`` record commit together: a failure rolls both back, a re-delivery finds the record.
Along the way one batch fails once (rolled back, then retried) and the consumer "restarts" from an
old offset, so the whole queue is delivered again.

    .venv/bin/python examples/idempotent_consumer.py [DIR]

``DIR`` (default: a temporary directory) receives the store and ``bank.db``.
"""

from __future__ import annotations

import json
import sqlite3
import sys
import tempfile
from pathlib import Path

from localstore import MessageStore, NewMessage, StoredMessage, UniqKeyGenerator
from sdk.idempotency import (
    ClaimStatus,
    ConsumeResult,
    Listener,
    SqliteDedupStore,
    idempotent_in_transaction,
)

TOPIC = "deposits"
DEPOSITS = [("alice", 100), ("bob", 50), ("alice", 25), ("carol", 10)]
EXPECTED = {"alice": 125, "bob": 50, "carol": 10}


def deposit(uniq_key: str, number: int, account: str, amount: int) -> NewMessage:
    """A deposit event keyed by its deposit number, with a producer-side id."""
    body = json.dumps({"account": account, "amount": amount}).encode()
    properties = {"KEYS": f"deposit-{number}", "UNIQ_KEY": uniq_key}
    return NewMessage(TOPIC, body, queue_id=0, properties=properties)


def produce(store: MessageStore) -> int:
    """Put the deposits, then re-send the first two with their original ``UNIQ_KEY``."""
    ids = UniqKeyGenerator()
    sent = [deposit(ids.next(), n, account, amount) for n, (account, amount) in enumerate(DEPOSITS)]
    for message in [*sent, sent[0], sent[1]]:
        result = store.put(message)
        if not result.ok:
            sys.exit(f"put failed: {result.status.value} {result.detail}")
    return len(sent) + 2


class Bank:
    """The business side: accounts in SQLite, credited by the listener."""

    def __init__(self) -> None:
        self.credited = 0
        self.fail_once = True

    def listener(self, messages: list[StoredMessage], conn: sqlite3.Connection) -> ConsumeResult:
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


def balances(conn: sqlite3.Connection) -> dict[str, int]:
    """Every account's balance."""
    rows = conn.execute("SELECT name, balance FROM accounts ORDER BY name").fetchall()
    return {str(name): int(balance) for name, balance in rows}


def consume(store: MessageStore, handle: Listener[StoredMessage], label: str) -> int:
    """Deliver the queue from offset 0 in batches of 3 until every batch succeeded."""
    offset, delivered = 0, 0
    while True:
        got = store.get_messages(TOPIC, 0, offset, max_count=3)
        if not got.messages:
            return delivered
        delivered += len(got.messages)
        try:
            result = handle(got.messages)
        except RuntimeError as exc:
            print(f"   {label}: batch at offset {offset} failed ({exc}): rolled back, retrying")
            continue
        if result is ConsumeResult.SUCCESS:
            offset = got.next_offset


def main(argv: list[str]) -> int:
    """Run the example in ``argv[1]`` or a temporary directory."""
    with tempfile.TemporaryDirectory() as scratch:
        data = Path(argv[1]) if len(argv) > 1 else Path(scratch)
        data.mkdir(parents=True, exist_ok=True)
        return run(data)


def run(data: Path) -> int:
    """Produce, consume twice, check the balances."""
    skipped: list[str] = []
    bank = Bank()
    with (
        MessageStore(data / "store", commitlog_file_size=1 << 20, cq_entries_per_file=1000) as mq,
        SqliteDedupStore(data / "bank.db") as dedup,
    ):
        count = produce(mq)
        print(f"1. produced {count} messages: {len(DEPOSITS)} deposits, 2 re-sent (same UNIQ_KEY)")
        with dedup.transaction() as conn:
            conn.execute(
                "CREATE TABLE IF NOT EXISTS accounts (name TEXT PRIMARY KEY, balance INTEGER)"
            )

        def on_skip(message: StoredMessage, status: ClaimStatus) -> None:
            skipped.append(f"{message.keys[0]}:{status.value}")

        handle = idempotent_in_transaction(bank.listener, dedup, on_skip=on_skip)
        delivered = consume(mq, handle, "first pass")
        print(
            f"2. first pass: {delivered} deliveries, {bank.credited} credited, "
            f"{len(skipped)} skipped as duplicates ({', '.join(skipped)})"
        )
        credited_before, skipped_before = bank.credited, len(skipped)
        delivered = consume(mq, handle, "restart")
        print(
            f"3. restart from offset 0: {delivered} deliveries, "
            f"{bank.credited - credited_before} credited, "
            f"{len(skipped) - skipped_before} skipped as duplicates"
        )
        with dedup.transaction() as conn:
            final = balances(conn)
        print("4. balances: " + ", ".join(f"{name}={amount}" for name, amount in final.items()))
    if final != EXPECTED or bank.credited != len(DEPOSITS):
        print(f"exactly-once: FAILED (expected {EXPECTED}, {len(DEPOSITS)} credits)")
        return 1
    print(f"exactly-once: OK ({len(DEPOSITS)} deposits credited once each)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
