"""Running a benchmark's Python threads on one CPU (Linux), to measure what that buys.

CPython's threads take turns holding the GIL, so threads that hand work to each other (sixteen
producers blocked on one flush waking one another in turn, a pull thread handing messages to a
listener) wake one another all the time, and a wake-up may land on either CPU. On this project's
virtual machines a wake-up that crosses CPUs is an inter-processor interrupt, spent in the
kernel's context-switch path. Held on one CPU, such threads run faster (docs/performance.md has
the figures).

:func:`pinned` is what ``quiver perf store --pin-cpu`` and ``quiver perf e2e --pin-cpu`` use. It
pins the calling thread; the threads it starts meanwhile inherit the pin, while the threads and
child processes that already run (the store's flush thread, its key-index process) keep their
CPUs. A thread started pinned that works with the GIL released (the store's segment
preparation, started by the put that needs it) shares the pinned CPU too. An application does
the same with ``os.sched_setaffinity(0, {cpu})`` once its broker is open.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator


def allowed_cpus() -> set[int] | None:
    """The CPUs this thread may run on; None where the platform cannot pin threads."""
    if not hasattr(os, "sched_getaffinity"):
        return None
    return set(os.sched_getaffinity(0))


def pin_problem(cpu: int) -> str | None:
    """Why the calling thread cannot be pinned to ``cpu``, or None."""
    allowed = allowed_cpus()
    if allowed is None:
        return "pinning threads to a CPU needs Linux (os.sched_setaffinity)"
    if cpu not in allowed:
        return f"CPU {cpu} is not one this process may run on: {sorted(allowed)}"
    return None


@contextlib.contextmanager
def pinned(cpu: int | None) -> Iterator[None]:
    """Run the calling thread, and the threads it starts meanwhile, on ``cpu``; the calling
    thread gets its CPU set back on exit. ``None`` changes nothing."""
    if cpu is None:
        yield
        return
    problem = pin_problem(cpu)
    if problem is not None:
        raise ValueError(problem)
    before = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {cpu})
    try:
        yield
    finally:
        os.sched_setaffinity(0, before)
