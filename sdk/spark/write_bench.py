"""The Spark side of the sink's benchmark (:mod:`sdk.perf.spark_write_bench`): one timed batch
write of generated rows through a broker. Here because only ``sdk.spark`` imports pyspark."""

from __future__ import annotations

import os
import sys
import time

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as f

from sdk.spark.source import QuiverDataSource

WARM_UP_ROWS = 1000  # per task of the untimed first write


def timed_write(
    url: str, topic: str, *, count: int, size: int, partitions: int, batch_rows: int, master: str
) -> float:
    """Seconds a ``master`` session takes to write ``count`` rows of ``size``-byte values (made
    by ``spark.range`` in ``partitions`` tasks: nothing read) to ``topic`` of the broker at
    ``url``. Not timed: the session's start, and a first write of a few rows to
    ``<topic>-warm-up``, in which Spark starts its Python workers and each loads the sink
    (seconds that do not grow with the rows: the workers serve the timed write too)."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    session = (
        SparkSession.builder.master(master)
        .appName("quiver-perf-spark-write")
        .config("spark.ui.enabled", "false")
        .getOrCreate()
    )
    try:
        session.dataSource.register(QuiverDataSource)
        warm_up = _rows(session, WARM_UP_ROWS * partitions, size, partitions)
        _write(warm_up, url, f"{topic}-warm-up", batch_rows)
        frame = _rows(session, count, size, partitions)
        started = time.perf_counter()
        _write(frame, url, topic, batch_rows)
        return time.perf_counter() - started
    finally:
        session.stop()


def _rows(session: SparkSession, count: int, size: int, partitions: int) -> DataFrame:
    """``count`` rows of one ``value`` column: the row number, zero-padded, then padding."""
    pad = "x" * max(0, size - 12)
    return session.range(0, count, numPartitions=partitions).select(
        f.concat(f.lpad(f.col("id").cast("string"), 12, "0"), f.lit(pad)).alias("value")
    )


def _write(frame: DataFrame, url: str, topic: str, batch_rows: int) -> None:
    (
        frame.write.format("quiver")
        .option("broker", url)
        .option("topic", topic)
        .option("batchRows", str(batch_rows))
        .mode("append")
        .save()
    )
