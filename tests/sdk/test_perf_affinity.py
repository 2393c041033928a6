"""sdk.perf.affinity: a thread held on one CPU, the threads it starts, and the way back."""

from __future__ import annotations

import os
import threading

import pytest

from sdk.perf.affinity import pin_problem, pinned

pytestmark = pytest.mark.skipif(
    not hasattr(os, "sched_setaffinity"), reason="pinning threads to a CPU needs Linux"
)


def test_pinned_holds_the_thread_and_its_new_threads_then_gives_the_cpus_back():
    before = os.sched_getaffinity(0)
    cpu = max(before)
    seen: list[set[int]] = []
    with pinned(cpu):
        assert os.sched_getaffinity(0) == {cpu}
        started = threading.Thread(target=lambda: seen.append(os.sched_getaffinity(0)))
        started.start()
        started.join()
    assert seen == [{cpu}]
    assert os.sched_getaffinity(0) == before


def test_pinned_gives_the_cpus_back_when_the_body_raises():
    before = os.sched_getaffinity(0)
    with pytest.raises(RuntimeError), pinned(min(before)):
        raise RuntimeError("boom")
    assert os.sched_getaffinity(0) == before


def test_pinned_none_changes_nothing_and_a_foreign_cpu_is_refused():
    before = os.sched_getaffinity(0)
    with pinned(None):
        assert os.sched_getaffinity(0) == before
    foreign = max(before) + 1000
    assert pin_problem(min(before)) is None
    problem = pin_problem(foreign)
    assert problem is not None and str(foreign) in problem
    with pytest.raises(ValueError, match="may run on"), pinned(foreign):
        pass
    assert os.sched_getaffinity(0) == before
