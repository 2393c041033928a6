"""PushConsumer mechanics the behaviour suite does not reach: flow control, consume timeout,
local retry when a send-back fails, membership changes, where a new group starts."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from sdk import (
    BrokerOptions,
    ConsumeFrom,
    ConsumeResult,
    EmbeddedBroker,
    FlowControlLimits,
    Message,
    Producer,
    PushConsumer,
)
from sdk.transport.in_process import InProcessTransport
from sdk.transport.models import PullBatch

from .waiting import wait_until


@pytest.fixture
def broker(tmp_path: Path):
    options = BrokerOptions(delay_levels=[30] * 18, schedule_poll_interval_s=0.01)
    with EmbeddedBroker(tmp_path / "b", options=options, commitlog_file_size=1 << 20) as b:
        yield b


def produce(broker: EmbeddedBroker, n: int, topic: str = "orders", queue_id: int | None = 0):
    with Producer(broker) as producer:
        for i in range(n):
            producer.send(Message(topic, b"m%d" % i), queue_id=queue_id)


def test_flow_control_stops_pulling_a_full_queue(broker):
    produce(broker, 200)
    release = threading.Event()
    seen: list[int] = []

    def blocked(messages):
        seen.extend(m.queue_offset for m in messages)
        release.wait(10)

    limits = FlowControlLimits(max_cached_messages=20)
    with PushConsumer(
        broker, "g", {"orders": None}, blocked, consume_threads=1,
        consume_from=ConsumeFrom.FIRST_OFFSET, flow_control=limits, pull_batch_size=8,
    ) as consumer:  # fmt: skip
        wait_until(lambda: bool(seen))
        queue = next(q for q in consumer.assignment() if q.topic == "orders" and q.queue_id == 0)
        # Watch the pulls the pull thread makes: a few that leave the full queue out show that
        # it stopped pulling it (without flow control every pull names it until all 200 came).
        skipping: list[PullBatch] = []
        next_pull = consumer.core.next_pull

        def watched(wait_ms: int | None = None) -> PullBatch:
            batch = next_pull(wait_ms)
            if all((p.topic, p.queue_id) != ("orders", 0) for p in batch.pulls):
                skipping.append(batch)
            return batch

        consumer.core.next_pull = watched  # type: ignore[method-assign]
        wait_until(lambda: len(skipping) >= 3)
        cached = consumer.core.states[queue].process_queue.cached_count
        assert 20 < cached <= 20 + 8  # one pull past the limit, then it stops
        release.set()
        wait_until(lambda: len(seen) == 200)


def test_a_message_stuck_past_the_consume_timeout_is_sent_back(broker):
    produce(broker, 1)
    deliveries: list[int] = []
    first_stuck = threading.Event()

    def stuck_once(messages):
        deliveries.append(messages[0].reconsume_times)
        if len(deliveries) == 1:
            first_stuck.wait(5)  # far longer than the consume timeout

    with PushConsumer(
        broker, "g", {"orders": None}, stuck_once,
        consume_from=ConsumeFrom.FIRST_OFFSET, consume_timeout_ms=200,
    ):  # fmt: skip
        wait_until(lambda: len(deliveries) >= 2)
        first_stuck.set()
    assert deliveries[:2] == [0, 1]  # redelivered through the retry topic


class SendBackFails(InProcessTransport):
    def __init__(self, service, failures: int) -> None:
        super().__init__(service)
        self.failures = failures

    def send_back(self, *args, **kwargs):
        if self.failures > 0:
            self.failures -= 1
            raise ConnectionError("broker away")
        return super().send_back(*args, **kwargs)


def test_a_failed_send_back_is_retried_locally(broker, monkeypatch):
    monkeypatch.setattr("sdk.consumer.push._LOCAL_RETRY_S", 0.05)
    produce(broker, 1)
    deliveries: list[int] = []

    def fail_twice(messages):
        deliveries.append(messages[0].reconsume_times)
        return ConsumeResult.RECONSUME_LATER if len(deliveries) < 3 else ConsumeResult.SUCCESS

    transport = SendBackFails(broker.service, failures=1)
    with PushConsumer(
        transport, "g", {"orders": None}, fail_twice, consume_from=ConsumeFrom.FIRST_OFFSET
    ):
        wait_until(lambda: len(deliveries) >= 3)
    # The local retry counts the attempt on the client only; the broker's retry copies the
    # stored message's count (as RocketMQ's broker does), so the next delivery shows 1 again.
    assert deliveries == [0, 1, 1]


def test_a_listener_answering_garbage_counts_as_failure(broker):
    produce(broker, 1)
    deliveries: list[int] = []

    def odd(messages):
        deliveries.append(messages[0].reconsume_times)
        return "ok" if len(deliveries) == 1 else None

    with PushConsumer(broker, "g", {"orders": None}, odd, consume_from=ConsumeFrom.FIRST_OFFSET):
        wait_until(lambda: len(deliveries) >= 2)
    assert deliveries == [0, 1]


def test_a_joining_member_takes_over_queues_at_once(broker):
    with PushConsumer(broker, "g", {"orders": None}, lambda m: None, rebalance_interval_s=60) as a:
        assert len([q for q in a.assignment() if q.topic == "orders"]) == 4
        with PushConsumer(
            broker, "g", {"orders": None}, lambda m: None, rebalance_interval_s=60
        ) as b:
            wait_until(  # a lets two queues go, then b gets their leases
                lambda: (
                    len([q for q in a.assignment() if q.topic == "orders"]) == 2
                    and len([q for q in b.assignment() if q.topic == "orders"]) == 2
                )
            )
            mine = {q for q in a.assignment() if q.topic == "orders"}
            theirs = {q for q in b.assignment() if q.topic == "orders"}
            assert mine.isdisjoint(theirs) and len(mine | theirs) == 4
        wait_until(lambda: len([q for q in a.assignment() if q.topic == "orders"]) == 4)


@pytest.mark.parametrize(
    ("consume_from", "expected"),
    [(ConsumeFrom.LAST_OFFSET, [b"new"]), (ConsumeFrom.FIRST_OFFSET, [b"m0", b"m1", b"new"])],
)
def test_where_a_new_group_starts(broker, consume_from, expected):
    produce(broker, 2)
    got: list[bytes] = []
    with PushConsumer(
        broker, "fresh", {"orders": None}, lambda ms: got.extend(m.body for m in ms),
        consume_from=consume_from, consume_threads=1,
    ):  # fmt: skip
        with Producer(broker) as producer:
            producer.send(Message("orders", b"new"), queue_id=0)
        wait_until(lambda: b"new" in got)
    assert got == expected


def test_consume_from_timestamp(broker):
    produce(broker, 2)
    # The store stamps messages with the real time: the cut is 1 ms after the second message,
    # and the third is stored once the real clock reached the cut.
    cut = broker.service.store.store_timestamp("orders", 0, 1) + 1
    wait_until(lambda: time.time_ns() // 1_000_000 >= cut)
    produce(broker, 1)
    got: list[bytes] = []
    with PushConsumer(
        broker, "by-time", {"orders": None}, lambda ms: got.extend(m.body for m in ms),
        consume_from=ConsumeFrom.TIMESTAMP, consume_timestamp_ms=cut,
    ):  # fmt: skip
        wait_until(lambda: bool(got))
        with Producer(broker) as producer:  # a marker after it: once it came, all before it had
            producer.send(Message("orders", b"m1"), queue_id=0)
        wait_until(lambda: b"m1" in got)
    assert got == [b"m0", b"m1"]  # the third message, m0 of the second round, then the marker


def test_close_persists_the_committed_offset(broker):
    produce(broker, 5)
    done = []
    with PushConsumer(
        broker, "g", {"orders": None}, done.extend,
        consume_from=ConsumeFrom.FIRST_OFFSET,
    ):  # fmt: skip
        wait_until(lambda: len(done) == 5)
    assert broker.service.query_offset("g", "orders", 0) == 5


def test_bad_settings_are_refused(broker):
    with pytest.raises(ValueError, match="subscribe"):
        PushConsumer(broker, "g", {}, lambda m: None)
    with pytest.raises(ValueError, match="illegal characters"):
        PushConsumer(broker, "bad group", {"t": None}, lambda m: None)
    with pytest.raises(ValueError, match="consume_batch_size"):
        PushConsumer(broker, "g", {"t": None}, lambda m: None, consume_batch_size=0)
    with pytest.raises(TypeError):
        PushConsumer(broker, "g", {"t": None}, lambda m: None, no_such_setting=1)


def test_filtered_messages_at_the_end_of_a_queue_are_committed_past(broker):
    with Producer(broker) as producer:
        producer.send(Message("orders", b"wanted", tags="paid"), queue_id=0)
        producer.send(Message("orders", b"skipped", tags="shipped"), queue_id=0)
    got: list[bytes] = []
    with PushConsumer(
        broker, "g", {"orders": "paid"}, lambda ms: got.extend(m.body for m in ms),
        consume_from=ConsumeFrom.FIRST_OFFSET,
    ) as consumer:  # fmt: skip
        wait_until(lambda: got == [b"wanted"])
        wait_until(lambda: consumer.core.offsets.clone_offset_table("orders").get(
            next(q for q in consumer.assignment() if q.topic == "orders" and q.queue_id == 0)
        ) == 2)  # fmt: skip
    assert broker.service.query_offset("g", "orders", 0) == 2


def test_two_consumers_never_share_a_client_id(broker):
    first = PushConsumer(broker, "g", {"orders": None}, lambda m: None, instance_name="same")
    second = PushConsumer(broker, "g", {"orders": None}, lambda m: None, instance_name="same")
    first.close()
    second.close()
    assert first.client_id != second.client_id
    assert "same" in first.client_id


def test_sticky_allocation_moves_only_what_it_must(broker):
    from sdk.consumer.allocate import AllocateSticky

    def orders(consumer: PushConsumer) -> set:
        return {q for q in consumer.assignment() if q.topic == "orders"}

    broker.service.store.options.default_queue_count = 12
    produce(broker, 1, topic="orders", queue_id=None)
    sticky = {"allocate_strategy": AllocateSticky(), "rebalance_interval_s": 60}
    with (
        PushConsumer(broker, "g", {"orders": None}, lambda m: None, **sticky) as a,
        PushConsumer(broker, "g", {"orders": None}, lambda m: None, **sticky) as b,
    ):
        wait_until(lambda: len(orders(a)) == 6 and len(orders(b)) == 6)
        before_a, before_b = orders(a), orders(b)
        with PushConsumer(broker, "g", {"orders": None}, lambda m: None, **sticky) as c:
            wait_until(lambda: (len(orders(a)), len(orders(b)), len(orders(c))) == (4, 4, 4))
            assert orders(a) <= before_a and orders(b) <= before_b  # nothing else moved


@pytest.mark.parametrize(("pause_s", "inline_expected"), [(0.0, True), (0.003, False)])
def test_a_quick_listener_runs_lone_batches_on_the_pull_thread(broker, pause_s, inline_expected):
    """One message at a time and a quick listener: after a run of quick calls, lone batches
    skip the thread hand-off; a listener slower than 0.5 ms always runs on the pool."""
    threads: list[str] = []
    arrived = threading.Event()

    def listener(messages):
        time.sleep(pause_s)
        threads.append(threading.current_thread().name)
        arrived.set()

    with (
        PushConsumer(broker, "g", {"orders": None}, listener) as consumer,
        Producer(broker) as producer,
    ):
        for _ in range(40):
            arrived.clear()
            producer.send(Message("orders", b"x"))
            assert arrived.wait(5)
        on_pull_thread = [name for name in threads if name.startswith("quiver-pull")]
        assert bool(on_pull_thread) is inline_expected
        assert threads[0].startswith("quiver-consume")  # it starts on the pool either way
        assert consumer.core.offsets.clone_offset_table("orders")
