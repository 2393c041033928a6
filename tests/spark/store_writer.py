"""A broker writing a store in another process, for the tests of the ``quiver`` source.

``python -m tests.spark.store_writer ROOT FLUSH_MODE FIRST TOTAL`` opens an
:class:`EmbeddedBroker` over ROOT (tiny segments, so files roll while it writes), creates topic
``orders`` with :data:`QUEUES` queues, sends FIRST messages, prints ``ready``, sends the rest
up to TOTAL (in small batches, round the queues), prints ``done``, and closes the broker at
the end of its stdin. Message i: body :func:`body_of` (long enough to span many pages), key
``k{i}``, tag ``t{i % 3}``, property ``n`` = i: a row whose body does not match its key is
torn.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from types import TracebackType

TOPIC = "orders"
QUEUES = 3
GEOMETRY = {"commitlog_file_size": 64 * 1024, "cq_entries_per_file": 64}
BATCH = 7
_REPO = Path(__file__).resolve().parents[2]
_TIMEOUT_S = 120.0


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


def _main(root: str, flush_mode: str, first: int, total: int) -> None:
    from sdk import Admin, EmbeddedBroker, Producer

    with EmbeddedBroker(root, flush_mode=flush_mode, **GEOMETRY) as broker:
        with Admin(broker) as admin:
            admin.create_topic(TOPIC, queue_count=QUEUES)
        with Producer(broker) as producer:
            _send(producer, 0, first)
            print("ready", flush=True)
            _send(producer, first, total)
            print("done", flush=True)
        sys.stdin.read()


class StoreWriter:
    """The writer process; ``wait_for(line)`` blocks until it prints ``line``."""

    def __init__(self, root: Path, flush_mode: str, first: int, total: int) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-m", "tests.spark.store_writer", str(root), flush_mode,
             str(first), str(total)],
            cwd=_REPO, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
        )  # fmt: skip

    def wait_for(self, line: str) -> None:
        assert self.process.stdout is not None
        got = self.process.stdout.readline().strip()
        assert got == line, f"writer said {got!r}, expected {line!r}"

    def close(self) -> None:
        assert self.process.stdin is not None and self.process.stdout is not None
        self.process.stdin.close()
        try:
            assert self.process.wait(_TIMEOUT_S) == 0
        finally:
            self.process.stdout.close()

    def __enter__(self) -> StoreWriter:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if exc_type is None:
            self.close()
        else:
            self.process.kill()
            self.process.wait(_TIMEOUT_S)
            for pipe in (self.process.stdin, self.process.stdout):
                if pipe is not None:
                    pipe.close()


if __name__ == "__main__":
    _main(sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))
