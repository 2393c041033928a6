"""A broker writing a store in another process, for the tests of the ``quiver`` source.

``python -m tests.spark.store_writer ROOT FLUSH_MODE FIRST`` opens an :class:`EmbeddedBroker`
over ROOT (small segments, so files roll while it writes), creates topic ``orders`` with
:data:`QUEUES` queues, sends FIRST messages and prints ``ready``. Then it obeys its stdin, a
command a line: ``produce`` (keep sending in a thread, small batches round the queues, up to
:data:`MOST` messages in all; answers ``producing`` once one more batch is stored), ``stop``
(answers ``stopped N``, N messages stored in all). End of stdin closes the broker. Message i:
body :func:`body_of`, key ``k{i}``, tag ``t{i % 3}``, property ``n`` = i: a row whose body does
not match its key is torn.

:class:`StoreWriter` runs it and speaks that protocol; every wait has a generous timeout.
"""

from __future__ import annotations

import subprocess
import sys
import threading
from pathlib import Path
from types import TracebackType

TOPIC = "orders"
QUEUES = 3
GEOMETRY = {"commitlog_file_size": 64 * 1024, "cq_entries_per_file": 64}
BATCH = 7
MOST = 200_000  # messages a writer stores at most (a bound on the disk a test takes)
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


def _main(root: str, flush_mode: str, first: int) -> None:
    from sdk import Admin, EmbeddedBroker, Producer

    with EmbeddedBroker(root, flush_mode=flush_mode, **GEOMETRY) as broker:
        with Admin(broker) as admin:
            admin.create_topic(TOPIC, queue_count=QUEUES)
        with Producer(broker) as producer:
            _send(producer, 0, first)
            print("ready", flush=True)
            _obey(producer, first)


def _obey(producer: object, stored: int) -> None:
    stopping, one_more = threading.Event(), threading.Event()
    sender: threading.Thread | None = None

    def produce() -> None:
        nonlocal stored
        while not stopping.is_set() and stored < MOST:
            _send(producer, stored, stored + BATCH)
            stored += BATCH
            one_more.set()

    for line in sys.stdin:
        if line.strip() == "produce" and sender is None:
            sender = threading.Thread(target=produce)
            sender.start()
            one_more.wait(_TIMEOUT_S)
            print("producing", flush=True)
        elif line.strip() == "stop" and sender is not None:
            stopping.set()
            sender.join()
            sender = None
            print(f"stopped {stored}", flush=True)
    stopping.set()
    if sender is not None:
        sender.join()


class StoreWriter:
    """The writer process; ``wait_for(line)`` blocks until it prints ``line``."""

    def __init__(self, root: Path, flush_mode: str, first: int) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-m", "tests.spark.store_writer", str(root), flush_mode,
             str(first)],
            cwd=_REPO, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
        )  # fmt: skip

    def wait_for(self, line: str) -> str:
        """Block until the writer's next line, which must start with ``line``; return it."""
        assert self.process.stdout is not None
        got = self.process.stdout.readline().strip()
        assert got.startswith(line), f"writer said {got!r}, expected {line!r}"
        return got

    def tell(self, command: str) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(command + "\n")
        self.process.stdin.flush()

    def produce(self) -> None:
        """Start sending, and return once one more batch is stored."""
        self.tell("produce")
        self.wait_for("producing")

    def stop(self) -> int:
        """Stop sending; the number of messages stored in all."""
        self.tell("stop")
        return int(self.wait_for("stopped").split()[1])

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
    _main(sys.argv[1], sys.argv[2], int(sys.argv[3]))
