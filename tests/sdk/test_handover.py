"""Queue hand-over between members: sealing, lease renewal while draining, no late commits."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from localstore.record.codec import StoredMessage
from offsetstore import MessageQueue
from sdk import BrokerOptions, ConsumeFrom, EmbeddedBroker, Message, Producer, PushConsumer
from sdk.consumer.process_queue import ProcessQueue
from sdk.transport.models import PullBatch

from .waiting import wait_until


def stored(offset: int) -> StoredMessage:
    return StoredMessage("t", 0, offset, offset * 100, 100, 0, 0, 0, 0, "", 0, "", 0, 0, b"", {})


def test_a_sealed_queue_starts_nothing_and_seals_only_when_idle():
    queue: ProcessQueue[StoredMessage] = ProcessQueue()
    first, second = stored(0), stored(1)
    queue.put_messages([first, second])
    assert queue.try_start([first], 1)
    assert not queue.seal_if_idle()  # a listener runs on offset 0
    queue.remove_messages([first])
    assert queue.seal_if_idle()
    assert not queue.try_start([second], 2)
    assert queue.take_started(1, 3) == []


def test_an_orderly_batch_put_back_is_no_longer_in_a_listener():
    queue: ProcessQueue[StoredMessage] = ProcessQueue()
    queue.put_messages([stored(0), stored(1)])
    taken = queue.take_started(2, 1)
    assert queue.started_count == 2
    queue.make_messages_consume_again(taken)
    assert queue.started_count == 0 and queue.seal_if_idle()


class Intervals:
    """on_assigned / on_revoked times of one member, per queue."""

    def __init__(self) -> None:
        self.assigned: dict[MessageQueue, float] = {}
        self.revoked: dict[MessageQueue, float] = {}

    def on_assigned(self, queues: list[MessageQueue]) -> None:
        for queue in queues:
            self.assigned[queue] = time.monotonic()

    def on_revoked(self, queues: list[MessageQueue]) -> None:
        for queue in queues:
            self.revoked[queue] = time.monotonic()


@pytest.fixture
def broker(tmp_path: Path):
    options = BrokerOptions(queue_lease_ms=600)
    with EmbeddedBroker(tmp_path / "b", options=options, commitlog_file_size=1 << 20) as b:
        yield b


def test_a_draining_queue_keeps_its_lease_past_the_lease_time(broker: EmbeddedBroker):
    """A revoked queue whose listener runs longer than the broker's lease is renewed while it
    drains: the new owner gets it only after the old one let go."""
    with Producer(broker) as producer:
        for queue_id in range(4):
            producer.send(Message("orders", b"slow" if queue_id == 3 else b"x"), queue_id=queue_id)
    slow_started = threading.Event()

    def slow_listener(messages):
        if messages[0].body == b"slow":
            slow_started.set()
            time.sleep(1.5)  # 2.5 leases

    settings = {"lease_renew_interval_s": 0.1, "consume_from": ConsumeFrom.FIRST_OFFSET}
    seen_a, seen_b = Intervals(), Intervals()
    q3 = MessageQueue("orders", "broker-a", 3)
    with PushConsumer(broker, "g", {"orders": None}, slow_listener, rebalance_listener=seen_a,
                      instance_name="a", **settings):  # fmt: skip
        assert slow_started.wait(5)
        held_since = seen_a.assigned[q3]
        with PushConsumer(broker, "g", {"orders": None}, lambda m: None, rebalance_listener=seen_b,
                          instance_name="b", **settings) as b:  # fmt: skip
            wait_until(lambda: q3 in seen_b.assigned)  # b's share: queues 2 and 3
            assert q3 in b.assignment()
            revoked, taken = seen_a.revoked[q3], seen_b.assigned[q3]
    assert taken >= revoked  # never both at once
    assert revoked - held_since > 1.0  # a held it well past the 600 ms lease


def test_a_late_finish_after_a_forced_release_commits_nothing(broker: EmbeddedBroker):
    with Producer(broker) as producer:
        producer.send(Message("orders", b"stuck"), queue_id=3)  # b's share when b joins
    release = threading.Event()

    def stuck(messages):
        release.wait(5)

    q3 = MessageQueue("orders", "broker-a", 3)
    options = {
        "consume_from": ConsumeFrom.FIRST_OFFSET,
        "release_timeout_s": 0.2,
        "lease_renew_interval_s": 0.1,  # the fixture's lease is 600 ms
    }
    with PushConsumer(broker, "g", {"orders": None}, stuck, instance_name="a", **options) as a:
        wait_until(lambda: q3 in a.core.states and a.core.states[q3].process_queue.started_count)
        held = a.core.states[q3]  # the queue as a holds it while its listener is stuck
        got: list[bytes] = []
        with PushConsumer(broker, "g", {"orders": None}, lambda ms: got.extend(m.body for m in ms),
                          instance_name="b", **options) as b:  # fmt: skip
            wait_until(lambda: q3 not in a.assignment() and q3 in b.assignment())
            wait_until(lambda: got == [b"stuck"])  # the new owner consumes it again
            b.persist_offsets()
            assert broker.service.query_offset("g", "orders", 3) == 1
            release.set()  # the old listener finishes after the queue was let go
            # a's finish removes the message and decides about its commit under the queue's
            # commit lock: once the message is gone and the lock is free, that decision is made
            wait_until(lambda: held.process_queue.cached_count == 0)
            with held.commit_lock:
                pass
            assert q3 not in a.core.offsets.clone_offset_table("orders")
            a.persist_offsets()
            assert broker.service.query_offset("g", "orders", 3) == 1


def test_giving_a_lease_back_ends_a_parked_pull_of_the_group(broker: EmbeddedBroker):
    service = broker.service
    q0 = MessageQueue("orders", "broker-a", 0)
    assert service.lock_queues("g", "a", [q0]) == {q0}
    threading.Timer(0.1, service.unlock_queues, ("g", "a", [q0])).start()
    started = time.monotonic()
    service.pull_wait(PullBatch("g", (), wait_ms=5000))
    assert time.monotonic() - started < 2
