"""The write figure of ``quiver perf spark``: rows a Spark batch write stores through a broker.

``spark_write_rows_per_s``: a ``local[2]`` session (``--master``) writes ``--count`` rows of
``--size``-byte bodies, in ``--partitions`` tasks, with ``frame.write.format("quiver")`` to a
``quiver broker`` spawned for the run (``--port 0``, a fresh data directory), timed from the
write's start to its end, after an untimed write of a few rows in which Spark starts the
Python workers that serve the timed one (:func:`sdk.spark.write_bench.timed_write`). The rows
come from ``spark.range`` (made in the JVM, nothing read), so the figure is the sink's: rows to
Arrow batches, to produce bodies, over HTTP, stored. After the clock stops the broker's queue
ends are summed and must equal ``--count`` (every row stored once), or the run fails.

``quiver perf spark --write`` runs it after the reads (:func:`run_spark_write_bench` yields its
:class:`~sdk.perf.report.Figure`). pyspark is imported when a run starts (the ``spark`` extra).
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from sdk.errors import IllegalStateError
from sdk.perf.report import Figure
from sdk.perf.spawn import spawned_broker
from sdk.transport.http_sync import HttpTransport


@dataclass(frozen=True, slots=True)
class SparkWriteBenchConfig:
    count: int = 1_000_000
    size: int = 100
    partitions: int = 2
    batch_rows: int = 1000
    master: str = "local[2]"


def run_spark_write_bench(config: SparkWriteBenchConfig) -> Iterator[Figure]:
    """Yield ``spark_write_rows_per_s`` (see the module docstring)."""
    from sdk.spark.write_bench import timed_write  # noqa: PLC0415 (pyspark, only when run)

    topic = f"spark-write-{os.getpid()}"
    with (
        tempfile.TemporaryDirectory(prefix="quiver-spark-write-") as data,
        spawned_broker(Path(data) / "broker") as broker,
    ):
        elapsed = timed_write(
            broker.url,
            topic,
            count=config.count,
            size=config.size,
            partitions=config.partitions,
            batch_rows=config.batch_rows,
            master=config.master,
        )
        _check_stored(broker.url, topic, config.count)
    yield Figure("spark_write_rows_per_s", config.count / elapsed, config.count, config.size, 0)


def _check_stored(url: str, topic: str, count: int) -> None:
    with HttpTransport(url) as transport:
        queues = transport.queue_count(topic)
        stored = sum(transport.max_offset(topic, queue_id) for queue_id in range(queues))
    if stored != count:
        raise IllegalStateError(f"the write stored {stored} rows of {count}")
