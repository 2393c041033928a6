"""The injected clocks: a ManualClock moves only when advanced and wakes the waits it passes."""

from __future__ import annotations

import threading

import pytest

from sdk.clock import SYSTEM_CLOCK, Clock, ManualClock, SystemClock
from tests.sdk.waiting import wait_until


def test_manual_clock_moves_only_when_advanced() -> None:
    clock = ManualClock(start_ms=1_000)
    assert (clock.monotonic(), clock.time_ms()) == (0.0, 1_000)
    clock.advance(2.5)
    assert (clock.monotonic(), clock.time_ms()) == (2.5, 3_500)
    with pytest.raises(ValueError, match="does not go back"):
        clock.advance(-1)


def test_manual_wait_ends_when_advanced_past_its_deadline() -> None:
    clock = ManualClock()
    condition = threading.Condition()
    ended = threading.Event()

    def waiter() -> None:
        with condition:
            clock.wait(condition, 10.0)
        ended.set()

    thread = threading.Thread(target=waiter)
    thread.start()
    wait_until(lambda: clock.pending_waits() == 1)
    clock.advance(9.999)  # before the deadline: the waiter is not woken by the clock
    assert not ended.is_set()
    clock.advance(0.001)
    assert ended.wait(10)
    thread.join(10)


def test_manual_wait_is_woken_by_a_notify() -> None:
    clock = ManualClock()
    condition = threading.Condition()
    ready = threading.Event()
    with condition:
        threading.Thread(target=_notify, args=(condition, ready)).start()
        ready.set()
        clock.wait(condition, 3600.0)
    assert clock.monotonic() == 0.0


def _notify(condition: threading.Condition, ready: threading.Event) -> None:
    ready.wait(10)
    with condition:
        condition.notify_all()


def test_manual_sleep_returns_once_time_passed() -> None:
    clock = ManualClock()
    slept = threading.Event()

    def sleeper() -> None:
        clock.sleep(5.0)
        slept.set()

    thread = threading.Thread(target=sleeper)
    thread.start()
    wait_until(lambda: clock.pending_waits() == 1)
    clock.advance(4.0)
    assert not slept.is_set()
    clock.advance(1.0)
    assert slept.wait(10)
    thread.join(10)


def test_zero_wait_returns_at_once() -> None:
    clock = ManualClock()
    condition = threading.Condition()
    with condition:
        clock.wait(condition, 0.0)
    clock.sleep(0.0)


def test_both_clocks_are_clocks() -> None:
    clocks: list[Clock] = [SYSTEM_CLOCK, SystemClock(), ManualClock()]
    assert all(c.time_ms() > 0 for c in clocks)
    condition = threading.Condition()
    with condition:
        SYSTEM_CLOCK.wait(condition, 0.0)
