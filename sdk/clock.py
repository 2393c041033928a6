"""The time a client or broker reads: a :class:`Clock` it is given, never the module ``time``.

Every decision that depends on time passing (a lease or a member expiring, a delayed message
coming due, a transaction check, a rebalance, a lease renewal or an auto-commit falling due, a
route cache going stale) reads the clock its owner was built with. :data:`SYSTEM_CLOCK` is the
default; tests give a :class:`ManualClock` and move time with :meth:`ManualClock.advance`
instead of sleeping.

Invariants: :meth:`Clock.monotonic` never goes back; a :meth:`Clock.wait` or
:meth:`Clock.sleep` ends no earlier than the clock's deadline unless woken (a wait) and never
later than the first :meth:`ManualClock.advance` that passes the deadline.
"""

from __future__ import annotations

import threading
import time
from typing import Protocol

__all__ = ["SYSTEM_CLOCK", "Clock", "ManualClock", "SystemClock"]


class Clock(Protocol):
    """What time it is and how to wait for it (thread-safe)."""

    def monotonic(self) -> float:
        """Seconds on a clock that never goes back (for intervals and deadlines)."""
        ...

    def time_ms(self) -> int:
        """Wall time in ms since the epoch (compared with store timestamps)."""
        ...

    def wait(self, condition: threading.Condition, timeout_s: float) -> None:
        """Wait on ``condition`` (held by the caller) until notified or ``timeout_s`` passed on
        this clock. May return early: the caller re-checks its predicate and its deadline."""
        ...

    def sleep(self, seconds: float) -> None:
        """Block until ``seconds`` passed on this clock."""
        ...


class SystemClock:
    """The real clocks: ``time.monotonic``, ``time.time_ns`` and real waits."""

    def monotonic(self) -> float:
        return time.monotonic()

    def time_ms(self) -> int:
        return time.time_ns() // 1_000_000

    def wait(self, condition: threading.Condition, timeout_s: float) -> None:
        condition.wait(max(timeout_s, 0.0))

    def sleep(self, seconds: float) -> None:
        time.sleep(max(seconds, 0.0))


SYSTEM_CLOCK: Clock = SystemClock()


class ManualClock:
    """A clock that moves only when told (tests): :meth:`advance` moves both its monotonic and
    its wall time and wakes every :meth:`wait` and :meth:`sleep` whose deadline it passed.

    The wall time starts at ``start_ms`` (default: the real time at construction, so it
    compares sensibly with the store's timestamps); the monotonic time starts at 0.
    """

    def __init__(self, start_ms: int | None = None) -> None:
        self._lock = threading.Lock()
        self._monotonic_ns = 0  # whole ns: advancing by 0.1 ten times is exactly 1 s
        self._start_ms = time.time_ns() // 1_000_000 if start_ms is None else start_ms
        self._waiters: list[tuple[int, threading.Condition]] = []  # (deadline ns, wakes)

    def monotonic(self) -> float:
        with self._lock:
            return self._monotonic_ns / 1e9

    def time_ms(self) -> int:
        with self._lock:
            return self._start_ms + self._monotonic_ns // 1_000_000

    def pending_waits(self) -> int:
        """How many :meth:`wait` and :meth:`sleep` calls are parked on this clock (a test
        advances once the thread it drives is waiting)."""
        with self._lock:
            return len(self._waiters)

    def advance(self, seconds: float) -> None:
        """Move time forward by ``seconds`` (>= 0) and wake the waits that are now due."""
        if seconds < 0:
            raise ValueError(f"a clock does not go back: advance({seconds})")
        with self._lock:
            self._monotonic_ns += _ns(seconds)
            due = [
                condition
                for deadline_ns, condition in self._waiters
                if deadline_ns <= self._monotonic_ns
            ]
        for condition in due:
            with condition:
                condition.notify_all()

    def wait(self, condition: threading.Condition, timeout_s: float) -> None:
        with self._lock:
            entry = (self._monotonic_ns + _ns(timeout_s), condition)
            if entry[0] <= self._monotonic_ns:
                return
            self._waiters.append(entry)
        try:
            condition.wait()
        finally:
            with self._lock:
                self._waiters.remove(entry)

    def sleep(self, seconds: float) -> None:
        condition = threading.Condition()
        with self._lock:
            deadline_ns = self._monotonic_ns + _ns(seconds)
        with condition:
            while (remaining_ns := deadline_ns - self._now_ns()) > 0:
                self.wait(condition, remaining_ns / 1e9)

    def _now_ns(self) -> int:
        with self._lock:
            return self._monotonic_ns


def _ns(seconds: float) -> int:
    return max(round(seconds * 1e9), 0)
