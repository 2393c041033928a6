"""A background task run at a fixed interval until stopped (the store's retention check)."""

from __future__ import annotations

import threading
from collections.abc import Callable


class PeriodicTask:
    """Calls ``task`` every ``interval_s`` on a daemon thread, the first time after
    ``first_delay_s``; ``task`` returning False stops it. An interval of 0 disables it."""

    def __init__(
        self, name: str, task: Callable[[], bool], interval_s: float, first_delay_s: float
    ):
        self._task = task
        self._interval_s = interval_s
        self._first_delay_s = first_delay_s
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        if interval_s > 0:
            self._thread = threading.Thread(target=self._run, name=name, daemon=True)
            self._thread.start()

    def _run(self) -> None:
        if self._stop.wait(self._first_delay_s):
            return
        while not self._stop.is_set() and self._task():
            self._stop.wait(self._interval_s)

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
