"""A background thread that runs a service's rounds at a steady pace on a clock.

The broker's schedule service and transaction check service each run one (``run_once`` every
interval). Invariants:

* The first round runs at once on :meth:`Rounds.start`.
* Rounds keep their pace on the clock: the next round is due one interval after the previous
  one started, so time moved during a round is not lost (a round longer than the interval is
  followed at once).
* :meth:`Rounds.stop` wakes the wait: the thread ends after its current round, not after the
  next interval, and ``stop`` returns once it has ended.
* A round's failure is logged and the next round runs on time; :class:`StoreClosedError` ends
  the thread (logged at INFO: nothing is left to serve).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from localstore import StoreClosedError
from sdk.clock import Clock
from sdk.errors import IllegalStateError

__all__ = ["Rounds"]


class Rounds:
    """``run_once()`` every ``interval_s()`` seconds of ``clock`` in a daemon thread named
    ``name`` (``what`` names the service in log lines and errors; ``log`` is its logger)."""

    def __init__(
        self,
        run_once: Callable[[], object],
        interval_s: Callable[[], float],
        clock: Clock,
        *,
        name: str,
        what: str,
        log: logging.Logger,
    ) -> None:
        self._run_once = run_once
        self._interval_s = interval_s
        self._clock = clock
        self._name = name
        self._what = what
        self._log = log
        self._wake = threading.Condition()  # notified by stop(); the clock wakes the rounds
        self._stopping = False
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        """Start the thread; a second start before :meth:`stop` is refused."""
        if self._thread is not None:
            raise IllegalStateError(f"the {self._what} is already started")
        self._stopping = False
        self._thread = threading.Thread(target=self._run, name=self._name, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """End the thread after its current round and wait for it (nothing when not started)."""
        with self._wake:
            self._stopping = True
            self._wake.notify_all()
        thread, self._thread = self._thread, None
        if thread is not None:
            thread.join()

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def _run(self) -> None:
        while not self._stopping:
            next_round_s = self._clock.monotonic() + self._interval_s()
            try:
                self._run_once()
            except StoreClosedError:
                self._log.info("%s: the store is closed; stopping", self._what)
                return
            except Exception:
                self._log.exception("%s round failed; retrying", self._what)
            self._pause_until(next_round_s)

    def _pause_until(self, at_s: float) -> None:
        """Wait until ``at_s`` on the clock or :meth:`stop`; an early return only brings a
        round forward."""
        with self._wake:
            remaining_s = at_s - self._clock.monotonic()
            if not self._stopping and remaining_s > 0:
                self._clock.wait(self._wake, remaining_s)
