"""Delayed messages: a delay level, and an absolute delivery time.

The broker runs with a short custom delay table, ``BrokerOptions(delay_levels=[250, 500, 1000,
2000])`` (level 1 = 250 ms ... level 4 = 2 s; RocketMQ's default table is 1 s, 5 s, 10 s, 30 s,
1 m, ... 2 h for levels 1-18). The producer sends a plain message, two messages with
``delay_level`` 1 and 3, and one with ``deliver_at_ms`` 1.5 s ahead. The broker keeps delayed
messages under ``SCHEDULE_TOPIC_XXXX`` (their receipts carry queue offset -1) and puts each into
its topic once due, never earlier. The consumer prints when each message was sent and received.

    .venv/bin/python examples/delayed.py [DIR]

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
)

TOPIC = "reminders"
GROUP = "reminder-service"
DELAYS_MS = [250, 500, 1000, 2000]  # delay levels 1-4
WAIT_S = 10.0


def now_ms() -> int:
    return time.time_ns() // 1_000_000


class Arrivals:
    """Receive times by message id; an event set once ``expected`` messages arrived."""

    def __init__(self, expected: int) -> None:
        self.expected = expected
        self.received_ms: dict[str, int] = {}
        self.done = threading.Event()
        self.lock = threading.Lock()

    def listener(self, messages: list[ReceivedMessage]) -> ConsumeResult:
        arrived = now_ms()
        with self.lock:
            for message in messages:
                if message.msg_id is not None:
                    self.received_ms.setdefault(message.msg_id, arrived)
            if len(self.received_ms) >= self.expected:
                self.done.set()
        return ConsumeResult.SUCCESS


def plans(sent_at_ms: int) -> list[tuple[str, Message, int]]:
    """What to send at ``sent_at_ms``: (label, message, the delay asked for in ms)."""
    return [
        ("no delay", Message(TOPIC, b"now"), 0),
        ("delay_level=1", Message(TOPIC, b"level 1", delay_level=1), DELAYS_MS[0]),
        ("delay_level=3", Message(TOPIC, b"level 3", delay_level=3), DELAYS_MS[2]),
        (
            "deliver_at_ms=now+1500",
            Message(TOPIC, b"at a time", deliver_at_ms=sent_at_ms + 1500),
            1500,
        ),
    ]


def run(data: Path) -> int:
    """Send a plain, two delay-level and one deliver-at message; time their arrival."""
    count = len(plans(0))
    arrivals = Arrivals(count)
    options = BrokerOptions(delay_levels=DELAYS_MS)
    sent: list[tuple[str, str, int, int]] = []  # label, msg_id, sent at, delay asked for
    with EmbeddedBroker(data, options=options) as broker:
        say(f"1. embedded broker over {data}/, delay levels 1-4 = {DELAYS_MS} ms")
        with (
            PushConsumer(
                broker,
                GROUP,
                {TOPIC: "*"},
                arrivals.listener,
                consume_from=ConsumeFrom.FIRST_OFFSET,
            ),
            Producer(broker) as producer,
        ):
            say("2. sent (a delayed message has no queue offset until it is delivered):")
            for index in range(count):
                sent_at = now_ms()
                label, message, delay_ms = plans(sent_at)[index]
                receipt = producer.send(message)
                sent.append((label, receipt.msg_id, sent_at, delay_ms))
                say(f"     {label:<24} queue offset {receipt.queue_offset:>2}  ({receipt.msg_id})")
            if not arrivals.done.wait(WAIT_S):
                say(f"only {len(arrivals.received_ms)} of {count} arrived in {WAIT_S} s")
                return 1
    say("3. received (ms after its send):")
    early = 0
    for label, msg_id, sent_at, delay_ms in sent:
        waited = arrivals.received_ms[msg_id] - sent_at
        early += waited < delay_ms
        verdict = "EARLY" if waited < delay_ms else "not early"
        say(f"     {label:<24} after {waited:>5} ms, asked {delay_ms:>5} ms: {verdict}")
    say(f"delays: {'OK' if not early else 'FAILED'} ({len(sent) - early} of {len(sent)} on time)")
    return 0 if not early else 1


if __name__ == "__main__":
    sys.exit(run_example(run, default_name="store"))
