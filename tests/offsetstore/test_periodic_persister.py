"""PeriodicPersister: a call every interval on a daemon thread; failures are logged under the
name of what failed and retried; with ``until_false`` the call returning False ends the
thread (a push consumer's lease renewal once its consumer closed)."""

from __future__ import annotations

import logging
import threading
import time

import pytest

from offsetstore.memory import PeriodicPersister


class Renewals:
    """Answers True ``live`` times, then False (the consumer closed); counts its calls."""

    def __init__(self, live: int) -> None:
        self.live = live
        self.calls = 0
        self.closed = threading.Event()

    def __call__(self) -> bool:
        self.calls += 1
        if self.calls > self.live:
            self.closed.set()
            return False
        return True


def test_until_false_ends_the_thread_once_the_call_returns_false():
    renewals = Renewals(live=3)
    keeper = PeriodicPersister("quiver-leases-t", renewals, 0.01, until_false=True)
    keeper._thread.join(timeout=5)
    assert not keeper._thread.is_alive()
    assert renewals.calls == 4  # three renewals, then the False that ended it
    keeper.stop()  # stopping an ended keeper is harmless


def test_without_until_false_what_the_call_returns_is_ignored():
    renewals = Renewals(live=0)
    keeper = PeriodicPersister("persist-t", renewals, 0.01)
    assert renewals.closed.wait(5)
    deadline = time.monotonic() + 5
    while renewals.calls < 3 and time.monotonic() < deadline:  # it keeps calling after False
        keeper._thread.join(timeout=0.01)
    assert renewals.calls >= 3
    keeper.stop()
    assert not keeper._thread.is_alive()


def test_a_failure_is_logged_as_what_failed_and_tried_again(caplog: pytest.LogCaptureFixture):
    calls: list[int] = []
    again = threading.Event()

    def renew() -> bool:
        calls.append(1)
        if len(calls) == 1:
            raise OSError("broker did not answer")
        again.set()
        return True

    with caplog.at_level(logging.ERROR, logger="offsetstore.memory"):
        keeper = PeriodicPersister("quiver-leases-g", renew, 0.01, what="lease renewal")
        assert again.wait(5)
        keeper.stop()
    messages = [r.getMessage() for r in caplog.records]
    assert "lease renewal (quiver-leases-g) failed" in messages


def test_a_persister_still_says_periodic_persist_when_it_fails(caplog: pytest.LogCaptureFixture):
    failed = threading.Event()

    def persist() -> None:
        failed.set()
        raise OSError("disk full")

    with caplog.at_level(logging.ERROR, logger="offsetstore.memory"):
        keeper = PeriodicPersister("quiver-offsets-g", persist, 0.01)
        assert failed.wait(5)
        keeper.stop()
    messages = [r.getMessage() for r in caplog.records]
    assert "periodic persist (quiver-offsets-g) failed" in messages
