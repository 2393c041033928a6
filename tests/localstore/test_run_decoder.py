"""decode_run: a run of records decoded in one loop gives what decode_record gives, record for
record, and names the record that is damaged or misplaced."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from localstore import CorruptStoreError, MessageStore, NewMessage
from localstore.record.batch_encoder import encode_batch
from localstore.record.codec import (
    BLANK_MAGIC,
    SYSFLAG_TRANSACTION_COMMIT,
    decode_record,
    pack_host,
)
from localstore.record.run_decoder import RunDecodeError, decode_run

STORE_HOST = pack_host("10.0.0.7", 10911)
SEGMENT = 1 << 24
TOPIC = "Orders"
QUEUE = 3
FIRST = 7  # the queue offset of a run's first record
RUN = (TOPIC, QUEUE, FIRST)  # what a run is expected to hold: topic, queue id, first offset


def encode_run(
    messages: list[NewMessage], position: int, topic: str = TOPIC
) -> tuple[bytes, list[int]]:
    """The records of ``messages`` (each encoded alone) back to back from commitlog
    ``position``, in ``topic``'s queue ``QUEUE`` from queue offset ``FIRST``; returns the bytes
    and each record's position in them."""
    parts: list[bytes] = []
    positions: list[int] = []
    at = position
    for index, message in enumerate(messages):
        encoded = encode_batch(
            [message],
            topic,
            QUEUE,
            FIRST + index,
            at,
            SEGMENT,
            1_700_000_000_123,
            STORE_HOST,
            1 << 30,
        )
        assert len(encoded.runs) == 1, "the run must fit one segment"
        positions.append(at - position)
        parts.append(encoded.published_runs()[0])
        at = encoded.end_offset
    return b"".join(parts), positions


PROPERTY_CHARACTERS = st.characters(codec="utf-8", exclude_characters="\x01\x02")
messages = st.builds(
    NewMessage,
    topic=st.just(TOPIC),  # encode_run stores each in the run's topic
    body=st.binary(max_size=300),
    queue_id=st.just(QUEUE),
    properties=st.dictionaries(
        st.text(PROPERTY_CHARACTERS, min_size=1, max_size=8),
        st.text(PROPERTY_CHARACTERS, max_size=12),
        max_size=3,
    ),
    flag=st.integers(-(2**31), 2**31 - 1),
    # PREPARED records (stored at queue offset 0) have no unit, so no get reads them
    sys_flag=st.sampled_from([0, 0, 0, SYSFLAG_TRANSACTION_COMMIT, 0x1]),
    born_timestamp=st.integers(0, 2**40),
    born_host=st.sampled_from(
        [pack_host("127.0.0.1", 4000), pack_host("::1", 4001), pack_host("192.168.1.9", 1)]
    ),
)


@settings(max_examples=150, deadline=None)
@given(
    st.lists(messages, min_size=1, max_size=12),
    st.sampled_from([TOPIC, "T" * 200]),  # v1 and v2
    st.integers(0, 64),
    st.integers(0, 1 << 20),
)
def test_a_run_decodes_as_its_records_do_one_by_one(
    batch: list[NewMessage], topic: str, segment: int, within: int
) -> None:
    base = segment * SEGMENT + within  # far enough from the segment's end
    data, positions = encode_run(batch, base, topic)
    view = memoryview(data)
    expected = [decode_record(view, position) for position in positions]
    assert decode_run(view, positions, base, topic, QUEUE, FIRST) == expected
    # Equal by value, and every field the decode keeps, raw host and stored text included.
    got = decode_run(view, positions, base, topic, QUEUE, FIRST)
    for mine, theirs in zip(got, expected, strict=True):
        assert mine.store_host_raw == theirs.store_host_raw == STORE_HOST
        assert mine.properties == theirs.properties
        assert mine.offset_msg_id == theirs.offset_msg_id


def test_bodies_past_the_longest_layout_decode_alike() -> None:
    """A body over 64 KiB gets no one-unpack layout: the general decode reads it."""
    batch = [NewMessage(TOPIC, bytes([i]) * (70_000 + i), 0, {"TAGS": "big"}) for i in range(3)]
    data, positions = encode_run(batch, 0)
    view = memoryview(data)
    got = decode_run(view, positions, 0, *RUN)
    assert got == [decode_record(view, position) for position in positions]
    assert [len(m.body) for m in got] == [70_000, 70_001, 70_002]


def test_an_unparsed_run_keeps_properties_as_text_until_read() -> None:
    data, positions = encode_run([NewMessage(TOPIC, b"x" * 100, 0, {"TAGS": "a", "K": "v"})], 0)
    (message,) = decode_run(memoryview(data), positions, 0, *RUN)
    assert message._properties == "TAGS\x01a\x02K\x01v\x02"
    assert message.properties == {"TAGS": "a", "K": "v"}
    assert message.tags == "a"


def _run_of_five() -> tuple[bytearray, list[int]]:
    batch = [NewMessage(TOPIC, f"body-{i}".encode() * 10, 0, {"TAGS": "t"}) for i in range(5)]
    data, positions = encode_run(batch, 4096)
    return bytearray(data), positions


@pytest.mark.parametrize(
    ("offset_in_record", "patch", "why"),
    [
        pytest.param(4, struct.pack(">i", BLANK_MAGIC), "bad magic", id="magic"),
        pytest.param(0, struct.pack(">i", 40), "declares", id="total-size"),
        pytest.param(28, struct.pack(">q", 999), "elsewhere", id="misplaced"),
        pytest.param(12, struct.pack(">i", QUEUE + 1), "Orders/4 queue offset 10", id="queue-id"),
        pytest.param(-10, b"z", "Orderz/3 queue offset 10", id="topic"),
        pytest.param(20, struct.pack(">q", 1 << 56), f"offset {1 << 56}", id="queue-offset"),
        pytest.param(-3, b"\xff\xfe\xfd", "malformed", id="properties-not-utf8"),
    ],
)
def test_a_damaged_record_is_named_by_its_index(offset_in_record: int, patch: bytes, why: str):
    data, positions = _run_of_five()
    damaged = 3
    at = positions[damaged] + offset_in_record
    if offset_in_record < 0:  # from the record's end
        at = positions[damaged + 1] + offset_in_record
    data[at : at + len(patch)] = patch
    with pytest.raises(RunDecodeError, match=why) as raised:
        decode_run(memoryview(data), positions, 4096, *RUN)
    assert raised.value.index == damaged
    # The records before it decode; a run that stops before it is whole.
    assert len(decode_run(memoryview(data), positions[:damaged], 4096, *RUN)) == damaged


def test_a_record_cut_off_by_the_buffer_end_is_named() -> None:
    data, positions = _run_of_five()
    with pytest.raises(RunDecodeError) as raised:
        decode_run(memoryview(data)[:-5], positions, 4096, *RUN)
    assert raised.value.index == 4


def test_a_get_names_the_queue_offset_of_a_damaged_or_misplaced_record(tmp_path: Path) -> None:
    """Through the store, on its real files: the record's bytes change under an open store."""
    with MessageStore(tmp_path, commitlog_file_size=1 << 20) as store:
        results = [store.put(NewMessage(TOPIC, b"payload" * 20, 0)) for _ in range(20)]
        segment = tmp_path / "commitlog" / ("0" * 20)
        with open(segment, "r+b") as handle:
            handle.seek(results[7].phys_offset + 4)  # record 7's magic
            handle.write(struct.pack(">i", BLANK_MAGIC))
            handle.seek(results[12].phys_offset + 28)  # record 12's PHYSICALOFFSET
            handle.write(struct.pack(">q", 5))
        got = store.get_messages(TOPIC, 0, 0, max_count=7)
        assert [m.queue_offset for m in got.messages] == list(range(7))
        # The records before a damaged one are answered, the damaged one named; a get that
        # starts at it raises the same error.
        got = store.get_messages(TOPIC, 0, 0, max_count=32)
        assert [m.queue_offset for m in got.messages] == list(range(7))
        assert got.next_offset == 7
        assert got.damaged is not None
        assert (got.damaged.queue_offset, got.damaged.phys_offset) == (7, results[7].phys_offset)
        with pytest.raises(CorruptStoreError, match=rf"{TOPIC}/0 queue offset 7, .*bad magic"):
            store.get_messages(TOPIC, 0, 7, max_count=32)
        got = store.get_messages(TOPIC, 0, 8, max_count=32)
        assert [m.queue_offset for m in got.messages] == list(range(8, 12))
        assert got.damaged is not None and got.damaged.queue_offset == 12
        assert "elsewhere" in str(got.damaged)
        with pytest.raises(CorruptStoreError, match=rf"{TOPIC}/0 queue offset 12, .*elsewhere"):
            store.get_messages(TOPIC, 0, 12, max_count=32)
