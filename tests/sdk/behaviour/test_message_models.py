"""Clustering (the group shares the queues) and broadcasting (every member gets everything)."""

from __future__ import annotations

import collections
import json
import socket
from pathlib import Path

from localstore.record.tags import SCHEDULE_TOPIC
from sdk import ConsumeResult, Message, MessageModel, Producer
from sdk.message import ReceivedMessage, dlq_topic, retry_topic

from .conftest import ConsumerFactory, Harness, Recorder, assignment, wait_until

TOPIC = "prices"


def test_clustering_members_split_the_queues_and_share_the_messages_once(
    harness: Harness, producer: Producer, start_consumer: ConsumerFactory
) -> None:
    group = "pricers"
    first, second = Recorder(), Recorder()
    one = start_consumer(group, {TOPIC: None}, first.listener)
    two = start_consumer(group, {TOPIC: None}, second.listener)
    every_queue = {(TOPIC, q) for q in range(harness.service.queue_count(TOPIC))}
    every_queue.add((retry_topic(group), 0))

    def split() -> bool:
        mine = {(q.topic, q.queue_id) for q in assignment(one)}
        theirs = {(q.topic, q.queue_id) for q in assignment(two)}
        return bool(mine) and bool(theirs) and not mine & theirs and mine | theirs == every_queue

    wait_until(split)
    view = harness.service.group_view(group)
    assert sorted(view.members) == sorted([one.client_id, two.client_id])

    receipts = [producer.send(Message(TOPIC, f"tick {i}".encode())) for i in range(100)]
    wait_until(lambda: first.count() + second.count() >= 100)
    counts = collections.Counter(m.msg_id for m in first.messages() + second.messages())
    assert set(counts) == {r.msg_id for r in receipts}
    assert set(counts.values()) == {1}
    assert first.count() > 0 and second.count() > 0
    for recorder, consumer in ((first, one), (second, two)):
        owned = {(q.topic, q.queue_id) for q in assignment(consumer)}
        assert {(TOPIC, m.queue_id) for m in recorder.messages()} <= owned


def test_clustering_member_leaving_hands_its_queues_over(
    harness: Harness, producer: Producer, start_consumer: ConsumerFactory
) -> None:
    group = "pricers"
    first, second = Recorder(), Recorder()
    one = start_consumer(group, {TOPIC: None}, first.listener)
    two = start_consumer(group, {TOPIC: None}, second.listener)
    wait_until(lambda: len(assignment(one)) + len(assignment(two)) == 5 and assignment(two))
    early = [producer.send(Message(TOPIC, f"early {i}".encode())) for i in range(20)]
    wait_until(lambda: first.count() + second.count() >= 20)

    two.close()
    wait_until(lambda: len(assignment(one)) == 5)
    late = [producer.send(Message(TOPIC, f"late {i}".encode())) for i in range(20)]
    wait_until(lambda: {r.msg_id for r in late} <= {m.msg_id for m in first.messages()})
    everything = {m.msg_id for m in first.messages() + second.messages()}
    assert everything == {r.msg_id for r in early + late}


def test_broadcasting_members_each_receive_everything_and_keep_their_own_offsets(
    tmp_path: Path, producer: Producer, start_consumer: ConsumerFactory
) -> None:
    group = "dashboards"
    offsets_dir = tmp_path / "offsets"
    recorders = {"screen-a": Recorder(), "screen-b": Recorder()}
    consumers = [
        start_consumer(
            group,
            {TOPIC: None},
            recorder.listener,
            message_model=MessageModel.BROADCASTING,
            instance_name=name,
            offsets_dir=str(offsets_dir),
        )
        for name, recorder in recorders.items()
    ]
    for consumer in consumers:
        assert len(assignment(consumer)) == 4  # every queue, no retry topic

    receipts = [producer.send(Message(TOPIC, f"quote {i}".encode())) for i in range(40)]
    wait_until(lambda: all(r.count() >= 40 for r in recorders.values()))
    for recorder in recorders.values():
        assert collections.Counter(m.msg_id for m in recorder.messages()) == collections.Counter(
            r.msg_id for r in receipts
        )

    for consumer in consumers:
        consumer.close()
    host = socket.gethostname()
    for name in recorders:
        path = offsets_dir / f"{host}@{name}" / group / "offsets.json"
        assert path.is_file(), sorted(str(p) for p in offsets_dir.rglob("*"))
        table = json.loads(path.read_text())["offsetTable"]
        assert {e["queueId"]: e["offset"] for e in table if e["topic"] == TOPIC} == {
            q: 10 for q in range(4)
        }


def test_broadcasting_member_resumes_from_its_own_file(
    tmp_path: Path, producer: Producer, start_consumer: ConsumerFactory
) -> None:
    settings = {
        "message_model": MessageModel.BROADCASTING,
        "instance_name": "screen-a",
        "offsets_dir": str(tmp_path / "offsets"),
    }
    first = Recorder()
    consumer = start_consumer("dashboards", {TOPIC: None}, first.listener, **settings)
    producer.send_batch([Message(TOPIC, f"a{i}".encode()) for i in range(5)], queue_id=1)
    wait_until(lambda: first.count() >= 5)
    consumer.close()

    producer.send_batch([Message(TOPIC, f"b{i}".encode()) for i in range(5)], queue_id=1)
    second = Recorder()
    start_consumer("dashboards", {TOPIC: None}, second.listener, **settings)
    wait_until(lambda: second.count() >= 5)
    assert sorted(second.bodies()) == [f"b{i}".encode() for i in range(5)]


def test_broadcasting_drops_failed_messages_instead_of_retrying(
    harness: Harness, tmp_path: Path, producer: Producer, start_consumer: ConsumerFactory
) -> None:
    """As RocketMQ's broadcasting consumers do: a failure is logged, not sent back."""
    recorder = Recorder()

    def failing(messages: list[ReceivedMessage]) -> ConsumeResult:
        recorder.record(messages)
        return ConsumeResult.RECONSUME_LATER

    consumer = start_consumer(
        "tickers",
        {TOPIC: None},
        failing,
        message_model=MessageModel.BROADCASTING,
        instance_name="ticker-1",
        offsets_dir=str(tmp_path / "offsets"),
    )
    receipt = producer.send(Message(TOPIC, b"flash crash"), queue_id=0)
    wait_until(lambda: recorder.count() >= 1)

    # A failed batch is sent back (or retried here) before its offset is committed: once the
    # consumer committed past the message, a send-back would already be in the schedule.
    def committed_past_it() -> bool:
        table = consumer.core.offsets.clone_offset_table(TOPIC)
        return {queue.queue_id: offset for queue, offset in table.items()}.get(0) == 1

    wait_until(committed_past_it)
    consumer.close()
    assert [d.message.reconsume_times for d in recorder.deliveries] == [0]
    delay_queues = range(len(harness.delay_levels_ms))
    assert sum(harness.service.max_offset(SCHEDULE_TOPIC, q) for q in delay_queues) == 0
    assert harness.service.max_offset(retry_topic("tickers"), 0) == 0
    assert harness.service.max_offset(dlq_topic("tickers"), 0) == 0
    assert receipt.queue_offset == 0
