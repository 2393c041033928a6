"""The Spark half of ``quiver perf spark`` (:mod:`sdk.perf.spark_bench` fills the store and
prints): one ``local[2]`` session reads a store through the ``quiver`` source with a given
number of partitions, and the same rows as Parquet and as JSON lines, with one query that
touches every column, timed.

The query aggregates each column (lengths of the strings and binaries, sizes of the arrays,
sums and maxima of the numbers and times), so a columnar format cannot skip any column and
every format's answer is one row; the three answers must be equal, else
:class:`~quiver_errors.IllegalStateError` (a benchmark that read different data measured
nothing). A figure is the better of ``repeats`` runs of the query, each over a new frame (a
frame collected twice reuses its plan's finished stages), in rows per second.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as sf

from quiver_errors import IllegalStateError
from sdk.spark.schema import schema_ddl
from sdk.spark.source import QuiverDataSource


@contextmanager
def local_session(
    cores: int = 2, *, max_task_failures: int = 1, app_name: str = "quiver-perf-spark", **conf: str
) -> Iterator[SparkSession]:
    """A ``local[cores]`` session (a task tried up to ``max_task_failures`` times), UTC, the
    ``quiver`` format registered, Python workers on this interpreter, ``conf`` added to its
    settings; stopped on exit and ``PYSPARK_PYTHON`` restored. The tests' sessions too."""
    before = os.environ.get("PYSPARK_PYTHON")
    os.environ["PYSPARK_PYTHON"] = sys.executable  # workers with this interpreter's packages
    builder = (
        SparkSession.builder.master(f"local[{cores},{max_task_failures}]")
        .appName(app_name)
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", str(cores))
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.ui.showConsoleProgress", "false")  # the benchmark shows its own
    )
    for key, value in conf.items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    session.dataSource.register(QuiverDataSource)
    try:
        yield session
    finally:
        session.stop()
        if before is None:
            os.environ.pop("PYSPARK_PYTHON", None)
        else:
            os.environ["PYSPARK_PYTHON"] = before


def every_column(frame: DataFrame) -> DataFrame:
    """One row aggregating every column of the source's schema (body included)."""
    return frame.agg(
        sf.count(sf.lit(1)),
        sf.sum(sf.length("topic")),
        sf.sum("queue_id"),
        sf.sum("queue_offset"),
        sf.sum(sf.length("msg_id")),
        sf.sum(sf.length("offset_msg_id")),
        sf.sum(sf.length("tags")),
        sf.sum(sf.size("keys")),
        sf.sum(sf.length("body")),
        sf.max("born_timestamp"),
        sf.max("store_timestamp"),
        sf.sum("reconsume_times"),
    )


class ReadBench:
    """The reads of one store directory and its Parquet and JSON-lines copies in ``work``."""

    def __init__(self, spark: SparkSession, store: Path, topic: str, work: Path, repeats: int):
        self.spark = spark
        self.store = store
        self.topic = topic
        self.parquet = work / "parquet"
        self.json_lines = work / "json"
        self.repeats = repeats
        self.answers: dict[str, list[Any]] = {}

    def quiver(self, partitions: int) -> DataFrame:
        return (
            self.spark.read.format("quiver")
            .options(path=str(self.store), topics=self.topic, minPartitions=str(partitions))
            .load()
        )

    def write_copies(self, partitions: int) -> None:
        """Write the topic as Parquet and as JSON lines, ``partitions`` files each."""
        self.quiver(partitions).write.parquet(str(self.parquet))
        self.spark.read.parquet(str(self.parquet)).write.json(str(self.json_lines))

    def quiver_seconds(self, partitions: int) -> float:
        return self._best(f"quiver/{partitions}", lambda: self.quiver(partitions))

    def parquet_seconds(self) -> float:
        return self._best("parquet", lambda: self.spark.read.parquet(str(self.parquet)))

    def json_seconds(self) -> float:
        schema = schema_ddl(include_body=True, include_properties=False)
        return self._best("json", lambda: self.spark.read.schema(schema).json(str(self.json_lines)))

    def _best(self, name: str, frame: Callable[[], DataFrame]) -> float:
        """The shortest of ``repeats`` runs of the query over a new ``frame()`` each (a plan
        run again would reuse its finished stages), in seconds; its answer must be every
        other format's."""
        timings = []
        for _ in range(self.repeats):
            query = every_column(frame())
            started = time.perf_counter()
            answer = [tuple(row) for row in query.collect()]
            timings.append(time.perf_counter() - started)
        for other, other_answer in self.answers.items():
            if other_answer != answer:
                raise IllegalStateError(
                    f"{name} read other data than {other}: {answer} != {other_answer}"
                )
        self.answers[name] = answer
        return min(timings)
