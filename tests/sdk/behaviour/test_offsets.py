"""Committed offsets: the smallest offset still in flight, durable across restarts."""

from __future__ import annotations

import threading
import time
from collections import Counter

from sdk import ConsumeFrom, Message, Producer, PushConsumer
from sdk.message import ReceivedMessage

from .conftest import (
    ConsumerFactory,
    Harness,
    Recorder,
    committed_offsets,
    now_ms,
    wait_until,
)

TOPIC = "ledger"


def test_committed_offset_waits_for_a_slow_message_then_jumps_past_the_rest(
    harness: Harness, producer: Producer, start_consumer: ConsumerFactory
) -> None:
    group, blocked_offset, total = "bookkeepers", 3, 20
    started, release = threading.Event(), threading.Event()
    done: set[int] = set()
    lock = threading.Lock()

    def listener(messages: list[ReceivedMessage]) -> None:
        for message in messages:
            if message.queue_offset == blocked_offset:
                started.set()
                release.wait(timeout=30)
            with lock:
                done.add(message.queue_offset)

    consumer = start_consumer(group, {TOPIC: None}, listener, consume_threads=4)
    try:
        for index in range(total):
            producer.send(Message(TOPIC, f"entry {index}".encode()), queue_id=0)
        wait_until(started.is_set)
        wait_until(lambda: len(done) == total - 1)
        assert blocked_offset not in done

        consumer.persist_offsets()
        assert harness.service.query_offset(group, TOPIC, 0) == blocked_offset
    finally:
        release.set()

    wait_until(lambda: len(done) == total)

    def committed_all() -> bool:
        consumer.persist_offsets()
        return harness.service.query_offset(group, TOPIC, 0) == total

    wait_until(committed_all)


def test_close_commits_and_a_new_consumer_resumes_after_a_broker_restart(
    harness: Harness, start_consumer: ConsumerFactory
) -> None:
    group = "archivers"
    with Producer(harness.broker_target) as producer:
        first_half = [producer.send(Message(TOPIC, f"a{i}".encode())) for i in range(12)]

    recorder = Recorder()
    consumer = PushConsumer(
        harness.broker_target,
        group,
        {TOPIC: None},
        recorder.listener,
        consume_from=ConsumeFrom.FIRST_OFFSET,
    )
    with consumer:
        wait_until(lambda: recorder.count() >= 12)
    assert committed_offsets(harness, group, TOPIC) == {0: 3, 1: 3, 2: 3, 3: 3}

    harness.restart()
    assert committed_offsets(harness, group, TOPIC) == {0: 3, 1: 3, 2: 3, 3: 3}
    with Producer(harness.broker_target) as producer:
        second_half = [producer.send(Message(TOPIC, f"b{i}".encode())) for i in range(8)]

    again = Recorder()
    # FIRST_OFFSET applies to queues the group never committed; these it did.
    start_consumer(group, {TOPIC: None}, again.listener, consume_from=ConsumeFrom.FIRST_OFFSET)
    wait_until(lambda: again.count() >= 8)
    assert {m.msg_id for m in recorder.messages()} == {r.msg_id for r in first_half}
    assert Counter(m.msg_id for m in again.messages()) == Counter(r.msg_id for r in second_half)


def test_new_group_starting_from_last_offset_skips_old_messages(
    producer: Producer, start_consumer: ConsumerFactory
) -> None:
    old = [producer.send(Message(TOPIC, f"old {i}".encode())) for i in range(6)]
    recorder = Recorder()
    start_consumer(
        "latecomers", {TOPIC: None}, recorder.listener, consume_from=ConsumeFrom.LAST_OFFSET
    )
    new = [producer.send(Message(TOPIC, f"new {i}".encode())) for i in range(6)]
    wait_until(lambda: recorder.count() >= 6)
    got = {m.msg_id for m in recorder.messages()}
    assert got == {r.msg_id for r in new}
    assert got.isdisjoint(r.msg_id for r in old)


def test_messages_pulled_but_not_consumed_at_close_come_again(
    harness: Harness, producer: Producer, start_consumer: ConsumerFactory
) -> None:
    """Closing a busy consumer drops what it buffered; the committed offset stays at the
    first unfinished message, so the next consumer of the group gets it (at-least-once)."""
    group, total = "slow-readers", 60
    first = Recorder()

    def slow(messages: list[ReceivedMessage]) -> None:
        time.sleep(0.02)  # slow work, so most messages are still buffered at close
        first.record(messages)

    consumer = start_consumer(group, {TOPIC: None}, slow, consume_threads=1)
    receipts = [producer.send(Message(TOPIC, f"row {i}".encode())) for i in range(total)]
    wait_until(lambda: first.count() >= 5)
    consumer.close()
    seen_first = first.count()
    assert seen_first < total
    queues = range(4)
    committed = {q: harness.service.query_offset(group, TOPIC, q) or 0 for q in queues}
    finished = {(m.queue_id, m.queue_offset) for m in first.messages()}
    # No gap: everything below a committed offset was finished by the first consumer.
    assert all((q, o) in finished for q in queues for o in range(committed[q]))
    assert sum(committed.values()) >= 1  # and its finished work was committed

    second = Recorder()
    start_consumer(group, {TOPIC: None}, second.listener)
    everything = {r.msg_id for r in receipts}
    wait_until(lambda: {m.msg_id for m in first.messages() + second.messages()} >= everything)
    # The second consumer starts each queue exactly at the committed offset: it skips what the
    # first finished and committed, and gets everything after it.
    for q in queues:
        got = sorted(m.queue_offset for m in second.messages() if m.queue_id == q)
        assert got == list(range(committed[q], harness.service.max_offset(TOPIC, q)))


def test_consume_from_timestamp_starts_at_the_first_message_stored_then(
    producer: Producer, start_consumer: ConsumerFactory
) -> None:
    old = [producer.send(Message(TOPIC, f"old {i}".encode())) for i in range(8)]
    boundary = max(r.store_timestamp for r in old) + 1
    wait_until(lambda: now_ms() > boundary)
    new = [producer.send(Message(TOPIC, f"new {i}".encode())) for i in range(8)]
    recorder = Recorder()
    start_consumer(
        "replayers",
        {TOPIC: None},
        recorder.listener,
        consume_from=ConsumeFrom.TIMESTAMP,
        consume_timestamp_ms=boundary,
    )
    wait_until(lambda: recorder.count() >= 8)
    assert {m.msg_id for m in recorder.messages()} == {r.msg_id for r in new}


def test_closing_a_consumer_after_its_broker_stopped_returns(
    harness: Harness, producer: Producer, start_consumer: ConsumerFactory
) -> None:
    recorder = Recorder()
    consumer = start_consumer("orphans", {TOPIC: None}, recorder.listener)
    producer.send(Message(TOPIC, b"last words"))
    wait_until(lambda: recorder.count() >= 1)
    harness.stop()
    consumer.close()  # offsets cannot be committed: logged, not raised, and no hang
    consumer.close()
