"""The local Spark session of a test module: ``local[2]`` by default, UTC, the ``quiver`` source
registered, workers on this interpreter (``PYSPARK_PYTHON``), restored afterwards."""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable, Iterator
from typing import Any

from pyspark.sql import SparkSession


def local_session(app_name: str, master: str = "local[2]", **conf: str) -> Iterator[Any]:
    """Yield a session for one module (a fixture's body), ``conf`` added to its settings."""
    from sdk.spark import QuiverDataSource

    before = os.environ.get("PYSPARK_PYTHON")
    os.environ["PYSPARK_PYTHON"] = sys.executable  # workers with this interpreter's packages
    builder = (
        SparkSession.builder.master(master)
        .appName(app_name)
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.session.timeZone", "UTC")
    )
    for key, value in conf.items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    session.dataSource.register(QuiverDataSource)
    try:
        yield session
    finally:
        session.stop()
        if before is None:
            del os.environ["PYSPARK_PYTHON"]
        else:
            os.environ["PYSPARK_PYTHON"] = before


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
