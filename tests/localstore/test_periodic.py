"""PeriodicTask: a task that raises is logged and run again, not lost with its thread."""

from __future__ import annotations

import logging
import threading

import pytest

from localstore.runtime.periodic import PeriodicTask


def test_a_failing_run_is_logged_and_the_task_runs_again(caplog: pytest.LogCaptureFixture):
    calls = 0
    third = threading.Event()

    def task() -> bool:
        nonlocal calls
        calls += 1
        if calls == 1:
            raise OSError("disk full (test)")
        if calls >= 3:
            third.set()
        return True

    with caplog.at_level(logging.ERROR, logger="localstore.runtime.periodic"):
        periodic = PeriodicTask("test-task", task, 0.01, 0.0)
        try:
            assert third.wait(5)
        finally:
            periodic.close()
    assert "test-task failed" in caplog.text and "disk full (test)" in caplog.text


def test_returning_false_stops_the_task():
    stopped = threading.Event()
    periodic = PeriodicTask("test-stop", lambda: stopped.set() or False, 0.01, 0.0)
    assert stopped.wait(5)
    thread = periodic._thread
    assert thread is not None
    thread.join(5)  # the thread ends on its own
    assert not thread.is_alive()
    periodic.close()
