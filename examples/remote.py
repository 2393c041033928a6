"""Remote mode: a broker server in its own process, and clients that reach it by URL.

The script starts ``quiver broker --data DIR/store --port 0`` (a free loopback port) as a child
process and reads the URL it prints. A :class:`sdk.Producer` sends five orders to it, a
:class:`sdk.PushConsumer` of group ``billing`` in this process receives them over HTTP, and
:class:`sdk.Admin` shows the group's lag once everything is consumed. Then the broker is stopped
with SIGTERM (as Ctrl-C or a service manager would), which flushes the store and removes its abort
marker: its next start recovers nothing.

    .venv/bin/python examples/remote.py [DIR]

In a real deployment the broker runs on its own (``quiver broker --data /var/lib/quiver --host
0.0.0.0``) and applications on other machines use its URL. ``DIR`` (default: a temporary
directory, removed afterwards) receives the store (``DIR/store``).
"""

from __future__ import annotations

import sys
import threading
from pathlib import Path

from _example import run_example, say, start_broker, stop_broker

from sdk import Admin, ConsumeFrom, Message, Producer, PushConsumer, ReceivedMessage

TOPIC = "orders"
GROUP = "billing"
ORDERS = 5


def run(data: Path) -> int:
    broker, url = start_broker(data / "store")
    say(f"1. a broker serves {data / 'store'} at {url}")
    received: list[ReceivedMessage] = []
    all_in = threading.Event()

    def on_orders(messages: list[ReceivedMessage]) -> None:
        received.extend(messages)
        for message in messages:
            say(f"   billing got {message.body.decode()} (queue {message.queue_id})")
        if len(received) >= ORDERS:
            all_in.set()

    try:
        with (
            PushConsumer(
                url, GROUP, {TOPIC: None}, on_orders, consume_from=ConsumeFrom.FIRST_OFFSET
            ),
            Producer(url) as producer,
        ):
            say(f"2. a producer sends {ORDERS} orders over HTTP")
            for number in range(ORDERS):
                producer.send(Message(TOPIC, f"order-{number}".encode(), keys=[f"o{number}"]))
            if not all_in.wait(30):
                say("   the consumer did not receive every order in 30 s")
                return 1
        with Admin(url) as admin:
            lag = sum(queue.lag for queue in admin.lag(GROUP, TOPIC))
            say(f"3. the group {GROUP} has consumed everything: lag {lag}")
    finally:
        status = stop_broker(broker)
    say(f"4. the broker stopped cleanly (exit status {status})")
    return 0 if status == 0 and len(received) >= ORDERS else 1


if __name__ == "__main__":
    sys.exit(run_example(run, default_name="remote", store="store"))
