"""Two threads closing one broker at once (an application's close racing the interpreter's
exit hook): the second waits for the first, and every close step runs exactly once."""

from __future__ import annotations

import sys
import threading
from pathlib import Path

from sdk import EmbeddedBroker

from .waiting import wait_until


def innermost_function(thread: threading.Thread) -> str:
    frame = sys._current_frames().get(thread.ident or 0)
    return "" if frame is None else f"{Path(frame.f_code.co_filename).name}:{frame.f_code.co_name}"


def test_a_second_close_waits_for_the_first_and_runs_no_step_twice(tmp_path: Path) -> None:
    broker = EmbeddedBroker(tmp_path / "b", commitlog_file_size=1 << 20)
    offsets = broker.service.offsets
    persist = offsets.close
    calls: list[str] = []
    release = threading.Event()

    def slow_persist() -> None:
        calls.append(threading.current_thread().name)
        assert release.wait(10)
        persist()

    offsets.close = slow_persist  # type: ignore[method-assign]
    first = threading.Thread(target=broker.close, name="first")
    first.start()
    wait_until(lambda: calls == ["first"])
    second = threading.Thread(target=broker.close, name="second")
    second.start()
    # the second close is parked in close() itself, waiting for the first one
    wait_until(lambda: innermost_function(second) == "service.py:close" or len(calls) > 1)
    release.set()
    first.join(10)
    second.join(10)
    assert not first.is_alive() and not second.is_alive()
    assert calls == ["first"]  # the offsets were persisted once, by the first close
    assert broker.closed and broker.service.store.closed
