"""The ``quiver`` data source read in batch by a real local Spark session (``local[2]``, one
session for the module): exact ranges, every row once and equal to what the store holds, and
a store read while another process writes it."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from pyspark.errors import PySparkException

from localstore.read_only import ReadOnlyStore
from localstore.results import GetStatus
from sdk import ReceivedMessage
from tests.spark.spark_session import local_session
from tests.spark.store_writer import QUEUES, TOPIC, StoreWriter, body_of

pytestmark = [
    pytest.mark.spark,
    pytest.mark.xdist_group("spark"),  # one session per run under --dist loadgroup
    pytest.mark.filterwarnings("ignore:PySpark does not yet fully support pandas:FutureWarning"),
]

STORED = 300  # messages of the module's store


@pytest.fixture(scope="module")
def spark() -> Iterator[Any]:
    yield from local_session("quiver-source-tests")


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A store of STORED messages of ``orders`` (3 queues), written by another process."""
    root = tmp_path_factory.mktemp("source") / "store"
    with StoreWriter(root, "async", STORED) as writer:
        writer.wait_for("ready")
    return root


def read(spark: Any, root: Path, **options: str) -> list[dict[str, Any]]:
    frame = spark.read.format("quiver").option("path", str(root)).options(**options).load()
    return frame.toArrow().to_pylist()  # type: ignore[no-any-return]


def stored_messages(root: Path) -> dict[tuple[int, int], ReceivedMessage]:
    """Every message of ``orders`` by (queue id, queue offset), as the store holds it."""
    found = {}
    with ReadOnlyStore(root) as store:
        for queue_id in store.queue_ids(TOPIC):
            offset = store.min_offset(TOPIC, queue_id)
            while (got := store.get_messages(TOPIC, queue_id, offset)).status == GetStatus.FOUND:
                for message in got.messages:
                    found[queue_id, message.queue_offset] = ReceivedMessage.from_stored(message)
                offset = got.next_offset
    return found


def expected_row(message: ReceivedMessage, *, properties: bool = False) -> dict[str, Any]:
    row = {
        "topic": message.stored_topic,
        "queue_id": message.queue_id,
        "queue_offset": message.queue_offset,
        "msg_id": message.msg_id,
        "offset_msg_id": message.offset_msg_id,
        "tags": message.tags,
        "keys": list(message.keys),
        "body": message.body,
        "born_timestamp": datetime.fromtimestamp(message.born_timestamp / 1000, UTC),
        "store_timestamp": datetime.fromtimestamp(message.store_timestamp / 1000, UTC),
        "reconsume_times": message.reconsume_times,
    }
    if properties:
        row["properties"] = sorted(message.properties.items())
    return row


def where(rows: list[dict[str, Any]]) -> Counter[tuple[int, int]]:
    return Counter((row["queue_id"], row["queue_offset"]) for row in rows)


def test_reads_every_record_once_equal_to_what_the_store_holds(spark: Any, store: Path):
    rows = read(spark, store, topics=TOPIC)
    messages = stored_messages(store)
    assert len(messages) == STORED
    assert where(rows) == Counter(messages.keys())  # every row once, nothing else
    for row in rows:  # field by field
        assert row == expected_row(messages[row["queue_id"], row["queue_offset"]])


def test_json_offsets_read_exactly_the_ranges_asked(spark: Any, store: Path):
    rows = read(
        spark,
        store,
        topics=TOPIC,
        startingOffsets='{"orders": {"0": 2, "1": -2, "2": 10}}',
        endingOffsets='{"orders": {"0": 5, "2": -1}}',
    )
    messages = stored_messages(store)
    latest = {q: 1 + max(o for qq, o in messages if qq == q) for q in range(QUEUES)}
    wanted = [(0, o) for o in range(2, 5)] + [(1, o) for o in range(latest[1])]
    wanted += [(2, o) for o in range(10, latest[2])]
    assert where(rows) == Counter(wanted)
    assert read(spark, store, topics=TOPIC, startingOffsets="latest") == []


def test_a_queues_subset_and_min_partitions(spark: Any, store: Path):
    messages = stored_messages(store)
    subset = read(spark, store, topics=TOPIC, queues="0,2")
    assert where(subset) == Counter(key for key in messages if key[0] in (0, 2))
    frame = (
        spark.read.format("quiver").options(path=str(store), topics=TOPIC, minPartitions="7").load()
    )
    assert frame.rdd.getNumPartitions() >= 7
    assert where(frame.toArrow().to_pylist()) == Counter(messages.keys())


def test_include_body_and_include_properties_choose_the_columns(spark: Any, store: Path):
    messages = stored_messages(store)
    narrow = read(spark, store, topics=TOPIC, includeBody="false", queues="1")
    assert narrow and all("body" not in row and "properties" not in row for row in narrow)
    wide = read(spark, store, topics=TOPIC, includeProperties="true", queues="1")
    for row in wide:
        message = messages[row["queue_id"], row["queue_offset"]]
        assert row | {"properties": sorted(row["properties"])} == expected_row(
            message, properties=True
        )
        assert dict(row["properties"]) == {"n": row["keys"][0][1:]}


@pytest.mark.parametrize(
    ("options", "named"),
    [
        ({"topics": TOPIC, "startingOffsets": "first"}, "startingOffsets"),
        ({"topics": TOPIC, "queues": "9"}, "queues"),
        ({"topics": TOPIC, "endingOffsets": '{"orders": {"0": 100000}}'}, "endingOffsets"),
        ({"topics": TOPIC, "minPartitions": "0"}, "minPartitions"),
        ({}, "topics"),
    ],
)
def test_bad_options_are_refused_naming_the_option(
    spark: Any, store: Path, options: dict[str, str], named: str
):
    with pytest.raises(PySparkException, match=f"InvalidArgumentError: {named}: "):
        read(spark, store, **options)


def test_a_directory_without_a_store_is_refused_naming_path(spark: Any, tmp_path: Path):
    with pytest.raises(PySparkException, match="InvalidArgumentError: path: "):
        read(spark, tmp_path, topics=TOPIC)
    assert list(tmp_path.iterdir()) == []  # nothing created


@pytest.mark.parametrize("flush_mode", ["async", "sync"])
def test_reads_a_store_another_process_writes_every_row_once_none_torn(
    spark: Any, tmp_path: Path, flush_mode: str
):
    root = tmp_path / "store"
    with StoreWriter(root, flush_mode, 200) as writer:
        writer.wait_for("ready")
        writer.produce()  # sending while Spark plans and reads
        during = read(spark, root, topics=TOPIC, includeProperties="true")
        stored = writer.stop()
    after = read(spark, root, topics=TOPIC, includeProperties="true")
    for rows in (during, after):
        offsets = where(rows)
        assert max(offsets.values()) == 1  # every row once
        for queue_id in range(QUEUES):  # each queue a prefix from 0, no gap
            mine = sorted(o for q, o in offsets if q == queue_id)
            assert mine == list(range(len(mine)))
        for row in rows:  # none torn: each body is its message's
            number = int(row["keys"][0][1:])
            assert row["body"] == body_of(number)
            assert dict(row["properties"]) == {"n": str(number)}
    assert 200 < len(during) <= stored
    assert sorted(int(row["keys"][0][1:]) for row in after) == list(range(stored))
