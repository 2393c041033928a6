"""The ``quiver`` sink and the ``broker`` source against a real ``quiver broker`` process on a
loopback port, driven by a real local Spark session (``local[2]``, one for the module; a task
may be tried 3 times): every row stored once with its columns mapped, a task retried by Spark
or a write run again stores nothing twice, overwrite refused, exact ranges read over HTTP, a
streaming query's consumer group offsets advanced after a trigger, a broker stream capped by
``maxOffsetsPerTrigger``, and data loss detected when retention removed a stream's start."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from pyspark import TaskContext
from pyspark.errors import PySparkException
from pyspark.sql.functions import udf

from quiver_errors import IllegalStateError
from sdk import EmbeddedBroker, Message, Producer
from sdk.spark.broker_source import read_broker_range
from sdk.spark.ranges import QueueRange
from sdk.spark.write_plan import CHUNK_BATCHES
from sdk.spark.writer import parse_write_options, send_partition
from sdk.transport.http_sync import HttpTransport
from tests.sdk.remote.broker_process import SMALL_GEOMETRY, BrokerProcess
from tests.spark.pyspark_versions import with_admission_control
from tests.spark.spark_session import local_session, process_until

pytestmark = [
    pytest.mark.spark,
    pytest.mark.xdist_group("spark"),  # one session per run under --dist loadgroup
    pytest.mark.filterwarnings("ignore:PySpark does not yet fully support pandas:FutureWarning"),
]

WAIT_S = 120.0


@pytest.fixture(scope="module")
def spark() -> Iterator[Any]:
    # a failed task is tried again (up to 3 times in all)
    yield from local_session("quiver-broker-tests", max_task_failures=3)


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    with BrokerProcess(tmp_path_factory.mktemp("sink") / "data") as process:
        yield process


def stored_ends(url: str, topic: str) -> list[int]:
    """Each queue's end offset of ``topic`` (none for a topic not created yet)."""
    with HttpTransport(url) as transport:
        if topic not in {found.name for found in transport.list_topics()}:
            return []
        return [transport.max_offset(topic, q) for q in range(transport.queue_count(topic))]


def stored(url: str, topic: str) -> list[dict[str, Any]]:
    """Every message of ``topic`` as the broker serves it, pulled over HTTP without Spark."""

    rows: list[dict[str, Any]] = []
    with HttpTransport(url) as transport:
        for queue_id in range(transport.queue_count(topic)):
            end = transport.max_offset(topic, queue_id)
            start = transport.min_offset(topic, queue_id)
            if end > start:
                queue_range = QueueRange(topic, queue_id, start, end)
                for batch in read_broker_range(transport, queue_range, True, True):
                    rows += batch.to_pylist()
    return rows


def test_write_round_trip_maps_every_column_and_stores_each_row_once(
    spark: Any, broker: BrokerProcess
) -> None:
    frame = spark.createDataFrame(
        [
            (f"row{i}".encode(), f"tag{i % 3}", [f"k{i}", "all"], {"n": str(i)}, f"s{i % 7}")
            for i in range(600)
        ],
        "body binary, tags string, keys array<string>, properties map<string,string>, "
        "sharding_key string",
    ).coalesce(2)
    (
        frame.write.format("quiver")
        .option("broker", broker.url)
        .option("topic", "round")
        .option("batchRows", "50")
        .mode("append")
        .save()
    )
    rows = stored(broker.url, "round")
    assert Counter(row["body"] for row in rows) == Counter(f"row{i}".encode() for i in range(600))
    queue_of_key: dict[str, set[int]] = {}
    for row in rows:
        i = int(row["body"][3:])
        assert row["tags"] == f"tag{i % 3}"
        assert row["keys"] == [f"k{i}", "all"]
        assert dict(row["properties"]) == {"n": str(i)}
        queue_of_key.setdefault(f"s{i % 7}", set()).add(row["queue_id"])
    assert all(len(queues) == 1 for queues in queue_of_key.values())  # one key, one queue
    assert len({row["msg_id"] for row in rows}) == 600


def test_topic_and_queue_columns_and_string_values(spark: Any, broker: BrokerProcess) -> None:
    frame = spark.createDataFrame(
        [(f"v{i}", "colA" if i % 2 else "colB", i % 2) for i in range(40)],
        "value string, topic string, queue_id int",
    )
    frame.write.format("quiver").option("broker", broker.url).mode("append").save()
    for topic, parity in (("colA", 1), ("colB", 0)):
        rows = stored(broker.url, topic)
        assert sorted(row["body"] for row in rows) == sorted(
            f"v{i}".encode() for i in range(40) if i % 2 == parity
        )
        assert {row["queue_id"] for row in rows} == {parity}


def test_a_task_retried_by_spark_stores_nothing_twice(spark: Any, broker: BrokerProcess) -> None:

    def body_or_die(i: int) -> str | None:
        """Row 1900's body is null in the task's first attempt: the sink fails the task
        there, after it sent the batches before that row."""
        context = TaskContext.get()
        if context is not None and context.attemptNumber() == 0 and i == 1900:
            return None
        return f"r{i}"

    fail_first_attempt = udf(body_or_die, "string", useArrow=False)

    rows = 2000  # partition 1 sends many more batches per queue than a window holds
    frame = spark.range(0, rows, numPartitions=2).select(fail_first_attempt("id").alias("value"))
    (
        frame.write.format("quiver")
        .option("broker", broker.url)
        .option("topic", "retried")
        .option("batchRows", "5")
        .mode("append")
        .save()
    )
    bodies = Counter(row["body"] for row in stored(broker.url, "retried"))
    assert bodies == Counter(f"r{i}".encode() for i in range(rows))


def test_a_partition_written_again_stores_nothing_twice(broker: BrokerProcess) -> None:
    options = parse_write_options(
        {"broker": broker.url, "topic": "replayed", "batchRows": "3"}, False
    )
    rows = pa.RecordBatch.from_pydict({"value": [f"x{i}" for i in range(1000)]})
    batches_per_queue = 1000 // 3 // 4
    assert batches_per_queue > CHUNK_BATCHES  # more than one window's worth per queue
    first = send_partition(options, "replay-1", 0, iter([rows]))
    again = send_partition(options, "replay-1", 0, iter([rows]))
    assert first == again
    bodies = Counter(row["body"] for row in stored(broker.url, "replayed"))
    assert bodies == Counter(f"x{i}".encode() for i in range(1000))


def test_other_rows_under_a_stored_stamp_fail_the_task(broker: BrokerProcess) -> None:
    # the broker answers a stamp it holds as stored: a batch of other rows under it (a reused
    # writeId, input that differs between attempts) would be dropped without a word
    options = parse_write_options({"broker": broker.url, "topic": "reused"}, False)
    first = pa.RecordBatch.from_pydict({"value": [f"a{i}" for i in range(10)]})
    other = pa.RecordBatch.from_pydict({"value": [f"b{i}" for i in range(7)]})
    send_partition(options, "reused-1", 0, iter([first]))
    with pytest.raises(IllegalStateError, match="holds 7: the write's rows differ"):
        send_partition(options, "reused-1", 0, iter([other]))
    bodies = Counter(row["body"] for row in stored(broker.url, "reused"))
    assert bodies == Counter(f"a{i}".encode() for i in range(10))


def test_a_partition_written_again_after_a_broker_restart_stores_nothing_twice(
    tmp_path: Path,
) -> None:
    rows = pa.RecordBatch.from_pydict({"value": [f"y{i}" for i in range(1000)]})
    data = tmp_path / "data"
    with BrokerProcess(data) as first:
        options = parse_write_options(
            {"broker": first.url, "topic": "restarted", "batchRows": "3"}, False
        )
        send_partition(options, "restart-1", 5, iter([rows]))
        assert first.stop() == 0
        with BrokerProcess(data, port=first.port) as second:  # its windows rebuilt from the log
            send_partition(options, "restart-1", 5, iter([rows]))
            bodies = Counter(row["body"] for row in stored(second.url, "restarted"))
    assert bodies == Counter(f"y{i}".encode() for i in range(1000))


def test_the_same_write_id_run_twice_stores_each_row_once(
    spark: Any, broker: BrokerProcess
) -> None:
    frame = spark.range(0, 300, numPartitions=3).selectExpr("cast(id as string) as value")
    for _ in range(2):
        (
            frame.write.format("quiver")
            .option("broker", broker.url)
            .option("topic", "rerun")
            .option("writeId", "nightly-2026-11-27")
            .option("batchRows", "7")
            .mode("append")
            .save()
        )
    bodies = Counter(row["body"] for row in stored(broker.url, "rerun"))
    assert bodies == Counter(str(i).encode() for i in range(300))


def test_overwrite_is_refused_and_nothing_stored(spark: Any, broker: BrokerProcess) -> None:
    frame = spark.createDataFrame([("a",)], "value string")
    with pytest.raises(PySparkException, match="only appends"):
        (
            frame.write.format("quiver")
            .option("broker", broker.url)
            .option("topic", "overwritten")
            .mode("overwrite")
            .save()
        )
    assert stored(broker.url, "overwritten") == []


def test_unknown_column_is_refused(spark: Any, broker: BrokerProcess) -> None:
    frame = spark.createDataFrame([("a", "b")], "value string, tag string")
    with pytest.raises(PySparkException, match="'tag'"):
        frame.write.format("quiver").option("broker", broker.url).option("topic", "t").mode(
            "append"
        ).save()


def produce(url: str, topic: str, count: int) -> None:
    with Producer(url) as producer:
        for start in range(0, count, 50):
            batch = [Message(topic, f"m{i}".encode()) for i in range(start, min(start + 50, count))]
            producer.send_batch(batch)


def test_broker_read_covers_exact_ranges(spark: Any, broker: BrokerProcess) -> None:
    produce(broker.url, "ranged", 400)
    with HttpTransport(broker.url) as transport:
        ends = {q: transport.max_offset("ranged", q) for q in range(4)}
    assert sum(ends.values()) == 400
    frame = (
        spark.read.format("quiver")
        .option("broker", broker.url)
        .option("topics", "ranged")
        .option("startingOffsets", '{"ranged": {"0": 10, "1": 3}}')
        .option("endingOffsets", '{"ranged": {"0": 40}}')
        .option("minPartitions", "9")
        .load()
    )
    rows = frame.select("queue_id", "queue_offset", "body").collect()
    got = Counter((row.queue_id, row.queue_offset) for row in rows)
    expected = {(0, o) for o in range(10, 40)} | {(1, o) for o in range(3, ends[1])}
    expected |= {(q, o) for q in (2, 3) for o in range(ends[q])}
    assert set(got) == expected
    assert set(got.values()) == {1}
    assert frame.rdd.getNumPartitions() >= 9


def test_streaming_read_advances_the_consumer_group(
    spark: Any, broker: BrokerProcess, tmp_path: Path
) -> None:
    produce(broker.url, "streamed", 120)
    with HttpTransport(broker.url) as transport:
        first_ends = {q: transport.max_offset("streamed", q) for q in range(4)}
    query = (
        spark.readStream.format("quiver")
        .option("broker", broker.url)
        .option("topics", "streamed")
        .option("startingOffsets", "earliest")  # a stream starts at the latest by default
        .option("consumerGroup", "lag-watch")
        .load()
        .select("body")
        .writeStream.format("quiver")
        .option("broker", broker.url)
        .option("topic", "streamed-copy")
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(processingTime="1 second")
        .start()
    )
    try:
        query.processAllAvailable()
        # Spark commits a micro-batch's source offsets when it plans the next one: a second
        # trigger commits the first's ends as the group's offsets
        produce(broker.url, "streamed", 30)
        process_until(query, lambda: sum(stored_ends(broker.url, "streamed-copy")) == 150)
        with HttpTransport(broker.url) as transport:
            name = transport.broker_name
            wait_until(
                lambda: (
                    {q: transport.query_offset(name, "lag-watch", "streamed", q) for q in range(4)}
                    == first_ends
                )
            )
    finally:
        query.stop()
    copied = Counter(row["body"] for row in stored(broker.url, "streamed-copy"))
    assert copied == Counter(f"m{i}".encode() for i in range(120)) + Counter(
        f"m{i}".encode() for i in range(30)
    )


def wait_until(condition: Any) -> None:

    deadline = time.monotonic() + WAIT_S
    while not condition():
        assert time.monotonic() < deadline, "the condition did not hold in time"
        time.sleep(0.2)


class Batches:
    """A ``foreachBatch`` sink that keeps each micro-batch's bodies (it runs in this process)."""

    def __init__(self) -> None:
        self.seen: list[list[bytes]] = []

    def __call__(self, frame: Any, batch_id: int) -> None:
        self.seen.append([row["body"] for row in frame.select("body").toArrow().to_pylist()])


def broker_stream(spark: Any, url: str, checkpoint: Path, sink: Batches, **options: str) -> Any:
    """A started ``Trigger.AvailableNow`` query of the broker at ``url`` into ``sink``."""
    frame = spark.readStream.format("quiver").option("broker", url).options(**options).load()
    writer = frame.writeStream.foreachBatch(sink).option("checkpointLocation", str(checkpoint))
    return writer.trigger(availableNow=True).start()


@with_admission_control  # 4.0 and 4.1 refuse the option: test_quiver_stream.py
def test_a_broker_stream_honours_max_offsets_per_trigger(
    spark: Any, broker: BrokerProcess, tmp_path: Path
) -> None:
    produce(broker.url, "capped", 100)
    sink = Batches()
    query = broker_stream(
        spark, broker.url, tmp_path / "checkpoint", sink,
        topics="capped", startingOffsets="earliest", maxOffsetsPerTrigger="30",
    )  # fmt: skip
    assert query.awaitTermination(WAIT_S)  # AvailableNow: it stops by itself
    assert [len(bodies) for bodies in sink.seen if bodies] == [30, 30, 30, 10]
    read = Counter(body for bodies in sink.seen for body in bodies)
    assert read == Counter(f"m{i}".encode() for i in range(100))


def produce_large(url: str, topic: str, count: int, first: int = 0) -> None:
    """``count`` messages of 1 KiB bodies ``l<number>`` padded: many 1 MiB log segments."""
    with Producer(url) as producer:
        for start in range(first, first + count, 50):
            end = min(start + 50, first + count)
            producer.send_batch(
                [Message(topic, f"l{i}".encode().ljust(1024)) for i in range(start, end)]
            )


def remove_old_segments(process: BrokerProcess) -> BrokerProcess:
    """Retention, forced, on a stopped broker's store (every log segment but the last goes);
    the broker started again on the same port."""
    assert process.stop() == 0
    with EmbeddedBroker(process.data, **SMALL_GEOMETRY) as embedded:
        assert embedded.service.store.clean(force=True).commitlog_files
    return BrokerProcess(process.data, port=process.port)


def test_a_broker_stream_fails_when_retention_removed_its_next_offsets(
    spark: Any, tmp_path: Path
) -> None:
    checkpoint = tmp_path / "checkpoint"
    first = Batches()
    with BrokerProcess(tmp_path / "data") as process:
        produce_large(process.url, "lost", 40)
        query = broker_stream(
            spark, process.url, checkpoint, first, topics="lost", startingOffsets="earliest"
        )
        assert query.awaitTermination(WAIT_S)
        produce_large(process.url, "lost", 4000, first=40)
    with remove_old_segments(process) as restarted:
        with HttpTransport(restarted.url) as transport:
            assert all(transport.min_offset("lost", q) > 40 for q in range(4))
        second = Batches()
        query = broker_stream(spark, restarted.url, checkpoint, second, topics="lost")
        with pytest.raises(PySparkException, match=r"DataLossError: failOnDataLoss: 'lost'"):
            query.awaitTermination(WAIT_S)
        query.stop()
        assert not any(second.seen)
        third = Batches()
        query = broker_stream(
            spark, restarted.url, checkpoint, third, topics="lost", failOnDataLoss="false"
        )
        assert query.awaitTermination(WAIT_S)
        with HttpTransport(restarted.url) as transport:
            earliest = {q: transport.min_offset("lost", q) for q in range(4)}
            latest = {q: transport.max_offset("lost", q) for q in range(4)}
    assert sum(len(bodies) for bodies in first.seen) == 40
    assert sum(len(bodies) for bodies in third.seen) == sum(
        latest[q] - earliest[q] for q in range(4)
    )
