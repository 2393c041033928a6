"""Broadcasting: every consumer of the group receives every message.

Two push consumers of group ``cache-invalidator`` run with
``message_model=MessageModel.BROADCASTING``, as two application instances would (each names its
instance: ``instance_name="node-a"`` / ``"node-b"``). The producer sends six messages spread over
the topic's four queues; each consumer receives all six (in CLUSTERING mode, the default, the
group would share them out instead). A broadcasting consumer keeps its offsets itself, in a local
file named by host and instance (``offsets_dir``; default ``~/.quiver_offsets``), here under
``DIR/offsets``; the example prints where each one's file is.

    .venv/bin/python examples/broadcast.py [DIR]

``DIR`` (default: a temporary directory, removed afterwards) receives the store (``DIR/store``)
and the offsets (``DIR/offsets``); a directory holding a Quiver store from an earlier run is
deleted first, any other non-empty directory is left alone.
"""

from __future__ import annotations

import json
import sys
import threading
from pathlib import Path

from _example import run_example, say

from sdk import (
    ConsumeFrom,
    ConsumeResult,
    EmbeddedBroker,
    Message,
    MessageModel,
    Producer,
    PushConsumer,
    ReceivedMessage,
)

TOPIC = "price-changes"
GROUP = "cache-invalidator"
INSTANCES = ["node-a", "node-b"]
COUNT = 6
WAIT_S = 10.0


class Node:
    """One application instance: what its consumer received."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.bodies: list[str] = []
        self.done = threading.Event()
        self.lock = threading.Lock()

    def listener(self, messages: list[ReceivedMessage]) -> ConsumeResult:
        with self.lock:
            self.bodies.extend(m.body.decode() for m in messages)
            if len(self.bodies) >= COUNT:
                self.done.set()
        return ConsumeResult.SUCCESS


def run(data: Path) -> int:
    """Two broadcasting consumers, six messages, each consumer sees all six."""
    nodes = [Node(name) for name in INSTANCES]
    offsets_dir = data / "offsets"
    with EmbeddedBroker(data / "store") as broker:
        say(f"1. embedded broker over {data / 'store'}/")
        consumers = [
            PushConsumer(
                broker,
                GROUP,
                {TOPIC: "*"},
                node.listener,
                message_model=MessageModel.BROADCASTING,
                instance_name=node.name,
                offsets_dir=str(offsets_dir),
                consume_from=ConsumeFrom.FIRST_OFFSET,
            )
            for node in nodes
        ]
        for consumer in consumers:
            consumer.start()
        say(f"2. started {len(consumers)} BROADCASTING consumers of group {GROUP!r}:")
        for node, consumer in zip(nodes, consumers, strict=True):
            queues = [q.queue_id for q in consumer.assignment()]
            say(f"     {node.name}: client id {consumer.client_id}, queues {queues}")
        try:
            with Producer(broker) as producer:
                receipts = [
                    producer.send(Message(TOPIC, f"sku-{n} price changed".encode()))
                    for n in range(1, COUNT + 1)
                ]
            spread = sorted({r.queue_id for r in receipts})
            say(f"3. sent {COUNT} messages to {TOPIC} (round-robin over queues {spread})")
            for node in nodes:
                node.done.wait(WAIT_S)
        finally:
            for consumer in consumers:
                consumer.close()  # persists each consumer's offsets to its own file
    say("4. each consumer received:")
    for node in nodes:
        say(f"     {node.name}: {len(node.bodies)} of {COUNT}: {sorted(node.bodies)}")
    say(f"5. offsets, one file per instance (under {offsets_dir}):")
    for node in nodes:
        for path in sorted(offsets_dir.glob(f"*@{node.name}/{GROUP}/offsets.json")):
            table = json.loads(path.read_text())["offsetTable"]
            saved = ", ".join(f"{e['queueId']}->{e['offset']}" for e in table)
            say(f"     {node.name}: {path.relative_to(offsets_dir)} (queue->offset: {saved})")
    ok = all(len(node.bodies) == len(set(node.bodies)) == COUNT for node in nodes)
    say(f"broadcasting: {'OK' if ok else 'FAILED'} (every consumer got every message once)")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(run_example(run, default_name="broadcast", store="store"))
