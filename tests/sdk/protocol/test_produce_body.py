"""The produce body: RocketMQ's ``MessageBatch`` encoding of a batch, decoded on the broker's
side into what the store's batch put takes; every malformed body is refused with the byte
offset and the problem."""

from __future__ import annotations

import struct
import zlib
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from localstore import MessageStore, NewMessage, UniformBatch
from localstore.index.service import CounterRun, counter_run_of
from localstore.record.batch_encoder import encode_batch, encode_uniform
from localstore.record.message_id import UniqKeyRun, uniq_key_run
from sdk import Message
from sdk.errors import InvalidArgumentError, MalformedBodyError
from sdk.outgoing import MessageBuilder
from sdk.protocol.produce_body import decode_produce_body, encode_produce_body

from ..brokers import SMALL_GEOMETRY

TOPIC = "orders"
JAVA_MAGIC = 0xDAA320A7  # RocketMQ's MessageDecoder.MESSAGE_MAGIC_CODE, as an unsigned int

# Property names and values a writer may store: text without the two separators.
_text = st.text(st.characters(codec="utf-8", exclude_characters="\x01\x02"), max_size=12)
_INDEXED_NAMES = ["TAGS", "KEYS", "UNIQ_KEY"]  # the names the store indexes, empty values too
_messages = st.lists(
    st.builds(
        NewMessage,
        topic=st.just(TOPIC),
        body=st.binary(max_size=64),
        queue_id=st.just(3),
        properties=st.dictionaries(st.sampled_from(_INDEXED_NAMES) | _text, _text, max_size=4),
        flag=st.integers(-(2**31), 2**31 - 1),
    ),
    min_size=1,
    max_size=5,
)


def rocketmq_client_message(body: bytes, properties: str | bytes, flag: int = 0) -> bytes:
    """One message as RocketMQ's ``MessageDecoder.encodeMessage`` writes it (magic and CRC 0),
    built here field by field, apart from the module under test."""
    text = properties.encode() if isinstance(properties, str) else properties
    size = 4 + 4 + 4 + 4 + 4 + len(body) + 2 + len(text)
    return (
        struct.pack(">iiiii", size, 0, 0, flag, len(body))
        + body
        + struct.pack(">h", len(text))
        + text
    )


def built_batch(count: int = 3) -> UniformBatch:
    """A producer's batch, as ``Producer.send_batch`` builds it."""
    messages = [
        Message(TOPIC, f"m{i}".encode(), tags=f"t{i % 2}", keys=[f"k{i}"], properties={"p": "v"})
        for i in range(count)
    ]
    built = MessageBuilder().build_batch(messages, 3)
    assert isinstance(built, UniformBatch)
    return built


@settings(max_examples=150, deadline=None)
@given(_messages)
def test_arbitrary_messages_round_trip(messages: list[NewMessage]) -> None:
    decoded = decode_produce_body(
        encode_produce_body(messages), TOPIC, 3, count=len(messages), born_timestamp=17
    )
    assert [(m.body, m.properties, m.flag, m.queue_id, m.topic) for m in decoded] == [
        (m.body, m.properties, m.flag, 3, TOPIC) for m in messages
    ]
    assert all(m.born_timestamp == 17 and m.sys_flag == 0 for m in decoded)
    flags_agree = len({m.flag for m in messages}) == 1
    assert isinstance(decoded, UniformBatch) is flags_agree


def test_the_layout_is_rocketmqs_with_magic_and_crc_filled_in() -> None:
    body = encode_produce_body([NewMessage(TOPIC, b"abc", 0, {"TAGS": "x"}, 7)])
    expected = rocketmq_client_message(b"abc", "TAGS\x01x\x02", 7)
    assert struct.unpack_from(">I", body, 4)[0] == JAVA_MAGIC
    assert struct.unpack_from(">i", body, 8)[0] == zlib.crc32(b"abc") & 0x7FFFFFFF
    assert body[:4] + body[12:] == expected[:4] + expected[12:]


def test_a_rocketmq_clients_body_without_magic_or_crc_is_taken() -> None:
    body = rocketmq_client_message(b"one", "TAGS\x01a\x02") + rocketmq_client_message(b"", "")
    decoded = decode_produce_body(body, TOPIC, 0, count=2)
    assert [(m.body, m.properties) for m in decoded] == [(b"one", {"TAGS": "a"}), (b"", {})]


def test_a_producers_batch_comes_back_as_the_same_columns() -> None:
    built = built_batch()
    decoded = decode_produce_body(
        encode_produce_body(built), TOPIC, 3, born_timestamp=built.born_timestamp
    )
    assert isinstance(decoded, UniformBatch)
    assert list(decoded.bodies) == list(built.bodies)
    assert list(decoded.properties) == list(built.properties)
    assert (decoded.uniq_keys, decoded.keys, decoded.tags) == (
        list(built.uniq_keys),
        list(built.keys),
        list(built.tags or ()),
    )
    assert decoded.plain is built.plain is False


def test_a_batch_without_user_properties_stays_plain() -> None:
    built = MessageBuilder().build_batch([Message(TOPIC, b"a", tags="t"), Message(TOPIC, b"b")], 0)
    decoded = decode_produce_body(encode_produce_body(built), TOPIC, 0)
    assert isinstance(decoded, UniformBatch)
    assert decoded.plain
    assert decoded.tags == ["t", None]


def test_a_decoded_body_puts_through_the_store_and_reads_back_equal(tmp_path: Path) -> None:
    built = built_batch(5)
    mixed = [NewMessage(TOPIC, b"x", 1, {"KEYS": "a b"}, 1), NewMessage(TOPIC, b"y", 1, {}, 2)]
    with MessageStore(tmp_path, **SMALL_GEOMETRY) as store:
        for batch, queue_id in ((built, 3), (mixed, 1)):
            decoded = decode_produce_body(encode_produce_body(batch), TOPIC, queue_id)
            assert store.put_batch(decoded).status.name == "PUT_OK"
            stored = store.get_messages(TOPIC, queue_id, 0, max_count=10).messages
            assert [(m.body, m.properties, m.flag, m.queue_id) for m in stored] == [
                (m.body, m.properties, m.flag, queue_id) for m in batch
            ]
        assert [m.body for m in store.query_by_key(TOPIC, "k2")] == [b"m2"]  # key index


def test_encoding_refuses_what_the_layout_cannot_hold() -> None:
    with pytest.raises(InvalidArgumentError, match="at least one message"):
        encode_produce_body([])
    with pytest.raises(InvalidArgumentError, match="message 1: flag"):
        encode_produce_body([NewMessage(TOPIC, b""), NewMessage(TOPIC, b"", flag=2**31)])
    with pytest.raises(InvalidArgumentError, match="message 0: its properties take 40000 bytes"):
        encode_produce_body([NewMessage(TOPIC, b"", properties={"a": "b" * 39997})])


def two_messages() -> bytes:
    return encode_produce_body(
        [NewMessage(TOPIC, b"abc", properties={"TAGS": "x"}), NewMessage(TOPIC, b"de")]
    )


def test_a_body_truncated_at_any_byte_is_refused() -> None:
    body = two_messages()
    for cut in range(len(body)):
        with pytest.raises(MalformedBodyError) as caught:
            decode_produce_body(body[:cut], TOPIC, 0, count=2)
        assert 0 <= caught.value.offset <= cut


def test_a_cut_between_two_messages_is_caught_by_the_count() -> None:
    body = two_messages()
    first_size = struct.unpack_from(">i", body)[0]
    assert len(decode_produce_body(body[:first_size], TOPIC, 0)) == 1  # well formed on its own
    with pytest.raises(MalformedBodyError, match="holds 1 messages, the request names 2"):
        decode_produce_body(body[:first_size], TOPIC, 0, count=2)


def patched(body: bytes, offset: int, fmt: str, value: int) -> bytes:
    changed = bytearray(body)
    struct.pack_into(fmt, changed, offset, value)
    return bytes(changed)


@pytest.mark.parametrize(
    ("offset", "fmt", "value", "problem"),
    [
        (4, ">I", JAVA_MAGIC ^ 1, "magic code 0xDAA320A6 is neither 0xDAA320A7 nor 0"),
        (4, ">I", 0xDAA320AB, "magic code 0xDAA320AB"),  # a stored record's v2 magic
        (8, ">i", 12345, "body CRC 12345 does not match"),
        (0, ">i", 21, "total size 21 is below"),
        (0, ">i", 1000, "total size 1000 runs past the body's end"),
        (16, ">i", -1, "body length -1 does not fit"),
        (16, ">i", 30, "body length 30 does not fit in total size 32"),
        (23, ">h", -1, "properties length -1 does not add up"),
        (23, ">h", 5, "properties length 5 does not add up"),
    ],
)
def test_a_field_that_cannot_be_right_is_refused_at_its_offset(
    offset: int, fmt: str, value: int, problem: str
) -> None:
    body = patched(two_messages(), offset, fmt, value)
    with pytest.raises(MalformedBodyError, match=problem) as caught:
        decode_produce_body(body, TOPIC, 0)
    assert caught.value.offset == offset
    assert f"at byte {offset}" in str(caught.value)


def test_a_bad_crc_in_the_second_message_names_its_offset() -> None:
    body = bytearray(two_messages())
    second = struct.unpack_from(">i", body)[0]
    body[second + 20] ^= 0xFF  # the second message's first body byte
    with pytest.raises(MalformedBodyError, match="body CRC") as caught:
        decode_produce_body(bytes(body), TOPIC, 0)
    assert caught.value.offset == second + 8


@pytest.mark.parametrize(
    "properties",
    [b"\xff\xfe\x02", b"a\x01b", b"a\x01b\x02c", b"no-separator\x02"],
    ids=["not-utf8", "no-final-separator", "trailing-text", "pair-without-name-separator"],
)
def test_a_properties_text_that_is_not_pairs_is_refused(properties: bytes) -> None:
    size = 22 + len(properties)
    body = struct.pack(">iiiii", size, 0, 0, 0, 0) + struct.pack(">h", len(properties)) + properties
    with pytest.raises(MalformedBodyError, match="not UTF-8 name") as caught:
        decode_produce_body(body, TOPIC, 0)
    assert caught.value.offset == 22


def test_an_empty_body_is_refused() -> None:
    with pytest.raises(MalformedBodyError, match="holds no message"):
        decode_produce_body(b"", TOPIC, 0)


def test_malformed_is_an_invalid_argument_never_retriable() -> None:
    error = MalformedBodyError(3, "x")
    assert isinstance(error, InvalidArgumentError)
    assert not error.retriable


@settings(max_examples=100, deadline=None)
@given(_messages)
def test_the_column_batch_stores_the_bytes_its_messages_would(messages: list[NewMessage]) -> None:
    for message in messages:
        message.flag = 5  # one flag: decoded as columns
    decoded = decode_produce_body(encode_produce_body(messages), TOPIC, 3, born_timestamp=9)
    assert isinstance(decoded, UniformBatch)
    where = (0, 0, 1 << 20, 123, b"\x7f\x00\x00\x01\x00\x00\x27\x10")
    as_columns = encode_uniform(decoded, *where, 1 << 20)
    as_messages = encode_batch(list(decoded), TOPIC, 3, *where, 1 << 20)
    assert as_columns == as_messages


def uniq_keys_alone(*values: bytes) -> bytes:
    """A body whose messages' properties are their UNIQ_KEY alone (a producer's batch without
    tags or keys)."""
    return b"".join(
        rocketmq_client_message(b"m", b"UNIQ_KEY\x01" + value + b"\x02") for value in values
    )


def test_the_checked_body_crcs_go_to_the_store_with_the_batch() -> None:
    built = built_batch(3)
    decoded = decode_produce_body(encode_produce_body(built), TOPIC, 3)
    assert isinstance(decoded, UniformBatch)
    assert decoded.body_crcs == [zlib.crc32(body) & 0x7FFFFFFF for body in built.bodies]
    unchecked = rocketmq_client_message(b"one", "") + rocketmq_client_message(b"two", "")
    assert decode_produce_body(unchecked, TOPIC, 0).body_crcs is None  # magic 0: no CRC


def test_a_batch_of_uniq_keys_alone_is_read_at_once_with_the_same_columns() -> None:
    values = ["0A01", "", "é-ü", "Z" * 40]
    decoded = decode_produce_body(uniq_keys_alone(*(v.encode() for v in values)), TOPIC, 0)
    assert isinstance(decoded, UniformBatch)
    assert list(decoded.uniq_keys) == values
    assert list(decoded.keys) == [None] * 4
    assert decoded.tags is None
    assert decoded.plain
    assert [m.properties for m in decoded] == [{"UNIQ_KEY": v} for v in values]


@pytest.mark.parametrize(
    ("head", "first", "count"),
    [
        ("7F0000010F2A3B4C5D6E7F0A1B2C", 0x0000, 100),
        ("7F0000010F2A3B4C5D6E7F0A1B2C", 0x1234, 100),
        ("7F0000010F2A3B4C5D6E7F0A1B2C", 0xFFC0, 100),
        ("é-\U0001f600-", 0x00FF, 3),
        ("7F0000010F2A3B4C5D6E7F0A1B2C", 0xBEEF, 1),
    ],
    ids=["start", "middle", "wraps", "non-ascii-head", "one-message"],
)
def test_keys_a_client_drew_as_a_run_come_back_as_that_run(
    head: str, first: int, count: int
) -> None:
    run = uniq_key_run(head, first, count)
    decoded = decode_produce_body(uniq_keys_alone(*(k.encode() for k in run)), TOPIC, 0)
    assert isinstance(decoded, UniformBatch)
    assert type(decoded.uniq_keys) is UniqKeyRun
    assert (decoded.uniq_keys.head, decoded.uniq_keys.first) == (head, first)
    assert list(decoded.uniq_keys) == list(run)
    assert counter_run_of(decoded.uniq_keys) == CounterRun(head, first, count)


@pytest.mark.parametrize(
    "keys",
    [
        ["AB0001", "AB0002", "AB0004", "AB0004"],  # a gap in the middle, first and last fit
        ["AB00ff", "AB0100"],  # lower-case hex: not what a client draws
        ["AB0001", "AC0002"],  # another head
        ["0001", "0002", "0003"],  # no head: still a run
        ["A1", "A2"],  # shorter than a counter
        ["AB00-1", "AB0000"],  # not hex
    ],
    ids=["gap", "lower-case", "two-heads", "no-head", "short", "not-hex"],
)
def test_keys_that_are_no_run_come_back_as_they_are(keys: list[str]) -> None:
    decoded = decode_produce_body(uniq_keys_alone(*(k.encode() for k in keys)), TOPIC, 0)
    assert isinstance(decoded, UniformBatch)
    assert list(decoded.uniq_keys) == keys
    is_run = keys[0] == "0001"
    assert (type(decoded.uniq_keys) is UniqKeyRun) is is_run


@pytest.mark.parametrize(
    ("second", "columns"),
    [
        (b"UNIQ_KEY\x01b\x02KEYS\x01k\x02", (["a", "b"], [None, "k"], None, True)),
        (b"TAGS\x01t\x02UNIQ_KEY\x01b\x02", (["a", "b"], [None, None], [None, "t"], True)),
        (b"X\x01UNIQ_KEY\x01b\x02", (["a", None], [None, None], None, False)),
        (b"UNIQ_KEY\x01b\x01c\x02", (["a", "b\x01c"], [None, None], None, True)),
    ],
    ids=["keys-after", "tags", "uniq-key-in-a-value", "name-separator-in-the-value"],
)
def test_one_text_beside_its_uniq_key_is_read_text_by_text(
    second: bytes, columns: tuple[object, ...]
) -> None:
    body = uniq_keys_alone(b"a") + rocketmq_client_message(b"m", second)
    decoded = decode_produce_body(body, TOPIC, 0, count=2)
    assert isinstance(decoded, UniformBatch)
    assert (list(decoded.uniq_keys), list(decoded.keys), decoded.tags, decoded.plain) == columns


@pytest.mark.parametrize(
    ("first", "second"),
    [
        (b"UNIQ_KEY\x01a\x02", b"UNIQ_KEY\x01\xff\x02"),
        (b"UNIQ_KEY\x01a\x02", b"UNIQ_KEY\x01a"),
        (b"UNIQ_KEY\x01a\x02", b"UNIQ_KEY\x01a\x02\x02"),
        (b"UNIQ_KEY\x01a\x02UNIQ_KEY\x01b\x02", b"UNIQ_KEY\x01c"),  # as many separators
    ],
    ids=["not-utf8", "no-final-separator", "two-pair-separators", "a-separator-moved-up"],
)
def test_a_bad_text_among_uniq_keys_alone_is_refused_at_its_offset(
    first: bytes, second: bytes
) -> None:
    body = rocketmq_client_message(b"m", first) + rocketmq_client_message(b"mm", second)
    with pytest.raises(MalformedBodyError, match="not UTF-8 name") as caught:
        decode_produce_body(body, TOPIC, 0, count=2)
    first_size = struct.unpack_from(">i", body)[0]
    assert caught.value.offset == first_size + 20 + 2 + 2  # head, body, properties length
