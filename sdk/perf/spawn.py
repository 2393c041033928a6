"""``--spawn-broker``: a ``quiver broker`` child process on a free loopback port, for one
benchmark run; stopped with SIGTERM (a clean stop) when the run ends."""

from __future__ import annotations

import contextlib
import signal
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import orjson

from sdk.errors import BrokerUnavailableError

__all__ = ["SpawnedBroker", "spawned_broker"]


@dataclass(frozen=True, slots=True)
class SpawnedBroker:
    url: str
    pid: int


@contextlib.contextmanager
def spawned_broker(
    data: Path, *, flush: str = "async", loop: str = "auto"
) -> Iterator[SpawnedBroker]:
    """Run ``quiver broker --data DATA --port 0`` (with ``--flush`` and ``--loop`` as given)
    until the block ends."""
    command = [sys.executable, "-m", "sdk.cli.main", "broker", "--data", str(data), "--port", "0"]
    command += ["--flush", flush, "--loop", loop, "--json", "--quiet"]
    process = subprocess.Popen(command, stdout=subprocess.PIPE)
    try:
        assert process.stdout is not None
        line = process.stdout.readline()
        if not line:
            raise BrokerUnavailableError(f"the spawned broker exited ({process.wait()})")
        yield SpawnedBroker(orjson.loads(line)["listening"], process.pid)
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
        try:
            process.wait(60)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        if process.stdout is not None:
            process.stdout.close()
