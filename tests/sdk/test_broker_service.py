"""BrokerService: delayed sends, send-back down to the DLQ, batched long polling, routes."""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path

import pytest

from localstore import NewMessage, PutResult, PutStatus, StoreOptions, pack_host
from offsetstore import MessageQueue
from sdk.broker.service import BrokerOptions, BrokerService
from sdk.clock import ManualClock
from sdk.message import PROPERTY_DELIVER_AT, dlq_topic, retry_topic
from sdk.transport.models import PullBatch, QueuePull, decode_records
from tests.sdk.waiting import wait_until


@pytest.fixture
def service(tmp_path: Path):
    options = BrokerOptions(delay_levels=[40] * 18, schedule_poll_interval_s=0.01)
    options.geometry = {"commitlog_file_size": 1 << 20}
    with BrokerService(tmp_path / "broker", options) as broker:
        yield broker


def message(topic: str = "orders", body: bytes = b"hello", queue_id: int = 0, **props: str):
    return NewMessage(topic, body, queue_id, {"UNIQ_KEY": f"U{time.monotonic_ns()}", **props})


def pull_all(service: BrokerService, topic: str, queue_id: int = 0, offset: int = 0):
    batch = PullBatch("g", (QueuePull(topic, queue_id, offset),), max_count=100)
    return decode_records(service.pull(batch).results[0].raw)


def test_send_stores_and_pull_hands_back_the_records(service: BrokerService):
    result = service.send([message(body=b"a"), message(body=b"b")])
    assert result.status == "PUT_OK" and result.queue_offset == 0
    assert len(result.offset_msg_ids) == 2
    assert [m.body for m in pull_all(service, "orders")] == [b"a", b"b"]


def test_a_batch_may_not_hold_delayed_messages(service: BrokerService):
    result = service.send([message(), message(DELAY="1")])
    assert result.status == "MESSAGE_ILLEGAL" and "delayed" in result.detail


def test_a_delayed_message_waits_under_the_schedule_topic(tmp_path: Path):
    clock = ManualClock()
    options = BrokerOptions(delay_levels=[40] * 18, clock=clock)
    options.geometry = {"commitlog_file_size": 1 << 20}
    with BrokerService(tmp_path / "broker", options) as service:
        result = service.send([message(body=b"later", DELAY="1")])
        assert result.status == "PUT_OK" and result.topic == "SCHEDULE_TOPIC_XXXX"
        due_ms = result.store_timestamp + 40
        clock.advance((due_ms - 1 - clock.time_ms()) / 1000)
        assert service.schedule.run_once() == 0  # 1 ms before it is due: never early
        assert pull_all(service, "orders") == []
        clock.advance(service.schedule.poll_interval_s)  # due, and a round comes
        assert_delivered_once_due(service)


def assert_delivered_once_due(service: BrokerService) -> None:
    batch = PullBatch("g", (QueuePull("orders", 0, 0),), wait_ms=5000)
    answer = service.pull_wait(batch)
    delivered = decode_records(answer.results[0].raw)
    assert [m.body for m in delivered] == [b"later"]
    assert "DELAY" not in delivered[0].properties


def test_an_absolute_time_already_due_is_delivered_at_once(service: BrokerService):
    past = str(time.time_ns() // 1_000_000 - 1000)
    result = service.send([message(body=b"now", **{PROPERTY_DELIVER_AT: past})])
    assert result.topic == "orders"
    assert [m.body for m in pull_all(service, "orders")] == [b"now"]


def test_a_bad_delay_is_refused(service: BrokerService):
    result = service.send([message(DELAY="soon")])
    assert result.status == "MESSAGE_ILLEGAL" and "delay" in result.detail


def test_send_back_retries_then_dead_letters(service: BrokerService):
    stored = service.send([message(body=b"poison", TAGS="paid")])
    phys = service.store.get_messages("orders", 0, 0).messages[0].phys_offset
    seen = []
    for attempt in range(3):
        answer = service.send_back("billing", phys, max_reconsume_times=2)
        assert answer.status == "PUT_OK", answer
        if attempt == 2:
            break
        batch = PullBatch("billing", (QueuePull(retry_topic("billing"), 0, attempt),), wait_ms=5000)
        retried = decode_records(service.pull_wait(batch).results[0].raw)[0]
        seen.append(retried.reconsume_times)
        assert retried.properties["RETRY_TOPIC"] == "orders"
        assert retried.properties["ORIGIN_MESSAGE_ID"] == stored_msg_id(service)
        phys = retried.phys_offset
    assert seen == [1, 2]
    dead = pull_all(service, dlq_topic("billing"))
    assert [m.body for m in dead] == [b"poison"] and dead[0].reconsume_times == 3
    assert stored.status == "PUT_OK"


def stored_msg_id(service: BrokerService) -> str | None:
    return service.store.get_messages("orders", 0, 0).messages[0].msg_id


def test_send_back_with_a_negative_level_dead_letters_at_once(service: BrokerService):
    service.send([message()])
    phys = service.store.get_messages("orders", 0, 0).messages[0].phys_offset
    assert service.send_back("g", phys, delay_level=-1).topic == dlq_topic("g")


def test_send_back_of_an_unknown_offset_is_refused(service: BrokerService):
    service.send([message()])
    answer = service.send_back("g", 3)
    assert answer.status == "MESSAGE_ILLEGAL" and "no message" in answer.detail


def test_send_back_of_a_half_message_is_refused(service: BrokerService):
    """A consumer cannot turn a transaction's half message (not committed, perhaps to be
    rolled back) into a retry that its group then consumes."""
    half = service.send_half("producers", message(body=b"not committed"))
    assert half.topic == "RMQ_SYS_TRANS_HALF_TOPIC"
    answer = service.send_back("g", half.phys_offsets[0])
    assert answer.status == "MESSAGE_ILLEGAL" and "broker's own topic" in answer.detail
    assert service.max_offset("SCHEDULE_TOPIC_XXXX", 2) == 0  # level 3: nothing scheduled
    assert service.max_offset(dlq_topic("g"), 0) == 0


def test_pull_wait_times_out_with_nothing_new(service: BrokerService):
    started = time.monotonic()
    answer = service.pull_wait(PullBatch("g", (QueuePull("orders", 0, 0),), wait_ms=60))
    assert time.monotonic() - started >= 0.06
    assert answer.results[0].status == "NO_MATCHED_LOGIC_QUEUE"


def test_pull_wait_answers_when_any_queue_gets_a_message(service: BrokerService):
    service.send([message(queue_id=0)])
    pulls = (QueuePull("orders", 0, 1), QueuePull("orders", 2, 0))
    threading.Timer(0.05, service.send, ([message(body=b"x", queue_id=2)],)).start()
    started = time.monotonic()
    answer = service.pull_wait(PullBatch("g", pulls, wait_ms=10_000))
    assert time.monotonic() - started < 5
    # only the queue that got a message is looked at again (and answered) after the wake-up
    assert [(r.queue_id, r.status) for r in answer.results] == [(2, "FOUND")]


def test_a_pull_at_a_bad_offset_answers_at_once_with_its_status(service: BrokerService):
    """A pull parks unread only when every queue is caught up: an offset past the end (or
    below the start) is answered at once, so the consumer corrects it."""
    service.send([message(), message()])
    started = time.monotonic()
    batch = PullBatch("g", (QueuePull("orders", 0, 9), QueuePull("orders", 1, 0)), wait_ms=10_000)
    answer = service.pull_wait(batch)
    assert time.monotonic() - started < 5
    statuses = {(r.queue_id, r.status, r.next_offset) for r in answer.results}
    assert (0, "OFFSET_OVERFLOW_BADLY", 2) in statuses


@pytest.mark.parametrize("max_count, tags", [(0, None), (32, "||")])
def test_a_pull_the_store_refuses_raises_at_once_not_after_its_wait(
    service: BrokerService, max_count: int, tags: str | None
):
    batch = PullBatch("g", (QueuePull("orders", 0, 0, tags),), max_count=max_count, wait_ms=10_000)
    started = time.monotonic()
    with pytest.raises(ValueError):
        service.pull_wait(batch)
    with pytest.raises(ValueError):
        asyncio.run(service.pull_async(batch))
    assert time.monotonic() - started < 5


def test_a_membership_change_ends_a_parked_pull(service: BrokerService):
    service.heartbeat("g", "a", {"orders": "*"}, "CLUSTERING")
    batch = PullBatch("g", (QueuePull("orders", 0, 0),), wait_ms=10_000)
    generation = service.groups.generation("g")
    threading.Timer(0.05, service.heartbeat, ("g", "b", {"orders": "*"}, "CLUSTERING")).start()
    started = time.monotonic()
    answer = service.pull_wait(batch)
    assert time.monotonic() - started < 5  # woken by the change, not by the 10 s wait
    assert answer.generation == generation + 1


@pytest.mark.parametrize("sender", ["loop", "thread"])
def test_pull_async_parks_a_future_and_wakes_on_arrival(service: BrokerService, sender: str):
    """A parked async pull is woken by an arrival appended on its own loop (resolved at once)
    or on another thread (handed to the loop)."""

    async def scenario() -> list[bytes]:
        batch = PullBatch("g", (QueuePull("orders", 1, 0),), wait_ms=10_000)
        arrival = ([message(body=sender.encode(), queue_id=1)],)
        if sender == "loop":
            asyncio.get_running_loop().call_later(0.05, service.send, *arrival)
        else:
            threading.Timer(0.05, service.send, arrival).start()
        started = time.monotonic()
        answer = await service.pull_async(batch)
        assert time.monotonic() - started < 5  # woken by the arrival, not by the 10 s wait
        return [m.body for m in decode_records(answer.results[0].raw)]

    assert asyncio.run(scenario()) == [sender.encode()]


def test_pull_async_answers_nothing_new_once_its_wait_ends(service: BrokerService):
    service.send([message(body=b"read", queue_id=1)])
    batch = PullBatch("g", (QueuePull("orders", 1, 1),), wait_ms=50)  # caught up: it parks
    answer = asyncio.run(service.pull_async(batch))
    assert [r.status for r in answer.results] == ["OFFSET_OVERFLOW_ONE"]  # caught up: no news


def test_close_answers_parked_pulls(tmp_path: Path):
    broker = BrokerService(tmp_path / "b", BrokerOptions(geometry={"commitlog_file_size": 1 << 20}))
    batch = PullBatch("g", (QueuePull("orders", 0, 0),), wait_ms=30_000)
    closer = threading.Timer(0.05, broker.close)
    closer.start()
    started = time.monotonic()
    broker.pull_wait(batch)
    assert time.monotonic() - started < 10
    # the pull is answered by close's first step; the rest of close still writes in tmp_path
    closer.join(timeout=30)
    assert not closer.is_alive()


def test_routes_and_offsets(service: BrokerService):
    assert service.queue_count("new-topic") == 4
    assert service.queue_count(retry_topic("g")) == 1
    assert service.query_offset("g", "orders", 0) is None
    service.commit_offsets("g", {MessageQueue("orders", "broker-a", 0): 7})
    assert service.query_offset("g", "orders", 0) == 7


def test_a_member_owning_no_queue_is_woken_by_a_membership_change(service: BrokerService):
    service.heartbeat("g", "a", {"orders": "*"}, "CLUSTERING")
    batch = PullBatch("g", (), wait_ms=10_000)
    threading.Timer(0.05, service.heartbeat, ("g", "b", {"orders": "*"}, "CLUSTERING")).start()
    started = time.monotonic()
    answer = service.pull_wait(batch)
    assert time.monotonic() - started < 5
    assert answer.results == []


def test_a_failed_start_stops_what_already_started(tmp_path: Path):
    import threading as threads

    before = {t.name for t in threads.enumerate()}
    options = BrokerOptions(geometry={"commitlog_file_size": 1 << 20}, transaction_max_checks=-1)
    with pytest.raises(ValueError):
        BrokerService(tmp_path / "b", options)

    def quiver_threads_left() -> set[str]:
        leftover = {t.name for t in threads.enumerate()} - before
        return {name for name in leftover if name.startswith("quiver")}

    wait_until(lambda: not quiver_threads_left())
    with BrokerService(tmp_path / "b", BrokerOptions(geometry={"commitlog_file_size": 1 << 20})):
        pass  # the store was released


def test_a_pull_from_a_consumer_behind_the_group_generation_does_not_wait(service: BrokerService):
    """A member that joined between the consumer's last look and this pull: the pull answers at
    once, so the consumer rebalances instead of parking on a stale view of the group."""
    known = service.heartbeat("g", "a", {"orders": "*"}, "CLUSTERING")
    service.heartbeat("g", "b", {"orders": "*"}, "CLUSTERING")  # the consumer has not seen this
    started = time.monotonic()
    answer = service.pull_wait(
        PullBatch("g", (QueuePull("orders", 0, 0),), wait_ms=10_000, generation=known)
    )
    assert time.monotonic() - started < 2
    assert answer.generation == known + 1


@pytest.mark.parametrize("wait_ms", [0, 10_000])
@pytest.mark.parametrize("how", ["sync", "async"])
def test_a_member_behind_the_group_generation_reads_nothing_until_it_rebalances(
    service: BrokerService, wait_ms: int, how: str
):
    """Its queues hold messages, but it may be about to hand them over: the answer carries the
    new generation alone. At the new generation the same pull reads them."""
    service.send([message(body=b"a"), message(body=b"b")])
    known = service.heartbeat("g", "a", {"orders": "*"}, "CLUSTERING")
    current = service.heartbeat("g", "b", {"orders": "*"}, "CLUSTERING")

    def pull(generation: int):
        batch = PullBatch("g", (QueuePull("orders", 0, 0),), wait_ms=wait_ms, generation=generation)
        return service.pull_wait(batch) if how == "sync" else asyncio.run(service.pull_async(batch))

    behind = pull(known)
    assert behind.generation == current and behind.results == []
    rebalanced = pull(current)
    assert [r.body for r in decode_records(rebalanced.results[0].raw)] == [b"a", b"b"]


def test_a_parked_member_whose_group_moves_reads_nothing_until_it_rebalances(
    service: BrokerService,
):
    """Parked at the group's generation: a member joins and a message arrives before the pull
    looks again. It answers the new generation alone."""
    known = service.heartbeat("g", "a", {"orders": "*"}, "CLUSTERING")
    batch = PullBatch("g", (QueuePull("orders", 0, 0),), wait_ms=10_000, generation=known)

    async def scenario():
        parked = asyncio.ensure_future(service.pull_async(batch))
        for _ in range(5):  # parks: nothing new, nothing to wait on but the wake-up
            await asyncio.sleep(0)
        assert not parked.done()
        joined = service.heartbeat("g", "b", {"orders": "*"}, "CLUSTERING")
        service.send([message(body=b"a")])  # before the woken pull runs again
        return joined, await parked

    joined, answer = asyncio.run(scenario())
    assert answer.generation == joined == known + 1 and answer.results == []


@pytest.mark.parametrize(
    "status, offsets",
    [
        (PutStatus.PUT_OK, [7, 9]),
        (PutStatus.FLUSH_DISK_TIMEOUT, [7, 9]),
        (PutStatus.MESSAGE_ILLEGAL, []),
    ],
)
def test_a_put_answer_becomes_the_transport_answer_field_for_field(status, offsets):
    """Every send's answer passes through send_result: status name, offsets only when the
    messages were stored, the store host as upper-case hex (kept per host)."""
    from sdk.broker.send_answers import send_result

    host = pack_host("10.0.0.254", 10911)
    put = PutResult(status, "why", "orders", 2, 40, [7, 9], 1_700_000_000_000, host)
    for _ in range(2):  # the second reads the kept hex
        answer = send_result(put)
        assert (answer.status, answer.detail, answer.topic, answer.queue_id) == (
            status.value, "why", "orders", 2,
        )  # fmt: skip
        assert (answer.queue_offset, answer.phys_offsets) == (40, offsets)
        assert answer.store_host == host.hex().upper() and answer.store_host == "0A0000FE00002A9F"
        assert answer.store_timestamp == 1_700_000_000_000


def test_a_parked_pull_sees_a_put_that_timed_out_on_the_disk_once_a_flush_covers_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    """Under sync flush a put answered FLUSH_DISK_TIMEOUT is stored but invisible until a flush
    covers it; the pull parked on its queue is woken then, not at the end of its wait."""
    import localstore.commitlog.log as commitlog_module

    real = commitlog_module._write_through
    disk_free = threading.Event()
    disk_free.set()

    def stalling(pending: list[tuple[object, int, bytes]], *, durably: bool) -> bool:
        disk_free.wait()
        return real(pending, durably=durably)

    monkeypatch.setattr(commitlog_module, "_write_through", stalling)
    options = BrokerOptions(store=StoreOptions(sync_flush_timeout_ms=100))
    options.geometry = {"commitlog_file_size": 1 << 20, "flush_mode": "sync"}
    with BrokerService(tmp_path / "broker", options) as broker:
        assert broker.send([message(body=b"first")]).status == "PUT_OK"
        answers: list[tuple[float, list[bytes]]] = []
        parked = PullBatch("g", (QueuePull("orders", 0, 1),), wait_ms=20_000)

        def pull() -> None:
            result = broker.pull_wait(parked)
            bodies = [m.body for r in result.results for m in decode_records(r.raw)]
            answers.append((time.monotonic(), bodies))

        puller = threading.Thread(target=pull)
        puller.start()
        time.sleep(0.1)  # parked
        disk_free.clear()
        try:
            assert broker.send([message(body=b"late")]).status == "FLUSH_DISK_TIMEOUT"
            time.sleep(0.2)  # woken by the put, it found nothing visible and parked again
            released = time.monotonic()
        finally:
            disk_free.set()
        puller.join(30)
        assert answers, "the parked pull never answered"
        answered_at, bodies = answers[0]
        assert bodies == [b"late"]
        assert answered_at - released < 5  # not the 20 s of its wait


def test_a_silent_member_is_dropped_once_the_brokers_clock_passes_its_expiry(tmp_path: Path):
    clock = ManualClock()
    options = BrokerOptions(member_expiry_ms=120_000, clock=clock)
    options.geometry = {"commitlog_file_size": 1 << 20}
    with BrokerService(tmp_path / "broker", options) as service:
        service.heartbeat("g", "silent", {"orders": "*"}, "CLUSTERING")
        clock.advance(60)
        service.heartbeat("g", "alive", {"orders": "*"}, "CLUSTERING")
        clock.advance(60)  # silent for exactly the expiry: still a member
        assert service.group_view("g").members == ("alive", "silent")
        clock.advance(0.001)
        assert service.group_view("g").members == ("alive",)


def test_stop_waiting_answers_parked_pulls_and_transaction_fetches_at_once(
    service: BrokerService,
):
    """A server shutting down calls stop_waiting(): every long poll it holds, pulls and
    transaction-check fetches alike, is answered now, not when its minute is up."""
    service.send([message()])

    async def parked() -> None:
        pull = asyncio.ensure_future(
            service.pull_async(PullBatch("g", (QueuePull("orders", 0, 1),), wait_ms=60_000))
        )
        checks = asyncio.ensure_future(
            service.fetch_transaction_checks_async("producers", "client-1", 60_000)
        )
        await asyncio.sleep(0)  # both park
        service.stop_waiting()
        pulled, fetched = await asyncio.wait_for(asyncio.gather(pull, checks), 30)
        assert all(r.count == 0 for r in pulled.results)
        assert fetched.count == 0

    asyncio.run(parked())
    thread_answers: list[object] = []
    waiting = threading.Thread(
        target=lambda: thread_answers.append(
            service.fetch_transaction_checks("producers", "client-2", 60_000)
        )
    )
    waiting.start()
    waiting.join(30)  # stop_waiting() holds for a thread that comes later, too
    assert not waiting.is_alive()
