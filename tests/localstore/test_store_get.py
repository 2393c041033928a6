"""The read path: every GetStatus, next offsets, budgets, tag filters and raw reads."""

from __future__ import annotations

from pathlib import Path

import pytest

from localstore import (
    GetResult,
    GetStatus,
    MessageStore,
    StoreClosedError,
    StoredMessage,
    pack_host,
)
from localstore.record.codec import RecordError, decode_record

from .conftest import TINY_GEOMETRY, StoreFactory, message


def put_tagged(store: MessageStore, tags: list[str | None], queue_id: int = 0) -> list[int]:
    """Put one message per entry (None = untagged); returns their queue offsets."""
    offsets = []
    for i, tag in enumerate(tags):
        result = store.put(message(body=f"m{i}".encode(), queue_id=queue_id, tags=tag))
        assert result.ok
        offsets.append(result.queue_offset)
    return offsets


def decode_all(raw: bytes) -> list[StoredMessage]:
    records, pos = [], 0
    while pos < len(raw):
        record = decode_record(raw, pos)
        records.append(record)
        pos += record.store_size
    assert pos == len(raw)
    return records


def bounds(result: GetResult) -> tuple[GetStatus, int, int, int]:
    return result.status, result.next_offset, result.min_offset, result.max_offset


# -- statuses --------------------------------------------------------------------------------


def test_no_matched_logic_queue(store: MessageStore) -> None:
    store.put(message("Known"))
    for topic, queue_id, offset in [("Unknown", 0, 0), ("Unknown", 0, 9), ("Known", 1, 3)]:
        result = store.get_messages(topic, queue_id, offset)
        assert result.status is GetStatus.NO_MATCHED_LOGIC_QUEUE
        assert result.next_offset == 0
        assert result.messages == []
    assert (store.min_offset("Unknown", 0), store.max_offset("Unknown", 0)) == (0, 0)


def test_no_message_in_queue(open_store: StoreFactory, store_dir: Path) -> None:
    open_store().close()
    (store_dir / "consumequeue" / "Empty" / "0").mkdir(parents=True)
    store = open_store()
    for offset in (0, 5):
        result = store.get_messages("Empty", 0, offset)
        assert bounds(result) == (GetStatus.NO_MESSAGE_IN_QUEUE, 0, 0, 0)


def test_a_deleted_first_queue_file_is_rebuilt_from_the_log(
    open_store: StoreFactory, store_dir: Path
) -> None:
    """Once its messages were hidden as OFFSET_TOO_SMALL, as if retention had removed them
    (issue 25): the log still holds them, so the queue is rebuilt."""
    store = open_store(**TINY_GEOMETRY)
    put_tagged(store, [None] * 20)
    store.close()
    (store_dir / "consumequeue" / "TopicTest" / "0" / f"{0:020d}").unlink()

    store = open_store()
    assert store.recovery.rebuilt_queues == ["TopicTest/0"]
    assert (store.min_offset("TopicTest", 0), store.max_offset("TopicTest", 0)) == (0, 20)
    found = store.get_messages("TopicTest", 0, 0)
    assert found.status is GetStatus.FOUND
    assert [m.queue_offset for m in found.messages] == [0, 1, 2, 3]
    assert store.store_timestamp("TopicTest", 0, 3) > 0


def test_caught_up_is_true_exactly_where_a_get_has_nothing_to_report(
    open_store: StoreFactory, store_dir: Path
) -> None:
    """A parked pull asks ``caught_up`` instead of reading: it must agree with the statuses a
    get answers, including the ones a consumer must act on (too small, overflow badly)."""
    store = open_store(**TINY_GEOMETRY)
    put_tagged(store, [None] * 20)
    store.close()
    (store_dir / "consumequeue" / "TopicTest" / "0" / f"{0:020d}").unlink()
    store = open_store()
    nothing = {
        GetStatus.OFFSET_OVERFLOW_ONE,
        GetStatus.NO_MESSAGE_IN_QUEUE,
        GetStatus.NO_MATCHED_LOGIC_QUEUE,
    }
    seen = set()
    for queue_id, offset in [(0, o) for o in (-1, 0, 3, 4, 10, 19, 20, 21, 500)] + [(7, 0)]:
        status = store.get_messages("TopicTest", queue_id, offset).status
        seen.add(status)
        assert store.caught_up("TopicTest", queue_id, offset) == (status in nothing), offset
    assert seen >= {
        GetStatus.OFFSET_TOO_SMALL,
        GetStatus.FOUND,
        GetStatus.OFFSET_OVERFLOW_ONE,
        GetStatus.OFFSET_OVERFLOW_BADLY,
        GetStatus.NO_MATCHED_LOGIC_QUEUE,
    }


def test_offset_overflow(store: MessageStore) -> None:
    put_tagged(store, [None] * 5)
    assert bounds(store.get_messages("TopicTest", 0, 5)) == (GetStatus.OFFSET_OVERFLOW_ONE, 5, 0, 5)
    badly = store.get_messages("TopicTest", 0, 6)
    assert bounds(badly) == (GetStatus.OFFSET_OVERFLOW_BADLY, 5, 0, 5)
    assert store.get_messages("TopicTest", 0, 10**12).next_offset == 5
    negative = store.get_messages("TopicTest", 0, -1)
    assert bounds(negative) == (GetStatus.OFFSET_TOO_SMALL, 0, 0, 5)


def test_found_with_next_offsets_and_max_count(store: MessageStore) -> None:
    put_tagged(store, [None] * 10)
    first = store.get_messages("TopicTest", 0, 0, max_count=3)
    assert bounds(first) == (GetStatus.FOUND, 3, 0, 10)
    assert first.count == 3
    assert [m.body for m in first.messages] == [b"m0", b"m1", b"m2"]
    rest = store.get_messages("TopicTest", 0, first.next_offset)
    assert rest.next_offset == 10
    assert [m.queue_offset for m in rest.messages] == list(range(3, 10))
    with pytest.raises(ValueError):
        store.get_messages("TopicTest", 0, 0, max_count=0)


def test_one_consume_queue_file_per_get(tiny_store: MessageStore) -> None:
    put_tagged(tiny_store, [None] * 10)
    result = tiny_store.get_messages("TopicTest", 0, 1)
    assert (result.count, result.next_offset) == (3, 4)  # stops at the file end (offset 4)


def test_max_bytes_budget(store: MessageStore) -> None:
    put_tagged(store, [None] * 10)
    size = store.get_messages("TopicTest", 0, 0, max_count=1).messages[0].store_size
    two = store.get_messages("TopicTest", 0, 0, max_bytes=size * 2 + size // 2)
    assert (two.count, two.next_offset) == (2, 2)
    exact = store.get_messages("TopicTest", 0, 0, max_bytes=size * 3)
    assert exact.count == 3
    at_least_one = store.get_messages("TopicTest", 0, 4, max_bytes=1)
    assert (at_least_one.status, at_least_one.count, at_least_one.next_offset) == (
        GetStatus.FOUND,
        1,
        5,
    )
    raw = store.get_message_bytes("TopicTest", 0, 0, max_bytes=1)
    assert len(decode_all(raw.raw)) == 1


# -- tag filters -----------------------------------------------------------------------------


def test_no_matched_message_advances_past_examined_units(store: MessageStore) -> None:
    put_tagged(store, ["A", "B", None, "C"])
    result = store.get_messages("TopicTest", 0, 0, tags="Nope")
    assert bounds(result) == (GetStatus.NO_MATCHED_MESSAGE, 4, 0, 4)
    assert result.messages == []
    assert result.count == 0


def test_tag_expression_with_or(store: MessageStore) -> None:
    tags = ["A", "B", "C", None, "A", "AB", "B"]
    put_tagged(store, tags)
    result = store.get_messages("TopicTest", 0, 0, tags="A || B")
    assert result.status is GetStatus.FOUND
    assert [m.tags for m in result.messages] == ["A", "B", "A", "B"]
    assert [m.queue_offset for m in result.messages] == [0, 1, 4, 6]
    assert result.next_offset == 7
    every = store.get_messages("TopicTest", 0, 0, tags="*")
    assert every.count == len(tags)
    assert store.get_messages("TopicTest", 0, 0, tags="  C  ").count == 1


def test_filtered_get_stops_at_max_count(store: MessageStore) -> None:
    put_tagged(store, ["A", "X", "A", "X", "A", "X"])
    result = store.get_messages("TopicTest", 0, 0, tags="A", max_count=2)
    assert [m.queue_offset for m in result.messages] == [0, 2]
    assert result.next_offset == 3


def test_filtered_scan_is_bounded(store: MessageStore) -> None:
    batch = [message(body=b"x", tags="Other") for _ in range(1000)]
    assert store.put_batch(batch).ok
    put_tagged(store, ["Wanted"])
    miss = store.get_messages("TopicTest", 0, 0, tags="Wanted")
    assert (miss.status, miss.next_offset) == (GetStatus.NO_MATCHED_MESSAGE, 800)
    hit = store.get_messages("TopicTest", 0, miss.next_offset, tags="Wanted")
    assert (hit.status, hit.next_offset) == (GetStatus.FOUND, 1001)
    assert [m.queue_offset for m in hit.messages] == [1000]


@pytest.mark.parametrize("raw", [False, True])
def test_hash_collision_is_filtered_by_tag_string(store: MessageStore, raw: bool) -> None:
    put_tagged(store, ["Aa", "BB", "Aa", "BB", "BB"])
    for tag, expected in [("Aa", [0, 2]), ("BB", [1, 3, 4])]:
        if raw:
            result = store.get_message_bytes("TopicTest", 0, 0, tags=tag)
            got = decode_all(result.raw)
        else:
            result = store.get_messages("TopicTest", 0, 0, tags=tag)
            got = result.messages
        assert [m.tags for m in got] == [tag] * len(expected)
        assert [m.queue_offset for m in got] == expected
        assert result.count == len(expected)
        assert result.next_offset == 5


# -- raw reads -------------------------------------------------------------------------------


@pytest.mark.parametrize("tags", [None, "A || C"])
def test_raw_get_decodes_to_the_same_messages(tiny_store: MessageStore, tags: str | None) -> None:
    for i in range(24):
        body = bytes([i]) * (150 + 40 * i)
        assert tiny_store.put(message(body=body, tags="ABC"[i % 3])).ok
    offset = 0
    while offset < 24:
        decoded = tiny_store.get_messages("TopicTest", 0, offset, tags=tags)
        raw = tiny_store.get_message_bytes("TopicTest", 0, offset, tags=tags)
        assert raw.messages == []
        assert (raw.status, raw.next_offset, raw.count) == (
            decoded.status,
            decoded.next_offset,
            decoded.count,
        )
        assert decode_all(raw.raw) == decoded.messages
        offset = decoded.next_offset
    assert offset == 24


# -- lookups ---------------------------------------------------------------------------------


def test_store_timestamp(store: MessageStore) -> None:
    results = [store.put(message(queue_id=1)) for _ in range(3)]
    for result in results:
        assert store.store_timestamp("TopicTest", 1, result.queue_offset) == result.store_timestamp
    assert store.store_timestamp("TopicTest", 1, 3) == -1
    assert store.store_timestamp("TopicTest", 1, -1) == -1
    assert store.store_timestamp("TopicTest", 0, 0) == -1
    assert store.store_timestamp("Nope", 0, 0) == -1


def test_store_timestamp_with_ipv6_born_host(store: MessageStore) -> None:
    result = store.put(message(born_host=pack_host("::1", 1)))
    assert store.store_timestamp("TopicTest", 0, 0) == result.store_timestamp


def test_min_and_max_offsets(store: MessageStore) -> None:
    put_tagged(store, [None] * 3, queue_id=2)
    assert (store.min_offset("TopicTest", 2), store.max_offset("TopicTest", 2)) == (0, 3)
    assert (store.min_offset("TopicTest", 0), store.max_offset("TopicTest", 0)) == (0, 0)


def test_message_at_valid_offsets(tiny_store: MessageStore) -> None:
    results = [tiny_store.put(message(body=bytes(700), tags="T")) for _ in range(12)]
    for result in results:
        found = tiny_store.message_at(result.phys_offset)
        assert found.phys_offset == result.phys_offset
        assert found.tags == "T"


def test_message_at_bad_offsets_raise_record_error(tiny_store: MessageStore) -> None:
    results = [tiny_store.put(message(body=bytes(700))) for _ in range(12)]
    first = results[0].phys_offset
    size = tiny_store.message_at(first).store_size
    end = tiny_store.commitlog.max_offset
    last_in_first = max(r.phys_offset for r in results if r.phys_offset < 4096)
    blank_at = last_in_first + tiny_store.message_at(last_in_first).store_size
    for offset in [first + 1, first + size // 2, -1, -4096, end, end + 1, 10**12, blank_at]:
        with pytest.raises(RecordError):
            tiny_store.message_at(offset)


@pytest.mark.parametrize("from_end", [7, 6, 4, 1])
def test_message_at_near_a_segment_end_raises_record_error(
    tiny_store: MessageStore, from_end: int
) -> None:
    """Fewer than 8 bytes before a segment's end cannot hold a record header."""
    for _ in range(12):
        assert tiny_store.put(message(body=bytes(700))).ok
    assert tiny_store.commitlog.max_offset > 4096
    with pytest.raises(RecordError):
        tiny_store.message_at(4096 - from_end)


def test_closed_store_refuses_reads(open_store: StoreFactory) -> None:
    store = open_store()
    put_tagged(store, ["A"])
    store.close()
    with pytest.raises(StoreClosedError):
        store.get_messages("TopicTest", 0, 0)
    with pytest.raises(StoreClosedError):
        store.message_at(0)
