"""A real broker server in a child process, on a free loopback port, for remote-mode tests.

:class:`BrokerProcess` starts ``sdk.server.run.serve`` in a new interpreter (the same code
``quiver broker`` runs, with test settings: a small store geometry and a short delay table),
reads the URL it prints, and stops it with SIGTERM (a clean shutdown, whose exit status the
test can check) or SIGKILL (a crash, also one it deals itself at a chosen point).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[3]

SMALL_GEOMETRY: dict[str, Any] = {
    "commitlog_file_size": 1 << 20,
    "cq_entries_per_file": 1024,
    "index_slots": 1024,
    "index_entries": 4096,
}

_CHILD = """
import asyncio, logging, signal, sys
from sdk.broker.service import BrokerOptions
from sdk.server.run import ServerOptions, serve

logging.basicConfig(level=logging.INFO, stream=sys.stderr)
die_after_sends = {die_after_sends!r}
if die_after_sends:
    import os
    from sdk.broker.service import BrokerService

    stored_sends = 0
    store_send = BrokerService.send

    def send_then_die(self, *args, **kwargs):
        global stored_sends
        result = store_send(self, *args, **kwargs)
        stored_sends += 1
        if stored_sends >= die_after_sends:  # stored, never answered
            os.kill(os.getpid(), signal.SIGKILL)
        return result

    BrokerService.send = send_then_die
options = ServerOptions(
    data={data!r},
    port={port!r},
    broker=BrokerOptions(broker_name={name!r}, **{broker!r}),
    geometry={geometry!r},
    max_request_bytes={max_request_bytes!r},
)

async def main():
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    await serve(options, stop, on_listening=lambda url: print(url, flush=True))

asyncio.run(main())
"""


class BrokerProcess:
    """A broker server over ``data`` in a child process (see the module docstring).

    ``port`` 0 takes a free one; a broker restarted after :meth:`kill` is given the port of
    the one it replaces (``port=old.port``), so clients holding its URL find it again.
    ``die_after_sends``: the broker SIGKILLs itself right after storing its n-th send, before
    answering it (a crash at the one moment a retry could store a message twice)."""

    def __init__(
        self,
        data: Path,
        *,
        name: str = "broker-a",
        port: int = 0,
        geometry: dict[str, Any] | None = None,
        max_request_bytes: int | None = None,
        die_after_sends: int | None = None,
        **broker: Any,
    ) -> None:
        self.data = data
        source = _CHILD.format(
            data=str(data),
            name=name,
            port=port,
            broker=broker,
            geometry=SMALL_GEOMETRY if geometry is None else geometry,
            max_request_bytes=max_request_bytes,
            die_after_sends=die_after_sends,
        )
        self.stderr_path = data.parent / f"{data.name}-broker.log"
        self._stderr = self.stderr_path.open("ab")
        self.process = subprocess.Popen(
            [sys.executable, "-c", source],
            cwd=REPO,
            env={**os.environ, "PYTHONPATH": str(REPO)},
            stdout=subprocess.PIPE,
            stderr=self._stderr,
        )
        assert self.process.stdout is not None
        line = self.process.stdout.readline().decode().strip()
        if not line.startswith("http://"):
            self.process.kill()
            self.process.wait()
            raise RuntimeError(f"the broker did not start: {self.log()}")
        self.url = line
        self.port = int(line.rsplit(":", 1)[1])

    def log(self) -> str:
        if not self._stderr.closed:
            self._stderr.flush()
        return self.stderr_path.read_text(errors="replace")

    def stop(self, timeout_s: float = 60.0) -> int:
        """SIGTERM, then wait: the exit status (0 for a clean stop)."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        return self._wait(timeout_s)

    def kill(self) -> None:
        """SIGKILL: the broker dies where it stands (its store is left to recovery)."""
        if self.process.poll() is None:
            self.process.kill()
        self._wait(30.0)

    def _wait(self, timeout_s: float) -> int:
        try:
            status = self.process.wait(timeout_s)
        finally:
            if self.process.stdout is not None:
                self.process.stdout.close()
            self._stderr.close()
        return status

    def __enter__(self) -> BrokerProcess:
        return self

    def __exit__(self, *exc_info: object) -> None:
        if self.process.poll() is None:
            self.stop()
