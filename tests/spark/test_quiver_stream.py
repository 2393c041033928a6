"""The ``quiver`` data source read as a stream by a real local Spark session (``local[2]``,
one session for the module), over a store an in-process broker writes (sync flush: a send
returns once its record is on disk, where Spark's read-only opens see it): micro-batches
within ``maxOffsetsPerTrigger``, ``Trigger.AvailableNow``, restarts from a checkpoint, and
data loss when retention removed the start, in streams and batch reads."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from pyspark.errors import PySparkException

from sdk.spark.pyspark_api import ADMISSION_CONTROL
from tests.spark.pyspark_versions import with_admission_control, without_admission_control
from tests.spark.spark_session import local_session, process_until
from tests.spark.store_writer import QUEUES, TOPIC, body_of
from tests.spark.stores import Store

pytestmark = [
    pytest.mark.spark,
    pytest.mark.xdist_group("spark"),  # one session per run under --dist loadgroup
    pytest.mark.filterwarnings("ignore:PySpark does not yet fully support pandas:FutureWarning"),
]

TIMEOUT_S = 300
COLUMNS = ("topic", "queue_id", "queue_offset", "keys", "body")


@pytest.fixture(scope="module")
def spark() -> Iterator[Any]:
    yield from local_session("quiver-stream-tests")


class Batches:
    """A ``foreachBatch`` sink that keeps each micro-batch's rows (it runs in this process)."""

    def __init__(self, after_first: Callable[[], None] | None = None) -> None:
        self.seen: list[tuple[int, list[dict[str, Any]]]] = []
        self.after_first = after_first

    def __call__(self, frame: Any, batch_id: int) -> None:
        self.seen.append((batch_id, frame.select(*COLUMNS).toArrow().to_pylist()))
        if self.after_first is not None:
            self.after_first()  # while the query runs, between two of its micro-batches
            self.after_first = None

    @property
    def rows(self) -> list[dict[str, Any]]:
        return [row for _, rows in self.seen for row in rows]


def stream(spark: Any, store: Store, checkpoint: Path, sink: Batches, **options: str) -> Any:
    """A started query of the store's ``orders`` (unless ``topics`` says otherwise) into
    ``sink``; ``trigger`` (``availableNow``) chooses the trigger."""
    available_now = options.pop("trigger", None) == "availableNow"
    options.setdefault("topics", TOPIC)
    frame = spark.readStream.format("quiver").option("path", str(store.root)).options(**options)
    writer = (
        frame.load().writeStream.foreachBatch(sink).option("checkpointLocation", str(checkpoint))
    )
    if available_now:
        writer = writer.trigger(availableNow=True)
    return writer.start()


def run_to_end(query: Any) -> None:
    """Read all the query can now, then stop it."""
    try:
        query.processAllAvailable()
    finally:
        query.stop()


def numbers(rows: list[dict[str, Any]], topic: str = TOPIC) -> list[int]:
    """The message numbers of ``topic``'s rows, sorted; every body checked against its key."""
    found = []
    for row in rows:
        if row["topic"] == topic:
            number = int(row["keys"][0][1:])
            assert row["body"] == body_of(number)
            found.append(number)
    return sorted(found)


def offsets_per_queue(rows: list[dict[str, Any]]) -> dict[int, list[int]]:
    """Each queue's offsets of ``orders`` in the order the rows came."""
    per_queue: dict[int, list[int]] = {}
    for row in rows:
        if row["topic"] == TOPIC:
            per_queue.setdefault(row["queue_id"], []).append(row["queue_offset"])
    return per_queue


@with_admission_control
def test_max_offsets_per_trigger_caps_every_micro_batch_each_row_once_in_order(
    spark: Any, tmp_path: Path
):
    with Store(tmp_path / "store") as store:
        store.write(300)
        sink = Batches()
        query = stream(
            spark,
            store,
            tmp_path / "checkpoint",
            sink,
            startingOffsets="earliest",
            maxOffsetsPerTrigger="40",
            minPartitions="4",
        )
        try:
            process_until(query, lambda: len(sink.rows) == 300)
            store.write(50)  # seen by the running query
            process_until(query, lambda: len(sink.rows) == 350)
        finally:
            query.stop()
    sizes = [len(rows) for _, rows in sink.seen]
    assert max(sizes) == 40, sizes  # the cap binds (how many batches fill it depends on when
    assert sum(sizes) == 350  # the writer's records became visible), and no batch passes it
    assert numbers(sink.rows) == list(range(350))  # every row once
    for queue_id, offsets in offsets_per_queue(sink.rows).items():
        assert offsets == list(range(len(offsets))), queue_id  # in order, no gap
    first = sink.seen[0][1]
    assert {row["queue_id"] for row in first} == set(range(QUEUES))  # shared across queues


@without_admission_control
def test_max_offsets_per_trigger_is_refused_without_admission_control(spark: Any, tmp_path: Path):
    with Store(tmp_path / "store") as store:
        store.write(10)
        sink = Batches()
        with pytest.raises(
            PySparkException, match=r"maxOffsetsPerTrigger: needs pyspark 4\.2 or later"
        ):
            run_to_end(
                stream(
                    spark, store, tmp_path / "checkpoint", sink, startingOffsets="earliest",
                    maxOffsetsPerTrigger="30",
                )
            )  # fmt: skip
    assert sink.rows == []


@with_admission_control
def test_available_now_reads_what_is_there_and_stops(spark: Any, tmp_path: Path):
    checkpoint = tmp_path / "checkpoint"
    with Store(tmp_path / "store") as store:
        store.write(100)
        first = Batches(after_first=lambda: store.write(50))  # not read: after the start
        query = stream(
            spark, store, checkpoint, first, startingOffsets="earliest", maxOffsetsPerTrigger="30",
            trigger="availableNow",
        )  # fmt: skip
        assert query.awaitTermination(TIMEOUT_S)  # it stops by itself
        second = Batches()
        query = stream(
            spark, store, checkpoint, second, maxOffsetsPerTrigger="30", trigger="availableNow"
        )
        assert query.awaitTermination(TIMEOUT_S)
    assert [len(rows) for _, rows in first.seen if rows] == [30, 30, 30, 10]
    assert numbers(first.rows) == list(range(100))
    assert numbers(second.rows) == list(range(100, 150))  # the new ones only


@without_admission_control
def test_available_now_reads_what_is_there_in_one_batch_and_stops(spark: Any, tmp_path: Path):
    """pyspark 4.0 and 4.1 run ``Trigger.AvailableNow`` through Spark's own wrapper: the
    queues' latest offsets at the start, in one micro-batch."""
    checkpoint = tmp_path / "checkpoint"
    with Store(tmp_path / "store") as store:
        store.write(100)
        first = Batches(after_first=lambda: store.write(50))  # not read: after the start
        query = stream(
            spark, store, checkpoint, first, startingOffsets="earliest", trigger="availableNow"
        )
        assert query.awaitTermination(TIMEOUT_S)  # it stops by itself
        second = Batches()
        query = stream(spark, store, checkpoint, second, trigger="availableNow")
        assert query.awaitTermination(TIMEOUT_S)
    assert [len(rows) for _, rows in first.seen if rows] == [100]
    assert numbers(first.rows) == list(range(100))
    assert numbers(second.rows) == list(range(100, 150))  # the new ones only


def test_a_restart_from_the_checkpoint_loses_nothing_and_repeats_nothing(
    spark: Any, tmp_path: Path
):
    checkpoint = tmp_path / "checkpoint"
    cap = {"maxOffsetsPerTrigger": "50"} if ADMISSION_CONTROL else {}  # several batches on 4.2+
    with Store(tmp_path / "store") as store:
        store.write(120)
        first = Batches()
        run_to_end(
            stream(
                spark, store, checkpoint, first, topics="orders,audit",
                startingOffsets="earliest", **cap,
            )
        )  # fmt: skip
        store.write(90)
        store.create_topic("audit", 2)  # a topic and its queues appear while stopped
        store.write(30, "audit")
        second = Batches()
        run_to_end(  # the checkpoint wins over startingOffsets
            stream(
                spark, store, checkpoint, second, topics="orders,audit",
                startingOffsets="earliest", **cap,
            )
        )  # fmt: skip
    assert numbers(first.rows) == list(range(120))
    assert numbers(first.rows + second.rows) == list(range(210))  # no loss, no duplicate
    assert numbers(second.rows, "audit") == list(range(30))


def test_a_new_stream_starts_at_latest_by_default(spark: Any, tmp_path: Path):
    with Store(tmp_path / "store") as store:
        store.write(40)
        sink = Batches()
        query = stream(spark, store, tmp_path / "checkpoint", sink)
        try:
            query.processAllAvailable()
            store.write(25)
            process_until(query, lambda: len(sink.rows) >= 25)
        finally:
            query.stop()
    assert numbers(sink.rows) == list(range(40, 65))


def read_then_lose_the_rest(spark: Any, store: Store, checkpoint: Path) -> dict[int, int]:
    """A stream reads what the store holds; then more is written and retention removes
    every segment but the last, offsets the stream has not read among them. The queues'
    new earliest offsets."""
    store.write(60)
    first = Batches()
    run_to_end(stream(spark, store, checkpoint, first, startingOffsets="earliest"))
    assert numbers(first.rows) == list(range(60))
    store.write(900)  # several 64 KiB segments
    earliest = store.remove_old_segments()
    assert all(offset > 60 for offset in earliest.values())
    return earliest


def test_a_stream_fails_when_retention_removed_its_next_offsets(spark: Any, tmp_path: Path):
    checkpoint = tmp_path / "checkpoint"
    with Store(tmp_path / "store") as store:
        read_then_lose_the_rest(spark, store, checkpoint)
        sink = Batches()
        query = stream(spark, store, checkpoint, sink)
        with pytest.raises(PySparkException, match=r"DataLossError: failOnDataLoss: 'orders'"):
            run_to_end(query)
    assert sink.rows == []


def test_a_stream_without_fail_on_data_loss_goes_on_from_the_earliest(spark: Any, tmp_path: Path):
    checkpoint = tmp_path / "checkpoint"
    with Store(tmp_path / "store") as store:
        earliest = read_then_lose_the_rest(spark, store, checkpoint)
        sink = Batches()
        run_to_end(stream(spark, store, checkpoint, sink, failOnDataLoss="false"))
        latest = store.sent[TOPIC]
    per_queue = offsets_per_queue(sink.rows)
    for queue_id, offsets in per_queue.items():
        assert offsets == list(range(earliest[queue_id], offsets[-1] + 1))
    assert len(numbers(sink.rows)) == len(set(numbers(sink.rows)))
    assert numbers(sink.rows)[-1] == latest - 1


def batch_read(spark: Any, root: Path, **options: str) -> list[dict[str, Any]]:
    frame = spark.read.format("quiver").options(path=str(root), topics=TOPIC, **options).load()
    return frame.select(*COLUMNS).toArrow().to_pylist()  # type: ignore[no-any-return]


def test_a_batch_read_from_removed_offsets_fails_or_starts_at_the_earliest(
    spark: Any, tmp_path: Path
):
    with Store(tmp_path / "store") as store:
        store.write(900)
        earliest = store.remove_old_segments()
    from_zero = '{"orders": {"0": 0, "1": 0, "2": 0}}'
    with pytest.raises(
        PySparkException,
        match=rf"DataLossError: failOnDataLoss: 'orders' queue 0 offsets \[0, {earliest[0]}\)",
    ):
        batch_read(spark, store.root, startingOffsets=from_zero)
    rows = batch_read(spark, store.root, startingOffsets=from_zero, failOnDataLoss="false")
    assert rows == batch_read(spark, store.root)  # what "earliest" reads
    for queue_id, offsets in offsets_per_queue(rows).items():
        assert offsets[0] == earliest[queue_id] > 0
    assert numbers(rows)[-1] == 899
