"""Ordered messages: each order's lifecycle events consumed strictly in order.

The producer sends the events of several orders (created -> paid -> shipped -> delivered),
interleaved, with the order id as the *sharding key*: every event of one order lands in the same
queue, in send order. Two orderly push consumers (``orderly=True``) share the group's queues;
each queue is consumed by one member at a time (under the broker's queue lease), one batch at a
time, in queue-offset order. One event fails once: an orderly consumer retries it in place after a
short pause instead of skipping it, so the order's later events wait for it.

    .venv/bin/python examples/ordered.py [DIR]

``DIR`` (default: a temporary directory, removed afterwards) receives the store; a Quiver store
already there is deleted first, any other non-empty directory is left alone.
"""

from __future__ import annotations

import sys
import threading
import time
from collections import defaultdict
from pathlib import Path

from _example import run_example, say

from sdk import (
    ConsumeFrom,
    ConsumeResult,
    EmbeddedBroker,
    Message,
    Producer,
    PushConsumer,
    ReceivedMessage,
)

TOPIC = "order-events"
GROUP = "fulfilment"
STEPS = ["created", "paid", "shipped", "delivered"]
ORDERS = [f"order-{n}" for n in range(1, 7)]
WAIT_S = 15.0


class Fulfilment:
    """Applies events per order; checks each order moves through STEPS in order."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.history: dict[str, list[str]] = defaultdict(list)
        self.out_of_order = 0
        self.failed_once: set[str] = set()
        self.done = threading.Event()

    def listener(self, messages: list[ReceivedMessage]) -> ConsumeResult:
        for message in messages:
            order, step = message.body.decode().split(":")
            if order == "order-3" and step == "shipped" and order not in self.failed_once:
                self.failed_once.add(order)  # the carrier is down: try again shortly
                say(f"     {order}: '{step}' failed once; retried in place")
                return ConsumeResult.RECONSUME_LATER
            with self.lock:
                expected = STEPS[len(self.history[order])]
                self.out_of_order += step != expected
                self.history[order].append(step)
                if sum(map(len, self.history.values())) == len(ORDERS) * len(STEPS):
                    self.done.set()
        return ConsumeResult.SUCCESS


def run(data: Path) -> int:
    """Two orderly members share the queues; every order's events are sent, interleaved."""
    fulfilment = Fulfilment()
    with EmbeddedBroker(data) as broker:
        say(f"1. embedded broker over {data}/")
        members = [
            PushConsumer(
                broker,
                GROUP,
                {TOPIC: None},
                fulfilment.listener,
                orderly=True,
                orderly_retry_pause_s=0.2,
                consume_from=ConsumeFrom.FIRST_OFFSET,
            )
            for _ in range(2)
        ]
        for member in members:
            member.start()
        deadline = time.monotonic() + WAIT_S
        while any(not owned_queues(m) for m in members) and time.monotonic() < deadline:
            time.sleep(0.01)  # the second member's queues are handed over under their leases
        say("2. two orderly consumers share the queues:")
        for member in members:
            say(f"     {member.client_id} owns queues {owned_queues(member)}")
        with Producer(broker) as producer:
            queues: dict[str, int] = {}
            for step in STEPS:
                for order in ORDERS:
                    body = f"{order}:{step}".encode()
                    receipt = producer.send(Message(TOPIC, body, keys=order), sharding_key=order)
                    queues[order] = receipt.queue_id
        say(f"3. sent {len(ORDERS) * len(STEPS)} events; queue of each order: {queues}")
        arrived = fulfilment.done.wait(WAIT_S)
        for member in members:
            member.close()
    if not arrived:
        say(f"not every event arrived within {WAIT_S} s")
        return 1
    say("4. what each order went through:")
    for order in ORDERS:
        say(f"     {order}: {' -> '.join(fulfilment.history[order])}")
    verdict = "OK" if not fulfilment.out_of_order else "FAILED"
    say(f"order: {verdict} ({fulfilment.out_of_order} event(s) out of order)")
    return 0 if not fulfilment.out_of_order else 1


def owned_queues(member: PushConsumer) -> list[int]:
    return sorted(q.queue_id for q in member.assignment() if q.topic == TOPIC)


if __name__ == "__main__":
    sys.exit(run_example(run, default_name="store"))
