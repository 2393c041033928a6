"""A queue's pull answer decoded into received messages in one loop
(:mod:`sdk.consumer.received_records`): records of the common shape take one unpack each, every
other shape the store's general decode, and both give the messages the general decode gives;
damage stops the decode after the records before it, named."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from localstore.record.codec import RecordError
from sdk import EmbeddedBroker, Message, Producer
from sdk.consumer.received_records import decode_received
from sdk.message import ReceivedMessage
from sdk.transport.models import PullBatch, QueuePull, decode_records_before_damage

SHORT_TOPIC = "Received"
LARGE_BODY = b"L" * (70 << 10)  # above 64 KiB: never the one-unpack shape


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[EmbeddedBroker]:
    with EmbeddedBroker(tmp_path / "data") as opened:
        yield opened


def _stored(broker: EmbeddedBroker, topic: str, messages: list[Message]) -> bytes:
    """``messages`` sent to queue 0 of ``topic``; their stored records as a pull reads them."""
    with Producer(broker) as producer:
        for message in messages:
            producer.send(message, queue_id=0)
    answer = broker.service.pull(
        PullBatch("g", (QueuePull(topic, 0, 0),), max_count=len(messages))
    ).results[0]
    assert answer.count == len(messages)
    return bytes(answer.raw)


def _fields(message: ReceivedMessage) -> tuple[object, ...]:
    return (
        message.stored_topic,
        message.queue_id,
        message.queue_offset,
        message.phys_offset,
        message.store_size,
        message.body,
        message.tags,
        message.keys,
        message.msg_id,
        message.offset_msg_id,
        dict(message.properties),
        message.born_host,
        message.store_host,
        message.born_timestamp,
        message.store_timestamp,
        message.flag,
        message.reconsume_times,
    )


def _varied(topic: str) -> list[Message]:
    """Bodies of several lengths (empty too), with and without tags, keys and properties."""
    return [
        Message(topic, b"x" * (1 + (i % 5) * 37), tags="A" if i % 2 else None, keys=(f"k{i}",))
        if i % 3
        else Message(topic, f"body {i}".encode(), properties={"color": "red", "n": str(i)}, flag=i)
        for i in range(40)
    ]


@pytest.mark.parametrize("large_at", [None, 0, 17])
def test_records_decode_as_the_general_decode_decodes_them(
    broker: EmbeddedBroker, large_at: int | None
) -> None:
    sent = _varied(SHORT_TOPIC)
    if large_at is not None:  # a record the general decode takes, and those after it
        sent.insert(large_at, Message(SHORT_TOPIC, LARGE_BODY))
    raw = _stored(broker, SHORT_TOPIC, sent)
    messages, error = decode_received(raw, SHORT_TOPIC)
    expected, expected_error = decode_records_before_damage(raw, ReceivedMessage)
    assert error is None and expected_error is None
    assert [_fields(m) for m in messages] == [_fields(m) for m in expected]
    assert messages == expected
    assert len(messages) == len(sent)


def test_records_of_another_topic_than_the_pulled_one_decode_as_stored(
    broker: EmbeddedBroker,
) -> None:
    raw = _stored(broker, SHORT_TOPIC, _varied(SHORT_TOPIC)[:5])
    messages, error = decode_received(raw, "another-topic")
    assert error is None
    assert [m.stored_topic for m in messages] == [SHORT_TOPIC] * 5


def test_a_damaged_record_ends_the_decode_after_the_records_before_it(
    broker: EmbeddedBroker,
) -> None:
    raw = bytearray(_stored(broker, SHORT_TOPIC, _varied(SHORT_TOPIC)[:6]))
    sizes = [m.store_size for m in decode_records_before_damage(bytes(raw))[0]]
    third_end = sum(sizes[:3])
    raw[third_end - 1] = 0xFF  # the third record's last properties byte: never UTF-8
    messages, error = decode_received(bytes(raw), SHORT_TOPIC)
    assert [m.queue_offset for m in messages] == [0, 1]
    assert isinstance(error, RecordError)


def test_a_truncated_answer_ends_the_decode_after_the_whole_records(
    broker: EmbeddedBroker,
) -> None:
    raw = _stored(broker, SHORT_TOPIC, _varied(SHORT_TOPIC)[:4])
    messages, error = decode_received(raw[:-3], SHORT_TOPIC)
    assert [m.queue_offset for m in messages] == [0, 1, 2]
    assert isinstance(error, RecordError)
