"""The ``quiver`` source's bounds by time, ``topicPattern`` and ``tags``, read by a real local
Spark session (``local[2]``, one session for the module) from a store written in epochs
(:mod:`tests.spark.epoch_store`): exact rows, expectations from the store's own gets."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from pyspark.errors import PySparkException
from pyspark.sql import functions as sf

from sdk.spark import QuiverDataSource, register
from sdk.spark.registration import PUSHDOWN_SETTING
from tests.spark.epoch_store import EPOCHS, PER_QUEUE, TOPICS, Stored, write_epoch_store
from tests.spark.pyspark_versions import without_filter_pushdown
from tests.spark.spark_session import local_session

pytestmark = [
    pytest.mark.spark,
    pytest.mark.xdist_group("spark"),  # one session per run under --dist loadgroup
    pytest.mark.filterwarnings("ignore:PySpark does not yet fully support pandas:FutureWarning"),
]


@pytest.fixture(scope="module")
def spark() -> Iterator[Any]:
    yield from local_session("quiver-source-options")


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("options") / "store"
    write_epoch_store(root)
    return root


@pytest.fixture(scope="module")
def stored(store: Path) -> Stored:
    found = Stored(store)
    assert len(found.rows) == sum(TOPICS.values()) * EPOCHS * PER_QUEUE
    return found


def read(spark: Any, root: Path, **options: str) -> list[tuple[str, int, int]]:
    """(topic, queue id, queue offset) of every row read, sorted; each row once."""
    frame = spark.read.format("quiver").option("path", str(root)).options(**options).load()
    rows = frame.select("topic", "queue_id", "queue_offset").toArrow().to_pylist()
    keys = sorted((row["topic"], row["queue_id"], row["queue_offset"]) for row in rows)
    assert len(set(keys)) == len(keys), "a row read twice"
    return keys


def queue_span(topic: str, queue_id: int, start: int, end: int) -> list[tuple[str, int, int]]:
    return [(topic, queue_id, offset) for offset in range(start, end)]


def test_starting_timestamp_starts_every_queue_at_its_first_offset_stored_then(
    spark: Any, store: Path, stored: Stored
):
    epoch_two = stored.epoch_start_ms(2)
    rows = read(spark, store, topics="orders,audit", startingTimestamp=str(epoch_two))
    wanted = []
    for topic in ("orders", "audit"):
        for queue_id in range(TOPICS[topic]):
            first = stored.first_at_or_after(topic, queue_id, epoch_two)
            assert first == 2 * PER_QUEUE  # the epochs' clock gap makes the oracle exact
            wanted += queue_span(topic, queue_id, first, EPOCHS * PER_QUEUE)
    assert rows == sorted(wanted)


def test_a_time_between_stored_times_and_ones_outside_the_queue(
    spark: Any, store: Path, stored: Stored
):
    # one ms after the first message of epoch 1: the oracle says where each queue starts
    inside = stored.epoch_start_ms(1) + 1
    rows = read(spark, store, topics="orders", startingTimestamp=str(inside))
    wanted = []
    for queue_id in range(3):
        first = stored.first_at_or_after("orders", queue_id, inside)
        wanted += queue_span("orders", queue_id, first, EPOCHS * PER_QUEUE)
    assert rows == sorted(wanted)
    newest = max(r.store_ms for r in stored.rows)
    assert read(spark, store, topics="orders", startingTimestamp=str(newest + 1)) == []
    everything = read(spark, store, topics="orders", startingTimestamp="0")
    assert everything == stored.keys(topic="orders")
    assert read(spark, store, topics="orders", endingTimestamp=str(newest + 1)) == everything


def test_starting_offsets_by_timestamp_per_queue_and_ending_timestamp(
    spark: Any, store: Path, stored: Stored
):
    by_queue = {"orders": {"0": stored.epoch_start_ms(1), "2": stored.epoch_start_ms(3)}}
    rows = read(
        spark,
        store,
        topics="orders",
        startingOffsetsByTimestamp=orjson.dumps(by_queue).decode(),
        endingTimestamp=str(stored.epoch_start_ms(3)),
    )
    assert rows == sorted(
        queue_span("orders", 0, PER_QUEUE, 3 * PER_QUEUE)
        + queue_span("orders", 1, 0, 3 * PER_QUEUE)  # not named: from the earliest
    )  # queue 2 starts where it ends: nothing
    ends = {"audit": {"1": stored.epoch_start_ms(1)}}
    rows = read(
        spark,
        store,
        topics="audit",
        startingTimestamp=str(stored.epoch_start_ms(0)),
        endingOffsetsByTimestamp=orjson.dumps(ends).decode(),
    )
    assert rows == sorted(
        queue_span("audit", 0, 0, EPOCHS * PER_QUEUE) + queue_span("audit", 1, 0, PER_QUEUE)
    )


@pytest.mark.parametrize(
    ("options", "named"),
    [
        ({"startingTimestamp": "1", "startingOffsets": "earliest"}, "startingOffsets"),
        ({"startingTimestamp": "1", "startingOffsetsByTimestamp": "{}"}, "startingTimestamp"),
        ({"endingTimestamp": "1", "endingOffsets": "latest"}, "endingOffsets"),
        ({"endingTimestamp": "1", "endingOffsetsByTimestamp": "{}"}, "endingTimestamp"),
        ({"startingTimestamp": "soon"}, "startingTimestamp"),
        ({"startingTimestamp": "5", "endingTimestamp": "4"}, "endingTimestamp"),
        ({"startingOffsetsByTimestamp": '{"orders": {"0": -1}}'}, "startingOffsetsByTimestamp"),
        ({"startingOffsetsByTimestamp": '{"audit": {"0": 1}}'}, "startingOffsetsByTimestamp"),
        ({"startingOffsetsByTimestamp": '{"orders": {"5": 1}}'}, "startingOffsetsByTimestamp"),
        ({"topicPattern": "orders.*"}, "topics"),
        ({"topics": None, "topicPattern": "("}, "topicPattern"),
        ({"tags": "||"}, "tags"),
    ],
)
def test_conflicting_or_malformed_options_are_refused_naming_them(
    spark: Any, store: Path, options: dict[str, str | None], named: str
):
    given = {name: value for name, value in {"topics": "orders", **options}.items() if value}
    with pytest.raises(PySparkException, match=f"InvalidArgumentError: {named}: "):
        read(spark, store, **given)


def test_an_ending_time_before_the_start_offset_is_refused_naming_it(
    spark: Any, store: Path, stored: Stored
):
    with pytest.raises(PySparkException, match="InvalidArgumentError: endingTimestamp: "):
        read(
            spark,
            store,
            topics="orders",
            startingOffsets='{"orders": {"0": 30}}',
            endingTimestamp=str(stored.epoch_start_ms(1)),
        )


def test_topic_pattern_reads_the_store_topics_it_matches_whole(
    spark: Any, store: Path, stored: Stored
):
    rows = read(spark, store, topicPattern="orders.*")
    assert rows == stored.keys(topic="orders") + stored.keys(topic="orders-eu")
    assert read(spark, store, topicPattern="order") == []  # matches no topic whole
    assert read(spark, store, topicPattern="aud.t|orders-eu") == sorted(
        stored.keys(topic="audit") + stored.keys(topic="orders-eu")
    )
    starting = '{"orders-eu": {"0": 25}}'
    rows = read(spark, store, topicPattern="orders-.*", startingOffsets=starting)
    assert rows == queue_span("orders-eu", 0, 25, EPOCHS * PER_QUEUE)


def test_tags_keep_only_rows_with_one_of_the_tags(spark: Any, store: Path, stored: Stored):
    rows = read(spark, store, topics="orders,audit", tags="t0 || t2")
    wanted = [
        key for tag in ("t0", "t2") for topic in ("orders", "audit")
        for key in stored.keys(topic=topic, tags=tag)
    ]  # fmt: skip
    assert rows == sorted(wanted)
    assert len(rows) > 0
    assert read(spark, store, topics="orders", tags="*") == stored.keys(topic="orders")
    assert read(spark, store, topics="orders", tags="nope") == []
    with_bounds = read(spark, store, topics="orders", queues="1", tags="t1", minPartitions="4",
                       startingOffsets='{"orders": {"1": 5}}')  # fmt: skip
    assert with_bounds == [
        key for key in stored.keys(topic="orders", queue_id=1, tags="t1") if key[2] >= 5
    ]


@without_filter_pushdown
def test_without_pushdown_in_pyspark_register_picks_the_plain_source(spark: Any, store: Path):
    """pyspark 4.0 has no filter pushdown: with the setting on, ``register`` still registers
    the plain source, and Spark filters its rows (4.1+: test_source_pushdown.py)."""
    spark.conf.set(PUSHDOWN_SETTING, "true")
    try:
        assert register(spark) is QuiverDataSource
        frame = spark.read.format("quiver").options(path=str(store), topics="orders").load()
        frame = frame.where((sf.col("queue_id") == 0) & (sf.col("queue_offset") < 4))
        rows = frame.select("topic", "queue_id", "queue_offset").toArrow().to_pylist()
    finally:
        spark.conf.unset(PUSHDOWN_SETTING)
    keys = sorted((row["topic"], row["queue_id"], row["queue_offset"]) for row in rows)
    assert keys == queue_span("orders", 0, 0, 4)
