"""The local Spark session of a test module: ``local[2]``, UTC, the ``quiver`` source
registered, workers on this interpreter (``PYSPARK_PYTHON``), restored afterwards."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from typing import Any

from pyspark.sql import SparkSession


def local_session(app_name: str, **conf: str) -> Iterator[Any]:
    """Yield a session for one module (a fixture's body), ``conf`` added to its settings."""
    from sdk.spark import QuiverDataSource

    before = os.environ.get("PYSPARK_PYTHON")
    os.environ["PYSPARK_PYTHON"] = sys.executable  # workers with this interpreter's packages
    builder = (
        SparkSession.builder.master("local[2]")
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
