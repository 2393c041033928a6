"""The put path: statuses, queue offsets, topics, message ids and the files a put leaves."""

from __future__ import annotations

import itertools
import json
import struct
from pathlib import Path

import pytest

from localstore import MessageStore, NewMessage, PutStatus, pack_host
from localstore.commitlog.flush import DurableWait
from localstore.record.codec import BLANK_MAGIC
from localstore.record.javahash import java_hash
from localstore.record.validation import SYSTEM_TOPICS

from .conftest import TINY_GEOMETRY, StoreFactory, message

ILLEGAL = PutStatus.MESSAGE_ILLEGAL


def segment_files(directory: Path) -> list[Path]:
    return sorted(directory.iterdir())


# -- statuses --------------------------------------------------------------------------------


def test_put_ok_assigns_offsets_and_reads_back(store: MessageStore) -> None:
    first = store.put(message(tags="TagA", keys="k1 k2"))
    second = store.put(message(body=b"world"))
    assert first.status is PutStatus.PUT_OK and first.ok
    assert (first.queue_offset, first.phys_offset) == (0, 0)
    assert second.queue_offset == 1
    assert second.phys_offset == store.message_at(0).store_size
    got = store.get_messages("TopicTest", 0, 0)
    assert [m.body for m in got.messages] == [b"hello", b"world"]
    assert got.messages[0].tags == "TagA"
    assert got.messages[0].keys == ["k1", "k2"]
    assert got.messages[0].store_timestamp == first.store_timestamp


@pytest.mark.parametrize(
    ("topic", "detail"),
    [
        ("", "The specified topic is blank"),
        ("   ", "The specified topic is blank"),
        ("has space", "The specified topic[has space] contains illegal characters"),
        ("slash/topic", "The specified topic[slash/topic] contains illegal characters"),
        ("dot.topic", "The specified topic[dot.topic] contains illegal characters"),
        ("tópico", "The specified topic[tópico] contains illegal characters"),
        pytest.param(
            "Topic\n",
            "The specified topic[Topic\n] contains illegal characters",
            id="trailing-newline",
        ),
        ("T" * 128, "The specified topic is longer than topic max length"),
        # A dead-letter topic may be 255 characters, as a retry topic (RocketMQ's rule).
        ("%DLQ%" + "g" * 251, "The specified topic is longer than topic max length"),
        ("%RETRY%" + "g" * 249, "The specified topic is longer than topic max length"),
    ],
)
def test_illegal_topics_are_rejected(store: MessageStore, topic: str, detail: str) -> None:
    result = store.put(message(topic))
    assert result.status is ILLEGAL
    assert result.detail.startswith(detail)
    assert store.consume_queue(topic, 0) is None
    assert store.commitlog.max_offset == 0


@pytest.mark.parametrize(
    "topic", ["T" * 127, "%RETRY%" + "g" * 248, "%DLQ%" + "g" * 250, "a|b%c_d-E9"]
)
def test_longest_legal_topics(store: MessageStore, topic: str) -> None:
    result = store.put(message(topic))
    assert result.ok, result.detail
    assert store.message_at(result.phys_offset).topic == topic


@pytest.mark.parametrize("topic", [*sorted(SYSTEM_TOPICS), "rmq_sys_custom"])
def test_system_topics_need_system_flag(store: MessageStore, topic: str) -> None:
    rejected = store.put(message(topic))
    assert rejected.status is ILLEGAL
    assert "forbidden" in rejected.detail or "conflict with system topic" in rejected.detail
    accepted = store.put(message(topic), system=True)
    assert accepted.ok, accepted.detail
    assert store.put(message(topic)).status is ILLEGAL  # the system put did not open it up


def test_empty_body_is_illegal(store: MessageStore) -> None:
    assert store.put(message(body=b"")).status is ILLEGAL


def test_body_size_limit(open_store: StoreFactory) -> None:
    store = open_store(max_message_size=1024)
    assert store.put(message(body=bytes(1024))).ok
    too_big = store.put(message(body=bytes(1025)))
    assert too_big.status is ILLEGAL
    assert "1025" in too_big.detail


def test_record_larger_than_a_segment_is_illegal(tiny_store: MessageStore) -> None:
    largest = 4096 - 8 - 91 - len("TopicTest")  # record + 8 fills a whole segment
    assert tiny_store.put(message(body=bytes(largest))).ok
    assert tiny_store.put(message(body=bytes(largest + 1))).status is ILLEGAL


def test_batch_rules(store: MessageStore) -> None:
    assert store.put_batch([]).status is ILLEGAL
    mixed_queues = [message(queue_id=0), message(queue_id=1)]
    assert store.put_batch(mixed_queues).status is ILLEGAL
    mixed_topics = [message("A"), message("B")]
    assert store.put_batch(mixed_topics).status is ILLEGAL
    one_empty = [message(), message(body=b""), message()]
    assert store.put_batch(one_empty).status is ILLEGAL
    assert store.commitlog.max_offset == 0  # all or nothing
    assert store.max_offset("TopicTest", 0) == 0


@pytest.mark.parametrize("queue_id", [4, 5, 1000, -1])
def test_queue_id_out_of_range(store: MessageStore, queue_id: int) -> None:
    result = store.put(message(queue_id=queue_id))
    assert result.status is ILLEGAL
    assert store.consume_queue("TopicTest", queue_id) is None


def test_queue_ids_inside_the_default_count(store: MessageStore) -> None:
    for queue_id in range(4):
        assert store.put(message(queue_id=queue_id)).ok
    assert store.queue_ids("TopicTest") == [0, 1, 2, 3]


def test_system_put_may_extend_queues(store: MessageStore) -> None:
    result = store.put(message("SCHEDULE_TOPIC_XXXX", queue_id=17), system=True)
    assert result.ok
    assert store.topics.get("SCHEDULE_TOPIC_XXXX").write_queue_nums == 18


@pytest.mark.parametrize(
    ("value", "ok"),
    [("v" * 32764, True), ("v" * 32765, False), ("é" * 16382, True), ("é" * 16383, False)],
)
def test_properties_size_limit(open_store: StoreFactory, value: str, ok: bool) -> None:
    """``K\\x01{value}\\x02``: at most 32767 UTF-8 bytes."""
    store = open_store(commitlog_file_size=65536)
    result = store.put(message(properties={"K": value}))
    if ok:
        assert result.ok, result.detail
        assert store.message_at(result.phys_offset).properties == {"K": value}
    else:
        assert result.status is PutStatus.PROPERTIES_SIZE_EXCEEDED
        assert store.max_offset("TopicTest", 0) == 0


def test_rejected_messages_consume_no_queue_offset(store: MessageStore) -> None:
    assert store.put(message()).queue_offset == 0
    assert store.put(message(body=b"")).status is ILLEGAL
    too_many_props = message(properties={"K": "v" * 40000})
    assert store.put(too_many_props).status is PutStatus.PROPERTIES_SIZE_EXCEEDED
    assert store.put_batch([message(), message(body=b"")]).status is ILLEGAL
    after = store.put(message(body=b"next"))
    assert after.queue_offset == 1
    assert store.max_offset("TopicTest", 0) == 2
    assert [m.queue_offset for m in store.get_messages("TopicTest", 0, 0).messages] == [0, 1]


def test_queue_offsets_are_per_topic_queue(store: MessageStore) -> None:
    puts = [("A", 0), ("A", 1), ("B", 0), ("A", 0), ("B", 0), ("A", 1), ("A", 0)]
    offsets = [store.put(message(t, queue_id=q)).queue_offset for t, q in puts]
    assert offsets == [0, 0, 0, 1, 1, 1, 2]
    assert store.max_offset("A", 0) == 3
    assert store.max_offset("A", 1) == 2
    assert store.max_offset("B", 0) == 2


def test_topics_are_created_in_rocketmq_shape(store: MessageStore, store_dir: Path) -> None:
    store.put(message("Orders"))
    store.put(message("Payments", queue_id=3))
    data = json.loads((store_dir / "config" / "topics.json").read_text())
    assert set(data["dataVersion"]) >= {"counter", "timestamp"}
    table = data["topicConfigTable"]
    assert set(table) == {"Orders", "Payments"}
    for name, config in table.items():
        assert config["topicName"] == name
        assert config["readQueueNums"] == config["writeQueueNums"] == 4
        assert config["perm"] == 6


# -- message ids -----------------------------------------------------------------------------


def test_offset_msg_id(tiny_store: MessageStore) -> None:
    results = [tiny_store.put(message(body=bytes(300))) for _ in range(30)]
    for result in results:
        msg_id = result.offset_msg_id
        assert len(msg_id) == 32
        assert msg_id == "7F00000100002A9F" + f"{result.phys_offset:016X}"
        found = tiny_store.message_by_offset_msg_id(msg_id)
        assert found.phys_offset == result.phys_offset
        assert found.offset_msg_id == msg_id
    batch = tiny_store.put_batch([message(body=bytes([i])) for i in range(5)])
    assert batch.offset_msg_ids == [f"7F00000100002A9F{p:016X}" for p in batch.phys_offsets]


# -- files -----------------------------------------------------------------------------------


def test_commitlog_segments_roll_with_blank_records(
    tiny_store: MessageStore, store_dir: Path
) -> None:
    size = TINY_GEOMETRY["commitlog_file_size"]
    bodies = [bytes([i]) * (100 + 37 * (i % 20)) for i in range(40)]
    offsets = []
    for body in bodies:
        result = tiny_store.put(message(body=body))
        assert result.ok
        offsets.append(result.phys_offset)
    files = segment_files(store_dir / "commitlog")
    assert len(files) >= 4
    for index, path in enumerate(files):
        assert path.name == f"{index * size:020d}"
        assert path.stat().st_size == size
    log = b"".join(path.read_bytes() for path in files)

    rolls = 0
    for current, following in itertools.pairwise(offsets):
        record_size = struct.unpack_from(">i", log, current)[0]
        end = current + record_size
        segment_end = end - end % size + size
        assert end + 8 <= segment_end
        if following == end:
            continue
        rolls += 1
        next_size = struct.unpack_from(">i", log, following)[0]
        assert following == segment_end  # starts the next segment
        assert struct.unpack_from(">ii", log, end) == (segment_end - end, BLANK_MAGIC)
        assert next_size + 8 > segment_end - end  # it did not fit
        assert log[end + 8 : segment_end] == bytes(segment_end - end - 8)
    assert rolls == len(files) - 1


def test_consume_queue_files_roll(tiny_store: MessageStore, store_dir: Path) -> None:
    results = [tiny_store.put(message(body=bytes(50), tags=f"T{i}")) for i in range(10)]
    queue_dir = store_dir / "consumequeue" / "TopicTest" / "0"
    files = segment_files(queue_dir)
    assert [f.name for f in files] == [f"{n:020d}" for n in (0, 80, 160)]
    assert all(f.stat().st_size == 80 for f in files)
    units = b"".join(f.read_bytes() for f in files)
    for i, result in enumerate(results):
        phys, size, code = struct.unpack_from(">qiq", units, i * 20)
        assert phys == result.phys_offset
        assert size == tiny_store.message_at(phys).store_size
        assert code == java_hash(f"T{i}")
    assert units[200:] == bytes(40)


def test_append_batches_stores_each_batch_or_none_with_one_waiter(open_store: StoreFactory) -> None:
    store = open_store(flush_mode="sync")
    batches = [
        ([message(body=b"q0-a", queue_id=0), message(body=b"q0-b", queue_id=0)], False),
        ([message(body=b"ok", queue_id=1), message(body=b"", queue_id=1)], False),  # empty body
        ([message(body=b"q2", queue_id=2)], False),
        ([message(topic="SCHEDULE_TOPIC_XXXX", body=b"x")], False),  # a system topic
    ]
    results, waiter = store.append_batches(batches)
    assert [r.status for r in results] == [PutStatus.PUT_OK, ILLEGAL, PutStatus.PUT_OK, ILLEGAL]
    assert results[0].queue_offset == 0 and len(results[0].phys_offsets) == 2
    assert results[2].queue_id == 2 and results[2].queue_offset == 0
    assert results[2].phys_offsets[0] > results[0].phys_offsets[1]  # in order, one after another
    assert isinstance(waiter, DurableWait)  # one waiter covers every stored batch
    assert waiter.end_offset == store.commitlog.max_offset
    assert waiter.wait(5)
    assert store.max_offset("TopicTest", 1) == 0  # the refused batch stored nothing
    got = [store.get_messages("TopicTest", q, 0).messages for q in (0, 2)]
    assert [[m.body for m in messages] for messages in got] == [[b"q0-a", b"q0-b"], [b"q2"]]


def test_append_batches_with_nothing_stored_has_no_waiter(open_store: StoreFactory) -> None:
    store = open_store(flush_mode="sync")
    results, waiter = store.append_batches([([message(body=b"")], False)])
    assert [r.status for r in results] == [ILLEGAL] and waiter is None


def test_a_batch_refused_for_want_of_a_disk_fails_alone(
    open_store: StoreFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = open_store(flush_mode="sync")
    store.put(message(queue_id=0))

    def no_room(*args: object, **kwargs: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(store.topics, "create", no_room)  # a new topic's config cannot be saved
    batches = [
        ([message(body=b"before")], False),
        ([message(topic="NewTopic", body=b"new")], False),
        ([message(body=b"after")], False),
    ]
    results, waiter = store.append_batches(batches)
    refused = PutStatus.CREATE_MAPPED_FILE_FAILED
    assert [r.status for r in results] == [PutStatus.PUT_OK, refused, PutStatus.PUT_OK]
    assert results[1].detail == (
        "cannot create topic-queue NewTopic/0: [Errno 28] No space left on device"
    )
    assert isinstance(waiter, DurableWait) and waiter.end_offset == store.commitlog.max_offset
    assert waiter.wait(5)
    got = store.get_messages("TopicTest", 0, 0)
    assert [m.body for m in got.messages] == [b"hello", b"before", b"after"]
    result, _ = store.append([message(topic="NewTopic")])  # a status, never a raw OSError
    assert result.status is refused


def test_batch_put_is_consecutive(tiny_store: MessageStore) -> None:
    tiny_store.put(message(queue_id=2))
    batch = [message(body=bytes([i]) * 200, queue_id=2, tags="B") for i in range(30)]
    result = tiny_store.put_batch(batch)
    assert result.ok
    assert result.queue_offset == 1
    assert len(result.phys_offsets) == 30
    assert len({p // 4096 for p in result.phys_offsets}) > 1  # the batch crossed segments
    got = []
    offset = 1
    while offset < tiny_store.max_offset("TopicTest", 2):
        page = tiny_store.get_messages("TopicTest", 2, offset)
        got.extend(page.messages)
        offset = page.next_offset
    assert [m.queue_offset for m in got] == list(range(1, 31))
    assert [m.phys_offset for m in got] == result.phys_offsets
    assert [m.body for m in got] == [m.body for m in batch]


@pytest.mark.parametrize("tran_type", [0x4, 0xC])
def test_prepared_and_rollback_records_skip_the_queue(store: MessageStore, tran_type: int) -> None:
    store.put(message())
    half = store.put(message(body=b"half", sys_flag=tran_type))
    assert half.ok
    stored = store.message_at(half.phys_offset)
    assert stored.queue_offset == 0
    assert stored.sys_flag & 0xC == tran_type
    assert store.max_offset("TopicTest", 0) == 1  # no consume-queue unit
    after = store.put(message(body=b"after"))
    assert after.queue_offset == 1
    assert [m.body for m in store.get_messages("TopicTest", 0, 0).messages] == [b"hello", b"after"]


def test_prepared_put_result_reports_queue_offset_zero(store: MessageStore) -> None:
    """RocketMQ's AppendMessageResult carries queue offset 0 for PREPARED/ROLLBACK records, as
    the record itself does; offset 1 here is the next normal message's, not this one's."""
    store.put(message())
    half = store.put(message(body=b"half", sys_flag=0x4))
    assert half.queue_offset == store.message_at(half.phys_offset).queue_offset == 0


def test_commit_records_enter_the_queue(store: MessageStore) -> None:
    committed = store.put(message(body=b"commit", sys_flag=0x8, prepared_transaction_offset=77))
    assert committed.queue_offset == 0
    got = store.get_messages("TopicTest", 0, 0).messages
    assert [m.prepared_transaction_offset for m in got] == [77]


def test_schedule_topic_tag_code_is_delivery_time(store: MessageStore) -> None:
    msg = message("SCHEDULE_TOPIC_XXXX", queue_id=2, properties={"DELAY": "3"})
    result = store.put(msg, system=True)
    assert result.ok
    queue = store.consume_queue("SCHEDULE_TOPIC_XXXX", 2)
    unit = bytes(queue.read_units(0, 1))
    assert struct.unpack(">qiq", unit)[2] == result.store_timestamp + 10_000  # level 3 = 10s


def test_born_host_and_fields_are_stored(store: MessageStore) -> None:
    msg = NewMessage(
        "TopicTest",
        b"x",
        queue_id=1,
        properties={"a": "ü"},
        flag=-5,
        born_timestamp=1_700_000_000_123,
        born_host=pack_host("::1", 40001),
        reconsume_times=3,
    )
    result = store.put(msg)
    stored = store.message_at(result.phys_offset)
    assert stored.born_host == "0:0:0:0:0:0:0:1:40001"
    assert stored.store_host == "127.0.0.1:10911"
    assert stored.sys_flag == 0x10
    assert (stored.flag, stored.reconsume_times) == (-5, 3)
    assert stored.born_timestamp == 1_700_000_000_123
    assert stored.properties == {"a": "ü"}
