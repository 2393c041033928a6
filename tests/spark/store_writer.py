"""A broker writing a store in another process, for the tests of the ``quiver`` source.

``python -m tests.spark.store_writer ROOT FLUSH_MODE FIRST`` opens an :class:`EmbeddedBroker`
over ROOT (small segments, so files roll while it writes), creates topic ``orders`` with
:data:`QUEUES` queues, sends FIRST messages and prints ``ready``. Then it obeys the
commands of :mod:`tests.commanded_writer` on its stdin (``produce`` sends small batches round
the queues, up to :data:`MOST` messages in all). End of stdin closes the broker. Message i:
body :func:`body_of`, key ``k{i}``, tag ``t{i % 3}``, property ``n`` = i: a row whose body does
not match its key is torn.

:class:`StoreWriter` runs it and speaks that protocol.
"""

from __future__ import annotations

import sys
from pathlib import Path

from tests.commanded_writer import CommandedWriter, obey_commands

TOPIC = "orders"
QUEUES = 3
GEOMETRY = {"commitlog_file_size": 64 * 1024, "cq_entries_per_file": 64}
BATCH = 7
MOST = 200_000  # messages a writer stores at most (a bound on the disk a test takes)


def body_of(i: int) -> bytes:
    return f"order-{i}:".encode() + bytes([i % 251]) * (100 + i % 50)


def _send(producer: object, start: int, stop: int) -> None:
    from sdk import Message

    for first in range(start, stop, BATCH):
        numbers = range(first, min(first + BATCH, stop))
        batch = [
            Message(TOPIC, body_of(i), tags=f"t{i % 3}", keys=[f"k{i}"], properties={"n": str(i)})
            for i in numbers
        ]
        producer.send_batch(batch, queue_id=(first // BATCH) % QUEUES)  # type: ignore[attr-defined]


def _main(root: str, flush_mode: str, first: int) -> None:
    from sdk import Admin, EmbeddedBroker, Producer

    with EmbeddedBroker(root, flush_mode=flush_mode, **GEOMETRY) as broker:
        with Admin(broker) as admin:
            admin.create_topic(TOPIC, queue_count=QUEUES)
        with Producer(broker) as producer:
            _send(producer, 0, first)
            print("ready", flush=True)

            def send_batch(stored: int) -> int:
                _send(producer, stored, stored + BATCH)
                return stored + BATCH

            obey_commands(send_batch, first, MOST)


class StoreWriter(CommandedWriter):
    """The writer process; ``wait_for(line)`` blocks until it prints ``line``."""

    def __init__(self, root: Path, flush_mode: str, first: int) -> None:
        super().__init__("tests.spark.store_writer", str(root), flush_mode, str(first))


if __name__ == "__main__":
    _main(sys.argv[1], sys.argv[2], int(sys.argv[3]))
