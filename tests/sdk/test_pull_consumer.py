"""The lite pull consumers (sdk.consumer.pull) against a real embedded broker and producer."""

from __future__ import annotations

import asyncio
import logging
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from offsetstore import MessageQueue
from sdk import (
    AsyncPullConsumer,
    BrokerOptions,
    ClientClosedError,
    ConsumeFrom,
    EmbeddedBroker,
    Message,
    MessageModel,
    Producer,
    PullConsumer,
    ReceivedMessage,
)
from sdk.clock import ManualClock
from sdk.consumer import pull_core

from .brokers import SMALL_GEOMETRY

GEOMETRY = SMALL_GEOMETRY
TOPIC = "orders"
GROUP = "billing"


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[EmbeddedBroker]:
    with EmbeddedBroker(tmp_path / "data", **GEOMETRY) as embedded:
        yield embedded


def send(broker: EmbeddedBroker, count: int, *, queue_id: int | None = None, tags: Any = None):
    """Send ``count`` messages ``m0``.. (round-robin over the queues unless ``queue_id``)."""
    with Producer(broker) as producer:
        return [
            producer.send(
                Message(TOPIC, f"m{i}".encode(), tags=tags(i) if callable(tags) else tags),
                queue_id=queue_id,
            )
            for i in range(count)
        ]


def from_first(broker: EmbeddedBroker, **options: Any) -> PullConsumer:
    """A consumer of ``GROUP`` that starts new queues at their first offset."""
    return PullConsumer(broker, GROUP, consume_from=ConsumeFrom.FIRST_OFFSET, **options)


def poll_until(consumer: PullConsumer, count: int, limit_s: float = 10.0) -> list[ReceivedMessage]:
    got: list[ReceivedMessage] = []
    deadline = time.monotonic() + limit_s
    while len(got) < count and time.monotonic() < deadline:
        got.extend(consumer.poll(0.2))
    return got


def queue(broker: EmbeddedBroker, queue_id: int, topic: str = TOPIC) -> MessageQueue:
    return MessageQueue(topic, broker.service.broker_name, queue_id)


def bodies(messages: list[ReceivedMessage]) -> list[bytes]:
    return [m.body for m in messages]


def in_queue_order(messages: list[ReceivedMessage]) -> bool:
    by_queue: dict[int, list[int]] = {}
    for message in messages:
        by_queue.setdefault(message.queue_id, []).append(message.queue_offset)
    return all(offsets == sorted(offsets) for offsets in by_queue.values())


# -- polling -----------------------------------------------------------------------------------


def test_poll_returns_what_was_sent_in_queue_order(broker):
    receipts = send(broker, 40)
    with from_first(broker) as consumer:
        consumer.subscribe([TOPIC])
        got = poll_until(consumer, 40)
        assert consumer.poll(0) == []
    assert sorted(bodies(got)) == sorted(f"m{i}".encode() for i in range(40))
    assert in_queue_order(got)
    sent = {(r.queue_id, r.queue_offset): r.msg_id for r in receipts}
    assert {(m.queue_id, m.queue_offset): m.msg_id for m in got} == sent


def test_max_poll_records_bounds_a_poll_and_loses_nothing(broker):
    send(broker, 30)
    with PullConsumer(
        broker, GROUP, consume_from=ConsumeFrom.FIRST_OFFSET, max_poll_records=7
    ) as consumer:
        consumer.subscribe([TOPIC])
        polls = []
        while sum(map(len, polls)) < 30:
            polls.append(consumer.poll(1.0))
            assert polls[-1], "messages stopped coming"
    assert all(len(batch) <= 7 for batch in polls)
    got = [m for batch in polls for m in batch]
    assert sorted(bodies(got)) == sorted(f"m{i}".encode() for i in range(30))
    assert in_queue_order(got)


def test_last_offset_start_sees_only_new_messages(broker):
    send(broker, 4)
    with PullConsumer(broker, GROUP) as consumer:  # ConsumeFrom.LAST_OFFSET
        consumer.subscribe({TOPIC: None})
        assert consumer.poll(0) == []
        send(broker, 2)
        assert sorted(bodies(poll_until(consumer, 2))) == [b"m0", b"m1"]


def test_empty_poll_returns_nothing_after_about_the_timeout(broker):
    with PullConsumer(broker, GROUP) as consumer:
        consumer.subscribe([TOPIC])
        started = time.monotonic()
        assert consumer.poll(0.3) == []
        elapsed = time.monotonic() - started
        assert consumer.poll(0) == []
    assert elapsed >= 0.25


def test_poll_returns_early_when_a_message_arrives(broker):
    with PullConsumer(broker, GROUP) as consumer:
        consumer.subscribe([TOPIC])
        sender = threading.Timer(0.2, send, (broker, 1))
        sender.start()
        try:
            started = time.monotonic()
            got = consumer.poll(30.0)
            elapsed = time.monotonic() - started
        finally:
            sender.join()
    assert bodies(got) == [b"m0"]
    # Answered by the arrival at 0.2 s: neither by the timeout nor by the lease renewal, which
    # ends a subscribed consumer's wait every 10 s on its own.
    assert elapsed < 5.0


def test_tag_expression_filters_and_advances_past_other_tags(broker):
    send(broker, 12, queue_id=0, tags=lambda i: "paid" if i % 3 == 0 else "created")
    with from_first(broker) as consumer:
        consumer.subscribe({TOPIC: "paid"})
        got = poll_until(consumer, 4)
        assert consumer.poll(0) == []
        assert bodies(got) == [b"m0", b"m3", b"m6", b"m9"]
        assert {m.tags for m in got} == {"paid"}
        assert consumer.position(queue(broker, 0)) == 12


# -- assign vs subscribe -----------------------------------------------------------------------


def test_assign_reads_only_the_given_queues_without_joining_the_group(broker):
    for queue_id in range(4):
        send(broker, 2, queue_id=queue_id)
    with from_first(broker) as consumer:
        every = consumer.queues_for(TOPIC)
        assert [q.queue_id for q in every] == [0, 1, 2, 3]
        consumer.assign([every[1], every[3]])
        assert consumer.assignment() == [every[1], every[3]]
        assert consumer.subscription() == {}
        got = poll_until(consumer, 4)
        assert consumer.poll(0) == []
        assert broker.service.group_view(GROUP).members == ()
    assert sorted((m.queue_id, m.queue_offset) for m in got) == [(1, 0), (1, 1), (3, 0), (3, 1)]


def test_assign_again_replaces_the_assignment(broker):
    send(broker, 3, queue_id=2)
    with from_first(broker) as consumer:
        consumer.assign([queue(broker, 0)])
        assert consumer.poll(0) == []
        consumer.assign([queue(broker, 2)])
        assert consumer.assignment() == [queue(broker, 2)]
        assert bodies(poll_until(consumer, 3)) == [b"m0", b"m1", b"m2"]
        consumer.assign([])
        assert consumer.assignment() == []
        assert consumer.poll(0.05) == []


def test_subscribe_joins_the_group_without_the_retry_topic(broker):
    with PullConsumer(broker, GROUP) as consumer:
        consumer.subscribe({TOPIC: "paid || refunded"})
        view = broker.service.group_view(GROUP)
        assert view.members == (consumer.client_id,)
        assert view.subscriptions[consumer.client_id] == {TOPIC: "paid || refunded"}
        assert {q.topic for q in consumer.assignment()} == {TOPIC}
        assert len(consumer.assignment()) == 4
        assert consumer.subscription() == {TOPIC: "paid || refunded"}
    assert broker.service.group_view(GROUP).members == ()  # close left the group


def test_subscribing_again_replaces_the_subscription(broker):
    send(broker, 2, queue_id=0)
    with from_first(broker) as consumer:
        consumer.subscribe([TOPIC])
        assert len(poll_until(consumer, 2)) == 2
        consumer.subscribe({"invoices": None})
        assert {q.topic for q in consumer.assignment()} == {"invoices"}
        assert broker.service.query_offset(GROUP, TOPIC, 0) == 2  # released with a commit
        assert consumer.poll(0) == []


def test_two_members_split_the_queues_and_see_everything_once(broker):
    first = from_first(broker)
    second = from_first(broker)
    with first, second:
        first.subscribe([TOPIC])
        second.subscribe([TOPIC])
        send(broker, 40)
        got: dict[str, list[ReceivedMessage]] = {"first": [], "second": []}
        deadline = time.monotonic() + 10
        while sum(map(len, got.values())) < 40 and time.monotonic() < deadline:
            got["first"].extend(first.poll(0.1))
            got["second"].extend(second.poll(0.1))
        mine, theirs = set(first.assignment()), set(second.assignment())
        assert len(mine) == len(theirs) == 2
        assert mine | theirs == {queue(broker, q) for q in range(4)}
        assert first.poll(0) == [] and second.poll(0) == []
    everything = got["first"] + got["second"]
    assert sorted(bodies(everything)) == sorted(f"m{i}".encode() for i in range(40))
    assert {m.queue_id for m in got["first"]} == {q.queue_id for q in mine}
    assert {m.queue_id for m in got["second"]} == {q.queue_id for q in theirs}


def test_a_joining_member_waits_for_the_owner_to_let_go_of_a_queue(broker):
    """Leases: the newcomer gets a queue only after its owner committed and released it, at
    the owner's next poll; until then nobody else reads it."""
    first = from_first(broker)
    second = from_first(broker)
    with first, second:
        first.subscribe([TOPIC])
        send(broker, 8)
        assert len(poll_until(first, 8)) == 8
        second.subscribe([TOPIC])
        assert second.poll(0.05) == [] and second.assignment() == []  # first still holds all
        send(broker, 4)
        kept = first.poll(0)  # sees the new generation: commits and releases two queues
        assert len(first.assignment()) == 2
        got: list[ReceivedMessage] = []
        deadline = time.monotonic() + 10
        while len(got) < 4 - len(kept) and time.monotonic() < deadline:
            got += second.poll(0.05)
        assert set(first.assignment()).isdisjoint(second.assignment())
        assert len(second.assignment()) == 2
        assert {m.queue_id for m in got} == {q.queue_id for q in second.assignment()}
        assert len(kept) + len(got) == 4  # each new message read once, by its queue's owner


def test_a_member_that_leaves_hands_its_queues_over_at_its_committed_offsets(broker):
    first = from_first(broker)
    second = from_first(broker)
    with first:
        first.subscribe([TOPIC])
        with second:
            second.subscribe([TOPIC])
            assert first.poll(0) == []  # sees the new generation: gives two queues away
            send(broker, 8)
            got_second = poll_until(second, 4)
        # second committed on close and left; first takes over where second stopped
        send(broker, 8)
        got_first = poll_until(first, 12)
        assert len(first.assignment()) == 4
    assert sorted(bodies(got_first + got_second)) == sorted(
        [f"m{i}".encode() for i in range(8)] * 2
    )


# -- seeking -------------------------------------------------------------------------------------


def test_seek_and_seek_to_beginning_and_end(broker):
    send(broker, 10, queue_id=0)
    q0 = queue(broker, 0)
    with PullConsumer(broker, GROUP) as consumer:  # starts at the end
        consumer.assign([q0])
        assert consumer.position(q0) == 10
        consumer.seek_to_beginning()
        assert consumer.position(q0) == 0
        assert bodies(poll_until(consumer, 10)) == [f"m{i}".encode() for i in range(10)]
        consumer.seek(q0, 7)
        assert consumer.position(q0) == 7
        assert bodies(poll_until(consumer, 3)) == [b"m7", b"m8", b"m9"]
        consumer.seek_to_beginning(q0)
        consumer.seek_to_end(q0)
        assert consumer.position(q0) == 10
        assert consumer.poll(0) == []


def test_seek_drops_messages_fetched_but_not_handed_out(broker):
    send(broker, 10, queue_id=0)
    q0 = queue(broker, 0)
    with PullConsumer(
        broker, GROUP, consume_from=ConsumeFrom.FIRST_OFFSET, max_poll_records=3
    ) as consumer:
        consumer.assign([q0])
        assert bodies(consumer.poll(1.0)) == [b"m0", b"m1", b"m2"]
        assert consumer.position(q0) == 3
        consumer.seek(q0, 8)
        assert bodies(poll_until(consumer, 2)) == [b"m8", b"m9"]


def test_seek_out_of_range_moves_to_the_queue_end_with_a_warning(broker, caplog):
    send(broker, 3, queue_id=0)
    q0 = queue(broker, 0)
    with PullConsumer(broker, GROUP) as consumer:
        consumer.assign([q0])
        consumer.seek(q0, 100)
        with caplog.at_level(logging.WARNING, logger="sdk.consumer.pull"):
            assert consumer.poll(0) == []
        assert consumer.position(q0) == 3
        assert "out of range (OFFSET_OVERFLOW_BADLY); moving to 3" in caplog.text
        send(broker, 1, queue_id=0)
        assert bodies(poll_until(consumer, 1)) == [b"m0"]


def test_offsets_for_times_finds_the_first_message_at_or_after(broker):
    send(broker, 3, queue_id=0)
    time.sleep(0.01)
    middle_ms = time.time_ns() // 1_000_000
    later = send(broker, 2, queue_id=0)
    assert later[0].store_timestamp >= middle_ms
    q0, q1 = queue(broker, 0), queue(broker, 1)
    with PullConsumer(broker, GROUP) as consumer:
        consumer.assign([q0, q1])
        found = consumer.offsets_for_times({q0: middle_ms, q1: middle_ms})
        assert found == {q0: 3, q1: 0}
        assert consumer.offsets_for_times({q0: 0}) == {q0: 0}
        assert consumer.offsets_for_times({q0: middle_ms + 3_600_000}) == {q0: 5}
        consumer.seek(q0, found[q0])
        assert bodies(poll_until(consumer, 2)) == [b"m0", b"m1"]


# -- offsets ---------------------------------------------------------------------------------------


def test_commit_and_committed_and_a_new_member_resumes_there(broker):
    send(broker, 10, queue_id=0)
    q0 = queue(broker, 0)
    with PullConsumer(
        broker, GROUP, consume_from=ConsumeFrom.FIRST_OFFSET, auto_commit=False
    ) as consumer:
        consumer.assign([q0])
        assert consumer.committed(q0) == 0  # a never-committed queue records its start
        consumer.seek(q0, 4)
        assert bodies(poll_until(consumer, 6))[0] == b"m4"
        consumer.commit({q0: 6})
        assert consumer.committed(q0) == 6
        assert broker.service.query_offset(GROUP, TOPIC, 0) == 6  # persisted at once
        assert consumer.committed(queue(broker, 3, topic="elsewhere")) is None
    with from_first(broker) as again:
        again.subscribe([TOPIC])
        assert again.position(q0) == 6
        assert bodies(poll_until(again, 4)) == [b"m6", b"m7", b"m8", b"m9"]
        again.commit()
        assert again.committed(q0) == 10


def test_commit_checks_its_offsets(broker):
    with PullConsumer(broker, GROUP) as consumer:
        consumer.assign([queue(broker, 0)])
        with pytest.raises(ValueError, match=r"queueId=1.*not assigned"):
            consumer.commit({queue(broker, 1): 3})
        with pytest.raises(ValueError, match="offset is an int >= 0"):
            consumer.commit({queue(broker, 0): -1})


def test_auto_commit_on_close(broker):
    send(broker, 6, queue_id=0)
    q0 = queue(broker, 0)
    with from_first(broker) as consumer:
        consumer.assign([q0])
        assert len(poll_until(consumer, 6)) == 6
        assert broker.service.query_offset(GROUP, TOPIC, 0) == 0  # not due yet
    assert broker.service.query_offset(GROUP, TOPIC, 0) == 6
    with from_first(broker) as again:
        again.assign([q0])
        assert again.poll(0) == []


def test_auto_commit_during_poll_commits_what_earlier_polls_returned(broker, clock):
    send(broker, 6, queue_id=0)
    q0 = queue(broker, 0)
    with from_first(
        broker,
        auto_commit_interval_s=0.05,
        max_poll_records=4,
        clock=clock,
    ) as consumer:
        consumer.assign([q0])
        assert len(consumer.poll(1.0)) == 4
        assert broker.service.query_offset(GROUP, TOPIC, 0) == 0
        clock.advance(0.049)
        assert len(consumer.poll(1.0)) == 2  # the interval has not passed: no commit
        assert broker.service.query_offset(GROUP, TOPIC, 0) == 0
        clock.advance(0.001)
        assert consumer.poll(0) == []  # commits the 6 handed out before
        assert broker.service.query_offset(GROUP, TOPIC, 0) == 6


def test_without_auto_commit_close_commits_nothing(broker):
    send(broker, 5, queue_id=0)
    q0 = queue(broker, 0)
    with PullConsumer(
        broker, GROUP, consume_from=ConsumeFrom.FIRST_OFFSET, auto_commit=False
    ) as consumer:
        consumer.assign([q0])
        assert len(poll_until(consumer, 5)) == 5
    with PullConsumer(broker, GROUP) as again:
        again.assign([q0])
        assert bodies(poll_until(again, 5)) == [f"m{i}".encode() for i in range(5)]


# -- pause / resume --------------------------------------------------------------------------------


def test_pause_and_resume(broker):
    send(broker, 3, queue_id=0)
    send(broker, 3, queue_id=1)
    q0, q1 = queue(broker, 0), queue(broker, 1)
    with from_first(broker) as consumer:
        consumer.assign([q0, q1])
        consumer.pause(q0)
        assert consumer.paused() == [q0]
        got = poll_until(consumer, 3)
        assert consumer.poll(0.05) == []
        assert {m.queue_id for m in got} == {1}
        assert consumer.position(q0) == 0
        consumer.resume(q0)
        assert consumer.paused() == []
        assert [(m.queue_id, m.body) for m in poll_until(consumer, 3)] == [
            (0, b"m0"),
            (0, b"m1"),
            (0, b"m2"),
        ]


def test_fetched_messages_of_a_paused_queue_wait_for_resume(broker):
    send(broker, 4, queue_id=0)
    q0 = queue(broker, 0)
    with PullConsumer(
        broker, GROUP, consume_from=ConsumeFrom.FIRST_OFFSET, max_poll_records=1
    ) as consumer:
        consumer.assign([q0])
        assert bodies(consumer.poll(1.0)) == [b"m0"]  # m1..m3 fetched, buffered
        consumer.pause(q0)
        assert consumer.poll(0.05) == []
        consumer.resume(q0)
        assert bodies(consumer.poll(0)) == [b"m1"]
        assert consumer.position(q0) == 2


# -- broadcasting ----------------------------------------------------------------------------------


def test_broadcasting_members_each_see_everything_and_keep_their_own_offsets(broker, tmp_path):
    offsets_dir = tmp_path / "offsets"
    send(broker, 8)

    def member(name: str) -> PullConsumer:
        return PullConsumer(
            broker,
            GROUP,
            message_model=MessageModel.BROADCASTING,
            consume_from=ConsumeFrom.FIRST_OFFSET,
            instance_name=name,
            offsets_dir=offsets_dir,
        )

    with member("a") as a, member("b") as b:
        a.subscribe([TOPIC])
        b.subscribe([TOPIC])
        assert len(a.assignment()) == len(b.assignment()) == 4
        assert len(poll_until(a, 8)) == 8
        assert len(poll_until(b, 8)) == 8
    host = socket.gethostname()
    assert (offsets_dir / f"{host}@a" / GROUP / "offsets.json").exists()
    assert (offsets_dir / f"{host}@b" / GROUP / "offsets.json").exists()
    assert broker.service.query_offset(GROUP, TOPIC, 0) is None  # nothing on the broker
    send(broker, 1)
    with member("a") as a:
        a.subscribe([TOPIC])
        assert bodies(poll_until(a, 1)) == [b"m0"]
        assert a.poll(0) == []


# -- asyncio ---------------------------------------------------------------------------------------


def test_async_consumer_mirrors_the_blocking_one(broker):
    send(broker, 6, queue_id=0)
    q0 = queue(broker, 0)

    async def main() -> None:
        async with AsyncPullConsumer(
            broker, GROUP, consume_from=ConsumeFrom.FIRST_OFFSET, auto_commit=False
        ) as consumer:
            consumer.subscribe([TOPIC])
            assert consumer.assignment() == []  # joined by the first poll
            got: list[ReceivedMessage] = []
            while len(got) < 6:
                batch = await consumer.poll(1.0)
                assert batch
                got.extend(batch)
            assert bodies(got) == [f"m{i}".encode() for i in range(6)]
            assert len(consumer.assignment()) == 4
            assert consumer.position(q0) == 6
            await consumer.commit({q0: 5})
            assert await consumer.committed(q0) == 5
            await consumer.seek_to_beginning(q0)
            assert consumer.position(q0) == 0
            await consumer.seek_to_end()
            assert consumer.position(q0) == 6
            found = await consumer.offsets_for_times({q0: 0})
            consumer.seek(q0, found[q0])
            consumer.pause(q0)
            assert await consumer.poll(0.05) == []
            consumer.resume(q0)
            assert len(await consumer.poll(1.0)) == 6
            assert [q.queue_id for q in await consumer.queues_for(TOPIC)] == [0, 1, 2, 3]
        assert consumer.closed
        with pytest.raises(ClientClosedError):
            await consumer.poll(0)

    asyncio.run(main())
    assert broker.service.query_offset(GROUP, TOPIC, 0) == 5
    assert broker.service.group_view(GROUP).members == ()


def test_async_poll_waits_and_returns_early_on_arrival(broker):
    async def main() -> tuple[list[ReceivedMessage], list[ReceivedMessage], float]:
        async with AsyncPullConsumer(broker, GROUP) as consumer:
            consumer.assign([queue(broker, 2)])
            empty = await consumer.poll(0.2)
            loop = asyncio.get_running_loop()
            loop.call_later(0.2, lambda: send(broker, 1, queue_id=2))
            started = time.monotonic()
            got = await consumer.poll(30.0)
            return empty, got, time.monotonic() - started

    empty, got, elapsed = asyncio.run(main())
    assert empty == []
    assert bodies(got) == [b"m0"]
    assert elapsed < 5.0  # answered by the arrival at 0.2 s
    assert broker.service.query_offset(GROUP, TOPIC, 2) == 1  # auto-committed on close


def test_async_members_split_the_queues(broker):
    async def main() -> tuple[
        list[ReceivedMessage], list[ReceivedMessage], tuple[set[MessageQueue], set[MessageQueue]]
    ]:
        first = AsyncPullConsumer(broker, GROUP, consume_from=ConsumeFrom.FIRST_OFFSET)
        second = AsyncPullConsumer(broker, GROUP, consume_from=ConsumeFrom.FIRST_OFFSET)
        async with first, second:
            first.subscribe([TOPIC])
            second.subscribe([TOPIC])
            await first.poll(0)
            await second.poll(0)
            send(broker, 20)
            mine: list[ReceivedMessage] = []
            theirs: list[ReceivedMessage] = []
            deadline = time.monotonic() + 10
            while len(mine) + len(theirs) < 20 and time.monotonic() < deadline:
                first_batch, second_batch = await asyncio.gather(first.poll(0.1), second.poll(0.1))
                mine.extend(first_batch)
                theirs.extend(second_batch)
            queues = set(first.assignment()), set(second.assignment())
            return mine, theirs, queues

    mine, theirs, (my_queues, their_queues) = asyncio.run(main())
    assert len(my_queues) == len(their_queues) == 2
    assert my_queues | their_queues == {queue(broker, q) for q in range(4)}
    assert sorted(bodies(mine + theirs)) == sorted(f"m{i}".encode() for i in range(20))
    assert {m.queue_id for m in mine} == {q.queue_id for q in my_queues}
    assert {m.queue_id for m in theirs} == {q.queue_id for q in their_queues}


# -- queue leases --------------------------------------------------------------------------------


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
def short_lease_broker(tmp_path: Path, clock: ManualClock) -> Iterator[EmbeddedBroker]:
    """A broker whose queue leases last 300 ms (30 s by default) on ``clock``."""
    options = BrokerOptions(queue_lease_ms=300, clock=clock)
    with EmbeddedBroker(tmp_path / "data", options=options, **GEOMETRY) as embedded:
        yield embedded


def take_over(broker: EmbeddedBroker, q0: MessageQueue, offset: int) -> None:
    """Member "B" takes ``q0``'s expired lease and commits ``offset`` (it consumed up to it)."""
    service = broker.service
    assert service.lock_queues(GROUP, "B", [q0]) == {q0}
    service.commit_offsets(GROUP, {q0: offset})


@pytest.mark.parametrize("comeback", ["poll", "commit", "close"])
def test_a_member_that_lost_a_lease_drops_the_queue_without_committing(
    short_lease_broker, clock, caplog, comeback
):
    broker = short_lease_broker
    send(broker, 30, queue_id=0)
    q0 = queue(broker, 0)
    with from_first(
        broker,
        max_poll_records=10,
        auto_commit_interval_s=0.1,
        clock=clock,
    ) as consumer:
        consumer.subscribe([TOPIC])
        assert len(consumer.poll(1.0)) == 10
        clock.advance(0.299)  # the application is busy, just short of the lease
        assert broker.service.lock_queues(GROUP, "B", [q0]) == set()
        clock.advance(0.201)  # now longer than the lease
        take_over(broker, q0, 25)
        with caplog.at_level(logging.WARNING, logger="sdk.consumer.pull"):
            if comeback == "poll":
                assert consumer.poll(0) == []  # nothing more of q0: it is not ours any more
            elif comeback == "commit":
                consumer.commit()
            else:
                consumer.close()
        assert broker.service.query_offset(GROUP, TOPIC, 0) == 25  # B's commit stands
        assert "lost the lease of" in caplog.text and "queueId=0" in caplog.text
        assert "dropped without committing" in caplog.text
        assert "poll at least every 10 s" in caplog.text
        if comeback != "close":
            assert q0 not in consumer.assignment() and len(consumer.assignment()) == 3
            broker.service.unlock_queues(GROUP, "B", [q0])  # B lets go: taken back at 25
            assert bodies(poll_until(consumer, 5)) == [f"m{i}".encode() for i in range(25, 30)]
    final = 25 if comeback == "close" else 30
    assert broker.service.query_offset(GROUP, TOPIC, 0) == final


class LastTwoWhenShared:
    """Every queue alone; only the last two when the group has another member."""

    name = "TEST"

    def allocate(
        self, consumer_group: str, current_cid: str, all_queues: Any, all_cids: Any
    ) -> list[MessageQueue]:
        queues = sorted(set(all_queues))
        return queues if len(set(all_cids)) == 1 else queues[2:]


def test_a_queue_taken_away_after_its_lease_was_lost_is_released_without_a_commit(
    short_lease_broker, clock, monkeypatch
):
    monkeypatch.setattr(pull_core, "LEASE_RENEW_INTERVAL_S", 0.1, raising=False)  # lease / 3
    broker = short_lease_broker
    service = broker.service
    send(broker, 30, queue_id=0)
    send(broker, 30, queue_id=1)
    q0, q2, q3 = (queue(broker, q) for q in (0, 2, 3))
    with from_first(
        broker,
        auto_commit_interval_s=60,  # only the release commits
        allocate_strategy=LastTwoWhenShared(),
        clock=clock,
    ) as consumer:
        consumer.subscribe([TOPIC])
        assert len(poll_until(consumer, 60)) == 60
        clock.advance(0.5)  # the application is busy longer than the lease
        service.heartbeat(GROUP, "B", {TOPIC: "*"}, "CLUSTERING")  # B joins: q0 and q1 go
        take_over(broker, q0, 25)
        assert consumer.poll(0) == []  # sees the new generation: releases q1, drops q0
        assert consumer.assignment() == [q2, q3]
        assert service.query_offset(GROUP, TOPIC, 0) == 25  # B's commit stands
        assert service.query_offset(GROUP, TOPIC, 1) == 30  # released with a commit
        owners = service.group_view(GROUP).owners
        assert owners == {q0: "B", q2: consumer.client_id, q3: consumer.client_id}


def test_polling_renews_the_leases_during_a_long_poll(tmp_path, monkeypatch):
    # A real long poll on the system clock: it must renew on its own, no test drives it.
    monkeypatch.setattr(pull_core, "LEASE_RENEW_INTERVAL_S", 0.1, raising=False)
    options = BrokerOptions(queue_lease_ms=1000)
    with (
        EmbeddedBroker(tmp_path / "data", options=options, **GEOMETRY) as broker,
        PullConsumer(broker, GROUP) as consumer,
    ):
        service = broker.service
        consumer.subscribe([TOPIC])
        mine = consumer.assignment()
        assert len(mine) == 4
        assert consumer.poll(1.5) == []  # longer than the lease
        assert service.group_view(GROUP).owners == dict.fromkeys(mine, consumer.client_id)
        assert service.lock_queues(GROUP, "B", mine) == set()


def test_polling_renews_the_leases_between_short_polls(tmp_path, monkeypatch, clock):
    monkeypatch.setattr(pull_core, "LEASE_RENEW_INTERVAL_S", 0.1, raising=False)
    options = BrokerOptions(queue_lease_ms=1000, clock=clock)
    with (
        EmbeddedBroker(tmp_path / "data", options=options, **GEOMETRY) as broker,
        PullConsumer(broker, GROUP, clock=clock) as consumer,
    ):
        service = broker.service
        consumer.subscribe([TOPIC])
        mine = consumer.assignment()
        assert len(mine) == 4
        for _ in range(15):  # short polls, 100 ms apart: 1.5 leases in all
            consumer.poll(0)
            clock.advance(0.1)
        assert service.lock_queues(GROUP, "B", mine) == set()
        assert consumer.assignment() == mine


def test_polling_less_often_than_the_lease_is_warned_about(broker, monkeypatch, caplog, clock):
    monkeypatch.setattr(pull_core, "QUEUE_LEASE_S", 0.5, raising=False)
    monkeypatch.setattr(pull_core, "LEASE_RENEW_INTERVAL_S", 0.1, raising=False)
    with PullConsumer(broker, GROUP, clock=clock) as consumer:
        consumer.subscribe([TOPIC])
        with caplog.at_level(logging.WARNING, logger="sdk.consumer.pull"):
            consumer.poll(0)
            clock.advance(0.5)  # a renewal exactly one lease after the last: not warned
            consumer.poll(0)
            assert "longer than the broker's queue lease" not in caplog.text
            clock.advance(0.7)
            consumer.poll(0)
        assert "longer than the broker's queue lease" in caplog.text
        assert "poll at least every" in caplog.text
        assert len(consumer.assignment()) == 4  # nobody took them (the real lease is 30 s)


def test_a_member_waiting_for_a_lease_asks_again_at_least_every_50_ms(broker, monkeypatch):
    first = from_first(broker)
    second = from_first(broker)
    with first, second:
        first.subscribe([TOPIC])
        second.subscribe([TOPIC])
        assert second.assignment() == []  # first holds every queue: two are pending
        waits: list[int] = []
        real_pull = second._transport.pull

        def recording_pull(batch: Any) -> Any:
            waits.append(batch.wait_ms)
            return real_pull(batch)

        monkeypatch.setattr(second._transport, "pull", recording_pull)
        assert second.poll(0.5) == []
        assert len(waits) >= 5 and max(waits) <= 50
        first.poll(0)  # sees the new generation: lets two queues go
        deadline = time.monotonic() + 10
        while len(second.assignment()) < 2 and time.monotonic() < deadline:
            second.poll(0.5)
        assert len(second.assignment()) == 2
        assert set(first.assignment()).isdisjoint(second.assignment())


def test_a_clustering_consumer_runs_no_periodic_offset_persist(broker):
    """A periodic persist would send the last commit of a queue again after its lease was lost
    (between two polls of a busy application), over the new owner's commits."""
    with PullConsumer(broker, GROUP) as consumer:
        consumer.subscribe([TOPIC])
        assert not [t for t in threading.enumerate() if t.name == f"offsets-{GROUP}"]


def test_async_member_that_lost_a_lease_drops_the_queue_without_committing(
    short_lease_broker, clock, caplog
):
    broker = short_lease_broker
    send(broker, 30, queue_id=0)
    q0 = queue(broker, 0)

    async def main() -> list[MessageQueue]:
        async with AsyncPullConsumer(
            broker,
            GROUP,
            consume_from=ConsumeFrom.FIRST_OFFSET,
            max_poll_records=10,
            auto_commit_interval_s=0.1,
            clock=clock,
        ) as consumer:
            consumer.subscribe([TOPIC])
            assert len(await consumer.poll(1.0)) == 10
            clock.advance(0.5)  # the application is busy longer than the lease
            take_over(broker, q0, 25)
            assert await consumer.poll(0) == []
            return consumer.assignment()

    with caplog.at_level(logging.WARNING, logger="sdk.consumer.pull"):
        assignment = asyncio.run(main())
    assert q0 not in assignment and len(assignment) == 3
    assert broker.service.query_offset(GROUP, TOPIC, 0) == 25
    assert "lost the lease of" in caplog.text


# -- errors ----------------------------------------------------------------------------------------


def test_a_closed_consumer_refuses_every_call(broker):
    consumer = PullConsumer(broker, GROUP)
    consumer.assign([queue(broker, 0)])
    consumer.close()
    consumer.close()  # idempotent
    q0 = queue(broker, 0)
    for call in (
        lambda: consumer.poll(0),
        lambda: consumer.seek(q0, 0),
        consumer.seek_to_end,
        consumer.commit,
        lambda: consumer.committed(q0),
        lambda: consumer.position(q0),
        consumer.assignment,
        lambda: consumer.subscribe([TOPIC]),
        lambda: consumer.pause(q0),
        lambda: consumer.offsets_for_times({q0: 0}),
    ):
        with pytest.raises(ClientClosedError, match="closed"):
            call()


def test_one_poll_at_a_time(broker):
    with PullConsumer(broker, GROUP) as consumer:
        consumer.assign([queue(broker, 0)])

        def poll_once_in_a_thread() -> None:
            while True:  # the main thread's short polls may hold the consumer for a moment
                try:
                    consumer.poll(1.0)
                    return
                except RuntimeError:
                    time.sleep(0.001)

        waiting = threading.Thread(target=poll_once_in_a_thread)
        waiting.start()
        refused = None
        try:
            deadline = time.monotonic() + 10
            while refused is None and time.monotonic() < deadline:
                try:
                    consumer.poll(0)  # until the thread's poll has begun
                except RuntimeError as exc:
                    refused = exc
                time.sleep(0.005)
        finally:
            waiting.join()
        assert "already polling" in str(refused)
        assert consumer.poll(0) == []


def test_queues_not_assigned_are_refused_by_name(broker):
    with PullConsumer(broker, GROUP) as consumer:
        consumer.assign([queue(broker, 0)])
        stranger = queue(broker, 3)
        for call in (
            lambda: consumer.seek(stranger, 0),
            lambda: consumer.seek_to_beginning(stranger),
            lambda: consumer.position(stranger),
            lambda: consumer.pause(stranger),
            lambda: consumer.resume(stranger),
        ):
            with pytest.raises(ValueError, match=r"topic=orders.*queueId=3.*not assigned"):
                call()


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"max_poll_records": 0}, "max_poll_records must be an int >= 1"),
        ({"pull_batch_size": -1}, "pull_batch_size must be an int >= 1"),
        ({"auto_commit_interval_s": 0}, "auto_commit_interval_s must be > 0"),
        ({"consume_timestamp_ms": -5}, "consume_timestamp_ms must be >= 0"),
        ({"consume_from": "FIRST"}, "consume_from must be a ConsumeFrom"),
    ],
)
def test_bad_settings_are_named(broker, settings, message):
    with pytest.raises(ValueError, match=message):
        PullConsumer(broker, GROUP, **settings)


def test_bad_arguments_are_named(broker):
    with pytest.raises(ValueError, match="group"):
        PullConsumer(broker, "bad group!")
    with PullConsumer(broker, GROUP) as consumer:
        with pytest.raises(RuntimeError, match=r"subscribe\(\) or assign\(\)"):
            consumer.poll(0)
        with pytest.raises(ValueError, match="bare string"):
            consumer.subscribe(TOPIC)
        with pytest.raises(ValueError, match="at least one topic"):
            consumer.subscribe([])
        with pytest.raises(ValueError, match="illegal characters"):
            consumer.subscribe(["no spaces"])
        with pytest.raises(ValueError, match="names no tag"):
            consumer.subscribe({TOPIC: "||"})
        with pytest.raises(
            ValueError, match=r"brokerName=elsewhere.*not a queue of broker 'broker-a'"
        ):
            consumer.assign([MessageQueue(TOPIC, "elsewhere", 0)])
        consumer.assign([queue(broker, 0)])
        with pytest.raises(RuntimeError, match="cannot subscribe"):
            consumer.subscribe([TOPIC])
        with pytest.raises(ValueError, match="timeout_s"):
            consumer.poll(-1)
        with pytest.raises(ValueError, match="offset is an int >= 0"):
            consumer.seek(queue(broker, 0), -3)
        with pytest.raises(ValueError, match="timestamp"):
            consumer.offsets_for_times({queue(broker, 0): -1})


def test_a_pending_lease_is_asked_for_without_membership_rounds(broker, monkeypatch):
    """A queue allocated to this member whose lease another member still holds is asked for
    again with a lease request after each pull, not with a whole membership round (heartbeat,
    route, group view) every 50 ms; once let go it is consumed."""
    send(broker, 4, queue_id=0)
    q0 = queue(broker, 0)
    service = broker.service
    assert service.lock_queues(GROUP, "B", [q0]) == {q0}  # "B" is still letting go
    heartbeats = []
    real_heartbeat = service.heartbeat
    monkeypatch.setattr(
        service, "heartbeat", lambda *a, **k: heartbeats.append(1) or real_heartbeat(*a, **k)
    )
    with from_first(broker) as consumer:
        consumer.subscribe([TOPIC])
        started = time.monotonic()
        while time.monotonic() - started < 0.6:  # about a dozen pulls of at most 50 ms
            assert all(m.queue_id != 0 for m in consumer.poll(0.1))
        assert q0 not in consumer.assignment()
        assert len(heartbeats) <= 2  # the first round (and at most one more), not one a pull
        service.unlock_queues(GROUP, "B", [q0])
        got = poll_until(consumer, 4)
        assert q0 in consumer.assignment()
        assert sorted(m.body for m in got) == [b"m0", b"m1", b"m2", b"m3"]
