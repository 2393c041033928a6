"""The local Spark session of a test module (``local[2]``, UTC, the ``quiver`` source registered:
:func:`sdk.spark.bench.local_session`), and a wait for a streaming query."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any


def local_session(app_name: str, max_task_failures: int = 1, **conf: str) -> Iterator[Any]:
    """Yield a session for one module (a fixture's body): :func:`sdk.spark.bench.local_session`
    on two cores."""
    from sdk.spark.bench import local_session as spark_session

    with spark_session(max_task_failures=max_task_failures, app_name=app_name, **conf) as session:
        yield session


def process_until(query: Any, done: Callable[[], bool], timeout_s: float = 200.0) -> None:
    """Let a running streaming ``query`` process what is available until ``done()`` holds.

    ``processAllAvailable`` alone can return before data written just before it is read: a
    trigger that asked the source for its latest offsets before the write, and found nothing
    new, may end after the call and mark the stream idle. So the call is repeated until the
    test's own condition holds, or ``timeout_s`` passes (then the test fails)."""
    deadline = time.monotonic() + timeout_s
    while True:
        query.processAllAvailable()
        if done():
            return
        assert time.monotonic() < deadline, "the stream did not process what was written"
