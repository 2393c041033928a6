"""The sink's write plan without Spark or a broker: the produce bodies it encodes column at a
time are what the broker decodes (and what the SDK's producer would send), the batches and
stamps depend on the rows alone (not on how they arrive in record batches), rows of one
sharding key share the SDK's queue, and a row the broker would refuse is refused naming it."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pytest
from pyspark.sql import Row
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    IntegerType,
    MapType,
    StringType,
    StructField,
    StructType,
)

from localstore.record.properties import PROPERTY_KEYS, PROPERTY_TAGS, PROPERTY_UNIQ_KEY
from quiver_errors import InvalidArgumentError
from sdk.outgoing import select_by_key
from sdk.protocol.produce_body import decode_produce_body
from sdk.spark.write_plan import (
    CHUNK_BATCHES,
    PlannedBatch,
    WritePlan,
    batch_stamp,
    check_write_columns,
    message_id,
    write_hash,
)
from sdk.spark.writer import rows_to_batches

QUEUES = 4


def plan(**options: Any) -> WritePlan:
    settings: dict[str, Any] = {"default_topic": "orders", "batch_rows": 10, "batch_bytes": 1 << 20}
    settings.update(options)
    return WritePlan("write-1", 3, lambda _topic: QUEUES, **settings)


def run(write_plan: WritePlan, *batches: pa.RecordBatch) -> list[PlannedBatch]:
    planned = []
    for batch in batches:
        planned += list(write_plan.add(batch))
    return planned + list(write_plan.finish())


def decoded(planned: PlannedBatch) -> list[Any]:
    return list(
        decode_produce_body(
            planned.body, planned.topic, planned.queue_id, count=planned.count, born_timestamp=0
        )
    )


def test_bodies_decode_to_the_rows_with_their_properties() -> None:
    rows = pa.RecordBatch.from_pydict(
        {
            "body": [b"a", b"bb", b""],
            "tags": ["t1", None, "t3"],
            "keys": [["k1", "k2"], None, ["k3"]],
            "properties": pa.array(
                [[("n", "1"), ("m", "x y")], None, []], pa.map_(pa.string(), pa.string())
            ),
            "queue_id": pa.array([1, 1, 1], pa.int32()),
        }
    )
    (planned,) = run(plan(), rows)
    messages = decoded(planned)
    hashed = write_hash("write-1")
    assert [m.body for m in messages] == [b"a", b"bb", b""]
    assert messages[0].properties == {
        "n": "1",
        "m": "x y",
        PROPERTY_TAGS: "t1",
        PROPERTY_KEYS: "k1 k2",
        PROPERTY_UNIQ_KEY: message_id(hashed, 3, 0),
    }
    assert messages[1].properties == {PROPERTY_UNIQ_KEY: message_id(hashed, 3, 1)}
    assert messages[2].properties == {
        PROPERTY_TAGS: "t3",
        PROPERTY_KEYS: "k3",
        PROPERTY_UNIQ_KEY: message_id(hashed, 3, 2),
    }
    assert (
        planned.first_msg_id
        == message_id(hashed, 3, 0)
        == f"{hashed[:12]}".upper() + ("00000003000000000000")
    )


def test_rows_given_to_a_stream_sink_become_batches_of_the_frames_types() -> None:
    """pyspark 4.0 hands a stream sink Rows, not record batches: a map column must stay a map
    and a column of nulls keep its type for the plan to read them."""
    frame = StructType(
        [
            StructField("body", BinaryType()),
            StructField("tags", StringType()),
            StructField("keys", ArrayType(StringType())),
            StructField("properties", MapType(StringType(), StringType())),
            StructField("queue_id", IntegerType()),
        ]
    )
    rows = [
        Row(body=bytearray(b"a"), tags=None, keys=["k1"], properties={"n": "1"}, queue_id=1),
        Row(body=bytearray(b"bb"), tags=None, keys=[], properties=None, queue_id=1),
        Row(body=bytearray(b""), tags=None, keys=None, properties={}, queue_id=1),
    ]
    batches = list(rows_to_batches(iter(rows), to_arrow_schema(frame), batch_rows=2))
    assert [batch.num_rows for batch in batches] == [2, 1]
    assert all(batch.schema == to_arrow_schema(frame) for batch in batches)
    (planned,) = run(plan(), *batches)
    messages = decoded(planned)
    hashed = write_hash("write-1")
    assert [m.body for m in messages] == [b"a", b"bb", b""]
    assert messages[0].properties == {
        "n": "1",
        PROPERTY_KEYS: "k1",
        PROPERTY_UNIQ_KEY: message_id(hashed, 3, 0),
    }
    assert [m.properties for m in messages[1:]] == [
        {PROPERTY_UNIQ_KEY: message_id(hashed, 3, row)} for row in (1, 2)
    ]


def test_batches_and_stamps_do_not_depend_on_how_rows_arrive() -> None:
    values = [f"v{i}" * (1 + i % 5) for i in range(997)]
    keys = [None if i % 3 else f"key{i % 11}" for i in range(997)]
    whole = pa.RecordBatch.from_pydict({"value": values, "sharding_key": keys})
    pieces = [whole.slice(start, 37) for start in range(0, 997, 37)]
    one = run(plan(batch_bytes=64), whole)
    many = run(plan(batch_bytes=64), *pieces)
    assert sorted(one, key=_order) == sorted(many, key=_order)
    bodies = [m.body for planned in one for m in decoded(planned)]
    assert sorted(bodies) == sorted(v.encode() for v in values)
    for planned in one:
        assert planned.count <= 10
        assert sum(len(m.body) for m in decoded(planned)) <= 64 or planned.count == 1


def _order(planned: PlannedBatch) -> tuple[str, int, int, str]:
    return (planned.topic, planned.queue_id, planned.stamp.sequence, planned.stamp.producer_id)


def test_each_queue_numbers_its_batches_with_a_new_producer_id_every_chunk() -> None:
    rows = pa.RecordBatch.from_pydict({"value": ["x"] * 1000, "queue_id": [2] * 1000})
    planned = run(plan(batch_rows=3), rows)
    assert len(planned) == 334 > 2 * CHUNK_BATCHES
    hashed = write_hash("write-1")
    assert [p.stamp for p in planned] == [batch_stamp(hashed, 3, index) for index in range(334)]
    by_producer: dict[str, list[int]] = {}
    for p in planned:
        by_producer.setdefault(p.stamp.producer_id, []).append(p.stamp.sequence)
    assert all(seqs == list(range(len(seqs))) for seqs in by_producer.values())
    assert max(len(seqs) for seqs in by_producer.values()) == CHUNK_BATCHES


def test_a_sharding_key_picks_the_sdk_producers_queue() -> None:
    keys = [f"customer-{i % 13}" for i in range(200)]
    rows = pa.RecordBatch.from_pydict({"value": [str(i) for i in range(200)], "sharding_key": keys})
    for planned in run(plan(), rows):
        for message in decoded(planned):
            key = keys[int(message.body)]
            assert planned.queue_id == select_by_key(key, QUEUES)


def test_unkeyed_rows_fill_whole_batches_queue_after_queue() -> None:
    rows = pa.RecordBatch.from_pydict({"value": [str(i) for i in range(80)]})
    planned = run(plan(), rows)
    assert all(p.count == 10 for p in planned)
    for p in planned:  # each batch holds ten consecutive rows
        assert len({int(m.body) // 10 for m in decoded(p)}) == 1
    queue_of_tens = {int(m.body) // 10: p.queue_id for p in planned for m in decoded(p)}
    assert queue_of_tens == {tens: (3 + tens) % QUEUES for tens in range(8)}


def test_topic_column_with_the_option_as_default() -> None:
    rows = pa.RecordBatch.from_pydict({"value": ["a", "b", "c"], "topic": ["x", None, "y"]})
    topics = sorted((p.topic, m.body) for p in run(plan(), rows) for m in decoded(p))
    assert topics == [("orders", b"b"), ("x", b"a"), ("y", b"c")]


@pytest.mark.parametrize(
    ("columns", "problem"),
    [
        ({"value": [None, "a"]}, "body: row 0"),
        ({"value": ["a", "b"], "tags": ["ok", "a||b"]}, "tags: row 1"),
        ({"value": ["a"], "tags": ["a\x01b"]}, "tags: row 0"),
        ({"value": ["a", "b"], "keys": [["k"], ["two words"]]}, "keys: row 1"),
        ({"value": ["a"], "keys": [["k", ""]]}, "keys: row 0"),
        ({"value": ["a", "b"], "keys": ["k", "a b"]}, "keys: row 1"),
        ({"value": ["a"], "queue_id": [4]}, "queue_id: row 0"),
    ],
)
def test_rows_the_broker_would_refuse_are_refused_by_name(
    columns: dict[str, Any], problem: str
) -> None:
    with pytest.raises(InvalidArgumentError, match=problem):
        run(plan(), pa.RecordBatch.from_pydict(columns))


@pytest.mark.parametrize("name", ["UNIQ_KEY", "TAGS", "__QUIVER_PRODUCER_SEQ"])
def test_a_reserved_property_name_is_refused(name: str) -> None:
    rows = pa.RecordBatch.from_pydict(
        {
            "value": ["a", "b"],
            "properties": pa.array([[], [(name, "x")]], pa.map_(pa.string(), pa.string())),
        }
    )
    with pytest.raises(InvalidArgumentError, match=f"row 1 has property {name!r}"):
        run(plan(), rows)


def test_a_row_without_topic_is_refused() -> None:
    with pytest.raises(InvalidArgumentError, match="topic: row 0"):
        run(plan(default_topic=None), pa.RecordBatch.from_pydict({"value": ["a"]}))


@pytest.mark.parametrize(
    ("names", "problem"),
    [
        (["body", "value"], "exactly one of body or value"),
        (["topic"], "exactly one of body or value"),
        (["value", "headers"], "column 'headers'"),
    ],
)
def test_frames_the_sink_cannot_write(names: list[str], problem: str) -> None:
    with pytest.raises(InvalidArgumentError, match=problem):
        check_write_columns(names)
