"""The commitlog record: encode (batch_encoder) -> decode (codec) round trips, byte layout."""

from __future__ import annotations

import ipaddress
import string
import struct
import zlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from localstore.queue.consume_queue import UNIT
from localstore.record import codec
from localstore.record.batch_encoder import RejectedMessageError, encode_batch
from localstore.record.codec import (
    BLANK_MAGIC,
    MAGIC_V1,
    MAGIC_V2,
    NewMessage,
    RecordError,
    decode_properties,
    decode_record,
    encode_properties,
    pack_host,
    read_properties,
    read_store_timestamp,
    unpack_host,
)
from localstore.record.javahash import java_hash
from localstore.record.put_mark import mark_pair

INT32 = st.integers(-(2**31), 2**31 - 1)
STORE_HOST = pack_host("127.0.0.1", 10911)
BIG_SEGMENT = 1 << 22
NO_LIMIT = 1 << 30
TOPIC_ALPHABET = string.ascii_letters + string.digits + "%|_-"
IpAddress = ipaddress.IPv4Address | ipaddress.IPv6Address


def encode_one(
    msg: NewMessage,
    *,
    queue_offset: int = 0,
    position: int = 0,
    store_timestamp: int = 1_700_000_000_999,
    store_host: bytes = STORE_HOST,
) -> bytes:
    """The record of one message, encoded at ``position`` of a segment with room to spare."""
    encoded = encode_batch(
        [msg],
        msg.topic,
        msg.queue_id,
        queue_offset,
        position,
        BIG_SEGMENT,
        store_timestamp,
        store_host,
        NO_LIMIT,
    )
    assert len(encoded.runs) == 1
    return bytes(encoded.published_runs()[0])


def java_host(ip: IpAddress, port: int) -> str:
    """How Java prints a socket address: IPv6 as 8 unpadded, uncompressed hex groups; an
    IPv4-mapped IPv6 address becomes an Inet4Address and prints as IPv4."""
    if ip.version == 6 and ip.ipv4_mapped is not None:
        return f"{ip.ipv4_mapped}:{port}"
    if ip.version == 4:
        return f"{ip}:{port}"
    groups = ip.exploded.split(":")
    return ":".join(format(int(g, 16), "x") for g in groups) + f":{port}"


# -- hypothesis strategies ------------------------------------------------------------------

hosts = st.tuples(st.ip_addresses(), st.integers(0, 65535))
topics = st.text(alphabet=TOPIC_ALPHABET, min_size=1, max_size=255)
property_text = st.text(
    alphabet=st.characters(codec="utf-8", exclude_characters="\x01\x02"), min_size=1, max_size=24
)
property_maps = st.dictionaries(property_text, property_text, max_size=6)


@st.composite
def record_cases(draw: st.DrawFn) -> dict:
    born_ip, born_port = draw(hosts)
    store_ip, store_port = draw(hosts)
    return {
        "topic": draw(topics),
        "queue_id": draw(st.integers(0, 2**31 - 1)),
        "flag": draw(INT32),
        "sys_flag": draw(INT32),
        "born_timestamp": draw(st.integers(1, 2**63 - 1)),
        "store_timestamp": draw(st.integers(0, 2**63 - 1)),
        "born": (born_ip, born_port),
        "store": (store_ip, store_port),
        "reconsume_times": draw(INT32),
        "prepared": draw(st.integers(-(2**63), 2**63 - 1)),
        "queue_offset": draw(st.integers(0, 2**62)),
        "position": draw(st.integers(0, 2**20)) * BIG_SEGMENT
        + draw(st.integers(0, BIG_SEGMENT - 65536)),
        "body": draw(st.binary(min_size=0, max_size=2048)),
        "properties": draw(property_maps),
    }


@settings(max_examples=200, deadline=None)
@given(record_cases(), st.integers(0, 64))
def test_encode_decode_round_trip(case: dict, lead: int) -> None:
    born_ip, born_port = case["born"]
    store_ip, store_port = case["store"]
    msg = NewMessage(
        case["topic"],
        case["body"],
        queue_id=case["queue_id"],
        properties=case["properties"],
        flag=case["flag"],
        sys_flag=case["sys_flag"],
        born_timestamp=case["born_timestamp"],
        born_host=pack_host(str(born_ip), born_port),
        reconsume_times=case["reconsume_times"],
        prepared_transaction_offset=case["prepared"],
    )
    store_host = pack_host(str(store_ip), store_port)
    record = encode_one(
        msg,
        queue_offset=case["queue_offset"],
        position=case["position"],
        store_timestamp=case["store_timestamp"],
        store_host=store_host,
    )
    decoded = decode_record(b"\xee" * lead + record, lead)  # pos is honoured

    expected_sys_flag = (case["sys_flag"] & ~0x30) | (0x10 if born_ip.version == 6 else 0)
    expected_sys_flag |= 0x20 if store_ip.version == 6 else 0
    skips_queue = case["sys_flag"] & 0xC in (0x4, 0xC)  # PREPARED / ROLLBACK
    assert decoded.topic == case["topic"]
    assert decoded.queue_id == case["queue_id"]
    assert decoded.queue_offset == (0 if skips_queue else case["queue_offset"])
    assert decoded.phys_offset == case["position"]
    assert decoded.store_size == len(record)
    assert decoded.body_crc == zlib.crc32(case["body"]) & 0x7FFFFFFF
    assert decoded.flag == case["flag"]
    assert decoded.sys_flag == expected_sys_flag
    assert decoded.born_timestamp == case["born_timestamp"]
    assert decoded.born_host == java_host(born_ip, born_port)
    assert decoded.store_timestamp == case["store_timestamp"]
    assert decoded.store_host == java_host(store_ip, store_port)
    assert decoded.reconsume_times == case["reconsume_times"]
    assert decoded.prepared_transaction_offset == case["prepared"]
    assert decoded.body == case["body"]
    assert decoded.properties == case["properties"]
    assert decoded.offset_msg_id == (store_host + struct.pack(">q", case["position"])).hex().upper()

    magic = struct.unpack_from(">i", record, 4)[0]
    assert magic == (MAGIC_V1 if len(case["topic"]) <= 127 else MAGIC_V2)
    # The partial readers agree with the full decode.
    assert read_store_timestamp(record, 0) == case["store_timestamp"]
    assert read_properties(record, 0) == case["properties"]


@settings(max_examples=200, deadline=None)
@given(
    bodies=st.lists(st.integers(1, 1500), min_size=1, max_size=25),
    start=st.integers(0, 4096 - 8),  # a log position always leaves >= 8 bytes
    segment_index=st.integers(0, 1000),
    first_queue_offset=st.integers(0, 10**9),
)
def test_batch_layout_across_segments(
    bodies: list[int], start: int, segment_index: int, first_queue_offset: int
) -> None:
    """Records never span segments: a segment ends with a blank record when the next record + 8
    does not fit, and the next run starts at the next segment's first byte."""
    segment = 4096
    position = segment_index * segment + start
    messages = [
        NewMessage("T", bytes([i % 251]) * size, properties={"TAGS": f"t{i % 3}"})
        for i, size in enumerate(bodies)
    ]
    encoded = encode_batch(
        messages,
        "T",
        1,
        first_queue_offset,
        position,
        segment,
        1_700_000_000_000,
        STORE_HOST,
        NO_LIMIT,
    )
    # Lay the runs out as the commitlog would.
    base = position - position % segment
    log = bytearray(segment * (len(encoded.runs) + 1))
    cursor = position
    for i, run in enumerate(encoded.published_runs()):
        if i:
            assert cursor % segment == 0
        log[cursor - base : cursor - base + len(run)] = run
        cursor += len(run)
        if i < len(encoded.runs) - 1:
            blank_at = cursor - base - 8
            room, magic = struct.unpack_from(">ii", log, blank_at)
            assert magic == BLANK_MAGIC
            assert (blank_at + room) % segment == 0  # the blank covers the rest of the segment
            cursor = base + blank_at + room
    assert cursor == encoded.end_offset

    units = list(UNIT.iter_unpack(encoded.units))
    assert len(units) == len(messages) == len(encoded.phys_offsets)
    assert encoded.next_queue_offset == first_queue_offset + len(messages)
    for i, (phys, unit) in enumerate(zip(encoded.phys_offsets, units, strict=True)):
        record = decode_record(log, phys - base)
        assert record.phys_offset == phys
        assert record.queue_offset == first_queue_offset + i
        assert record.body == messages[i].body
        assert unit == (phys, record.store_size, java_hash(f"t{i % 3}"))
        assert phys // segment == (phys + record.store_size + 8 - 1) // segment  # + 8 fits
    assert encoded.last_unit_phys_end == units[-1][0] + units[-1][1]


def test_record_fields_at_documented_offsets() -> None:
    body = b"Hello"
    properties = {"TAGS": "TagA", "KEYS": "k1 k2"}
    msg = NewMessage(
        "TopicTest",
        body,
        queue_id=3,
        properties=properties,
        flag=7,
        born_timestamp=1_700_000_000_001,
        born_host=pack_host("10.0.0.5", 40001),
        reconsume_times=2,
        prepared_transaction_offset=0,
    )
    record = encode_one(msg, queue_offset=42, position=1000, store_timestamp=1_700_000_000_099)
    props = b"TAGS\x01TagA\x02KEYS\x01k1 k2\x02"

    assert struct.unpack_from(">i", record, 0)[0] == len(record)
    assert struct.unpack_from(">I", record, 4)[0] == 0xDAA320A7
    crc = struct.unpack_from(">i", record, 8)[0]
    assert crc == zlib.crc32(body) & 0x7FFFFFFF == 2010220930  # RocketMQ's example for "Hello"
    assert struct.unpack_from(">i", record, 12)[0] == 3
    assert struct.unpack_from(">i", record, 16)[0] == 7
    assert struct.unpack_from(">q", record, 20)[0] == 42
    assert struct.unpack_from(">q", record, 28)[0] == 1000
    assert struct.unpack_from(">i", record, 36)[0] == 0
    assert struct.unpack_from(">q", record, 40)[0] == 1_700_000_000_001
    assert record[48:56] == bytes([10, 0, 0, 5]) + struct.pack(">i", 40001)
    assert struct.unpack_from(">q", record, 56)[0] == 1_700_000_000_099
    assert record[64:72] == bytes([127, 0, 0, 1]) + struct.pack(">i", 10911)
    assert struct.unpack_from(">i", record, 72)[0] == 2
    assert struct.unpack_from(">q", record, 76)[0] == 0
    assert struct.unpack_from(">i", record, 84)[0] == len(body)
    assert record[88 : 88 + len(body)] == body
    cursor = 88 + len(body)
    assert record[cursor] == len("TopicTest")
    assert record[cursor + 1 : cursor + 10] == b"TopicTest"
    cursor += 10
    assert struct.unpack_from(">h", record, cursor)[0] == len(props)
    assert record[cursor + 2 :] == props
    assert len(record) == 91 + len(body) + len("TopicTest") + len(props)


def test_ipv6_hosts_grow_the_header_and_set_sysflag_bits() -> None:
    msg = NewMessage("T", b"x", born_host=pack_host("::1", 40001))
    record = encode_one(msg, store_host=pack_host("2001:db8::10", 10911))
    assert struct.unpack_from(">i", record, 36)[0] == 0x30
    assert record[48:68] == ipaddress.ip_address("::1").packed + struct.pack(">i", 40001)
    assert struct.unpack_from(">q", record, 68)[0] == 1_700_000_000_999  # store ts moved by 12
    assert len(record) == 91 + 24 + 1 + 1
    decoded = decode_record(record, 0)
    assert decoded.born_host == "0:0:0:0:0:0:0:1:40001"
    assert decoded.store_host == "2001:db8:0:0:0:0:0:10:10911"
    assert len(decoded.offset_msg_id) == 56


def test_ipv6_records_never_take_the_cached_ipv4_layout() -> None:
    """Decoding reads BODYLENGTH where an IPv4 header keeps it and, for a body length seen
    before, header and body in one cached unpack. In a record with an IPv6 born host that
    offset holds RECONSUMETIMES: equal to a cached length, it must not decide the layout."""
    for body_len in (3, 5000):  # decoded once, their layouts are cached
        decode_record(encode_one(NewMessage("T", b"b" * body_len)), 0)
        assert body_len in codec._V4_WITH_BODY
    for reconsume in (3, 5000):  # 3 unpacks within the record, 5000 runs past its end
        message = NewMessage(
            "T", b"payload", born_host=pack_host("::1", 40001), reconsume_times=reconsume
        )
        decoded = decode_record(encode_one(message), 0)
        assert decoded.body == b"payload"
        assert decoded.reconsume_times == reconsume
        assert decoded.born_host == "0:0:0:0:0:0:0:1:40001"


def test_stored_properties_are_parsed_on_first_read() -> None:
    record = encode_one(NewMessage("T", b"body", properties={"TAGS": "a", "KEYS": "k1 k2"}))
    decoded = decode_record(record, 0)
    assert decoded._properties == "TAGS\x01a\x02KEYS\x01k1 k2\x02"  # not parsed yet
    assert decoded.tags == "a" and decoded.keys == ["k1", "k2"]
    assert decoded._properties == {"TAGS": "a", "KEYS": "k1 k2"}  # parsed once, kept
    decoded.properties["TAGS"] = "b"  # the parsed dict is the message's own
    assert decoded.tags == "b"
    decoded.properties = {"UNIQ_KEY": "u"}
    assert decoded.msg_id == "u" and decoded.tags is None


def test_stored_messages_compare_by_value_parsed_or_not() -> None:
    record = encode_one(NewMessage("T", b"body", properties={"TAGS": "a"}))
    lazy, parsed = decode_record(record, 0), decode_record(record, 0)
    assert parsed.properties == {"TAGS": "a"}
    assert lazy == parsed and parsed == lazy
    assert lazy != parsed.replace(body=b"other")
    assert lazy != parsed.replace(properties={"TAGS": "b"})
    moved = lazy.replace(topic="U", queue_id=3)
    assert (moved.topic, moved.queue_id, moved.body, moved.tags) == ("U", 3, b"body", "a")
    assert (lazy.topic, lazy.queue_id) == ("T", 0)
    assert "topic='T'" in repr(lazy) and "properties={'TAGS': 'a'}" in repr(lazy)
    with pytest.raises(TypeError, match="no field colour"):
        lazy.replace(colour="red")
    with pytest.raises(TypeError):
        hash(lazy)


def test_worked_size_example_from_rocketmq() -> None:
    """ReputMessageServiceTest: topic FooBar, 32-byte body, TAGS=TAG1 and a 13-digit KEYS."""
    props = {"TAGS": "TAG1", "KEYS": "1700000000000"}
    assert len(encode_properties(props).encode()) == 29
    record = encode_one(NewMessage("FooBar", bytes(32), properties=props))
    assert len(record) == 158
    units = encode_batch(
        [NewMessage("FooBar", bytes(32), properties=props)] * 10,
        "FooBar",
        0,
        0,
        0,
        BIG_SEGMENT,
        1,
        STORE_HOST,
        NO_LIMIT,
    )
    assert units.end_offset == 1580 + len(mark_pair(10))  # and the put's mark, on its first


def test_long_topic_uses_v2_magic_and_two_byte_length() -> None:
    topic = "%RETRY%" + "g" * 130
    record = encode_one(NewMessage(topic, b"body"))
    assert struct.unpack_from(">i", record, 4)[0] == MAGIC_V2
    cursor = 88 + 4
    assert struct.unpack_from(">h", record, cursor)[0] == len(topic)
    assert record[cursor + 2 : cursor + 2 + len(topic)] == topic.encode()
    assert decode_record(record, 0).topic == topic
    assert struct.unpack_from(">i", encode_one(NewMessage("t" * 127, b"b")), 4)[0] == MAGIC_V1


def test_zero_born_timestamp_takes_the_store_timestamp() -> None:
    record = encode_one(NewMessage("T", b"x"), store_timestamp=1234)
    assert decode_record(record, 0).born_timestamp == 1234


def test_encoder_rejections() -> None:
    too_many_props = NewMessage("T", b"x", properties={"K": "v" * 32765})
    with pytest.raises(RejectedMessageError) as rejected:
        encode_one(too_many_props)
    assert rejected.value.status == "PROPERTIES_SIZE_EXCEEDED"
    too_big = NewMessage("T", bytes(5000))
    with pytest.raises(RejectedMessageError) as rejected:
        encode_batch([too_big], "T", 0, 0, 0, 4096, 1, STORE_HOST, NO_LIMIT)
    assert rejected.value.status == "MESSAGE_ILLEGAL"


# -- properties and hosts --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("", {}),
        ("a\x01b\x02", {"a": "b"}),
        ("a\x01b", {"a": "b"}),  # last segment may lack the separator
        ("noseparator\x02\x01v\x02k\x01\x02good\x01yes\x02", {"good": "yes"}),
        ("\x02\x02a\x01b\x02\x02", {"a": "b"}),
        ("k\x011\x02k\x012\x02", {"k": "2"}),  # a repeated name keeps the later value
        ("k\x01v\x01w\x02", {"k": "v\x01w"}),  # split at the first name separator
        ("ü\x01😀\x02", {"ü": "😀"}),
    ],
)
def test_decode_properties(text: str, expected: dict[str, str]) -> None:
    assert decode_properties(text) == expected


@pytest.mark.parametrize(
    "text",
    [
        "TAGS\x01\x02KEYS\x01k\x02TAGS\x01t",  # an empty value, then its name again
        "\x01x\x02KEYS\x01k\x02TAGS\x01t",  # an empty name
        "KEYS\x01k\x02TAGS\x01t\x02TAGS\x01",  # an empty value at the end
    ],
)
def test_a_pair_that_does_not_count_holds_no_place_in_the_order(text: str) -> None:
    """A pair with an empty name or value is skipped, also when a later pair of its name
    counts: that name takes its place where the counting pair is (as the Arrow decoder reads
    it)."""
    assert list(decode_properties(text).items()) == [("KEYS", "k"), ("TAGS", "t")]


@settings(max_examples=200, deadline=None)
@given(property_maps)
def test_properties_round_trip(properties: dict[str, str]) -> None:
    assert decode_properties(encode_properties(properties)) == properties


@pytest.mark.parametrize(
    ("host", "port", "expected"),
    [
        ("127.0.0.1", 40001, "127.0.0.1:40001"),
        ("255.255.255.255", 0, "255.255.255.255:0"),
        ("::1", 40001, "0:0:0:0:0:0:0:1:40001"),
        ("fe80::abcd:1", 10911, "fe80:0:0:0:0:0:abcd:1:10911"),
    ],
)
def test_pack_unpack_host(host: str, port: int, expected: str) -> None:
    packed = pack_host(host, port)
    assert len(packed) == (8 if "." in host else 20)
    assert unpack_host(packed) == expected


# -- malformed records -----------------------------------------------------------------------


def test_decode_rejects_bad_magic_and_size_mismatch() -> None:
    record = encode_one(NewMessage("T", b"payload", properties={"TAGS": "x"}))
    bad_magic = record[:4] + struct.pack(">i", BLANK_MAGIC) + record[8:]
    with pytest.raises(RecordError):
        decode_record(bad_magic, 0)
    with pytest.raises(RecordError):
        decode_record(bytes(64), 0)
    wrong_total = struct.pack(">i", len(record) + 1) + record[4:]
    with pytest.raises(RecordError):
        decode_record(wrong_total, 0)
    with pytest.raises(RecordError):
        decode_record(record, 1)


# "TAGS\x01x\x02" is the last 7 bytes, its length the 2 before, "T" and its length before that.
@pytest.mark.parametrize(
    "cut",
    [
        pytest.param(1, id="properties-last-byte"),
        pytest.param(4, id="properties-half"),
        pytest.param(7, id="properties-all"),
        pytest.param(8, id="properties-length"),
        pytest.param(11, id="topic"),
        pytest.param(14, id="body"),
        pytest.param(60, id="header"),
    ],
)
def test_decode_rejects_truncated_records(cut: int) -> None:
    """A buffer that ends inside the record is not a complete record (RecordError)."""
    record = encode_one(NewMessage("T", b"payload", properties={"TAGS": "x"}))
    with pytest.raises(RecordError):
        decode_record(record[:-cut], 0)
