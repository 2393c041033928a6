"""A child process that writes a store on command, both ends of its conversation.

The child sets up, prints ``ready``, then obeys its stdin, a command a line: ``produce`` (keep
writing in a thread; answers ``producing`` once one more write is stored), ``stop`` (answers
``stopped N``, N messages stored in all). End of stdin ends the writing.
:func:`obey_commands` is the child's side, :class:`CommandedWriter` the parent's; every wait
has a generous timeout.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import Self

TIMEOUT_S = 120.0
_REPO = Path(__file__).resolve().parents[1]


def obey_commands(write_more: Callable[[int], int], stored: int, most: int | None = None) -> None:
    """Obey stdin until it ends. ``write_more(stored)`` stores the next messages and returns
    the new count stored; ``most`` bounds what ``produce`` writes in all."""
    stopping, one_more = threading.Event(), threading.Event()
    writer: threading.Thread | None = None

    def produce() -> None:
        nonlocal stored
        while not stopping.is_set() and (most is None or stored < most):
            stored = write_more(stored)
            one_more.set()

    for line in sys.stdin:
        command = line.strip()
        if command == "produce" and writer is None:
            writer = threading.Thread(target=produce)
            writer.start()
            one_more.wait(TIMEOUT_S)
            print("producing", flush=True)
        elif command == "stop" and writer is not None:
            stopping.set()
            writer.join()
            writer = None
            print(f"stopped {stored}", flush=True)
    stopping.set()
    if writer is not None:
        writer.join()


class CommandedWriter:
    """``python -m module *args`` run from the repository, spoken to (see the module
    docstring)."""

    def __init__(self, module: str, *args: str) -> None:
        env = {**os.environ, "PYTHONPATH": str(_REPO)}
        self.process = subprocess.Popen(
            [sys.executable, "-m", module, *args],
            cwd=_REPO,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )

    @property
    def pid(self) -> int:
        return self.process.pid

    def wait_for(self, word: str) -> str:
        """The child's next line, which must start with ``word`` within the timeout."""
        stdout = self.process.stdout
        assert stdout is not None
        result: list[str] = []
        reader = threading.Thread(target=lambda: result.append(stdout.readline()), daemon=True)
        reader.start()
        reader.join(TIMEOUT_S)
        line = result[0].strip() if result else ""
        assert line.startswith(word), f"the writer said {line!r}, expected {word!r}"
        return line

    def tell(self, command: str) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(command + "\n")
        self.process.stdin.flush()

    def produce(self) -> None:
        """Keep writing until :meth:`stop`; returns once at least one more is stored."""
        self.tell("produce")
        self.wait_for("producing")

    def stop(self) -> int:
        """Stop writing; how many messages are stored in all."""
        self.tell("stop")
        return int(self.wait_for("stopped").split()[1])

    def close(self) -> None:
        """End the child's stdin (it closes its store cleanly) and wait for it to exit 0."""
        if self.process.stdin is not None and not self.process.stdin.closed:
            self.process.stdin.close()
        assert self.process.wait(TIMEOUT_S) == 0
        if self.process.stdout is not None:
            self.process.stdout.close()

    def __enter__(self) -> Self:
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
        self.process.communicate(timeout=TIMEOUT_S)
