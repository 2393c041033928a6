"""The broker's answers a member settles from: ``rebalance_view`` (the group and its topics'
queue counts) and ``start_offsets`` (where the group starts each queue, a never-committed one
recorded at once), on the service, through the embedded transport and over HTTP."""

from __future__ import annotations

import logging
import time
from pathlib import Path

import pytest

from localstore import NewMessage
from offsetstore import MessageQueue, OffsetStatus, ReadOffsetType, RemoteBrokerOffsetStore
from sdk import Admin, ConsumeFrom, ConsumeResult, EmbeddedBroker, Message, Producer, PushConsumer
from sdk.broker.service import BrokerOptions, BrokerService
from sdk.consumer import push
from sdk.consumer.offset_steps import NO_BACKEND, read_starts
from sdk.errors import InvalidArgumentError
from sdk.message import retry_topic
from sdk.transport.http_sync import HttpTransport
from sdk.transport.in_process import InProcessTransport
from sdk.transport.models import (
    CONSUME_FROM_FIRST_OFFSET,
    CONSUME_FROM_LAST_OFFSET,
    CONSUME_FROM_TIMESTAMP,
    QueueStart,
)
from tests.sdk.remote.broker_process import BrokerProcess
from tests.sdk.waiting import wait_until

TOPIC = "starts"
GROUP = "g"


@pytest.fixture
def service(tmp_path: Path):
    options = BrokerOptions()
    options.geometry = {"commitlog_file_size": 1 << 20}
    with BrokerService(tmp_path / "broker", options) as broker:
        broker.admin.create_topic(TOPIC, 2, 6)
        yield broker


def _store(service: BrokerService, count: int, queue_id: int = 0, topic: str = TOPIC) -> list[int]:
    """Store ``count`` messages one by one; answers their store timestamps."""
    stamps = []
    for i in range(count):
        result = service.send([NewMessage(topic, f"m{i}".encode(), queue_id, {})])
        stamps.append(result.store_timestamp)
        time.sleep(0.002)  # distinct store timestamps, for the timestamp rule
    return stamps


def _queue(service: BrokerService, queue_id: int = 0, topic: str = TOPIC) -> MessageQueue:
    return MessageQueue(topic, service.broker_name, queue_id)


@pytest.mark.parametrize(
    ("rule", "expected"),
    [(CONSUME_FROM_FIRST_OFFSET, 0), (CONSUME_FROM_LAST_OFFSET, 3)],
)
def test_a_queue_never_committed_starts_by_the_rule_recorded_at_once(
    service: BrokerService, rule: str, expected: int
) -> None:
    _store(service, 3)
    queue = _queue(service)
    assert service.start_offsets(GROUP, [queue], rule, 0) == [QueueStart(queue, None, expected)]
    assert service.query_offset(GROUP, TOPIC, 0) == expected  # a restart resumes there
    # asked again, the recorded start is the committed offset
    again = service.start_offsets(GROUP, [queue], CONSUME_FROM_FIRST_OFFSET, 0)
    assert again == [QueueStart(queue, expected, expected)]


def test_the_timestamp_rule_starts_at_the_first_message_stored_at_or_after_it(
    service: BrokerService,
) -> None:
    stamps = _store(service, 4)
    queue = _queue(service)
    [start] = service.start_offsets(GROUP, [queue], CONSUME_FROM_TIMESTAMP, stamps[2])
    expected = stamps.index(stamps[2])  # the first stored at or after it (2 unless ms tie)
    assert start.start == expected and service.query_offset(GROUP, TOPIC, 0) == expected


def test_a_committed_queue_starts_at_its_commit_whatever_the_rule(service: BrokerService) -> None:
    _store(service, 5)
    committed, fresh = _queue(service, 0), _queue(service, 1)
    service.commit_offsets(GROUP, {committed: 4})
    answer = service.start_offsets(GROUP, [committed, fresh], CONSUME_FROM_LAST_OFFSET, 0)
    assert answer == [QueueStart(committed, 4, 4), QueueStart(fresh, None, 0)]
    assert service.query_offset(GROUP, TOPIC, 0) == 4


def test_a_retry_topic_starts_at_its_beginning(service: BrokerService) -> None:
    retry = retry_topic(GROUP)
    _store(service, 2, topic=retry)
    queue = _queue(service, topic=retry)
    answer = service.start_offsets(GROUP, [queue], CONSUME_FROM_LAST_OFFSET, 0)
    assert answer == [QueueStart(queue, None, 0)]


def test_an_unknown_rule_or_a_bad_queue_is_refused_recording_nothing(
    service: BrokerService,
) -> None:
    good = _queue(service)
    with pytest.raises(InvalidArgumentError, match="consume_from"):
        service.start_offsets(GROUP, [good], "CONSUME_FROM_NOWHERE", 0)
    with pytest.raises(InvalidArgumentError, match="'@'"):
        service.start_offsets(
            GROUP, [good, _queue(service, topic="a@b")], CONSUME_FROM_FIRST_OFFSET, 0
        )
    assert service.query_offset(GROUP, TOPIC, 0) is None


def test_a_queue_past_the_topics_queue_count_is_refused_recording_nothing(
    service: BrokerService,
) -> None:
    with pytest.raises(InvalidArgumentError, match="has no queue 6"):
        service.start_offsets(
            GROUP, [_queue(service), _queue(service, 6)], CONSUME_FROM_FIRST_OFFSET, 0
        )
    assert service.query_offset(GROUP, TOPIC, 0) is None


def test_a_commit_landing_while_the_start_is_worked_out_wins(
    service: BrokerService, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Reading the committed offset and recording the rule's start are not one step: a commit
    (or an admin's reset) in between must not be overwritten by the start."""
    _store(service, 5)
    queue = _queue(service)
    rule_start = service._group_offsets._rule_start

    def with_a_commit_meanwhile(*args: object) -> int:
        service.commit_offsets(GROUP, {queue: 2})  # another member, or a reset, meanwhile
        return rule_start(*args)  # type: ignore[arg-type]

    monkeypatch.setattr(service._group_offsets, "_rule_start", with_a_commit_meanwhile)
    [start] = service.start_offsets(GROUP, [queue], CONSUME_FROM_LAST_OFFSET, 0)
    assert start.start == 2
    assert service.query_offset(GROUP, TOPIC, 0) == 2


def test_the_embedded_transport_refuses_a_queue_of_another_broker(service: BrokerService) -> None:
    transport = InProcessTransport(service)
    stranger = MessageQueue(TOPIC, "broker-z", 0)
    with pytest.raises(InvalidArgumentError, match="broker-z"):
        transport.start_offsets(
            service.broker_name, GROUP, [stranger], CONSUME_FROM_FIRST_OFFSET, 0
        )


def test_a_rebalance_view_is_the_group_view_with_each_topics_queue_count(
    service: BrokerService,
) -> None:
    service.heartbeat(GROUP, "c1", {TOPIC: "*"}, "CLUSTERING")
    service.lock_queues(GROUP, "c1", [_queue(service)])
    view = service.rebalance_view(GROUP, [TOPIC, retry_topic(GROUP), "not-created-yet"])
    plain = service.group_view(GROUP)
    assert (view.generation, view.members, view.owners) == (
        plain.generation,
        plain.members,
        plain.owners,
    )
    default = service.options.store.default_queue_count
    assert view.queue_counts == {TOPIC: 2, retry_topic(GROUP): 1, "not-created-yet": default}
    assert plain.queue_counts == {}


@pytest.mark.integration
def test_both_answers_cross_http_to_a_broker_process(tmp_path: Path) -> None:
    with BrokerProcess(tmp_path / "broker") as broker, HttpTransport(broker.url) as transport:
        transport.create_topic(TOPIC, 3, 6)
        transport.heartbeat(GROUP, "c1", {TOPIC: "*"}, "CLUSTERING")
        view = transport.rebalance_view(GROUP, [TOPIC])
        assert view.members == ("c1",) and view.queue_counts == {TOPIC: 3}
        queue = MessageQueue(TOPIC, transport.broker_name, 1)
        starts = transport.start_offsets(
            transport.broker_name, GROUP, [queue], CONSUME_FROM_LAST_OFFSET, 0
        )
        assert starts == [QueueStart(queue, None, 0)]
        assert transport.query_offset(transport.broker_name, GROUP, TOPIC, 1) == 0


def test_a_push_member_records_a_new_queues_start_as_it_takes_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A LAST_OFFSET member that takes a never-committed queue records its start at once, not
    at its next periodic persist: a member that dies before committing leaves the group where
    it started, so the messages stored after that are not skipped by the next owner."""
    monkeypatch.setattr(push, "OFFSET_PERSIST_INTERVAL_S", 3600.0)  # no periodic persist here
    with EmbeddedBroker(tmp_path / "broker", commitlog_file_size=1 << 20) as broker:
        with Admin(broker) as admin:
            admin.create_topic(TOPIC, 1)
        with Producer(broker) as producer:
            for i in range(3):
                producer.send(Message(TOPIC, f"before-{i}".encode()))
        with PushConsumer(
            broker,
            GROUP,
            {TOPIC: None},
            lambda messages: ConsumeResult.SUCCESS,
            consume_from=ConsumeFrom.LAST_OFFSET,
        ):
            # recorded when the member takes the queue (30 s: a bound, not an expectation)
            wait_until(lambda: broker.service.query_offset(GROUP, TOPIC, 0) is not None, 30.0)
            assert broker.service.query_offset(GROUP, TOPIC, 0) == 3


def test_a_start_not_asked_for_is_ignored_and_one_left_out_is_not_taken(
    caplog: pytest.LogCaptureFixture,
) -> None:
    asked = [MessageQueue(TOPIC, "broker-a", i) for i in range(3)]
    stranger = MessageQueue(TOPIC, "broker-a", 5)  # another member's, say
    offsets = RemoteBrokerOffsetStore(GROUP, NO_BACKEND)
    steps = read_starts(offsets, asked, CONSUME_FROM_FIRST_OFFSET, 0)
    assert next(steps).method == "start_offsets"
    answer = [
        QueueStart(asked[0], 7, 0),
        QueueStart(stranger, None, 0),
        QueueStart(asked[2], None, 4),
        QueueStart(asked[2], 9, 9),  # a second, different start of one queue
    ]  # and none of asked[1]
    with caplog.at_level(logging.WARNING), pytest.raises(StopIteration) as answered:
        steps.send(answer)
    assert answered.value.value == {asked[0]: 7}
    assert [record.getMessage() for record in caplog.records] == [
        f"the broker answered a start of {stranger}, which group {GROUP} did not ask for; ignored",
        f"the broker answered no start of {asked[1]} for group {GROUP}",
        f"the broker answered two starts of {asked[2]} for group {GROUP}; neither taken",
    ]
    for queue in (stranger, asked[1], asked[2]):  # nothing recorded for them
        assert offsets.read_offset(queue, ReadOffsetType.MEMORY) is OffsetStatus.NOT_FOUND


def test_a_start_answered_twice_alike_is_taken_once() -> None:
    queue = MessageQueue(TOPIC, "broker-a", 0)
    steps = read_starts(
        RemoteBrokerOffsetStore(GROUP, NO_BACKEND), [queue], CONSUME_FROM_FIRST_OFFSET, 0
    )
    next(steps)
    with pytest.raises(StopIteration) as answered:
        steps.send([QueueStart(queue, None, 4), QueueStart(queue, None, 4)])
    assert answered.value.value == {queue: 4}
