"""The broker's background rounds: paced on the clock, woken by stop, surviving a failed round,
ended by a closed store."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

import pytest

from localstore import StoreClosedError
from sdk.broker.rounds import Rounds
from sdk.clock import ManualClock
from sdk.errors import IllegalStateError
from tests.sdk.waiting import wait_until

log = logging.getLogger("tests.rounds")


def rounds_of(run_once: Callable[[], None], clock: ManualClock) -> Rounds:
    return Rounds(run_once, lambda: 5.0, clock, name="t-rounds", what="test service", log=log)


def test_a_failed_round_is_logged_and_the_next_runs_on_the_clock(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock = ManualClock()
    calls: list[float] = []

    def run_once() -> None:
        calls.append(clock.monotonic())
        if len(calls) == 1:
            raise RuntimeError("boom")

    rounds = rounds_of(run_once, clock)
    with caplog.at_level(logging.ERROR, logger="tests.rounds"):
        rounds.start()
        try:
            wait_until(lambda: clock.pending_waits() == 1)  # first round done, waiting
            assert calls == [0.0]
            clock.advance(5.0)
            wait_until(lambda: len(calls) == 2 and clock.pending_waits() == 1)
            assert calls == [0.0, 5.0] and rounds.running
            with pytest.raises(IllegalStateError, match="test service is already started"):
                rounds.start()
        finally:
            rounds.stop()  # wakes the wait: no clock advance needed
    assert not rounds.running
    assert "test service round failed" in caplog.text and "boom" in caplog.text


def test_a_closed_store_ends_the_rounds() -> None:
    clock = ManualClock()
    ended = threading.Event()

    def run_once() -> None:
        ended.set()
        raise StoreClosedError("closed")

    rounds = rounds_of(run_once, clock)
    rounds.start()
    assert ended.wait(10)
    wait_until(lambda: not rounds.running)
    assert clock.pending_waits() == 0  # it ended instead of waiting for the next round
    rounds.stop()
