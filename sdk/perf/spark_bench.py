"""``quiver perf spark``: the ``quiver`` Spark source's read throughput beside Parquet and JSON
lines of the same rows, in one ``local[2]`` session.

The store holds ``--count`` messages of ``--size`` bytes in one queue of one topic, each with a
tag, a key and its UNIQ_KEY, as the SDK sends them (filled untimed, batches of 100). Figures,
rows per second of a query that touches every column (:mod:`sdk.spark.bench`):

* ``spark_quiver_p{N}_rows_per_s``: the source with N = 1, 2 and 4 partitions (the queue's
  range cut by ``minPartitions``);
* ``spark_parquet_rows_per_s`` / ``spark_json_rows_per_s``: the same rows written (untimed) as
  two Parquet / JSON-lines files, read back;
* ratios ``spark_quiver_vs_parquet`` and ``spark_quiver_vs_json`` (the source's best partition
  count) and ``spark_quiver_p2_vs_p1``.

pyspark is imported only when the benchmark runs (``sdk.spark.bench``).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from localstore import MessageStore, NewMessage, StoreOptions, UniqKeyGenerator
from sdk.perf.report import Figure, Progress, bench_body

TOPIC = "SparkBench"
FILL_BATCH = 100
PARTITION_COUNTS = (1, 2, 4)
COPY_FILES = 2  # Parquet and JSON-lines files, one per core of local[2]
REPEATS = 2  # runs of each timed query; the faster counts


@dataclass(frozen=True, slots=True)
class SparkBenchConfig:
    data_dir: Path
    count: int
    size: int


def run_spark_bench(config: SparkBenchConfig, progress: Progress) -> Iterator[Figure]:
    store_dir = config.data_dir / "store"
    _fill(store_dir, config, progress)
    from sdk.spark.bench import ReadBench, local_session  # noqa: PLC0415 (pyspark, lazily)

    with local_session() as spark:
        bench = ReadBench(spark, store_dir, TOPIC, config.data_dir / "copies", REPEATS)
        rates = {}
        for partitions in PARTITION_COUNTS:
            rates[partitions] = config.count / bench.quiver_seconds(partitions)
            progress.done(f"quiver source, {partitions} partition(s)")
            yield _figure(f"spark_quiver_p{partitions}_rows_per_s", rates[partitions], config,
                          partitions)  # fmt: skip
        bench.write_copies(COPY_FILES)
        progress.done("Parquet and JSON-lines copies written")
        parquet = config.count / bench.parquet_seconds()
        progress.done("Parquet")
        yield _figure("spark_parquet_rows_per_s", parquet, config, COPY_FILES)
        json_lines = config.count / bench.json_seconds()
        progress.done("JSON lines")
        yield _figure("spark_json_rows_per_s", json_lines, config, COPY_FILES)
    best = max(rates.values())
    yield _figure("spark_quiver_vs_parquet", best / parquet, config, 0)
    yield _figure("spark_quiver_vs_json", best / json_lines, config, 0)
    yield _figure("spark_quiver_p2_vs_p1", rates[2] / rates[1], config, 0)


def _figure(name: str, value: float, config: SparkBenchConfig, partitions: int) -> Figure:
    return Figure(name, value, config.count, config.size, partitions)


def _fill(root: Path, config: SparkBenchConfig, progress: Progress) -> None:
    """``count`` messages into queue 0 of :data:`TOPIC`, as the SDK's producer sends them."""
    ids = UniqKeyGenerator()
    body = bench_body(config.size)
    with MessageStore(root, options=StoreOptions()) as store:
        for start in range(0, config.count, FILL_BATCH):
            batch = [
                NewMessage(TOPIC, body, 0,
                           {"UNIQ_KEY": ids.next(), "TAGS": f"t{i % 4}", "KEYS": f"order-{i}"})
                for i in range(start, min(start + FILL_BATCH, config.count))
            ]  # fmt: skip
            result = store.put_batch(batch)
            if not result.ok:
                raise RuntimeError(f"fill failed: {result.status.value} {result.detail}")
            if start % 100_000 == 0:
                progress.update("fill", start, config.count)
    progress.done("fill")
