"""One undecodable record in queue 2 of 4 (issue 25, item 3): real damaged bytes in the broker's
commitlog file, a properties byte no CRC covers.

Before: a pull over the four queues raised a bare ``UnicodeDecodeError`` (tag-filtered) and
answered no queue; the push consumer's decode raised on every pull, so it stopped on all four
queues and retried every 3 s forever with a warning naming no queue or offset.

Now: the broker answers each queue on its own, naming the damaged record in its queue's answer;
consumers deliver every other message of every queue in order, log one ERROR naming topic,
queue, queue offset and commitlog offset, count it in ``stats.damaged_skipped`` and go on.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from sdk import (
    ConsumeFrom,
    ConsumeResult,
    EmbeddedBroker,
    Message,
    Producer,
    PullConsumer,
    PushConsumer,
)
from sdk.transport.models import RECORD_DAMAGED, PullBatch, QueuePull, decode_records

from .waiting import wait_until

TOPIC = "Damaged"
QUEUES = 4
PER_QUEUE = 10
BAD_QUEUE = 2
BAD_OFFSET = 4
SEGMENT_SIZE = 1 << 20
TAG_OF = ("A", "B")  # message i of a queue is tagged TAG_OF[i % 2]


def _send_all(broker: EmbeddedBroker) -> int:
    """PER_QUEUE messages in each queue, round-robin; answers the bad record's commitlog
    offset."""
    bad_phys = -1
    with Producer(broker) as producer:
        for i in range(PER_QUEUE):
            for queue_id in range(QUEUES):
                body = f"q{queue_id}-m{i}".encode()
                sent = producer.send(Message(TOPIC, body, tags=TAG_OF[i % 2]), queue_id=queue_id)
                assert (sent.queue_id, sent.queue_offset) == (queue_id, i)
                if (queue_id, i) == (BAD_QUEUE, BAD_OFFSET):
                    bad_phys = sent.phys_offset
    return bad_phys


def _damage_properties(root: Path, phys_offset: int) -> None:
    """The record's last byte (the end of its properties) becomes 0xFF, never UTF-8."""
    segment = root / "commitlog" / str(phys_offset - phys_offset % SEGMENT_SIZE).zfill(20)
    position = phys_offset % SEGMENT_SIZE
    with open(segment, "r+b") as handle:
        handle.seek(position)
        size = int.from_bytes(handle.read(4), "big")
        handle.seek(position + size - 1)
        handle.write(b"\xff")


def _damage_header(root: Path, phys_offset: int, at: int, patch: bytes) -> None:
    """The record's header field at ``at`` (no CRC covers it) is overwritten with ``patch``."""
    segment = root / "commitlog" / str(phys_offset - phys_offset % SEGMENT_SIZE).zfill(20)
    with open(segment, "r+b") as handle:
        handle.seek(phys_offset % SEGMENT_SIZE + at)
        handle.write(patch)


DAMAGE = {
    "properties": _damage_properties,
    # QUEUEOFFSET says 2**56, QUEUEID says queue 3: each copied to the client as it lies
    "queue-offset": lambda root, phys: _damage_header(root, phys, 20, (1 << 56).to_bytes(8, "big")),
    "queue-id": lambda root, phys: _damage_header(root, phys, 12, (3).to_bytes(4, "big")),
}


@pytest.fixture
def damaged(tmp_path: Path) -> Iterator[tuple[EmbeddedBroker, int]]:
    with EmbeddedBroker(tmp_path / "b", commitlog_file_size=SEGMENT_SIZE) as broker:
        bad_phys = _send_all(broker)
        _damage_properties(broker.root, bad_phys)
        yield broker, bad_phys


@pytest.fixture(params=list(DAMAGE))
def damaged_any(
    tmp_path: Path, request: pytest.FixtureRequest
) -> Iterator[tuple[EmbeddedBroker, int]]:
    """The damaged record's properties, or a header field that names another queue offset or
    queue (a consumer must not deliver it as if it were that queue's, nor commit past what
    the queue holds)."""
    with EmbeddedBroker(tmp_path / "b", commitlog_file_size=SEGMENT_SIZE) as broker:
        bad_phys = _send_all(broker)
        DAMAGE[request.param](broker.root, bad_phys)
        yield broker, bad_phys


def _expected(tags: str | None) -> dict[int, list[int]]:
    """Per queue, the queue offsets a consumer of ``tags`` must get, in order."""
    wanted = set(TAG_OF) if tags is None else {t.strip() for t in tags.split("||")}
    return {
        q: [
            i
            for i in range(PER_QUEUE)
            if TAG_OF[i % 2] in wanted and (q, i) != (BAD_QUEUE, BAD_OFFSET)
        ]
        for q in range(QUEUES)
    }


def _skip_logs(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]


def _assert_one_skip_logged(caplog: pytest.LogCaptureFixture, bad_phys: int) -> None:
    errors = _skip_logs(caplog)
    assert len(errors) == 1, errors
    assert (
        f"topic {TOPIC} queue {BAD_QUEUE} queue offset {BAD_OFFSET} commitlog offset {bad_phys}"
        in errors[0]
    )


@pytest.mark.parametrize("check", [False, True], ids=["copied", "checked"])
@pytest.mark.parametrize("tags", [None, "A || B"], ids=["all", "tagged"])
def test_a_pull_over_four_queues_answers_each_on_its_own(
    damaged: tuple[EmbeddedBroker, int], tags: str | None, check: bool
) -> None:
    broker, bad_phys = damaged
    pulls = tuple(QueuePull(TOPIC, q, 0, tags, check) for q in range(QUEUES))
    answers = broker.service.pull(PullBatch("g", pulls, max_count=32)).results
    by_queue = {a.queue_id: a for a in answers}
    assert sorted(by_queue) == list(range(QUEUES))
    for queue_id in set(range(QUEUES)) - {BAD_QUEUE}:
        answer = by_queue[queue_id]
        assert answer.found and answer.damaged is None
        got = [m.queue_offset for m in decode_records(answer.raw)]
        assert got == list(range(PER_QUEUE))
    bad = by_queue[BAD_QUEUE]
    if tags is None and not check:  # copied without decoding: the reader's decode finds it
        assert bad.count == PER_QUEUE and bad.damaged is None
        return
    assert bad.damaged is not None
    assert (bad.damaged.queue_offset, bad.damaged.phys_offset) == (BAD_OFFSET, bad_phys)
    assert [m.queue_offset for m in decode_records(bad.raw)] == list(range(BAD_OFFSET))
    assert bad.next_offset == BAD_OFFSET
    # A pull that starts at the damaged record names it with nothing before it.
    first = broker.service.pull(
        PullBatch("g", (QueuePull(TOPIC, BAD_QUEUE, BAD_OFFSET, tags, check),))
    ).results[0]
    assert first.status == RECORD_DAMAGED and first.raw == b""
    assert first.damaged == bad.damaged and first.next_offset == BAD_OFFSET


@pytest.mark.parametrize("tags", [None, "A"], ids=["all", "tagged"])
def test_a_push_consumer_steps_over_the_damaged_record(
    damaged_any: tuple[EmbeddedBroker, int], tags: str | None, caplog: pytest.LogCaptureFixture
) -> None:
    broker, bad_phys = damaged_any
    expected = _expected(tags)
    got: dict[int, list[int]] = {q: [] for q in range(QUEUES)}
    lock = threading.Lock()

    def listener(messages):
        with lock:
            for message in messages:
                got[message.queue_id].append(message.queue_offset)
        return ConsumeResult.SUCCESS

    caplog.set_level(logging.WARNING)
    with PushConsumer(
        broker, "g", {TOPIC: tags}, listener, consume_threads=1,
        consume_from=ConsumeFrom.FIRST_OFFSET, pull_batch_size=32,
    ) as consumer:  # fmt: skip
        wait_until(lambda: consumer.stats.damaged_skipped == 1 and got == expected)
    assert got == expected
    for queue_id in range(QUEUES):  # committed past the damaged record at close
        assert broker.service.query_offset("g", TOPIC, queue_id) == PER_QUEUE
    assert consumer.stats.damaged_skipped == 1
    _assert_one_skip_logged(caplog, bad_phys)


@pytest.mark.parametrize("tags", [None, "A"], ids=["all", "tagged"])
def test_a_pull_consumer_steps_over_the_damaged_record(
    damaged_any: tuple[EmbeddedBroker, int], tags: str | None, caplog: pytest.LogCaptureFixture
) -> None:
    broker, bad_phys = damaged_any
    expected = _expected(tags)
    want = sum(len(offsets) for offsets in expected.values())
    got: dict[int, list[int]] = {q: [] for q in range(QUEUES)}
    caplog.set_level(logging.WARNING)
    with PullConsumer(broker, "g", consume_from=ConsumeFrom.FIRST_OFFSET) as consumer:
        consumer.subscribe({TOPIC: tags})
        received = 0
        for _ in range(200):  # each poll returns what is fetched; bounded, not timed
            for message in consumer.poll(0.05):
                got[message.queue_id].append(message.queue_offset)
                received += 1
            if received >= want and consumer.stats.damaged_skipped:
                break
        assert got == expected
        assert consumer.stats.damaged_skipped == 1
        bad_queue = next(q for q in consumer.assignment() if q.queue_id == BAD_QUEUE)
        assert consumer.position(bad_queue) == PER_QUEUE
    _assert_one_skip_logged(caplog, bad_phys)


def _point_unit_at(root: Path, queue_id: int, queue_offset: int, phys_offset: int) -> None:
    """The consume-queue unit's commitlog offset is overwritten with ``phys_offset``."""
    unit_file = root / "consumequeue" / TOPIC / str(queue_id) / f"{0:020d}"
    with open(unit_file, "r+b") as handle:
        handle.seek(queue_offset * 20)
        handle.write(phys_offset.to_bytes(8, "big"))


@pytest.mark.parametrize("target", ["same-queue", "other-queue"])
@pytest.mark.parametrize("tags", [None, "A"], ids=["all", "tagged"])
def test_a_unit_pointing_at_another_record_loses_no_message(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, tags: str | None, target: str
) -> None:
    """A unit in the middle of a queue damaged to point at another valid record (of its queue,
    or of another): the consumer gets every message of every queue, each once and at its own
    queue offset, and skips none. It once got the other record in its place (the broker copied
    it), then, asking the broker to check, had the unit's message skipped as damaged; now the
    broker rebuilds the unit from the commitlog and logs a WARNING naming it."""
    with EmbeddedBroker(tmp_path / "b", commitlog_file_size=SEGMENT_SIZE) as broker:
        _send_all(broker)
        store = broker.service.store
        other_queue = BAD_QUEUE if target == "same-queue" else BAD_QUEUE + 1
        elsewhere = store.get_messages(TOPIC, other_queue, BAD_OFFSET - 2, max_count=1)
        _point_unit_at(broker.root, BAD_QUEUE, BAD_OFFSET, elsewhere.messages[0].phys_offset)
        wanted = set(TAG_OF) if tags is None else {tags}
        expected = {
            q: [i for i in range(PER_QUEUE) if TAG_OF[i % 2] in wanted] for q in range(QUEUES)
        }
        got: dict[int, list[tuple[int, bytes]]] = {q: [] for q in range(QUEUES)}
        caplog.set_level(logging.WARNING)
        with PullConsumer(broker, "g", consume_from=ConsumeFrom.FIRST_OFFSET) as consumer:
            consumer.subscribe({TOPIC: tags})
            want = sum(len(offsets) for offsets in expected.values())
            for _ in range(200):  # each poll returns what is fetched; bounded, not timed
                for message in consumer.poll(0.05):
                    got[message.queue_id].append((message.queue_offset, message.body))
                if sum(map(len, got.values())) >= want:
                    break
            assert consumer.stats.damaged_skipped == 0
    assert got == {
        q: [(i, f"q{q}-m{i}".encode()) for i in offsets] for q, offsets in expected.items()
    }
    assert not _skip_logs(caplog)
    if tags is None or TAG_OF[BAD_OFFSET % 2] in wanted:
        rebuilt = f"consume queue {TOPIC}/{BAD_QUEUE} offset {BAD_OFFSET} was damaged"
        assert any(rebuilt in r.getMessage() for r in caplog.records)
