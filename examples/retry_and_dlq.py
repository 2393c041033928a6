"""Retries and the dead-letter queue: a listener that fails, and where failed messages go.

A push consumer of group ``billing`` consumes four orders. Its listener fails ``order-2`` once
(it succeeds when the message comes back) and fails ``order-3`` every time. A failed message is
sent back to the broker, which re-delivers it through the group's retry topic ``%RETRY%billing``
with ``reconsume_times`` one higher, after the delay of level ``3 + reconsume_times``. Once a
message has been reconsumed ``max_reconsume_times`` times (2 here; 16 by default) the next
failure moves it to the group's dead-letter topic ``%DLQ%billing`` instead. A second push
consumer, subscribed to that topic, then reads the dead letter.

The broker runs with a short delay table (``BrokerOptions(delay_levels=[100] * 18)``: every
level is 100 ms instead of RocketMQ's 1 s ... 2 h), so the example takes about a second.

    .venv/bin/python examples/retry_and_dlq.py [DIR]

``DIR`` (default: a temporary directory, removed afterwards) receives the store; a Quiver store
already there is deleted first, any other non-empty directory is left alone.
"""

from __future__ import annotations

import sys
import threading
import time
from pathlib import Path

from _example import run_example, say

from sdk import (
    BrokerOptions,
    ConsumeFrom,
    ConsumeResult,
    EmbeddedBroker,
    Message,
    Producer,
    PushConsumer,
    ReceivedMessage,
    dlq_topic,
    retry_topic,
)

TOPIC = "orders"
GROUP = "billing"
DLQ_READER = "billing-dlq-reader"
MAX_RECONSUME_TIMES = 2
FAIL_ONCE = "order-2"
POISON = "order-3"
WAIT_S = 10.0


class Billing:
    """The failing listener: records every delivery (key, reconsume times, when)."""

    def __init__(self) -> None:
        self.started = time.monotonic()
        self.deliveries: list[tuple[str, int]] = []
        self.succeeded: set[str] = set()
        self.lock = threading.Lock()

    def listener(self, messages: list[ReceivedMessage]) -> ConsumeResult:
        message = messages[0]  # consume_batch_size is 1 (the default)
        key = message.keys[0]
        with self.lock:
            self.deliveries.append((key, message.reconsume_times))
        failing = key == POISON or (key == FAIL_ONCE and message.reconsume_times == 0)
        elapsed_ms = (time.monotonic() - self.started) * 1000
        say(
            f"   +{elapsed_ms:5.0f} ms  {GROUP} got {key} ({message.topic}, "
            f"reconsume_times={message.reconsume_times}): "
            + ("fails -> RECONSUME_LATER" if failing else "SUCCESS")
        )
        if failing:
            return ConsumeResult.RECONSUME_LATER
        with self.lock:
            self.succeeded.add(key)
        return ConsumeResult.SUCCESS


class DeadLetters:
    """The DLQ reader's listener: keeps what arrives and signals the first one."""

    def __init__(self) -> None:
        self.messages: list[ReceivedMessage] = []
        self.arrived = threading.Event()

    def listener(self, messages: list[ReceivedMessage]) -> ConsumeResult:
        self.messages.extend(messages)
        self.arrived.set()
        return ConsumeResult.SUCCESS


def run(data: Path) -> int:
    """Send four orders, consume them with a failing listener, read the DLQ."""
    billing, dead = Billing(), DeadLetters()
    sent: dict[str, str] = {}  # key -> msg_id
    options = BrokerOptions(delay_levels=[100] * 18)  # every delay level is 100 ms
    with EmbeddedBroker(data, options=options) as broker:
        say(f"1. embedded broker over {data}/, every delay level 100 ms")
        with (
            Producer(broker) as producer,
            PushConsumer(
                broker,
                GROUP,
                {TOPIC: "*"},
                billing.listener,
                consume_from=ConsumeFrom.FIRST_OFFSET,
                max_reconsume_times=MAX_RECONSUME_TIMES,
            ),
            PushConsumer(
                broker,
                DLQ_READER,
                {dlq_topic(GROUP): None},
                dead.listener,
                consume_from=ConsumeFrom.FIRST_OFFSET,
            ),
        ):
            say(
                f"2. sending order-1..order-4 to {TOPIC}; {GROUP} fails {FAIL_ONCE} once and "
                f"{POISON} always (max_reconsume_times={MAX_RECONSUME_TIMES}); retries come "
                f"back through {retry_topic(GROUP)}:"
            )
            for number in range(1, 5):
                body = f"order {number}".encode()
                receipt = producer.send(Message(TOPIC, body, keys=[f"order-{number}"]))
                sent[f"order-{number}"] = receipt.msg_id
            arrived = dead.arrived.wait(WAIT_S)
            deadline = time.monotonic() + WAIT_S
            while len(billing.succeeded) < 3 and time.monotonic() < deadline:
                time.sleep(0.05)
        # leaving ``with`` closed both consumers (offsets committed) and the producer
    poison_tries = [times for key, times in billing.deliveries if key == POISON]
    say(
        f"3. {POISON} was delivered {len(poison_tries)} times (reconsume_times "
        f"{poison_tries}), then dead-lettered; succeeded: {sorted(billing.succeeded)}"
    )
    if not arrived or not dead.messages:
        say(f"dead letter: NOT FOUND in {dlq_topic(GROUP)} after {WAIT_S} s")
        return 1
    letter = dead.messages[0]
    say(
        f"4. {DLQ_READER} read {len(dead.messages)} message(s) from {letter.topic}: "
        f"keys={letter.keys}, body={letter.body.decode()!r}, "
        f"reconsume_times={letter.reconsume_times}, "
        f"original topic {letter.original_topic}, msg_id {letter.msg_id} "
        f"({'the one sent' if letter.msg_id == sent[POISON] else 'NOT the one sent'})"
    )
    ok = (
        [m.keys[0] for m in dead.messages] == [POISON]
        and poison_tries == list(range(MAX_RECONSUME_TIMES + 1))
        and billing.succeeded == {"order-1", "order-2", "order-4"}
    )
    say(f"retry and DLQ: {'OK' if ok else 'FAILED'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(run_example(run, default_name="store"))
