"""The columnar decoder: row for row what the general decoder reads, in Spark's Arrow types."""

from __future__ import annotations

import ctypes
import datetime
import mmap
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    IntegerType,
    LongType,
    MapType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from localstore import MessageStore, NewMessage, StoreOptions, pack_host
from localstore.record.arrow import arrow_schema, decode_record_batch
from localstore.record.arrow.records import record_starts
from localstore.record.batch_encoder import encode_batch
from localstore.record.codec import RecordError
from localstore.record.layout import MAGIC_V2
from localstore.record.properties import PUT_RECORDS_PAIR_START
from quiver_errors import IllegalStateError
from sdk.broker.service import BrokerOptions, BrokerService
from sdk.message import ReceivedMessage, retry_topic
from sdk.transport.models import PullBatch, QueuePull, decode_records
from tests.sdk.waiting import wait_until

from .conftest import StoreFactory, extract_rocketmq_stores

EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)
STORE_HOST = pack_host("127.0.0.1", 10911)
STORE_HOST_V6 = pack_host("2001:db8::10", 10911)
VARIANTS = [(True, True), (True, False), (False, True), (False, False)]


def expected_rows(
    raw: bytes, include_body: bool = True, include_properties: bool = True
) -> list[dict[str, Any]]:
    """The rows the general decoder and the SDK's message view give for ``raw``."""
    rows = []
    for stored in decode_records(raw):
        received = ReceivedMessage.from_stored(stored)
        row: dict[str, Any] = {
            "topic": stored.topic,
            "queue_id": stored.queue_id,
            "queue_offset": stored.queue_offset,
            "msg_id": received.msg_id,
            "offset_msg_id": received.offset_msg_id,
            "tags": received.tags,
            "keys": list(received.keys),
        }
        if include_body:
            row["body"] = stored.body
        for name in ("born_timestamp", "store_timestamp"):
            row[name] = _as_datetime(getattr(stored, name))
        row["reconsume_times"] = stored.reconsume_times
        if include_properties:
            row["properties"] = list(stored.properties.items())
        rows.append(row)
    return rows


def _as_datetime(millis: int) -> datetime.datetime | None:
    """A stored time as the batch shows it; None past datetime's range (a damaged field)."""
    try:
        return EPOCH + datetime.timedelta(milliseconds=millis)
    except OverflowError:
        return None


def assert_decodes_as_the_general_decoder(raw: bytes) -> None:
    for include_body, include_properties in VARIANTS:
        batch = decode_record_batch(
            raw, include_body=include_body, include_properties=include_properties
        )
        assert batch.schema == arrow_schema(
            include_body=include_body, include_properties=include_properties
        )
        assert batch.to_pylist() == expected_rows(raw, include_body, include_properties)


def test_the_schema_is_the_arrow_schema_spark_makes_of_the_declared_one():
    string = StringType()
    spark_fields = [
        StructField("topic", string),
        StructField("queue_id", IntegerType()),
        StructField("queue_offset", LongType()),
        StructField("msg_id", string),
        StructField("offset_msg_id", string),
        StructField("tags", string),
        StructField("keys", ArrayType(string)),
        StructField("body", BinaryType()),
        StructField("born_timestamp", TimestampType()),
        StructField("store_timestamp", TimestampType()),
        StructField("reconsume_times", IntegerType()),
        StructField("properties", MapType(string, string)),
    ]
    for include_body, include_properties in VARIANTS:
        fields = [
            f
            for f in spark_fields
            if (include_body or f.name != "body") and (include_properties or f.name != "properties")
        ]
        spark = to_arrow_schema(StructType(fields), timezone="UTC")
        ours = arrow_schema(include_body=include_body, include_properties=include_properties)
        assert spark.equals(ours), (spark, ours)  # what Spark's reader compares
    assert arrow_schema().field("store_timestamp").type == pa.timestamp("us", tz="UTC")
    assert arrow_schema().field("queue_id").type == pa.int32()


def put_varied_messages(store: MessageStore, topic: str = "orders") -> None:
    """Tags, keys, user properties, no properties at all, bodies of many sizes."""
    for index in range(40):
        properties = {"UNIQ_KEY": f"U{index:031d}"} if index % 5 else {}
        if index % 3 == 0:
            properties["TAGS"] = f"tag{index % 4}"
        if index % 4 == 0:
            properties["KEYS"] = f"order-{index}  customer-{index % 3} "
        if index % 7 == 0:
            properties["region"] = "eu-west\nline two é"
        body = bytes(range(256))[: (index * 7) % 40 + 1] * (index % 3 + 1)
        assert store.put(NewMessage(topic, body, index % 2, properties)).ok


def test_a_store_s_records_decode_as_the_general_decoder_reads_them(open_store: StoreFactory):
    store = open_store()
    put_varied_messages(store)
    for queue_id in (0, 1):
        raw = bytes(store.get_message_bytes("orders", queue_id, 0, max_count=100).raw)
        assert len(decode_records(raw)) == 20
        assert_decodes_as_the_general_decoder(raw)


def test_count_decodes_only_the_first_records(open_store: StoreFactory):
    store = open_store()
    put_varied_messages(store)
    raw = bytes(store.get_message_bytes("orders", 0, 0, max_count=100).raw)
    batch = decode_record_batch(raw, 5)
    assert batch.column("queue_offset").to_pylist() == [0, 1, 2, 3, 4]
    with pytest.raises(RecordError, match="hold 20 records, not the 21"):
        decode_record_batch(raw, 21)


def test_ipv6_hosts_take_the_general_decoder_among_ipv4_records(store_dir: Path):
    """The store's own host IPv6 makes every record longer; a born host IPv6 only some."""
    for store_host in ("127.0.0.1:10911", "2001:db8::10:10911"):
        with MessageStore(store_dir / store_host, options=StoreOptions(store_host=store_host)) as s:
            for index in range(12):
                born = pack_host("::1" if index % 3 == 1 else "10.0.0.7", 40000 + index)
                props = {"UNIQ_KEY": f"U{index}", "TAGS": "t", "KEYS": "a b"} if index % 2 else {}
                assert s.put(NewMessage("orders", b"body%d" % index, 0, props, born_host=born)).ok
            raw = bytes(s.get_message_bytes("orders", 0, 0, max_count=100).raw)
        assert_decodes_as_the_general_decoder(raw)
        batch = decode_record_batch(raw)
        assert len(batch.column("offset_msg_id")[0].as_py()) == (
            56 if store_host.startswith("2001") else 32
        )


def test_retried_delayed_and_scheduled_records_from_a_broker(tmp_path: Path):
    """A pull answer's raw bytes, and the commitlog itself as a range of every topic's records
    (the schedule topic's, the retry topic's, the dead-letter topic's)."""
    options = BrokerOptions(delay_levels=[40] * 18, schedule_poll_interval_s=0.01)
    options.geometry = {"commitlog_file_size": 1 << 20}
    with BrokerService(tmp_path / "broker", options) as service:
        sent = [
            NewMessage("orders", b"o%d" % i, 0, {"UNIQ_KEY": f"U{i}", "TAGS": "paid"})
            for i in range(3)
        ]
        assert service.send(sent).status == "PUT_OK"
        delayed = NewMessage("orders", b"later", 0, {"UNIQ_KEY": "UD", "DELAY": "1", "KEYS": "k"})
        assert service.send([delayed]).status == "PUT_OK"
        phys = service.store.get_messages("orders", 0, 0).messages[0].phys_offset
        assert service.send_back("billing", phys, max_reconsume_times=5).status == "PUT_OK"
        retry = retry_topic("billing")
        wait_until(
            lambda: service.max_offset(retry, 0) == 1 and service.max_offset("orders", 0) == 4
        )
        answer = service.pull(PullBatch("g", (QueuePull(retry, 0, 0),), max_count=10))
        retried_raw = bytes(answer.results[0].raw)
        assert decode_records(retried_raw)[0].reconsume_times == 1
        assert_decodes_as_the_general_decoder(retried_raw)
        whole = bytes(service.store.get_message_bytes("orders", 0, 0, max_count=10).raw)
        assert_decodes_as_the_general_decoder(whole)
        log_end = service.store.commitlog.max_offset
    segment = next((tmp_path / "broker").rglob("commitlog/00000000000000000000"))
    log_range = segment.read_bytes()[:log_end]
    topics = {m.topic for m in decode_records(log_range)}
    assert {"orders", "SCHEDULE_TOPIC_XXXX", retry} <= topics
    assert_decodes_as_the_general_decoder(log_range)


def test_rocketmq_s_own_records_decode_as_the_general_decoder_reads_them(
    open_store: StoreFactory, tmp_path: Path
):
    store = open_store(extract_rocketmq_stores(tmp_path / "rocketmq") / "store")
    decoded = 0
    for topic, queue_id in sorted(store.queues.queues):
        offset = store.min_offset(topic, queue_id)
        while offset < store.max_offset(topic, queue_id):  # a get stops at a segment's end
            got = store.get_message_bytes(topic, queue_id, offset, max_count=1000)
            raw = bytes(got.raw)
            assert_decodes_as_the_general_decoder(raw)
            decoded += len(decode_records(raw))
            offset = got.next_offset
    assert decoded == 1002


# --- generated records ------------------------------------------------------------------------

TOPICS = st.text(alphabet="abcXYZ09_%|-", min_size=1, max_size=140)  # v2 topics above 127 bytes
TEXT = st.text(alphabet=st.characters(blacklist_characters="\x01\x02", blacklist_categories=["Cs"]))
PROPERTIES = st.dictionaries(
    st.sampled_from(["TAGS", "KEYS", "UNIQ_KEY", "x", "é", "TAGSX", "KEYS "]) | TEXT.filter(bool),
    TEXT,
    max_size=6,
)
MESSAGES = st.builds(
    NewMessage,
    topic=st.just("T"),
    body=st.binary(max_size=40),
    properties=PROPERTIES,
    born_timestamp=st.integers(0, 2**42),
    born_host=st.sampled_from([pack_host("10.1.2.3", 7), pack_host("::1", 8)]),
    reconsume_times=st.integers(0, 2**31 - 1),
)


def encode(messages: list[NewMessage], topic: str, store_host: bytes = STORE_HOST) -> bytes:
    for message in messages:
        message.topic = topic
    encoded = encode_batch(
        messages, topic, 3, 7, 1000, 1 << 22, 1_700_000_000_123, store_host, 1 << 30
    )
    return b"".join(encoded.published_runs())


@settings(max_examples=150, deadline=None)
@given(
    st.lists(MESSAGES, min_size=1, max_size=12),
    TOPICS,
    st.sampled_from([STORE_HOST, STORE_HOST_V6]),
)
def test_generated_records_decode_as_the_general_decoder_reads_them(
    messages: list[NewMessage], topic: str, store_host: bytes
):
    assert_decodes_as_the_general_decoder(encode(messages, topic, store_host))


PROPERTY_TOKENS = st.sampled_from(
    [
        *(
            "TAGS",
            "KEYS",
            "UNIQ_KEY",
            "\x01",
            "\x02",
            " ",
            "a",
            "é",
            "\n",
            "TAGS\x01",
            "\x02KEYS\x01",
        ),
        PUT_RECORDS_PAIR_START,  # the store's own pair: dropped only as a text's first
    ]
)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.lists(PROPERTY_TOKENS, max_size=20).map("".join), min_size=1, max_size=4))
@example(["TAGS\x01first\x02TAGS\x01later", "KEYS\x01a b\x02KEYS\x01\x02", "TAGS\x01x"])
@example(["UNIQ_KEY\x01u1\x02x\x01y\x02UNIQ_KEY\x01u2\x02", "\x01TAGS\x01\x02\x02TAGS\x01t"])
@example(["TAGS\x01\x02KEYS\x01TAGS\x02TAGS\x01TAGS"])  # an empty TAGS, then TAGS again
@example([PUT_RECORDS_PAIR_START + "3", PUT_RECORDS_PAIR_START + "2\x01x\x02a\x01b\x02"])
@example(["a\x01b\x02" * 40, "a\x01b\x02c\x01d\x02a\x01e"])  # dense pairs, a name again
@example(["".join(f"{chr(65 + i % 26)}{i}\x01x\x02" for i in range(60))])  # dense, all names new
@example(["KEYS\x01" + "k " * 200, "KEYS\x01 a  b " + "c" * 30])  # dense keys
def test_any_properties_text_reads_as_decode_properties_reads_it(texts: list[str]):
    """Empty names and values, repeated names, separators in values: the stored text is
    whatever a foreign writer put there (each record is written, then its text replaced)."""
    records = b""
    for text in texts:
        stored = text.encode().ljust(4, b"\x02")  # room for the pair written first
        record = bytearray(
            encode([NewMessage("T", b"b", properties={"P": "v" * (len(stored) - 3)})], "T")
        )
        record[len(record) - len(stored) :] = stored
        records += record
    assert_decodes_as_the_general_decoder(records)
    assert_reads_or_fails_as_the_general_decoder(records)  # from guarded memory


# --- values at places in the bytes ------------------------------------------------------------

BYTES_AND_PLACES = st.binary(max_size=40).flatmap(
    lambda data: st.tuples(
        st.just(data),
        st.lists(st.tuples(st.integers(0, len(data)), st.integers(-1, 20)), max_size=12),
    )
)


@settings(max_examples=300, deadline=None)
@given(BYTES_AND_PLACES)
@example((b"", [(0, 0), (0, -1)]))
def test_values_are_the_bytes_at_their_places(bytes_and_places: tuple[bytes, list[Any]]):
    """Values of any length, near the bytes' end, null where the length is -1: each one the
    bytes at its place; as strings, checked as UTF-8."""
    from localstore.record.arrow.buffers import values_at

    data, places = bytes_and_places
    places = [(at, min(length, len(data) - at)) for at, length in places]
    octets = np.frombuffer(data, dtype=np.uint8)
    at = np.array([at for at, _ in places], dtype=np.int64)
    length = np.array([length for _, length in places], dtype=np.int64)
    expected = [data[at : at + length] if length >= 0 else None for at, length in places]
    assert values_at(octets, at, length, pa.binary()).to_pylist() == expected
    try:
        texts = [value.decode() if value is not None else None for value in expected]
    except UnicodeDecodeError:
        with pytest.raises(pa.ArrowInvalid):
            values_at(octets, at, length, pa.string())
    else:
        assert values_at(octets, at, length, pa.string()).to_pylist() == texts


def test_a_place_outside_the_bytes_is_refused_before_arrow_reads_it():
    from localstore.record.arrow.buffers import values_at

    octets = np.frombuffer(b"0123", dtype=np.uint8)
    for at, length in ((3, 2), (-1, 1)):
        with pytest.raises(IllegalStateError, match="outside its bytes"):
            values_at(octets, np.array([at]), np.array([length]), pa.binary())


# --- damage -----------------------------------------------------------------------------------


def test_damaged_records_raise_the_general_decoder_s_error():
    good = encode([NewMessage("T", b"body", properties={"TAGS": "t"}) for _ in range(3)], "T")
    second = int.from_bytes(good[:4], "big")  # the first record is the longer (the put's mark)
    end = second + int.from_bytes(good[second : second + 4], "big")
    cases = {
        "cut short": good[:-5],
        "bad magic": good[: second + 4] + b"\x00\x00\x00\x00" + good[second + 8 :],
        "topic not UTF-8": good[: end - 10] + b"\xff" + good[end - 9 :],  # then 2 + 7 bytes
    }
    for name, damaged in cases.items():
        with pytest.raises(RecordError) as general:
            decode_records(damaged)
        with pytest.raises(RecordError) as columnar:
            decode_record_batch(damaged)
        assert str(columnar.value) == str(general.value), name


def guarded(data: bytes) -> tuple[mmap.mmap, memoryview]:
    """``data`` in memory with an unreadable page right before and right after it: a read
    outside it kills the process (the test fails) instead of reading a neighbour's bytes."""
    page = mmap.PAGESIZE
    pages = -(-len(data) // page) + 2
    memory = mmap.mmap(-1, pages * page)
    base = ctypes.addressof(ctypes.c_char.from_buffer(memory))
    libc = ctypes.CDLL(None, use_errno=True)
    for guard in (base, base + (pages - 1) * page):
        assert libc.mprotect(ctypes.c_void_p(guard), page, 0) == 0  # PROT_NONE
    start = (pages - 1) * page - len(data)
    memory[start : start + len(data)] = data
    return memory, memoryview(memory)[start : start + len(data)]


def assert_reads_or_fails_as_the_general_decoder(damaged: bytes) -> None:
    """The batch of ``damaged`` (read from guarded memory) is what the general decoder reads,
    or the general decoder's error for the first bad record."""
    _memory, view = guarded(damaged)  # unmapped when both go (a traceback may hold views)
    try:
        stored = decode_records(damaged)
    except RecordError as general:
        with pytest.raises(RecordError) as columnar:
            decode_record_batch(view, include_properties=True)
        assert str(columnar.value) == str(general)
        return
    batch = decode_record_batch(view, include_properties=True)
    times = ["born_timestamp", "store_timestamp"]  # damaged: maybe past datetime's range
    for name in times:
        micros = batch.column(name).cast(pa.int64()).to_pylist()
        expected_micros = [getattr(message, name) * 1000 for message in stored]
        assert micros == [m if abs(m) < 2**63 else None for m in expected_micros]
    rest = batch.drop_columns(times).to_pylist()
    assert rest == [
        {name: row[name] for name in row if name not in times} for row in expected_rows(damaged)
    ]


@settings(max_examples=400, deadline=None)
@given(
    st.lists(MESSAGES, min_size=1, max_size=6),
    st.lists(st.tuples(st.integers(min_value=0), st.integers(0, 255)), min_size=1, max_size=3),
    st.integers(0, 3),
)
def test_damaged_bytes_anywhere_read_or_fail_as_the_general_decoder(
    messages: list[NewMessage], changes: list[tuple[int, int]], cut: int
):
    """Bytes of the records changed, and the bytes cut short: the compiled loops read nothing
    outside them, and the batch is what the general decoder reads, or its error."""
    raw = bytearray(encode(messages, "T"))
    for place, value in changes:
        raw[place % len(raw)] = value
    assert_reads_or_fails_as_the_general_decoder(bytes(raw[: len(raw) - cut]))


def _field_places(record: bytes) -> dict[str, int]:
    """Where the variable fields' lengths lie in one record (IPv4 hosts)."""
    body_length = int.from_bytes(record[84:88], "big")
    topic_field = 88 + body_length
    v2 = record[4:8] == MAGIC_V2.to_bytes(4, "big", signed=True)
    topic_length = int.from_bytes(record[topic_field : topic_field + (2 if v2 else 1)], "big")
    return {
        "body length": 84,
        "topic length": topic_field,
        "properties length": topic_field + (2 if v2 else 1) + topic_length,
    }


@pytest.mark.parametrize(
    ("case", "topic", "field", "value"),
    [
        ("a negative body length", "T", "body length", b"\xff\xff\xff\xf0"),
        ("a body length past the record", "T", "body length", b"\x00\x0f\x42\x40"),
        ("a negative v2 topic length", "t" * 130, "topic length", b"\x80\x10"),
        ("a v2 topic length past the record", "t" * 130, "topic length", b"\x7f\xff"),
        ("a properties length with its sign bit", "T", "properties length", b"\x80\x05"),
        ("a properties length past the record", "T", "properties length", b"\x7f\xff"),
        ("a negative physical offset", "T", None, b"\xff"),
    ],
)
def test_each_length_field_damaged_reads_or_fails_as_the_general_decoder(
    case: str, topic: str, field: str | None, value: bytes
):
    message = NewMessage("T", b"body", properties={"UNIQ_KEY": "U1", "TAGS": "t", "KEYS": "a b"})
    record = bytearray(encode([message], topic))
    at = _field_places(bytes(record))[field] if field else 28  # 28: PHYSICALOFFSET
    record[at : at + len(value)] = value
    plain = encode([NewMessage("T", b"next")], "T")
    assert_reads_or_fails_as_the_general_decoder(bytes(record) + plain)
    assert_reads_or_fails_as_the_general_decoder(plain + bytes(record))


def _v2_record(properties: dict[str, str], topic: str = "t" * 130) -> bytearray:
    """One record of a v2 topic (a 2-byte topic length), body b"body"."""
    return bytearray(encode([NewMessage("T", b"body", properties=properties)], topic))


def _set_total(record: bytearray) -> bytearray:
    record[0:4] = len(record).to_bytes(4, "big")
    return record


def _topic_length_last_but_one(record: bytearray) -> bytearray:
    """BODYLENGTH puts the 2-byte topic length one byte before the record's end."""
    record[84:88] = (len(record) - 89).to_bytes(4, "big")
    return record


def _properties_length_last_but_one(record: bytearray) -> bytearray:
    """The topic length puts the 2-byte properties length one byte before the record's end."""
    topic_field = _field_places(bytes(record))["topic length"]
    record[topic_field : topic_field + 2] = (len(record) - 1 - topic_field - 2).to_bytes(2, "big")
    return record


def _text_of_the_put_mark_but_its_last_byte(record: bytearray) -> bytearray:
    """A properties text shorter than the put mark by one byte, ending the record."""
    at = _field_places(bytes(record))["properties length"]
    text = PUT_RECORDS_PAIR_START.encode()[:-1]
    return _set_total(record[:at] + len(text).to_bytes(2, "big") + text)


def _topic_length_with_its_sign_bit(record: bytearray) -> bytearray:
    """A v2 topic length of 0x800A, the properties length placed where it then lies, so that
    the fields add up if the length is read unsigned (the record is long enough)."""
    topic_field = _field_places(bytes(record))["topic length"]
    topic_length = 0x800A
    properties_field = topic_field + 2 + topic_length
    record[topic_field : topic_field + 2] = topic_length.to_bytes(2, "big")
    record[properties_field : properties_field + 2] = (len(record) - properties_field - 2).to_bytes(
        2, "big"
    )
    return record


def _properties_length_with_its_sign_bit(record: bytearray) -> bytearray:
    """A properties length of 0x8005, the record padded so that it adds up read unsigned."""
    at = _field_places(bytes(record))["properties length"]
    length = int.from_bytes(record[at : at + 2], "big")
    record[at : at + 2] = (0x8005).to_bytes(2, "big")
    return _set_total(record + b"a" * (0x8005 - length))


def _properties_length_one_short(record: bytearray) -> bytearray:
    at = _field_places(bytes(record))["properties length"]
    length = int.from_bytes(record[at : at + 2], "big")
    record[at : at + 2] = (length - 1).to_bytes(2, "big")
    return record


@pytest.mark.parametrize(
    ("damage", "record"),
    [
        (_topic_length_last_but_one, lambda: _v2_record({"TAGS": "t"})),
        (_properties_length_last_but_one, lambda: _v2_record({"TAGS": "t"})),
        (_text_of_the_put_mark_but_its_last_byte, lambda: _v2_record({"TAGS": "t"})),
        (_topic_length_with_its_sign_bit, lambda: _v2_record({"P": "v" * 32600}, "t" * 1000)),
        (_properties_length_with_its_sign_bit, lambda: _v2_record({"TAGS": "t"})),
        (_properties_length_one_short, lambda: _v2_record({"TAGS": "t"})),
    ],
    ids=lambda value: getattr(value, "__name__", "").strip("_").replace("_", " "),
)
def test_fields_at_the_record_s_edge_read_or_fail_as_the_general_decoder(damage: Any, record: Any):
    """Each length field placed where a read of it, or of what it points to, would cross the
    record's end, or read as negative; the record alone, at the end of the bytes."""
    assert_reads_or_fails_as_the_general_decoder(bytes(damage(record())))


def test_a_second_walk_of_bytes_that_changed_stops_at_their_end():
    """The loops walk twice (count, then bounds): asked for more records than the bytes hold,
    as bytes changed between the walks would have them, the bounds walk checks every size
    itself and stops at the end, from guarded memory; the fields are read within its bounds."""
    from localstore.record.arrow.records import _fill_table, _record_bounds, read_only_bytes

    raw = encode([NewMessage("T", b"body") for _ in range(3)], "T")
    _memory, view = guarded(raw)
    octets = read_only_bytes(view)
    with pytest.raises(RecordError, match="the records changed while they were read"):
        _record_bounds(octets, 4)
    bounds = _record_bounds(octets, 3)
    assert bounds[-1] == len(raw) and _fill_table(octets, bounds).shape[1] == 3


def test_an_error_leaves_no_view_of_a_mapped_buffer():
    """A damaged record in a mapping the caller closes as the error passes: the caller gets
    the RecordError, not a BufferError for views the error's traceback held."""
    good = encode([NewMessage("T", b"body")], "T")
    bad_magic = good[:4] + b"\x00\x00\x00\x00" + good[8:]
    cut_short = good + good[:-1]
    for decode, damaged in (
        (decode_record_batch, bad_magic),
        (decode_record_batch, cut_short),
        (lambda raw: record_starts(raw, None), cut_short),
    ):
        with pytest.raises(RecordError), mmap.mmap(-1, len(damaged)) as mapped:
            mapped[:] = damaged
            decode(mapped)


def test_the_first_of_two_faults_is_named():
    """A record the general decoder takes (IPv6) holding bad UTF-8, then a bad magic: the
    error names the first, as the general decoder does."""
    good = encode([NewMessage("T", b"body", properties={"TAGS": "t"})], "T")
    not_utf8 = good[:-3] + b"\xff" + good[-2:]  # in the properties text
    bad_magic = good[:4] + b"\x00\x00\x00\x00" + good[8:]
    for raw in (not_utf8 + bad_magic, good + not_utf8 + good + bad_magic, bad_magic[:-5]):
        assert_reads_or_fails_as_the_general_decoder(raw)


def test_a_count_below_zero_is_refused():
    good = encode([NewMessage("T", b"body")], "T")
    assert decode_record_batch(good, 0).num_rows == 0
    with pytest.raises(ValueError, match="count must be 0 or more, not -1"):
        decode_record_batch(good, -1)


def test_no_bytes_give_an_empty_batch():
    batch = decode_record_batch(b"", include_properties=True)
    assert batch.num_rows == 0 and batch.schema == arrow_schema(include_properties=True)


def test_a_body_is_read_from_the_bytes_given(open_store: StoreFactory):
    """A memoryview of a larger buffer (as a mapped segment) decodes as its bytes do."""
    store = open_store()
    put_varied_messages(store)
    raw = bytes(store.get_message_bytes("orders", 0, 0, max_count=100).raw)
    padded = bytearray(b"\xee" * 7 + raw + b"\xee" * 9)
    view = memoryview(padded)[7 : 7 + len(raw)]
    assert decode_record_batch(view).to_pylist() == expected_rows(raw, True, False)


def test_v2_records_with_long_topics_take_the_compiled_path():
    """A topic above 127 bytes makes a v2 record (a 2-byte topic length): read in bulk, not
    left to the general decoder."""
    from localstore.record.arrow.records import COMMON_ROW, record_table

    raw = encode([NewMessage("T", b"x" * n, properties={"TAGS": "t"}) for n in range(5)], "é" * 100)
    assert_decodes_as_the_general_decoder(raw)
    assert record_table(np.frombuffer(raw, dtype=np.uint8), None)[COMMON_ROW].all()


def test_bodies_holding_records_do_not_cut_the_records_there():
    """Records are found by the TOTALSIZE chain: a body holding a whole record (its magic
    and a size that fits) is a body."""
    inner = encode([NewMessage("T", b"inner", properties={"TAGS": "t"})], "T")
    messages = [NewMessage("T", body) for body in (b"a", inner, b"b" + inner[:-3], inner * 2, b"c")]
    raw = encode(messages, "T")
    walked = [0]
    while walked[-1] < len(raw):
        walked.append(walked[-1] + int.from_bytes(raw[walked[-1] : walked[-1] + 4], "big"))
    assert record_starts(raw, None).tolist() == walked[:-1]
    assert record_starts(raw, 2).tolist() == walked[:2]
    assert_decodes_as_the_general_decoder(raw)


def test_the_batch_holds_no_reference_to_the_bytes_given(open_store: StoreFactory):
    """A reader may hand in a mapped segment and unmap it: the batch owns its values."""
    store = open_store()
    put_varied_messages(store)
    raw = bytearray(store.get_message_bytes("orders", 0, 0, max_count=100).raw)
    expected = expected_rows(bytes(raw))
    batch = decode_record_batch(memoryview(raw), include_properties=True)
    raw[:] = bytes(len(raw))
    assert batch.to_pylist() == expected


def test_loops_compile_without_a_cache_where_none_is_writable(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
):
    """numba refuses ``cache=True`` when no cache directory is writable (a read-only install,
    no home): the loops are compiled in the process instead, with a warning naming the fix."""
    import numba

    from localstore.record.arrow import jit

    real_njit = numba.njit

    def no_cache_dir(*args: Any, **kwargs: Any) -> Any:
        if kwargs.get("cache"):
            raise RuntimeError("cannot cache function 'add': no locator available")
        return real_njit(*args, **kwargs)

    monkeypatch.setattr(numba, "njit", no_cache_dir)
    monkeypatch.setattr(jit, "_warned", False)

    @jit.compiled(jit.types.int64(jit.types.int64, jit.types.int64))
    def add(a: int, b: int) -> int:  # pragma: no cover - compiled
        return a + b

    assert add(2, 3) == 5
    assert "NUMBA_CACHE_DIR" in caplog.text


def test_a_full_cache_disk_compiles_in_the_process(tmp_path: Path):
    """numba's cache on a full disk (a real tmpfs): saving fails with ENOSPC, and the loops
    are compiled in the process instead, the decoder working, a warning naming the fix."""
    import os
    import subprocess
    import sys

    from tests.disks import fill, small_tmpfs

    program = (
        "import logging; logging.basicConfig();"
        "from localstore.record.arrow import decode_record_batch;"
        "print(decode_record_batch(bytes.fromhex(__import__('sys').argv[1])).num_rows)"
    )
    record = encode([NewMessage("T", b"body")], "T")
    with small_tmpfs(tmp_path / "cache", "64k") as cache:
        fill(cache / "filler")
        done = subprocess.run(
            [sys.executable, "-c", program, record.hex()],
            env={**os.environ, "NUMBA_CACHE_DIR": str(cache)},
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "1"
    assert "No space left on device" in done.stderr and "NUMBA_CACHE_DIR" in done.stderr
