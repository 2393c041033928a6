"""Stores localstore did not write: RocketMQ 4.9.8's own, and an independent reference encoder's.
Every message must read back exactly as the dumps say; geometry is inferred or given."""

from __future__ import annotations

import base64
import struct
import zlib
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest

from localstore import MessageStore, StoredMessage
from localstore.record.javahash import java_hash

from .conftest import (
    REFERENCE_DIR,
    ROCKETMQ_DIR,
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
DELAY_LEVELS_MS = [
    1000, 5000, 10_000, 30_000, 60_000, 120_000, 180_000, 240_000, 300_000, 360_000, 420_000,
    480_000, 540_000, 600_000, 1_200_000, 1_800_000, 3_600_000, 7_200_000,
]  # fmt: skip


@pytest.fixture(scope="module")
def rocketmq_dump() -> list[dict[str, Any]]:
    return read_jsonl(ROCKETMQ_DIR / "store.jsonl.gz")


@pytest.fixture
def rocketmq_store_dir(tmp_path: Path) -> Path:
    return extract_rocketmq_stores(tmp_path / "rocketmq") / "store"


def read_queue(store: MessageStore, topic: str, queue_id: int) -> list[StoredMessage]:
    messages: list[StoredMessage] = []
    offset = store.min_offset(topic, queue_id)
    while offset < store.max_offset(topic, queue_id):
        result = store.get_messages(topic, queue_id, offset)
        assert result.found, (topic, queue_id, offset, result.status)
        messages.extend(result.messages)
        offset = result.next_offset
    return messages


def cq_unit(store: MessageStore, topic: str, queue_id: int, offset: int) -> tuple[int, int, int]:
    queue = store.consume_queue(topic, queue_id)
    assert queue is not None
    return struct.unpack(">qiq", bytes(queue.read_units(offset, 1)))


# -- RocketMQ 4.9.8 --------------------------------------------------------------------------


def assert_matches_rocketmq(store: MessageStore, got: StoredMessage, want: dict[str, Any]) -> None:
    where = f"{want['topic']}/{want['queueId']}@{want['queueOffset']}"
    body = base64.b64decode(want["body"])
    actual = {
        "topic": got.topic,
        "queueId": got.queue_id,
        "queueOffset": got.queue_offset,
        "commitLogOffset": got.phys_offset,
        "storeSize": got.store_size,
        "sysFlag": got.sys_flag,
        "flag": got.flag,
        "bodyCRC": got.body_crc,
        "reconsumeTimes": got.reconsume_times,
        "preparedTransactionOffset": got.prepared_transaction_offset,
        "tags": got.tags,
        "keys": got.properties.get("KEYS"),
        "uniqKey": got.msg_id,
        "msgId": got.offset_msg_id,
        "bornTimestamp": got.born_timestamp,
        "storeTimestamp": got.store_timestamp,
        "bornHost": got.born_host,
        "storeHost": got.store_host,
        "properties": got.properties,
    }
    expected = {key: want[key] for key in actual}
    assert actual == expected, where
    assert got.body == body, where
    assert zlib.crc32(body) & 0x7FFFFFFF == want["bodyCRC"], where
    unit = cq_unit(store, got.topic, got.queue_id, got.queue_offset)
    assert unit == (want["cqCommitLogOffset"], want["cqSize"], want["cqTagsCode"]), where


def test_rocketmq_store_geometry_is_inferred(
    open_store: StoreFactory, rocketmq_store_dir: Path
) -> None:
    assert not (rocketmq_store_dir / "config" / "store.json").exists()
    store = open_store(rocketmq_store_dir)
    geometry = store.geometry
    assert {key: getattr(geometry, key) for key in ROCKETMQ_GEOMETRY} == ROCKETMQ_GEOMETRY
    assert not store.crashed_last_time
    assert (rocketmq_store_dir / "config" / "store.json").exists()


def test_rocketmq_store_reads_back_every_message(
    open_store: StoreFactory, rocketmq_store_dir: Path, rocketmq_dump: list[dict[str, Any]]
) -> None:
    store = open_store(rocketmq_store_dir)
    by_queue: dict[tuple[str, int], list[dict[str, Any]]] = defaultdict(list)
    for line in rocketmq_dump:
        if line["type"] == "msg":
            by_queue[(line["topic"], line["queueId"])].append(line)
    queue_lines = [line for line in rocketmq_dump if line["type"] == "queue"]
    assert sum(len(v) for v in by_queue.values()) == 1002

    for line in queue_lines:
        key = (line["topic"], line["queueId"])
        assert store.min_offset(*key) == line["minOffset"], key
        assert store.max_offset(*key) == line["maxOffset"], key
    non_empty = {(q["topic"], q["queueId"]) for q in queue_lines if q["maxOffset"] > 0}
    assert set(store.queues.queues) == non_empty == set(by_queue)

    compared = 0
    for key, expected in by_queue.items():
        expected.sort(key=lambda line: line["queueOffset"])
        got = read_queue(store, *key)
        assert len(got) == len(expected), key
        for message_got, want in zip(got, expected, strict=True):
            assert_matches_rocketmq(store, message_got, want)
            assert store.message_at(want["commitLogOffset"]) == message_got
            compared += 1
    assert compared == 1002

    summary = next(line for line in rocketmq_dump if line["type"] == "summary")
    assert store.commitlog.min_offset == summary["minPhyOffset"]
    assert store.commitlog.max_offset == summary["maxPhyOffset"]


def test_rocketmq_crashed_store_recovers_to_what_rocketmq_recovers(
    open_store: StoreFactory, tmp_path: Path
) -> None:
    """crashed-store/: abort marker, an all-zero preallocated segment, a stale checkpoint.
    Recovery must give exactly RocketMQ's own recovered read-back."""
    root = extract_rocketmq_stores(tmp_path / "rocketmq") / "crashed-store"
    expected = read_jsonl(ROCKETMQ_DIR / "crashed-store.recovered.jsonl.gz")
    segments_before = sorted(p.name for p in (root / "commitlog").iterdir())
    store = open_store(root, **ROCKETMQ_GEOMETRY)
    assert store.crashed_last_time and store.recovery.abnormal
    summary = next(line for line in expected if line["type"] == "summary")
    assert store.commitlog.min_offset == summary["minPhyOffset"]
    assert store.commitlog.max_offset == summary["maxPhyOffset"]
    segments_after = sorted(p.name for p in (root / "commitlog").iterdir())
    assert segments_after == segments_before[:-1]  # the all-zero preallocated one is gone
    for line in expected:
        if line["type"] == "queue":
            key = (line["topic"], line["queueId"])
            assert (store.min_offset(*key), store.max_offset(*key)) == (
                line["minOffset"],
                line["maxOffset"],
            ), key
    messages = [line for line in expected if line["type"] == "msg"]
    assert len(messages) == summary["messages"] == 601
    for want in messages:
        got = store.get_messages(want["topic"], want["queueId"], want["queueOffset"], max_count=1)
        assert got.found, want["queueOffset"]
        assert_matches_rocketmq(store, got.messages[0], want)
    store.close()
    reopened = open_store(root)  # and the recovered store opens cleanly afterwards
    assert not reopened.recovery.abnormal
    assert reopened.commitlog.max_offset == summary["maxPhyOffset"]


def test_rocketmq_store_accepts_new_puts(
    open_store: StoreFactory, rocketmq_store_dir: Path
) -> None:
    store = open_store(rocketmq_store_dir)
    end = store.commitlog.max_offset
    result = store.put(message(queue_id=0, tags="TagA"))
    assert result.ok
    assert result.queue_offset == 84
    assert result.phys_offset >= end
    assert store.get_messages("TopicTest", 0, 84).messages[0].phys_offset == result.phys_offset
    store.close()
    reopened = open_store(rocketmq_store_dir)
    assert reopened.geometry.commitlog_file_size == 262144
    assert reopened.max_offset("TopicTest", 0) == 85


# -- the reference encoder -------------------------------------------------------------------


@pytest.fixture(scope="module")
def reference_dump() -> list[dict[str, Any]]:
    return read_jsonl(REFERENCE_DIR / "expected-dump.jsonl")


def expected_tag_code(record: dict[str, Any]) -> int:
    properties = record["properties"]
    if record["topic"] == "SCHEDULE_TOPIC_XXXX":
        level = min(int(properties["DELAY"]), len(DELAY_LEVELS_MS))
        return record["storeTimestamp"] + DELAY_LEVELS_MS[level - 1]
    tags = properties.get("TAGS")
    return java_hash(tags) if tags else 0


def test_reference_store_reads_back_every_record(
    open_store: StoreFactory, tmp_path: Path, reference_dump: list[dict[str, Any]]
) -> None:
    geometry = reference_geometry()
    store = open_store(copy_reference_store(tmp_path), **geometry)
    assert {key: getattr(store.geometry, key) for key in geometry} == geometry
    assert len(reference_dump) == 129

    by_queue: dict[tuple[str, int], list[dict[str, Any]]] = defaultdict(list)
    for want in reference_dump:
        got = store.message_at(want["physicalOffset"])
        actual = {
            "topic": got.topic,
            "queueId": got.queue_id,
            "queueOffset": got.queue_offset,
            "physicalOffset": got.phys_offset,
            "storeSize": got.store_size,
            "sysflag": got.sys_flag,
            "flag": got.flag,
            "bornTimestamp": got.born_timestamp,
            "storeTimestamp": got.store_timestamp,
            "reconsumeTimes": got.reconsume_times,
            "msgId": got.offset_msg_id,
            "properties": got.properties,
            "body": base64.b64encode(got.body).decode(),
        }
        assert actual == want, want["physicalOffset"]
        if want["sysflag"] & 0xC not in (0x4, 0xC):
            by_queue[(want["topic"], want["queueId"])].append(want)

    assert set(store.queues.queues) == set(by_queue)
    for key, records in by_queue.items():
        records.sort(key=lambda record: record["queueOffset"])
        assert store.max_offset(*key) == len(records), key
        got = read_queue(store, *key)
        assert [m.phys_offset for m in got] == [r["physicalOffset"] for r in records], key
        for record in records:
            unit = cq_unit(store, *key, record["queueOffset"])
            assert unit == (
                record["physicalOffset"],
                record["storeSize"],
                expected_tag_code(record),
            )


def test_reference_store_shapes(
    open_store: StoreFactory, tmp_path: Path, reference_dump: list[dict[str, Any]]
) -> None:
    """The records the RocketMQ samples lack are really there: v2 topics, IPv6 born hosts,
    a compressed body, transaction commits, segment rolls."""
    store = open_store(copy_reference_store(tmp_path), **reference_geometry())
    records = [store.message_at(r["physicalOffset"]) for r in reference_dump]
    assert any(len(m.topic) > 127 for m in records)
    assert any(m.sys_flag & 0x10 and m.born_host.count(":") == 8 for m in records)
    assert any(m.sys_flag & 0x1 for m in records)
    assert any(m.sys_flag & 0xC == 0x8 for m in records)
    assert len({m.phys_offset // 8192 for m in records}) == 5


# -- a Quiver store that lost its geometry record --------------------------------------------


def test_quiver_store_without_geometry_record(open_store: StoreFactory, store_dir: Path) -> None:
    store = open_store(commitlog_file_size=8192, cq_entries_per_file=16)
    for i in range(80):
        assert store.put(message(body=bytes([i]) * (i * 7 + 1), queue_id=i % 4, tags="T")).ok
    before = {q: read_queue(store, "TopicTest", q) for q in range(4)}
    store.close()
    (store_dir / "config" / "store.json").unlink()

    reopened = open_store()
    assert reopened.geometry.commitlog_file_size == 8192
    assert reopened.geometry.cq_entries_per_file == 16
    assert {q: read_queue(reopened, "TopicTest", q) for q in range(4)} == before
    assert (store_dir / "config" / "store.json").exists()
