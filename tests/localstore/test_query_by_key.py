"""Query by key (``query_by_key``) and by id (``query_by_id``) through the index files: order,
limits, exact time ranges, hash collisions, durability, and the crash rules of RocketMQ's index
(files newer than the checkpoint's indexMsgTimestamp are dropped and rebuilt by recovery)."""

from __future__ import annotations

import shutil
import struct
import time
from pathlib import Path
from typing import Any

import pytest

from localstore import MessageStore, PutResult, StoredMessage, StoreError, UniqKeyGenerator

from .conftest import (
    REFERENCE_DIR,
    ROCKETMQ_DIR,
    TINY_GEOMETRY,
    StoreFactory,
    copy_reference_store,
    extract_rocketmq_stores,
    message,
    read_jsonl,
    reference_geometry,
)

ROCKETMQ_GEOMETRY = {
    "commitlog_file_size": 262144,
    "cq_entries_per_file": 50,
    "index_slots": 64,
    "index_entries": 256,
}
TOPIC = "TopicTest"
SMALL = {**TINY_GEOMETRY, "index_slots": 8}  # small files: copies stay cheap, everything rolls


def put(store: MessageStore, keys: str | None = None, **kwargs: Any) -> PutResult:
    result = store.put(message(keys=keys, **kwargs))
    assert result.ok, result
    return result


def offsets(found: list[StoredMessage]) -> list[int]:
    return [m.phys_offset for m in found]


def index_files(root: Path) -> list[Path]:
    directory = root / "index"
    return sorted(directory.iterdir()) if directory.is_dir() else []


def index_end_timestamp(path: Path) -> int:
    return int(struct.unpack_from(">q", path.read_bytes(), 8)[0])


def simulate_crash(root: Path, index_msg_timestamp: int) -> None:
    """Make a closed store look crashed: ``abort`` present, the checkpoint's indexMsgTimestamp
    (big-endian long at offset 16) set as given."""
    (root / "abort").write_text("1")
    with open(root / "checkpoint", "r+b") as checkpoint:
        checkpoint.seek(16)
        checkpoint.write(struct.pack(">q", index_msg_timestamp))


def put_spread(store: MessageStore, count: int) -> list[PutResult]:
    """``count`` messages keyed ``key-{i}`` (and ``all``), each in its own millisecond."""
    results = []
    for i in range(count):
        results.append(put(store, f"key-{i} all", queue_id=i % 2))
        time.sleep(0.002)
    return results


# -- results ----------------------------------------------------------------------------------


def test_newest_first_across_files(open_store: StoreFactory, store_dir: Path) -> None:
    store = open_store(index_slots=8, index_entries=4)  # 3 keys per file
    results = [put(store, f"order-1 filler-{i}") for i in range(10)]
    put(store, "order-2")
    assert len(index_files(store_dir)) >= 6
    found = store.query_by_key(TOPIC, "order-1")
    assert offsets(found) == [r.phys_offset for r in reversed(results)]
    assert all(m.topic == TOPIC and "order-1" in m.keys for m in found)
    assert offsets(store.query_by_key(TOPIC, "filler-3")) == [results[3].phys_offset]


def test_every_keys_token_and_the_uniq_key_are_queryable(store: MessageStore) -> None:
    result = put(store, "  first  second ", properties={"UNIQ_KEY": "UNIQ-1"})
    for key in ("first", "second", "UNIQ-1"):
        assert offsets(store.query_by_key(TOPIC, key)) == [result.phys_offset], key
    for key in ("", " ", "first  second", "UNIQ"):
        assert store.query_by_key(TOPIC, key) == [], key


def test_unknown_key_or_topic_finds_nothing(store: MessageStore) -> None:
    put(store, "known")
    assert store.query_by_key(TOPIC, "unknown") == []
    assert store.query_by_key("OtherTopic", "known") == []


def test_max_count_is_respected_and_capped_at_64(open_store: StoreFactory) -> None:
    store = open_store(index_slots=16, index_entries=32)
    newest_first = [put(store, "same").phys_offset for _ in range(70)][::-1]
    assert offsets(store.query_by_key(TOPIC, "same", max_count=1)) == newest_first[:1]
    assert offsets(store.query_by_key(TOPIC, "same", max_count=5)) == newest_first[:5]
    assert offsets(store.query_by_key(TOPIC, "same")) == newest_first[:64]
    assert offsets(store.query_by_key(TOPIC, "same", max_count=1000)) == newest_first[:64]


def test_max_count_zero_finds_nothing(store: MessageStore) -> None:
    """At most ``max_count``: RocketMQ's selectPhyOffset stops before the first hit for 0."""
    put(store, "k")
    assert store.query_by_key(TOPIC, "k", max_count=0) == []


def test_transaction_records(store: MessageStore) -> None:
    """ROLLBACK (0xC) records are not indexed; PREPARED (0x4) and COMMIT (0x8) ones are."""
    prepared = put(store, "tx", sys_flag=0x4)
    put(store, "tx", sys_flag=0xC, prepared_transaction_offset=prepared.phys_offset)
    commit = put(store, "tx", sys_flag=0x8, prepared_transaction_offset=prepared.phys_offset)
    plain = put(store, "tx")
    found = store.query_by_key(TOPIC, "tx")
    assert offsets(found) == [plain.phys_offset, commit.phys_offset, prepared.phys_offset]


# -- time range -------------------------------------------------------------------------------


def test_time_range_is_exact(open_store: StoreFactory) -> None:
    store = open_store(index_slots=8, index_entries=64)
    results = []
    for i in range(6):
        results.append(put(store, f"t other-{i}"))
        time.sleep(0.003)
    stamps = sorted({r.store_timestamp + d for r in results for d in (-1, 0, 1)})
    for begin in stamps:
        for end in stamps:
            want = [r.phys_offset for r in reversed(results) if begin <= r.store_timestamp <= end]
            got = store.query_by_key(TOPIC, "t", begin_ms=begin, end_ms=end)
            assert offsets(got) == want, (begin, end)
            assert all(begin <= m.store_timestamp <= end for m in got)


def test_time_range_finds_the_first_key_of_a_later_file(open_store: StoreFactory) -> None:
    """A new file's first entry has its timeDiff computed against the previous file's end (the
    header preset), so begin + timeDiff * 1000 lies after its true store time. A query whose
    range ends at that store time must still find it."""
    store = open_store(index_slots=8, index_entries=2)  # one key per file
    first = put(store, "k")
    time.sleep(1.05)
    second = put(store, "k")
    t1, t2 = first.store_timestamp, second.store_timestamp
    assert offsets(store.query_by_key(TOPIC, "k")) == [second.phys_offset, first.phys_offset]
    assert offsets(store.query_by_key(TOPIC, "k", begin_ms=t1, end_ms=t1)) == [first.phys_offset]
    assert offsets(store.query_by_key(TOPIC, "k", begin_ms=t2, end_ms=t2)) == [second.phys_offset]
    assert offsets(store.query_by_key(TOPIC, "k", begin_ms=t1, end_ms=t2)) == [
        second.phys_offset,
        first.phys_offset,
    ]


# -- hash collisions --------------------------------------------------------------------------


def test_colliding_keys_in_one_topic(store: MessageStore) -> None:
    aa = put(store, "Aa")
    bb = put(store, "BB")
    assert offsets(store.query_by_key(TOPIC, "Aa")) == [aa.phys_offset]
    assert offsets(store.query_by_key(TOPIC, "BB")) == [bb.phys_offset]


def test_colliding_keys_across_topics(store: MessageStore) -> None:
    """ "AaTopic#BB" and "BBTopic#Aa" have the same hash, -10606476."""
    from localstore.record.javahash import java_hash

    assert java_hash("AaTopic#BB") == java_hash("BBTopic#Aa") == -10606476
    in_aa = put(store, "BB", topic="AaTopic")
    in_bb = put(store, "Aa", topic="BBTopic")
    assert offsets(store.query_by_key("AaTopic", "BB")) == [in_aa.phys_offset]
    assert offsets(store.query_by_key("BBTopic", "Aa")) == [in_bb.phys_offset]
    assert store.query_by_key("AaTopic", "Aa") == []
    assert store.query_by_key("BBTopic", "BB") == []


# -- by id ------------------------------------------------------------------------------------


def test_query_by_id(store: MessageStore) -> None:
    ids = UniqKeyGenerator()
    uniq_a, uniq_b = ids.next(), ids.next()
    a = put(store, "k", properties={"UNIQ_KEY": uniq_a})
    b = put(store, "k", topic="OtherTopic", properties={"UNIQ_KEY": uniq_b})
    plain = put(store)

    [by_offset] = store.query_by_id(a.offset_msg_id)
    assert (by_offset.phys_offset, by_offset.msg_id) == (a.phys_offset, uniq_a)
    assert offsets(store.query_by_id(plain.offset_msg_id)) == [plain.phys_offset]
    assert offsets(store.query_by_id(uniq_a)) == [a.phys_offset]
    assert offsets(store.query_by_id(uniq_b)) == [b.phys_offset]
    assert store.query_by_id(ids.next()) == []
    assert store.query_by_id("no-such-id") == []


def test_query_by_id_of_a_prepared_message_after_reopen(
    open_store: StoreFactory, store_dir: Path
) -> None:
    uniq = UniqKeyGenerator().next()
    store = open_store()
    prepared = put(store, topic="HalfOnly", sys_flag=0x4, properties={"UNIQ_KEY": uniq})
    assert offsets(store.query_by_id(uniq)) == [prepared.phys_offset]
    store.close()
    assert offsets(open_store().query_by_id(uniq)) == [prepared.phys_offset]


# -- durability -------------------------------------------------------------------------------


def all_answers(store: MessageStore, count: int) -> dict[str, list[int]]:
    keys = [f"key-{i}" for i in range(count)] + ["all", "missing"]
    return {key: offsets(store.query_by_key(TOPIC, key)) for key in keys}


def test_queries_survive_reopen(open_store: StoreFactory, store_dir: Path) -> None:
    store = open_store(**SMALL, index_entries=8)
    results = put_spread(store, 12)
    before = all_answers(store, 12)
    assert before["all"] == [r.phys_offset for r in reversed(results)]
    store.close()
    store = open_store()
    assert all_answers(store, 12) == before
    later = put(store, "all")
    assert offsets(store.query_by_key(TOPIC, "all"))[:2] == [later.phys_offset, before["all"][0]]


def test_deleted_index_is_rebuilt_on_open(open_store: StoreFactory, store_dir: Path) -> None:
    store = open_store(**SMALL, index_entries=8)
    put_spread(store, 12)
    before = all_answers(store, 12)
    file_count = len(index_files(store_dir))
    store.close()
    shutil.rmtree(store_dir / "index")
    store = open_store()
    assert all_answers(store, 12) == before
    assert len(index_files(store_dir)) == file_count


def test_index_disabled_store(tmp_path: Path) -> None:
    root = tmp_path / "store"
    with MessageStore(root, index_enabled=False) as store:
        result = put(store, "k", properties={"UNIQ_KEY": "UNIQ-1"})
        assert index_files(root) == []
        with pytest.raises(StoreError):
            store.query_by_key(TOPIC, "k")
        assert offsets(store.query_by_id(result.offset_msg_id)) == [result.phys_offset]
        # a UNIQ_KEY needs the index: refused, not answered "none" as if it had been looked up
        with pytest.raises(StoreError, match="without an index"):
            store.query_by_id("UNIQ-1")
    with MessageStore(root) as store, pytest.raises(StoreError):  # recorded: still disabled
        store.query_by_key(TOPIC, "k")
    assert index_files(root) == []


# -- crash: index files newer than the checkpoint -----------------------------------------------


def test_store_copied_while_open_recovers_its_index(
    open_store: StoreFactory, store_dir: Path, tmp_path: Path
) -> None:
    store = open_store(**SMALL, index_entries=8)
    put_spread(store, 20)
    before = all_answers(store, 20)
    crashed_copy = tmp_path / "crashed"
    shutil.copytree(store_dir, crashed_copy)  # as the files were at the moment of a crash
    assert (crashed_copy / "abort").exists()
    store.close()
    reopened = open_store(crashed_copy)
    assert reopened.crashed_last_time
    assert all_answers(reopened, 20) == before


def test_crash_drops_index_files_newer_than_the_checkpoint(
    open_store: StoreFactory, store_dir: Path
) -> None:
    """Files whose endTimestamp is above the checkpoint's indexMsgTimestamp are destroyed on open
    and rebuilt by recovery; older files are kept as they are. A marker in each file's entry 0
    (never used) tells a kept file from a rebuilt one."""
    slots = SMALL["index_slots"]
    store = open_store(**SMALL, index_entries=4)  # 3 keys per file
    for i in range(8):
        put(store, f"key-{i}")
        time.sleep(0.002)
    before = all_answers(store, 8)
    store.close()

    files = index_files(store_dir)
    assert len(files) == 3
    checkpoint_time = index_end_timestamp(files[0])
    marker = b"\xab" * 20
    entry_zero = 40 + 4 * slots
    for path in files:
        data = bytearray(path.read_bytes())
        data[entry_zero : entry_zero + 20] = marker
        path.write_bytes(bytes(data))
    assert [index_end_timestamp(p) > checkpoint_time for p in files] == [False, True, True]
    simulate_crash(store_dir, checkpoint_time)

    store = open_store()
    assert store.crashed_last_time
    assert all_answers(store, 8) == before
    assert len(index_files(store_dir)) == 3
    kept = files[0].read_bytes()
    assert kept[entry_zero : entry_zero + 20] == marker
    for path in files[1:]:
        assert not path.exists() or path.read_bytes()[entry_zero : entry_zero + 20] == bytes(20)


def test_crash_with_a_zero_checkpoint_rebuilds_every_index_file(
    open_store: StoreFactory, store_dir: Path
) -> None:
    store = open_store(**SMALL, index_entries=4)
    put_spread(store, 10)
    before = all_answers(store, 10)
    store.close()
    files = index_files(store_dir)
    for path in files:  # garbage in every slot: only a rebuilt file answers correctly
        data = bytearray(path.read_bytes())
        data[40 : 40 + 4 * 8] = b"\x00\x00\x00\x01" * 8
        path.write_bytes(bytes(data))
    simulate_crash(store_dir, 0)
    store = open_store()
    assert all_answers(store, 10) == before
    assert len(index_files(store_dir)) == len(files)


def test_crash_keeps_keys_of_a_message_split_across_files(
    open_store: StoreFactory, store_dir: Path
) -> None:
    """A message whose keys straddle two files: the older file is kept (its end is the
    checkpoint's indexMsgTimestamp), the newer one dropped. RocketMQ re-indexes the message at
    the kept file's endPhyOffset (section 0 item 9), so none of its keys is lost."""
    store = open_store(**SMALL, index_entries=3)  # 2 keys per file
    a = put(store, "a1")
    time.sleep(0.002)
    b = put(store, "b1 b2")  # b1 fills file 1, b2 starts file 2
    time.sleep(0.002)
    c = put(store, "c1")
    store.close()
    first, second = index_files(store_dir)
    assert index_end_timestamp(first) == b.store_timestamp < index_end_timestamp(second)
    simulate_crash(store_dir, b.store_timestamp)

    store = open_store()
    assert store.crashed_last_time
    for key, result in (("a1", a), ("b1", b), ("b2", b), ("c1", c)):
        assert offsets(store.query_by_key(TOPIC, key)) == [result.phys_offset], key


# -- stores written by others -------------------------------------------------------------------


def rocketmq_queries(dump_name: str) -> list[dict[str, Any]]:
    [line] = [d for d in read_jsonl(ROCKETMQ_DIR / dump_name) if d["type"] == "queries"]
    return list(line["results"])


@pytest.mark.parametrize(
    ("store_name", "dump_name"),
    [
        ("store", "store.jsonl.gz"),
        ("crashed-store", "crashed-store.recovered.jsonl.gz"),
    ],
)
def test_rocketmq_query_results(
    open_store: StoreFactory, tmp_path: Path, store_name: str, dump_name: str
) -> None:
    """RocketMQ 4.9.8's own key queries (ascending commitLogOffsets); Quiver answers newest
    first. The crashed store has index files newer than its checkpoint: dropped and rebuilt."""
    root = extract_rocketmq_stores(tmp_path / "rocketmq") / store_name
    store = open_store(root, **ROCKETMQ_GEOMETRY)
    queries = rocketmq_queries(dump_name)
    assert len(queries) == 7
    for query in queries:
        found = store.query_by_key(query["topic"], query["key"])
        assert sorted(offsets(found)) == query["commitLogOffsets"], query["key"]
        assert offsets(found) == sorted(offsets(found), reverse=True)


def test_reference_store_keys_are_all_found(open_store: StoreFactory, tmp_path: Path) -> None:
    root = copy_reference_store(tmp_path)
    store = open_store(root, **reference_geometry())
    checked = 0
    for record in read_jsonl(REFERENCE_DIR / "expected-dump.jsonl"):
        props = record["properties"]
        keys = [k for k in props.get("KEYS", "").split(" ") if k]
        if props.get("UNIQ_KEY"):
            keys.append(props["UNIQ_KEY"])
        for key in keys:
            found = store.query_by_key(record["topic"], key)
            assert record["physicalOffset"] in offsets(found), (record["topic"], key)
            checked += 1
    assert checked > 100
