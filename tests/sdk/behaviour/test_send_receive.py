"""Sending and receiving: what a consumer gets, tag filtering, order within a queue."""

from __future__ import annotations

import threading

from sdk import ConsumeResult, Message, Producer, SendReceipt
from sdk.message import ReceivedMessage

from .conftest import ConsumerFactory, Harness, Recorder, wait_until

TOPIC = "orders"


def test_tag_expression_receives_only_its_tags_with_every_field(
    harness: Harness, producer: Producer, start_consumer: ConsumerFactory
) -> None:
    recorder = Recorder()
    start_consumer("billing", {TOPIC: "paid || refunded"}, recorder.listener)
    queues = harness.service.queue_count(TOPIC)

    sent = {}
    for index, tag in enumerate(["paid", "created", "refunded", None, "shipped", "paid"] * 3):
        message = Message(
            TOPIC,
            f"order {index} {tag}".encode(),
            tags=tag,
            keys=[f"order-{index}", f"customer-{index % 2}"],
            properties={"origin": "web", "index": str(index)},
        )
        receipt = producer.send(message)
        if tag in ("paid", "refunded"):
            sent[message.body] = (message, receipt)
    # A last "paid" message on every queue: once it arrived, everything before it on its queue
    # was pulled, so anything the filter let through would have arrived by then too.
    for queue_id in range(queues):
        body = f"last of queue {queue_id}".encode()
        message = Message(TOPIC, body, tags="paid", keys=[f"last-{queue_id}"])
        sent[body] = (message, producer.send(message, queue_id=queue_id))

    wait_until(lambda: recorder.count() >= len(sent))
    received = recorder.messages()
    assert sorted(m.body for m in received) == sorted(sent)
    for got in received:
        message, receipt = sent[got.body]
        assert got.topic == TOPIC == receipt.topic
        assert got.queue_id == receipt.queue_id
        assert got.queue_offset == receipt.queue_offset
        assert got.msg_id == receipt.msg_id
        assert got.offset_msg_id == receipt.offset_msg_id
        assert got.tags == message.tags
        assert got.keys == tuple(message.keys)
        assert got.properties == message.properties  # the user's, and only theirs
        assert got.body == message.body
        assert got.store_timestamp == receipt.store_timestamp
        assert 0 < got.born_timestamp <= got.store_timestamp
        assert got.reconsume_times == 0
    assert len({m.msg_id for m in received}) == len(received)  # ids are unique


def test_batch_send_is_received_in_one_queue(
    producer: Producer, start_consumer: ConsumerFactory
) -> None:
    recorder = Recorder()
    start_consumer("batch-readers", {TOPIC: None}, recorder.listener)
    receipts = producer.send_batch(
        [Message(TOPIC, f"item {i}".encode(), tags="bulk") for i in range(20)], queue_id=2
    )
    assert [r.queue_offset for r in receipts] == list(range(20))
    wait_until(lambda: recorder.count() >= 20)
    by_id = {m.msg_id: m for m in recorder.messages()}
    assert set(by_id) == {r.msg_id for r in receipts}
    assert {(m.queue_id, m.queue_offset) for m in by_id.values()} == {(2, i) for i in range(20)}


def test_messages_of_one_sharding_key_arrive_in_send_order(
    producer: Producer, start_consumer: ConsumerFactory
) -> None:
    recorder = Recorder()
    start_consumer("shipping", {TOPIC: None}, recorder.listener, consume_threads=1)
    keys = ["order-7", "order-8", "order-9"]
    receipts: dict[str, list[SendReceipt]] = {key: [] for key in keys}
    for step in range(30):
        for key in keys:
            receipt = producer.send(Message(TOPIC, f"{key} step {step}".encode()), sharding_key=key)
            receipts[key].append(receipt)

    wait_until(lambda: recorder.count() >= 90)
    for key in keys:
        assert len({r.queue_id for r in receipts[key]}) == 1  # one key, one queue
        offsets = [r.queue_offset for r in receipts[key]]
        assert offsets == sorted(offsets)
        bodies = [b for b in recorder.bodies() if b.startswith(f"{key} ".encode())]
        assert bodies == [f"{key} step {step}".encode() for step in range(30)]


def test_concurrent_listeners_see_every_queue_offset_exactly_once(
    producer: Producer, start_consumer: ConsumerFactory
) -> None:
    """Many listener threads finish in any order, yet every queue offset is handed to the
    listener exactly once (in a quiet run)."""
    handed: dict[int, list[int]] = {}
    lock = threading.Lock()

    def listener(messages: list[ReceivedMessage]) -> ConsumeResult:
        with lock:
            for message in messages:
                handed.setdefault(message.queue_id, []).append(message.queue_offset)
        return ConsumeResult.SUCCESS

    start_consumer("auditors", {TOPIC: None}, listener, consume_threads=8)
    for index in range(200):
        producer.send(Message(TOPIC, f"event {index}".encode()))
    wait_until(lambda: sum(len(v) for v in handed.values()) >= 200)
    assert set(handed) == {0, 1, 2, 3}
    for offsets in handed.values():
        assert sorted(offsets) == list(range(50))
