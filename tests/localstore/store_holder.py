"""A store held by another process, for the tests of read-only opens (``ReadOnlyStore`` and
the CLI on a held store).

``python -m tests.localstore.store_holder ROOT FLUSH_MODE COUNT`` opens a :class:`MessageStore`
at ROOT with the tests' tiny geometry (files roll every few messages), puts COUNT messages to
topic ``T`` (message i: body ``m{i}``, queue ``i % 2``, key ``k{i}``, tag ``A``), prints
``ready`` and then (writing nothing while it does not put) obeys its stdin, one command a
line: ``produce`` (keep putting in a thread; answers ``producing`` once one more message is
stored), ``stop`` (answers ``stopped N``, N messages stored in all). End of stdin closes
the store cleanly.

:class:`HeldStore` runs it and speaks that protocol; every wait has a generous timeout.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path
from types import TracebackType

TOPIC = "T"
QUEUES = 2
GEOMETRY = {"commitlog_file_size": 4096, "cq_entries_per_file": 4}
_REPO = Path(__file__).resolve().parents[2]
_TIMEOUT_S = 60.0


def _message(i: int) -> object:
    from localstore.record.codec import NewMessage

    properties = {"KEYS": f"k{i}", "TAGS": "A"}
    return NewMessage(TOPIC, f"m{i}".encode(), i % QUEUES, properties=properties)


def _main(root: str, flush_mode: str, count: int) -> None:
    from localstore.options import StoreOptions
    from localstore.store import MessageStore

    # No periodic flush of the queues and checkpoint, no retention check: while it does not
    # put, the holder changes no byte of the store (its tests hash the files).
    options = StoreOptions(cq_flush_interval_ms=3_600_000, clean_interval_ms=0)
    store = MessageStore(root, flush_mode=flush_mode, options=options, **GEOMETRY)
    stored = 0
    for _ in range(count):
        store.put(_message(stored))  # type: ignore[arg-type]
        stored += 1
    print("ready", flush=True)
    stopping = threading.Event()
    producer: threading.Thread | None = None
    first_more = threading.Event()

    def produce() -> None:
        nonlocal stored
        while not stopping.is_set():
            store.put(_message(stored))  # type: ignore[arg-type]
            stored += 1
            first_more.set()

    for line in sys.stdin:
        command = line.strip()
        if command == "produce" and producer is None:
            producer = threading.Thread(target=produce)
            producer.start()
            first_more.wait(_TIMEOUT_S)
            print("producing", flush=True)
        elif command == "stop" and producer is not None:
            stopping.set()
            producer.join()
            producer = None
            print(f"stopped {stored}", flush=True)
    stopping.set()
    if producer is not None:
        producer.join()
    store.close()


class HeldStore:
    """The holder process over ``root`` (see the module docstring)."""

    def __init__(self, root: Path, *, flush_mode: str = "async", count: int = 40):
        self.root = root
        env = {**os.environ, "PYTHONPATH": str(_REPO)}
        self.process = subprocess.Popen(
            [sys.executable, "-m", "tests.localstore.store_holder", str(root), flush_mode,
             str(count)],
            cwd=_REPO,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )  # fmt: skip
        self._expect("ready")

    @property
    def pid(self) -> int:
        return self.process.pid

    def _expect(self, word: str) -> str:
        assert self.process.stdout is not None
        result: list[str] = []
        reader = threading.Thread(target=lambda: result.append(self.process.stdout.readline()))  # type: ignore[union-attr]
        reader.start()
        reader.join(_TIMEOUT_S)
        line = result[0].strip() if result else ""
        assert line.startswith(word), f"holder said {line!r}, expected {word!r}"
        return line

    def _send(self, command: str) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(command + "\n")
        self.process.stdin.flush()

    def produce(self) -> None:
        """Keep putting until :meth:`stop`; returns once at least one more is stored."""
        self._send("produce")
        self._expect("producing")

    def stop(self) -> int:
        """Stop putting; how many messages are stored in all."""
        self._send("stop")
        return int(self._expect("stopped").split()[1])

    def close(self) -> None:
        """Close the store (cleanly) and wait for the process."""
        if self.process.stdin is not None and not self.process.stdin.closed:
            self.process.stdin.close()
        assert self.process.wait(_TIMEOUT_S) == 0
        if self.process.stdout is not None:
            self.process.stdout.close()

    def __enter__(self) -> HeldStore:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if exc_type is None:
            self.close()
            return
        self.process.kill()  # the test failed: its error is the one to see
        self.process.communicate(timeout=_TIMEOUT_S)


if __name__ == "__main__":
    _main(sys.argv[1], sys.argv[2], int(sys.argv[3]))
