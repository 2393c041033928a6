"""A background task run at a fixed interval until stopped (the store's retention check, the
broker's group expiry and snapshots, a push consumer's lease renewal).

A task that raises is logged and run again at the next interval: one failure (a full disk, a
broker that did not answer) must not end the thread that keeps leases or files alive.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

log = logging.getLogger(__name__)


class PeriodicTask:
    """Calls ``task`` every ``interval_s`` on a daemon thread, the first time after
    ``first_delay_s``; ``task`` returning False stops it, raising does not (it is logged). An
    interval of 0 disables it."""

    def __init__(
        self, name: str, task: Callable[[], bool], interval_s: float, first_delay_s: float
    ):
        self._name = name
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
        while not self._stop.is_set() and self._run_once():
            self._stop.wait(self._interval_s)

    def _run_once(self) -> bool:
        try:
            return self._task()
        except Exception:
            log.exception("%s failed; trying again in %.1f s", self._name, self._interval_s)
            return True

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
