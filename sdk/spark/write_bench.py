"""The Spark side of the sink's benchmark (:mod:`sdk.perf.spark_write_bench`): one timed batch
write of generated rows through a broker. Here because only ``sdk.spark`` imports pyspark."""

from __future__ import annotations

import os
import sys
import time

from pyspark.sql import SparkSession
from pyspark.sql import functions as f

from sdk.spark.source import QuiverDataSource


def timed_write(
    url: str, topic: str, *, count: int, size: int, partitions: int, batch_rows: int, master: str
) -> float:
    """Seconds a ``master`` session takes to write ``count`` rows of ``size``-byte values (made
    by ``spark.range`` in ``partitions`` tasks: nothing read) to ``topic`` of the broker at
    ``url``; the session's start is not timed."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    session = (
        SparkSession.builder.master(master)
        .appName("quiver-perf-spark-write")
        .config("spark.ui.enabled", "false")
        .getOrCreate()
    )
    try:
        session.dataSource.register(QuiverDataSource)
        pad = "x" * max(0, size - 12)
        frame = session.range(0, count, numPartitions=partitions).select(
            f.concat(f.lpad(f.col("id").cast("string"), 12, "0"), f.lit(pad)).alias("value")
        )
        started = time.perf_counter()
        (
            frame.write.format("quiver")
            .option("broker", url)
            .option("topic", topic)
            .option("batchRows", str(batch_rows))
            .mode("append")
            .save()
        )
        return time.perf_counter() - started
    finally:
        session.stop()
