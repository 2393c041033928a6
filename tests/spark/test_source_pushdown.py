"""Filter pushdown of the ``quiver`` source: the filters it takes and returns, the ranges it
plans for them (exact, on a real store), and the rows a real local Spark session reads with
``spark.sql.python.filterPushdown.enabled`` (the session of this module) and without it."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from sdk.spark.pyspark_api import FILTER_PUSHDOWN, PYSPARK_VERSION

if not FILTER_PUSHDOWN:  # pyspark 4.0: test_pyspark_api.py and test_source_options.py cover it
    pytest.skip(
        f"pyspark {PYSPARK_VERSION} has no filter pushdown for Python sources (4.1+)",
        allow_module_level=True,
    )

from pyspark.sql import functions as sf
from pyspark.sql.datasource import (
    EqualTo,
    GreaterThan,
    GreaterThanOrEqual,
    In,
    IsNotNull,
    IsNull,
    LessThan,
    LessThanOrEqual,
    Not,
    StringStartsWith,
)

from sdk.spark import QuiverDataSource, register
from sdk.spark.options import parse_read_options
from sdk.spark.pushdown import QuiverPushdownDataSource, QuiverPushdownReader, push_filters
from sdk.spark.ranges import QueueRange
from sdk.spark.registration import PUSHDOWN_SETTING
from tests.spark.epoch_store import EPOCHS, PER_QUEUE, Stored, write_epoch_store
from tests.spark.spark_session import local_session

pytestmark = [
    pytest.mark.spark,
    pytest.mark.xdist_group("spark"),  # one session per run under --dist loadgroup
    pytest.mark.filterwarnings("ignore:PySpark does not yet fully support pandas:FutureWarning"),
]
END = EPOCHS * PER_QUEUE  # every queue's end offset


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("pushdown") / "store"
    write_epoch_store(root)
    return root


@pytest.fixture(scope="module")
def stored(store: Path) -> Stored:
    return Stored(store)


def at(time_ms: int) -> datetime:
    return datetime.fromtimestamp(time_ms / 1000, UTC)


def planned(store: Path, filters: list[Any], **options: str) -> tuple[list[QueueRange], list[Any]]:
    """The ranges a pushdown read of ``options`` plans after ``filters``, and the filters it
    hands back to Spark."""
    reader = QuiverPushdownReader(parse_read_options({"path": str(store), **options}))
    left = list(reader.pushFilters(filters))
    return [p.queue_range for p in reader.partitions()], left


def test_topic_and_queue_filters_drop_queues_and_are_applied_exactly(store: Path):
    filters = [
        IsNotNull(("topic",)),
        In(("topic",), ("orders", "audit")),
        EqualTo(("queue_id",), 1),
    ]
    ranges, left = planned(store, filters, topicPattern=".*")
    assert ranges == [QueueRange("audit", 1, 0, END), QueueRange("orders", 1, 0, END)]
    assert left == []
    ranges, left = planned(store, [GreaterThan(("queue_id",), 0), LessThan(("queue_id",), 2)],
                           topics="orders")  # fmt: skip
    assert (ranges, left) == ([QueueRange("orders", 1, 0, END)], [])
    ranges, _ = planned(store, [EqualTo(("topic",), "orders"), EqualTo(("topic",), "audit")],
                        topicPattern=".*")  # fmt: skip
    assert ranges == []  # a contradiction plans nothing


def test_offset_filters_cut_ranges_and_an_in_with_gaps_is_returned(store: Path):
    filters = [GreaterThanOrEqual(("queue_offset",), 5), LessThanOrEqual(("queue_offset",), 12)]
    ranges, left = planned(store, filters, topics="orders", queues="0,2")
    assert ranges == [QueueRange("orders", 0, 5, 13), QueueRange("orders", 2, 5, 13)]
    assert left == []
    gaps = In(("queue_offset",), (3, 7))
    ranges, left = planned(store, [gaps], topics="orders-eu")
    assert ranges == [QueueRange("orders-eu", 0, 3, 8)]
    assert left == [gaps] and left[0] is gaps  # the very object Spark passed
    ranges, left = planned(store, [In(("queue_offset",), (4, 6, 5))], topics="orders-eu")
    assert (ranges, left) == ([QueueRange("orders-eu", 0, 4, 7)], [])


def test_time_filters_cut_through_the_seek_by_time_and_go_back_to_spark(
    store: Path, stored: Stored
):
    start, end = at(stored.epoch_start_ms(1)), at(stored.epoch_start_ms(3))
    since, before = (
        GreaterThanOrEqual(("store_timestamp",), start),
        LessThan(("store_timestamp",), end),
    )
    ranges, left = planned(store, [since, before], topics="audit")
    assert ranges == [QueueRange("audit", q, PER_QUEUE, 3 * PER_QUEUE) for q in (0, 1)]
    assert left == [since, before]
    # > the last ms of epoch 1 (plus a fraction): epoch 2 on; <= it: up to the end of epoch 1
    last_of_one = at(stored.epoch_start_ms(2) - 1)
    after = GreaterThan(("store_timestamp",), last_of_one + timedelta(microseconds=1))
    ranges, _ = planned(store, [after], topics="orders-eu")
    assert ranges == [QueueRange("orders-eu", 0, 2 * PER_QUEUE, END)]
    ranges, _ = planned(store, [LessThanOrEqual(("store_timestamp",), last_of_one)],
                        topics="orders-eu")  # fmt: skip
    assert ranges == [QueueRange("orders-eu", 0, 0, 2 * PER_QUEUE)]


def test_filters_it_does_not_take_are_all_returned_untouched():
    filters = [
        Not(EqualTo(("queue_id",), 1)),
        IsNull(("tags",)),
        IsNotNull(("tags",)),
        StringStartsWith(("topic",), "ord"),
        EqualTo(("tags",), "t1"),
        GreaterThan(("topic",), "a"),
        EqualTo(("queue_id",), "1"),
        EqualTo(("properties", "n"), "1"),
    ]
    bounds, left = push_filters(filters)
    assert left == filters and all(a is b for a, b in zip(left, filters, strict=True))
    assert bounds == push_filters([])[0]


@pytest.fixture(scope="module")
def spark() -> Iterator[Any]:
    yield from local_session("quiver-source-pushdown", **{PUSHDOWN_SETTING: "true"})


def read(spark: Any, root: Path, where: Any, **options: str) -> tuple[list[Any], int]:
    """(topic, queue id, queue offset) of the rows read with filter ``where``, sorted, and the
    number of partitions Spark planned."""
    frame = spark.read.format("quiver").option("path", str(root)).options(**options).load()
    frame = frame.where(where)
    rows = frame.select("topic", "queue_id", "queue_offset").toArrow().to_pylist()
    keys = sorted((r["topic"], r["queue_id"], r["queue_offset"]) for r in rows)
    assert len(set(keys)) == len(keys), "a row read twice"
    return keys, frame.rdd.getNumPartitions()


def test_spark_reads_exactly_the_filtered_rows_from_fewer_partitions(
    spark: Any, store: Path, stored: Stored
):
    assert register(spark) is QuiverPushdownDataSource
    since = at(stored.epoch_start_ms(2))
    where = (
        sf.col("topic").isin("orders", "audit")
        & (sf.col("queue_id") == 1)
        & (sf.col("queue_offset") >= 3)
        & (sf.col("store_timestamp") >= sf.lit(since))
        & (sf.col("tags") == "t1")
    )
    rows, partitions = read(spark, store, where, topicPattern=".*")
    wanted = [
        (r.topic, r.queue_id, r.queue_offset)
        for r in stored.rows
        if r.topic in ("orders", "audit") and r.queue_id == 1 and r.queue_offset >= 3
        and r.store_ms >= stored.epoch_start_ms(2) and r.tags == "t1"
    ]  # fmt: skip
    assert rows == sorted(wanted) and rows
    assert partitions == 2  # one range per queue left, of the store's 6
    everything, partitions = read(spark, store, sf.lit(True), topicPattern=".*")
    assert (len(everything), partitions) == (len(stored.rows), 6)


def test_without_the_setting_register_picks_the_plain_source_with_the_same_rows(
    spark: Any, store: Path, stored: Stored
):
    where = (sf.col("queue_id") == 0) & (sf.col("queue_offset") < 4)
    pushed, _ = read(spark, store, where, topics="orders")
    spark.conf.set(PUSHDOWN_SETTING, "false")
    try:
        assert register(spark) is QuiverDataSource
        plain, partitions = read(spark, store, where, topics="orders")
    finally:
        spark.conf.set(PUSHDOWN_SETTING, "true")
        register(spark)
    assert plain == pushed == [("orders", 0, offset) for offset in range(4)]
    assert partitions == 3  # nothing pruned
