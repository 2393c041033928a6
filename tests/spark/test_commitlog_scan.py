"""``scan=commitlog``: the whole log of a store read in ranges cut at the offset index's record
starts, by the range reader itself and by a real local Spark session (``local[2]``, one
session for the module): every record once, in log order, equal to what the queue read gives."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from localstore import MessageStore
from localstore.read_only import ReadOnlyStore
from sdk.spark.commitlog_scan import plan_log_ranges, read_log_range
from tests.spark.epoch_store import Stored
from tests.spark.spark_session import local_session

pytestmark = [
    pytest.mark.spark,
    pytest.mark.xdist_group("spark"),  # one session per run under --dist loadgroup
    pytest.mark.filterwarnings("ignore:PySpark does not yet fully support pandas:FutureWarning"),
]
SEGMENT_BYTES = 1 << 20  # the offset index keeps a record start every 64 KiB of it
TOPICS = {"orders": 3, "audit": 2}
MESSAGES = 12_000  # about 3.5 MiB of log: four segments, each ending in a blank record


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from sdk import Admin, EmbeddedBroker, Message, Producer

    root = tmp_path_factory.mktemp("scan") / "store"
    with EmbeddedBroker(root, flush_mode="async", commitlog_file_size=SEGMENT_BYTES) as broker:
        with Admin(broker) as admin:
            for topic, queues in TOPICS.items():
                admin.create_topic(topic, queue_count=queues)
        with Producer(broker) as producer:
            for first in range(0, MESSAGES, 100):
                topic = "orders" if first % 300 else "audit"
                batch = [
                    Message(topic, bytes([i % 251]) * (100 + i % 97), tags=f"t{i % 3}",
                            keys=[f"k{i}"], properties={"n": str(i)})
                    for i in range(first, first + 100)
                ]  # fmt: skip
                producer.send_batch(batch, queue_id=(first // 100) % TOPICS[topic])
    return root


@pytest.fixture(scope="module")
def spark() -> Iterator[Any]:
    yield from local_session("quiver-commitlog-scan")


def phys_offset(offset_msg_id: str) -> int:
    return int(offset_msg_id[-16:], 16)


def test_read_only_split_points_are_the_store_own(store: Path):
    with ReadOnlyStore(store) as view:
        read_only = {parts: view.split_points(parts) for parts in (1, 2, 5, 9, 64)}
        visible_end = view.visible_end
    with MessageStore(store) as writer:
        assert {parts: writer.split_points(parts) for parts in read_only} == read_only
    assert visible_end > 3 * SEGMENT_BYTES
    inner = read_only[9][1:-1]
    assert len(inner) == 8 and any(point % SEGMENT_BYTES for point in inner)  # index entries


def test_a_chunk_holds_at_most_its_bytes(store: Path, monkeypatch: pytest.MonkeyPatch):
    """Chunks are cut by bytes too (a batch's values must fit Arrow's 32-bit offsets): with a
    cap of 10 KiB every batch holds about that much, one record at least, and no row is lost."""
    import sdk.spark.commitlog_scan as scan

    with ReadOnlyStore(store) as view:
        (whole,) = plan_log_ranges(view, 1)
        every = sum(b.num_rows for b in read_log_range(view, whole, True, False))
        monkeypatch.setattr(scan, "CHUNK_BYTES", 10 * 1024)
        batches = list(read_log_range(view, whole, True, False))
    assert sum(b.num_rows for b in batches) == every
    assert max(b.num_rows for b in batches) <= 10 * 1024 // 100  # records of 100 bytes or more
    assert len(batches) > every // 100


def test_ranges_read_every_record_once_in_log_order(store: Path):
    stored = Stored(store)
    with ReadOnlyStore(store) as view:
        ranges = plan_log_ranges(view, 7)
        assert len(ranges) == 7
        tables = [pa.Table.from_batches(list(read_log_range(view, r, True, False))) for r in ranges]
        for log_range, table in zip(ranges, tables, strict=True):
            offsets = [phys_offset(i) for i in table.column("offset_msg_id").to_pylist()]
            assert offsets[0] == log_range.start_offset and offsets[-1] < log_range.end_offset
    rows = pa.concat_tables(tables)
    offsets = [phys_offset(i) for i in rows.column("offset_msg_id").to_pylist()]
    assert offsets == sorted(offsets) and len(set(offsets)) == len(offsets)
    keys = zip(*(rows.column(c).to_pylist() for c in ("topic", "queue_id", "queue_offset")),
               strict=True)  # fmt: skip
    assert sorted(keys) == stored.keys() and len(offsets) == MESSAGES


def test_spark_exports_the_whole_log_equal_to_the_queue_read(spark: Any, store: Path):
    def load(**options: str) -> Any:
        reader = spark.read.format("quiver").option("path", str(store)).options(**options)
        return reader.option("includeProperties", "true").load()

    scan = load(scan="commitlog", minPartitions="5")
    assert scan.rdd.getNumPartitions() == 5
    order = ["topic", "queue_id", "queue_offset"]
    exported = scan.toArrow().sort_by([(c, "ascending") for c in order])
    by_queue = load(topicPattern=".*").toArrow().sort_by([(c, "ascending") for c in order])
    assert exported.num_rows == MESSAGES
    assert exported.equals(by_queue)


def test_topics_and_tags_filter_the_exported_rows(spark: Any, store: Path):
    stored = Stored(store)
    frame = (
        spark.read.format("quiver")
        .options(path=str(store), scan="commitlog", topics="audit", tags="t1")
        .load()
    )
    rows = frame.select("topic", "queue_id", "queue_offset").toArrow().to_pylist()
    keys = sorted((r["topic"], r["queue_id"], r["queue_offset"]) for r in rows)
    assert keys == stored.keys(topic="audit", tags="t1") and keys
    pattern = spark.read.format("quiver").options(path=str(store), scan="commitlog",
                                                  topicPattern="ord.*").load()  # fmt: skip
    assert pattern.count() == len(stored.keys(topic="orders"))
