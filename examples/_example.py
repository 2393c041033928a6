"""What every example script does around its own story: where its store goes, and printing.

Not part of the SDK: helpers the scripts in this folder import (they run with this folder on
``sys.path``). ``run_example`` gives a script its data directory: ``argv[1]``, or a fresh one
in a temporary directory removed afterwards. A Quiver store already there is deleted first;
any other non-empty directory is left alone (exit status 2). ``start_broker`` and
``stop_broker`` run a ``quiver broker`` process for the examples of remote mode.
"""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable
from pathlib import Path

_PRINT_LOCK = threading.Lock()


def say(text: str) -> None:
    """Print one whole line, whichever thread prints it (listeners run on other threads)."""
    with _PRINT_LOCK:
        print(text, flush=True)


def fresh_directory(data: Path, store: str = "") -> bool:
    """Empty ``data`` for the example; False when it holds something that is not a Quiver
    store (at ``data / store``)."""
    if data.exists():
        ours = (data / store / "config" / "store.json").exists()
        if any(data.iterdir()) and not ours:
            return False
        shutil.rmtree(data)
    return True


def run_example(
    run: Callable[[Path], int], *, default_name: str = "store", store: str = "", make: bool = False
) -> int:
    """``run(data)`` in ``sys.argv[1]`` or ``{a temporary directory}/{default_name}``; ``store``
    is where under ``data`` the script keeps its store, ``make`` creates ``data`` first."""
    with tempfile.TemporaryDirectory() as scratch:
        data = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(scratch) / default_name
        if not fresh_directory(data, store):
            say(f"{data} is not empty and holds no Quiver store: not deleting it")
            return 2
        if make:
            data.mkdir(parents=True)
        return run(data)


def start_broker(store: Path) -> tuple[subprocess.Popen[bytes], str]:
    """``quiver broker`` over ``store`` on a free port; the process and its URL."""
    command = [sys.executable, "-m", "sdk.cli.main", "broker", "--data", str(store)]
    broker = subprocess.Popen(
        [*command, "--port", "0", "--json", "--quiet"], stdout=subprocess.PIPE
    )
    assert broker.stdout is not None
    url = json.loads(broker.stdout.readline())["listening"]
    return broker, url


def stop_broker(broker: subprocess.Popen[bytes]) -> int:
    """Stop ``broker`` as an operator would (SIGTERM) and return its exit status."""
    broker.send_signal(signal.SIGTERM)
    status = broker.wait(60)
    if broker.stdout is not None:
        broker.stdout.close()
    return status
