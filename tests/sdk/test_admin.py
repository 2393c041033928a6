"""``Admin`` and ``AsyncAdmin`` on a real embedded broker: each change is shown to take effect
on the producers and consumers around it (queue counts producers use, lag that matches what
was produced and consumed, resets that make a consumer read again, a deleted topic that reads
nothing, also after a reopen)."""

from __future__ import annotations

import asyncio
import gc
import logging
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from offsetstore import MessageQueue
from sdk import (
    Admin,
    AsyncAdmin,
    ClientClosedError,
    ConsumeFrom,
    EmbeddedBroker,
    IllegalStateError,
    InvalidArgumentError,
    InvalidMessageError,
    Message,
    Producer,
    PullConsumer,
    SendRejectedError,
    UnknownGroupError,
    UnknownTopicError,
)
from sdk.admin import PERM_READ, PERM_READ_WRITE
from sdk.transport.models import PullBatch, QueuePull

from .brokers import SMALL_GEOMETRY

TOPIC = "orders"
GROUP = "billing"


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[EmbeddedBroker]:
    with EmbeddedBroker(tmp_path / "data", **SMALL_GEOMETRY) as embedded:
        yield embedded


@pytest.fixture
def admin(broker: EmbeddedBroker) -> Iterator[Admin]:
    with Admin(broker) as opened:
        yield opened


def produce(broker: EmbeddedBroker, count: int, *, queue_id: int | None = None) -> list[int]:
    """Send ``count`` messages ``m0``...; answers the queue each went to."""
    with Producer(broker) as producer:
        return [
            producer.send(Message(TOPIC, f"m{i}".encode()), queue_id=queue_id).queue_id
            for i in range(count)
        ]


def read(broker: EmbeddedBroker, queue_id: int, count: int) -> list[bytes]:
    """The next ``count`` bodies of ``queue_id`` for GROUP (committed at close)."""
    with PullConsumer(
        broker, GROUP, consume_from=ConsumeFrom.FIRST_OFFSET, max_poll_records=1
    ) as pull:
        pull.assign([MessageQueue(TOPIC, broker.service.broker_name, queue_id)])
        got: list[bytes] = []
        deadline = time.monotonic() + 10.0  # a missing message fails the test, never hangs it
        while len(got) < count and time.monotonic() < deadline:
            got.extend(m.body for m in pull.poll(timeout_s=0.5))
        return got


def pulled(broker: EmbeddedBroker, queue_id: int) -> tuple[str, int]:
    """What a pull of ``queue_id`` from offset 0 answers at once: status, message count."""
    answer = broker.service.pull(PullBatch(GROUP, (QueuePull(TOPIC, queue_id, 0),))).results[0]
    return answer.status, answer.count


def lags(admin: Admin) -> dict[int, tuple[int | None, int]]:
    return {row.queue_id: (row.committed, row.lag) for row in admin.lag(GROUP, TOPIC)}


def test_a_created_topic_has_the_queues_producers_spread_over(broker, admin):
    created = admin.create_topic(TOPIC, 2)
    assert (created.read_queue_nums, created.write_queue_nums, created.perm) == (2, 2, 6)
    assert set(produce(broker, 10)) == {0, 1}
    listed = admin.list_topics()
    assert [(t.name, t.read_queue_nums, t.system) for t in listed] == [(TOPIC, 2, False)]
    with pytest.raises(IllegalStateError, match="already exists"):
        admin.create_topic(TOPIC, 8)
    with pytest.raises(InvalidArgumentError, match="queue count"):
        admin.create_topic("other", 0)
    with pytest.raises(InvalidArgumentError, match="broker's own"):
        admin.create_topic("%RETRY%billing", 1)


def test_fewer_queues_are_refused_until_the_queues_that_go_are_consumed(broker, admin):
    admin.create_topic(TOPIC, 4)
    produce(broker, 3, queue_id=3)
    with pytest.raises(IllegalStateError, match="queue orders/3 holds 3 message"):
        admin.update_topic(TOPIC, queue_count=2)
    assert admin.list_topics()[0].write_queue_nums == 4  # the refusal narrowed nothing
    produce(broker, 1, queue_id=3)
    assert read(broker, 3, 4) == [b"m0", b"m1", b"m2", b"m0"]
    narrowed = admin.update_topic(TOPIC, queue_count=2)
    assert (narrowed.read_queue_nums, narrowed.write_queue_nums) == (2, 2)
    assert set(produce(broker, 10)) == {0, 1}
    with pytest.raises(InvalidMessageError, match="queue 3 does not exist"):
        produce(broker, 1, queue_id=3)
    admin.update_topic(TOPIC, queue_count=4)  # the queues come back as they were
    assert broker.service.max_offset(TOPIC, 3) == 4


def test_a_read_only_topic_refuses_sends(broker, admin):
    admin.create_topic(TOPIC, 1)
    assert admin.update_topic(TOPIC, perm=PERM_READ).writable is False
    with pytest.raises(SendRejectedError, match="not writable"):
        produce(broker, 1)
    admin.update_topic(TOPIC, perm=PERM_READ_WRITE)
    assert produce(broker, 1) == [0]
    with pytest.raises(InvalidArgumentError, match="perm"):
        admin.update_topic(TOPIC, perm=7)
    with pytest.raises(UnknownTopicError):
        admin.update_topic("nothing", perm=PERM_READ)


def test_lag_matches_what_was_produced_and_consumed(broker, admin):
    admin.create_topic(TOPIC, 2)
    produce(broker, 10, queue_id=0)
    produce(broker, 3, queue_id=1)
    assert read(broker, 0, 4) == [b"m0", b"m1", b"m2", b"m3"]
    assert lags(admin) == {0: (4, 6), 1: (None, 3)}
    group = admin.describe_group(GROUP)
    assert group.total_lag == 9 and not group.members and group.live is False
    assert [g.group for g in admin.list_groups()] == [GROUP]
    with pytest.raises(UnknownGroupError):
        admin.lag("nobody")
    produce(broker, 2, queue_id=1)
    assert lags(admin) == {0: (4, 6), 1: (None, 5)}


def test_resets_make_a_consumer_read_again(broker, admin):
    admin.create_topic(TOPIC, 1)
    produce(broker, 5, queue_id=0)
    time.sleep(0.005)  # store timestamps are ms: the cut falls between the two sends
    cut_ms = time.time_ns() // 1_000_000
    time.sleep(0.005)
    produce(broker, 5, queue_id=0)
    assert len(read(broker, 0, 10)) == 10
    assert lags(admin) == {0: (10, 0)}

    moved = admin.reset_offsets(GROUP, TOPIC, to="earliest")
    assert [(r.queue_id, r.previous, r.offset) for r in moved] == [(0, 10, 0)]
    assert read(broker, 0, 2) == [b"m0", b"m1"]
    admin.reset_offsets(GROUP, TOPIC, timestamp_ms=cut_ms)
    assert lags(admin) == {0: (5, 5)}
    admin.reset_offsets(GROUP, TOPIC, offsets={0: 8})
    assert read(broker, 0, 2) == [b"m3", b"m4"]
    with pytest.raises(InvalidArgumentError, match="outside"):
        admin.reset_offsets(GROUP, TOPIC, offsets={0: 11})
    with pytest.raises(InvalidArgumentError, match="exactly one"):
        admin.reset_offsets(GROUP, TOPIC, to="latest", timestamp_ms=cut_ms)


def test_an_unknown_group_is_reset_only_when_asked_to_create_it(broker, admin):
    produce(broker, 4, queue_id=0)
    with pytest.raises(UnknownGroupError, match="create"):
        admin.reset_offsets("fresh", TOPIC, offsets={0: 3})
    with pytest.raises(UnknownTopicError):
        admin.reset_offsets(GROUP, "nothing", to="earliest", create=True)
    admin.reset_offsets(GROUP, TOPIC, offsets={0: 3}, create=True)
    assert read(broker, 0, 1) == [b"m3"]


def test_a_reset_is_refused_while_the_group_consumes(broker, admin):
    produce(broker, 2, queue_id=0)
    with PullConsumer(broker, GROUP) as running:
        running.subscribe([TOPIC])
        with pytest.raises(IllegalStateError, match="running consumer"):
            admin.reset_offsets(GROUP, TOPIC, to="earliest", create=True)
        group = admin.describe_group(GROUP)
        assert group.live and [m.client_id for m in group.members] == [running.client_id]
        assert group.members[0].subscriptions == ((TOPIC, "*"),)
        with pytest.raises(IllegalStateError, match="running consumers in group"):
            admin.delete_topic(TOPIC)
    transport = broker.transport()  # a member that joins and leaves, committing nothing
    transport.heartbeat("idle", "client-1", {"elsewhere": "*"}, "CLUSTERING")
    transport.unregister("idle", "client-1")
    assert [(g.group, g.members) for g in admin.list_groups()] == [(GROUP, ())]


def test_a_deleted_topic_no_longer_lists_and_reads_nothing(broker, admin, tmp_path):
    produce(broker, 6, queue_id=0)
    assert len(read(broker, 0, 6)) == 6
    assert admin.delete_topic(TOPIC) == [0]  # the queues that held messages
    assert admin.list_topics() == []
    assert pulled(broker, 0) == ("NO_MATCHED_LOGIC_QUEUE", 0)
    assert broker.service.max_offset(TOPIC, 0) == 0
    with pytest.raises(UnknownGroupError):  # its offsets went with it
        admin.describe_group(GROUP)
    with pytest.raises(UnknownTopicError):
        admin.delete_topic(TOPIC)
    for own in ("%RETRY%billing", "SCHEDULE_TOPIC_XXXX", "RMQ_SYS_TRANS_HALF_TOPIC"):
        with pytest.raises(InvalidArgumentError, match="broker's own"):
            admin.delete_topic(own)
    broker.close()
    with EmbeddedBroker(tmp_path / "data") as reopened, Admin(reopened) as again:
        assert again.list_topics() == []
        assert pulled(reopened, 0) == ("NO_MATCHED_LOGIC_QUEUE", 0)


def test_a_closed_admin_refuses_calls_and_an_unclosed_one_warns(broker):
    admin = Admin(broker)
    admin.close()
    admin.close()
    with pytest.raises(ClientClosedError):
        admin.list_topics()
    forgotten = Admin(broker)
    with pytest.warns(ResourceWarning, match="unclosed Admin"):
        del forgotten
        gc.collect()


def test_async_admin_does_what_admin_does(broker):
    produce(broker, 10, queue_id=0)
    assert len(read(broker, 0, 4)) == 4

    async def administer() -> None:
        async with AsyncAdmin(broker) as admin:
            assert await admin.create_topic("refunds", 3) == (await admin.list_topics())[1]
            rows = await admin.lag(GROUP, TOPIC)
            assert [(r.queue_id, r.committed, r.lag) for r in rows if r.queue_id == 0] == [
                (0, 4, 6)
            ]
            assert [g.group for g in await admin.list_groups()] == [GROUP]
            assert (await admin.describe_group(GROUP)).total_lag == 6
            await admin.reset_offsets(GROUP, TOPIC, to="latest")
            with pytest.raises(UnknownGroupError):
                await admin.reset_offsets("fresh", TOPIC, to="latest")
            await admin.update_topic("refunds", queue_count=5)
            assert await admin.delete_topic("refunds") == []
            assert [t.name for t in await admin.list_topics()] == [TOPIC]
        with pytest.raises(ClientClosedError):
            await admin.list_topics()

    asyncio.run(administer())
    assert lags_after_async(broker) == {0: (10, 0)}


def lags_after_async(broker: EmbeddedBroker) -> dict[int, tuple[int | None, int]]:
    with Admin(broker) as admin:
        return {row.queue_id: (row.committed, row.lag) for row in admin.lag(GROUP, TOPIC)[:1]}


def test_a_refused_narrowing_leaves_the_permission_as_it_was(broker, admin):
    admin.create_topic(TOPIC, 4)
    produce(broker, 1, queue_id=3)
    with pytest.raises(IllegalStateError, match="queue orders/3 holds 1 message"):
        admin.update_topic(TOPIC, queue_count=2, perm=PERM_READ)
    (topic,) = admin.list_topics()
    assert (topic.read_queue_nums, topic.write_queue_nums, topic.perm) == (4, 4, PERM_READ_WRITE)
    assert produce(broker, 1, queue_id=0) == [0]  # still writable


def test_offsets_a_delete_left_behind_are_removed_at_the_next_open(tmp_path: Path, caplog) -> None:
    """A delete interrupted after the store's part (the tombstone) and before the offset
    table's: the next open removes the deleted topic's offsets, saying so, so a topic
    re-created with the name starts its groups from its own beginning."""
    root = tmp_path / "b"
    with EmbeddedBroker(root, commitlog_file_size=1 << 20) as broker:
        with Producer(broker) as producer:
            for i in range(5):
                producer.send(Message("Gone", f"old {i}".encode()), queue_id=0)
        broker.service.offsets.commit("g", "Gone", 0, 5)
        broker.service.offsets.commit("g", "Kept", 0, 1)
        broker.service.store.delete_topic("Gone")  # the store's part only: then the crash
    with (
        caplog.at_level(logging.WARNING, logger="sdk.broker.group_offsets"),
        EmbeddedBroker(root) as broker,
    ):
        assert broker.service.offsets.topics("g") == ["Kept"]
        with Producer(broker) as producer:
            producer.send(Message("Gone", b"new 0"), queue_id=0)
        with Admin(broker) as admin:
            (row,) = [r for r in admin.lag("g", "Gone") if r.queue_id == 0]
        assert row.committed is None and row.lag == 1  # the new message is not skipped
    assert "g@Gone" in caplog.text
