"""Quickstart: Quiver's SDK in local mode, in one short script.

Opens an embedded broker over a store in ``./quickstart-data`` (or the directory given as the
first argument; a Quiver store already there is deleted first, any other non-empty directory is
left alone), starts a push consumer of group ``billing`` subscribed to ``orders`` with the tag
expression ``paid || refunded``, sends one message with tags and keys and then a batch, waits
until the consumer has received every ``paid`` or ``refunded`` order, and closes everything
(the consumer commits its offsets on close).

    make demo                                # or, from the repository root:
    .venv/bin/python examples/quickstart.py [DIR]

Afterwards: ``quiver store info --data quickstart-data`` and
``quiver offsets show --data quickstart-data --group billing``.
"""

from __future__ import annotations

import sys
import threading
from pathlib import Path

from _example import fresh_directory, say

from sdk import (
    ConsumeFrom,
    ConsumeResult,
    EmbeddedBroker,
    Message,
    Producer,
    PushConsumer,
    ReceivedMessage,
    SendReceipt,
)

TOPIC = "orders"
GROUP = "billing"
EXPRESSION = "paid || refunded"
WAIT_S = 10.0


def order(number: int, state: str) -> Message:
    """An order event: tagged with its state, keyed by order id and customer."""
    body = f'{{"order": {number}, "state": "{state}"}}'.encode()
    return Message(TOPIC, body, tags=state, keys=[f"order-{number}", f"user-{number % 3}"])


def show(receipt: SendReceipt) -> str:
    """Where a sent message was stored: its id, topic/queue and queue offset."""
    where = f"{receipt.topic}/{receipt.queue_id}"
    return f"msg_id {receipt.msg_id} -> {where} offset {receipt.queue_offset}"


class Received:
    """What the listener got, and an event set once ``expected`` messages arrived."""

    def __init__(self, expected: int) -> None:
        self.expected = expected
        self.messages: list[ReceivedMessage] = []
        self.done = threading.Event()
        self._lock = threading.Lock()

    def listener(self, messages: list[ReceivedMessage]) -> ConsumeResult:
        """The push consumer calls this on its listener threads with a batch of messages."""
        with self._lock:
            self.messages.extend(messages)
            if len(self.messages) >= self.expected:
                self.done.set()
        return ConsumeResult.SUCCESS


def main(argv: list[str]) -> int:
    """Run the demo in ``argv[1]`` (default ``./quickstart-data``)."""
    data = Path(argv[1]) if len(argv) > 1 else Path("quickstart-data")
    if not fresh_directory(data):
        say(f"{data} is not empty and holds no Quiver store: not deleting it")
        return 2

    first = order(1, "paid")
    batch = [order(2, "created"), order(3, "paid"), order(2, "paid"), order(1, "refunded")]
    batch += [order(3, "shipped")]
    wanted = [m for m in [first, *batch] if m.tags in ("paid", "refunded")]
    received = Received(len(wanted))

    # Small segments (1 MiB commitlog files) keep the demo's files small; the defaults are
    # RocketMQ's (1 GiB). The geometry is recorded and must match on every later open.
    with EmbeddedBroker(data, commitlog_file_size=1 << 20, cq_entries_per_file=1000) as broker:
        say(f"1. opened an embedded broker over a new store in {data}/")
        with (
            PushConsumer(
                broker,
                GROUP,
                {TOPIC: EXPRESSION},
                received.listener,
                consume_from=ConsumeFrom.FIRST_OFFSET,
            ) as consumer,
            Producer(broker) as producer,
        ):
            queues = sorted(q.queue_id for q in consumer.assignment() if q.topic == TOPIC)
            say(
                f"2. push consumer of group {GROUP!r} started: {TOPIC} with "
                f"{EXPRESSION!r}, queues {queues}"
            )

            receipt = producer.send(first)
            say(f"3. sent one message (tags {first.tags}, keys {list(first.keys)}):")
            say(f"     {show(receipt)}")

            receipts = producer.send_batch(batch)  # one request, one append, one queue
            say(f"4. sent a batch of {len(receipts)} (one append, one queue):")
            for message, receipt in zip(batch, receipts, strict=True):
                say(f"     {show(receipt)}  tags={message.tags}")

            if not received.done.wait(WAIT_S):
                say(f"only {len(received.messages)} of {len(wanted)} arrived in {WAIT_S} s")
                return 1
        got = sorted(received.messages, key=lambda m: (m.queue_id, m.queue_offset))
        say(f"5. consumed {len(got)} of {len(wanted)} expected ({EXPRESSION}):")
        for stored in got:
            say(
                f"     {stored.topic}/{stored.queue_id} offset {stored.queue_offset}  "
                f"tags={stored.tags}  keys={stored.keys}  body={stored.body.decode()}"
            )
    say("6. closed the consumer (offsets committed), the producer and the broker")
    inspect = f"quiver store info --data {data}; quiver offsets show --data {data}"
    say(f"   inspect: {inspect} --group {GROUP}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
