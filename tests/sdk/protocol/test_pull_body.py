"""The pull answer body: several queues' answers, each a binary header and the stored records'
bytes as they lie in the commitlog; decoded with zero-copy slices, read by the consumers' own
code, and refused with the byte offset and the problem when malformed."""

from __future__ import annotations

import struct
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from localstore.results import GetStatus
from offsetstore import MessageQueue
from sdk import EmbeddedBroker, Message, Producer
from sdk.consumer.damaged import ConsumerStats, read_queue_answer
from sdk.errors import InvalidArgumentError, MalformedBodyError
from sdk.protocol.pull_body import STATUS_CODES, decode_pull_answer, encode_pull_answer
from sdk.transport.models import (
    RECORD_DAMAGED,
    DamagedRecord,
    PullBatch,
    PullBatchResult,
    QueuePull,
    QueuePullResult,
)

from ..brokers import SMALL_GEOMETRY

TOPIC = "orders"
GROUP = "billing"


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[EmbeddedBroker]:
    with EmbeddedBroker(tmp_path / "data", **SMALL_GEOMETRY) as embedded:
        yield embedded


def fields(answer: QueuePullResult) -> tuple[object, ...]:
    return (
        answer.topic,
        answer.queue_id,
        answer.status,
        answer.next_offset,
        answer.min_offset,
        answer.max_offset,
        bytes(answer.raw),
        answer.count,
        answer.damaged,
    )


def test_a_real_pull_answer_round_trips_and_reads_as_the_consumers_read(
    broker: EmbeddedBroker,
) -> None:
    with Producer(broker) as producer:
        producer.send_batch(
            [Message(TOPIC, f"m{i}".encode(), tags="t", keys=[f"k{i}"]) for i in range(5)],
            queue_id=0,
        )
        producer.send(Message(TOPIC, b"alone", properties={"p": "v"}), queue_id=1)
    pulls = (
        QueuePull(TOPIC, 0, 1),
        QueuePull(TOPIC, 1, 0),
        QueuePull(TOPIC, 2, 0),  # empty
        QueuePull("no-such-topic", 0, 0),
    )
    result = broker.service.pull(PullBatch(GROUP, pulls))
    body = encode_pull_answer(result)
    decoded = decode_pull_answer(body)
    assert decoded.generation == result.generation
    assert [fields(a) for a in decoded.results] == [fields(a) for a in result.results]
    assert [a.status for a in decoded.results][:2] == ["FOUND", "FOUND"]
    bodies = []
    for original, answer in zip(result.results[:2], decoded.results[:2], strict=True):
        assert isinstance(answer.raw, memoryview)
        assert answer.raw.obj is body  # a slice of the body, not a copy
        queue = MessageQueue(TOPIC, broker.service.broker_name, answer.queue_id)
        pulled_from = 1 if answer.queue_id == 0 else 0
        read = read_queue_answer(queue, pulled_from, answer, ConsumerStats())
        expected = read_queue_answer(queue, pulled_from, original, ConsumerStats())
        assert [(m.body, m.tags, m.keys, m.msg_id) for m in read.messages] == [
            (m.body, m.tags, m.keys, m.msg_id) for m in expected.messages
        ]
        assert (read.next_offset, read.check) == (expected.next_offset, False)
        bodies.append([m.body for m in read.messages])
    assert bodies == [[b"m1", b"m2", b"m3", b"m4"], [b"alone"]]


def damaged_answer() -> QueuePullResult:
    return QueuePullResult(
        "t", 2, RECORD_DAMAGED, 7, 0, 9, damaged=DamagedRecord(7, 4096, "body CRC mismatch: é")
    )


def test_a_damaged_record_answer_round_trips() -> None:
    result = PullBatchResult([damaged_answer()], 12)
    decoded = decode_pull_answer(encode_pull_answer(result))
    assert decoded.generation == 12
    assert [fields(a) for a in decoded.results] == [fields(damaged_answer())]


_answers = st.builds(
    QueuePullResult,
    topic=st.text(st.characters(codec="utf-8"), max_size=20),
    queue_id=st.integers(-(2**31), 2**31 - 1),
    status=st.sampled_from(sorted(STATUS_CODES)),
    next_offset=st.integers(-(2**63), 2**63 - 1),
    min_offset=st.integers(0, 2**40),
    max_offset=st.integers(0, 2**40),
    raw=st.binary(max_size=80),
    count=st.integers(0, 1000),
    damaged=st.none()
    | st.builds(
        DamagedRecord,
        st.integers(0, 2**40),
        st.integers(0, 2**40),
        st.text(st.characters(codec="utf-8"), max_size=30),
    ),
)


@settings(max_examples=150, deadline=None)
@given(st.lists(_answers, max_size=4), st.integers(-1, 2**40))
def test_arbitrary_answers_round_trip(answers: list[QueuePullResult], generation: int) -> None:
    decoded = decode_pull_answer(encode_pull_answer(PullBatchResult(answers, generation)))
    assert decoded.generation == generation
    assert [fields(a) for a in decoded.results] == [fields(a) for a in answers]


def test_every_status_has_one_code() -> None:
    assert set(STATUS_CODES) == {status.value for status in GetStatus} | {RECORD_DAMAGED}
    assert len(set(STATUS_CODES.values())) == len(STATUS_CODES)
    assert all(0 <= code < 256 for code in STATUS_CODES.values())


def test_a_status_without_a_code_is_not_encoded() -> None:
    answer = QueuePullResult(TOPIC, 0, "NEW_STATUS", 0, 0, 0)
    with pytest.raises(InvalidArgumentError, match="status 'NEW_STATUS' has no wire code"):
        encode_pull_answer(PullBatchResult([answer]))


def small_answer() -> bytes:
    return encode_pull_answer(
        PullBatchResult(
            [QueuePullResult("ab", 1, "FOUND", 3, 0, 3, b"recs", 1), damaged_answer()], 5
        )
    )


STATUS_AT = 13 + 2 + 2 + 4  # answer head, topic "ab", queue id


def test_an_unknown_status_code_is_refused_naming_it() -> None:
    body = bytearray(small_answer())
    body[STATUS_AT] = 200
    with pytest.raises(MalformedBodyError, match="status code 200 of ab:1 is not known") as caught:
        decode_pull_answer(bytes(body))
    assert caught.value.offset == STATUS_AT


def test_a_body_truncated_at_any_byte_is_refused() -> None:
    body = small_answer()
    for cut in range(len(body)):
        with pytest.raises(MalformedBodyError, match="truncated") as caught:
            decode_pull_answer(body[:cut])
        assert 0 <= caught.value.offset <= cut


def patched(offset: int, fmt: str, value: int) -> bytes:
    body = bytearray(small_answer())
    struct.pack_into(fmt, body, offset, value)
    return bytes(body)


@pytest.mark.parametrize(
    ("body", "offset", "problem"),
    [
        (patched(0, ">B", 2), 0, "pull answer version 2 is not known"),
        (patched(9, ">i", -1), 9, "queue count -1 is negative"),
        (patched(9, ">i", 1), None, "bytes after the last of 1 queue answers"),
        (patched(STATUS_AT + 1 + 24, ">i", -2), STATUS_AT + 1 + 24, "record count -2 of ab:1"),
        (patched(STATUS_AT + 1 + 24 + 4, ">i", -4), STATUS_AT + 1 + 24 + 4, "length -4 of ab:1"),
        (patched(STATUS_AT + 1 + 24 + 8, ">B", 2), STATUS_AT + 1 + 24 + 8, "flag 2 is neither"),
        (patched(13, ">H", 2)[:15] + b"\xff\xfe" + small_answer()[17:], 15, "topic is not UTF-8"),
        (small_answer() + b"\x00", len(small_answer()), "1 bytes after the last of 2"),
    ],
    ids=[
        "version",
        "negative-count",
        "fewer-queues",
        "negative-record-count",
        "negative-raw",
        "damaged-flag",
        "utf8",
        "tail",
    ],
)
def test_a_malformed_answer_is_refused_at_its_offset(
    body: bytes, offset: int | None, problem: str
) -> None:
    with pytest.raises(MalformedBodyError, match=problem) as caught:
        decode_pull_answer(body)
    if offset is not None:
        assert caught.value.offset == offset
