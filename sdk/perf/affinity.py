"""Running a benchmark's Python threads on one CPU (Linux), to measure what that buys.

CPython's threads take turns holding the GIL, so threads that hand work to each other (a flush
answering sixteen blocked producers, a pull thread handing messages to a listener) wake one
another all the time. The kernel wakes a thread on the CPU it last ran on; on this project's
virtual machines a wake-up that crosses CPUs is an inter-processor interrupt and costs the two
threads several microseconds more than one that stays on its CPU (``perf`` put about a quarter of
the 16-producer run's samples in the kernel's context-switch path). Holding the process's Python
threads on one CPU gives up nothing the GIL did not already take, and leaves the other CPUs to
the store's child processes (the key index, a loop's sync process) started before.

:func:`pinned` is what ``quiver perf store --pin-cpu`` and ``quiver perf e2e --pin-cpu`` use;
an application does the same with ``os.sched_setaffinity(0, {cpu})`` in its main thread once its
broker is open (threads inherit the CPU set of the thread that starts them, child processes that
of the thread that spawns them).
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
