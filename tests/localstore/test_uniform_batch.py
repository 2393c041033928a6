"""A UniformBatch is stored byte for byte as the same messages given one object each."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from localstore import MessageStore, NewMessage, PutStatus, StoreOptions, UniformBatch
from localstore.index.service import key_columns, sys_flags_of
from localstore.record.batch_encoder import RejectedMessageError, encode_batch, encode_uniform
from localstore.record.codec import MAX_PROPERTIES_BYTES, encode_properties, pack_host

STORE_V4 = pack_host("127.0.0.1", 10911)
STORE_V6 = pack_host("::1", 10911)
BORN_V6 = pack_host("fe80::1", 40001)
TEXT = st.text(st.characters(blacklist_characters="\x01\x02 ", blacklist_categories=("Cs",)))
NAME = st.text("ABCDEFGHIJKLMNOPQRSTUVWXYZ_", min_size=1, max_size=8)


def batch_of(
    topic: str,
    queue_id: int,
    rows: list[tuple[bytes, dict[str, str], str | None, str | None, str | None]],
    **shared: object,
) -> UniformBatch:
    """A batch from (body, user properties, tags, keys, uniq key) rows, its columns made the
    way the producer makes them: user properties, then TAGS, KEYS, UNIQ_KEY."""
    texts = []
    for _, user, tags, keys, uniq in rows:
        properties = dict(user)
        for name, value in (("TAGS", tags), ("KEYS", keys), ("UNIQ_KEY", uniq)):
            if value is not None:
                properties[name] = value
        texts.append(encode_properties(properties).encode())
    tags_column = [row[2] for row in rows]
    return UniformBatch(
        topic,
        queue_id,
        [row[0] for row in rows],
        texts,
        [row[4] for row in rows],
        [row[3] for row in rows],
        tags_column if any(tags_column) else None,
        plain=not any(row[1] for row in rows),
        **shared,  # type: ignore[arg-type]
    )


ROWS = st.lists(
    st.tuples(
        st.binary(min_size=1, max_size=300),
        st.dictionaries(
            NAME.filter(lambda n: n not in {"TAGS", "KEYS", "UNIQ_KEY"}), TEXT, max_size=2
        ),
        st.none() | st.text("abc|", min_size=1, max_size=5),
        st.none() | st.text("kx y", min_size=1, max_size=6),
        st.none() | st.text("0123456789ABCDEF", min_size=32, max_size=32),
    ),
    min_size=1,
    max_size=30,
)


@settings(max_examples=150, deadline=None)
@given(
    rows=ROWS,
    topic=st.sampled_from(["orders", "T" * 130, "%RETRY%g"]),
    queue_id=st.integers(0, 7),
    queue_offset=st.integers(0, 2**40),
    position=st.integers(0, 5000),
    segment=st.sampled_from([1024, 4096, 1 << 20]),
    flag=st.integers(-(2**31), 2**31 - 1),
    born_timestamp=st.sampled_from([0, 1_600_000_000_123]),
    born_host=st.sampled_from([pack_host("10.0.0.7", 1234), BORN_V6]),
    store_host=st.sampled_from([STORE_V4, STORE_V6]),
)
def test_uniform_encoding_is_the_messages_encoding(
    rows,
    topic,
    queue_id,
    queue_offset,
    position,
    segment,
    flag,
    born_timestamp,
    born_host,
    store_host,
) -> None:
    """Same runs (segment ends and blank records included), units, offsets and ends as
    encode_batch of the batch's messages, for v1 and v2 topics, IPv4 and IPv6 hosts, a born
    time or none (the store time then), any flag."""
    batch = batch_of(
        topic, queue_id, rows, flag=flag, born_timestamp=born_timestamp, born_host=born_host
    )
    args = (queue_offset, position, segment, 1_700_000_000_000, store_host, segment)
    try:
        expected = encode_batch(batch.messages(), topic, queue_id, *args)
    except RejectedMessageError as rejected:
        with pytest.raises(RejectedMessageError) as uniform_rejected:
            encode_uniform(batch, *args)
        assert (uniform_rejected.value.status, uniform_rejected.value.detail) == (
            rejected.status,
            rejected.detail,
        )
        return
    assert encode_uniform(batch, *args) == expected


def test_properties_over_the_limit_are_refused_as_the_messages_would_be() -> None:
    rows = [
        (b"x", {}, None, None, None),
        (b"y", {"P": "v" * MAX_PROPERTIES_BYTES}, None, None, None),
    ]
    batch = batch_of("orders", 0, rows)
    with pytest.raises(RejectedMessageError) as rejected:
        encode_uniform(batch, 0, 0, 1 << 30, 1, STORE_V4, 1 << 30)
    assert rejected.value.status == "PROPERTIES_SIZE_EXCEEDED"
    assert rejected.value.detail == "message 1: properties take 32770 bytes, more than 32767"


def test_columns_of_different_lengths_are_refused() -> None:
    with pytest.raises(ValueError, match="2 bodies, 1 properties, 2 UNIQ_KEYs, 2 KEYS, 3 TAGS"):
        UniformBatch("t", 0, [b"a", b"b"], [b""], [None, None], [None, None], ["x"] * 3)


def test_a_batch_reads_as_its_messages() -> None:
    batch = batch_of(
        "orders",
        3,
        [(b"a", {"P": "1"}, "paid", "k1 k2", "U" * 32), (b"b", {}, None, None, None)],
        flag=7,
        born_timestamp=42,
    )
    assert len(batch) == 2
    assert batch[0] == NewMessage(
        "orders",
        b"a",
        3,
        {"P": "1", "TAGS": "paid", "KEYS": "k1 k2", "UNIQ_KEY": "U" * 32},
        7,
        0,
        42,
    )
    assert batch[1].properties == {}
    assert list(batch) == batch[:]
    assert batch[0] is batch[0]  # made once
    assert key_columns(batch) == (["U" * 32, None], ["k1 k2", None])
    assert sys_flags_of(batch) is None


def test_holds_property_reads_whole_names_only() -> None:
    plain = batch_of("t", 0, [(b"a", {}, "tg", None, "U" * 32)])
    assert plain.holds_property("TAGS") and plain.holds_property("UNIQ_KEY")
    assert not plain.holds_property("KEYS")
    assert not plain.holds_property("DELAY")
    user = batch_of("t", 0, [(b"a", {"XDELAY": "DELAY"}, None, None, None)])
    assert not user.holds_property("DELAY")
    assert user.holds_property("XDELAY")
    first = batch_of("t", 0, [(b"a", {"DELAY": "3"}, None, None, None)])
    later = batch_of("t", 0, [(b"a", {"A": "1", "DELAY": "3"}, None, None, None)])
    assert first.holds_property("DELAY") and later.holds_property("DELAY")


@pytest.mark.parametrize("index_process", [False, True])
def test_a_stored_batch_reads_back_and_is_found_by_key(tmp_path, index_process) -> None:
    """Through the store: the records read back with every field, each message is found by its
    key and its UNIQ_KEY (in-process index and index process), and a bad body is refused
    naming the message, with nothing stored."""
    rows = [
        (
            b"body-%d" % i,
            {"P": str(i)} if i % 2 else {},
            "even" if i % 2 == 0 else None,
            f"key{i}",
            f"{i:032X}",
        )
        for i in range(20)
    ]
    batch = batch_of("orders", 1, rows)
    with MessageStore(tmp_path / "s", options=StoreOptions(index_process=index_process)) as store:
        refused = store.put_batch(
            UniformBatch("orders", 1, [b"a", b""], [b"", b""], [None] * 2, [None] * 2)
        )
        assert refused.status is PutStatus.MESSAGE_ILLEGAL
        assert "message 1: the body is empty" in refused.detail
        result = store.put_batch(batch)
        assert result.status is PutStatus.PUT_OK and result.queue_offset == 0
        got = store.get_messages("orders", 1, 0, max_count=32)
        assert [m.body for m in got.messages] == [row[0] for row in rows]
        assert [m.properties for m in got.messages] == [m.properties for m in batch.messages()]
        assert [m.queue_offset for m in got.messages] == list(range(20))
        assert [m.phys_offset for m in got.messages] == result.phys_offsets
        tagged = store.get_messages("orders", 1, 0, max_count=32, tags="even")
        assert [m.queue_offset for m in tagged.messages] == list(range(0, 20, 2))
        store.wait_indexed()
        for i in (0, 7, 19):
            assert [m.body for m in store.query_by_key("orders", f"key{i}")] == [rows[i][0]]
            assert [m.body for m in store.query_by_key("orders", f"{i:032X}")] == [rows[i][0]]
