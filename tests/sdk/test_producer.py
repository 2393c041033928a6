"""Producers: validation before I/O, queue selection, retries of retriable failures, async twin."""

from __future__ import annotations

import asyncio
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from localstore.record.javahash import java_hash
from localstore.record.layout import record_overhead, topic_field
from localstore.record.put_mark import MARK_START
from sdk import (
    AsyncProducer,
    BrokerUnavailableError,
    ClientClosedError,
    EmbeddedBroker,
    InvalidMessageError,
    Message,
    Producer,
    SendReceipt,
    SendReceipts,
    SendRejectedError,
    outgoing,
)
from sdk.clock import ManualClock
from sdk.transport.in_process import InProcessTransport

# Fields a batch's messages are checked for as well (a single send checks them and more).
FIELD_PROBLEMS = [
    # \x01 and \x02 separate stored properties: a value holding them would forge KEYS
    (Message("orders", b"x", properties={"note": "hi\x02KEYS\x01forged"}), "separate stored"),
    (Message("orders", b"x", properties={"a\x01b": "v"}), "separate stored"),
    (Message("orders", b"x", tags="a\x02b"), "separate stored"),
    (Message("orders", b"x", keys=["k1\x02EVIL\x01yes"]), "separate stored"),
    # a space separates keys: a key holding one would be stored as two
    (Message("orders", b"x", keys="order 42"), "pass several keys as a list"),
    (Message("orders", b"x", keys=["order 42", "x"]), "give each key alone"),
    (Message("orders", b"x", keys=["", "a"]), "non-empty"),
    (Message("orders", b"x", keys=[7]), "a key must be a str, got int"),  # type: ignore[list-item]
    (Message("orders", b"x", properties={"retries": 3}), "'retries' must be a str, got int"),  # type: ignore[dict-item]
    (Message("orders", b"x", tags=5), "tags must be a str"),  # type: ignore[arg-type]
    (Message("orders", b"x", flag=1 << 40), "flag must be an int of 32 bits"),
]


@pytest.fixture
def broker(tmp_path: Path):
    with EmbeddedBroker(tmp_path / "broker", commitlog_file_size=1 << 20) as embedded:
        yield embedded


@pytest.mark.parametrize(
    ("message", "problem"),
    [
        (Message("", b"x"), "blank"),
        (Message("bad topic", b"x"), "illegal characters"),
        (Message("t" * 128, b"x"), "longer than"),
        (Message("SCHEDULE_TOPIC_XXXX", b"x"), "forbidden"),
        (Message("orders", b""), "empty"),
        (Message("orders", b"x" * 5000), "over the limit"),
        (Message("orders", b"x", properties={"TAGS": "a"}), "reserved"),
        (Message("orders", b"x", properties={"big": "v" * 40_000}), "properties take"),
        (Message("orders", b"x", delay_level=19), "delay_level"),
        (Message("orders", b"x", delay_level=2, deliver_at_ms=5), "not both"),
        (Message("orders", "text"), "must be bytes"),  # type: ignore[arg-type]
        *((message, problem) for message, problem in FIELD_PROBLEMS),
    ],
)
def test_bad_messages_fail_before_any_io(broker, message, problem):
    with (
        Producer(broker, max_body_bytes=4096) as producer,
        pytest.raises(InvalidMessageError, match=problem),
    ):
        producer.send(message)
    assert broker.service.store.topics.get("orders") is None  # nothing reached the broker


def test_receipt_names_where_the_message_went(broker):
    with Producer(broker) as producer:
        receipt = producer.send(Message("orders", b"hi", tags="paid", keys=["k1", "k2"]))
    stored = broker.service.store.get_messages("orders", receipt.queue_id, 0).messages[0]
    assert receipt.msg_id == stored.msg_id and receipt.offset_msg_id == stored.offset_msg_id
    assert receipt.queue_offset == 0 and receipt.status == "PUT_OK"
    assert stored.tags == "paid" and stored.keys == ["k1", "k2"]


def test_a_single_string_key_is_one_key(broker):
    with Producer(broker) as producer:
        receipt = producer.send(Message("orders", b"hi", keys="order-42"))
    stored = broker.service.store.get_messages("orders", receipt.queue_id, 0).messages[0]
    assert stored.keys == ["order-42"]


def test_round_robin_spreads_over_the_queues(broker):
    with Producer(broker) as producer:
        queues = [producer.send(Message("orders", b"x")).queue_id for _ in range(8)]
    assert sorted(queues) == [0, 0, 1, 1, 2, 2, 3, 3]


def test_a_sharding_key_always_picks_the_same_queue(broker):
    with Producer(broker) as producer:
        queues = {
            producer.send(Message("orders", b"x"), sharding_key="order-7").queue_id
            for _ in range(5)
        }
    assert queues == {abs(java_hash("order-7")) % 4}


def test_a_custom_selector_is_checked(broker):
    with (
        Producer(broker, selector=lambda message, count: count) as producer,
        pytest.raises(InvalidMessageError, match="selector chose queue 4"),
    ):
        producer.send(Message("orders", b"x"))
    with Producer(broker, selector=lambda message, count: count - 1) as producer:
        assert producer.send(Message("orders", b"x")).queue_id == 3


def test_send_batch_is_one_append_to_one_queue(broker):
    with Producer(broker) as producer:
        receipts = producer.send_batch([Message("orders", b"%d" % i) for i in range(5)], queue_id=2)
        with pytest.raises(InvalidMessageError, match="one topic"):
            producer.send_batch([Message("orders", b"a"), Message("other", b"b")])
        with pytest.raises(InvalidMessageError, match="delayed"):
            producer.send_batch([Message("orders", b"a"), Message("orders", b"b", delay_level=1)])
    assert [r.queue_offset for r in receipts] == [0, 1, 2, 3, 4]
    assert {r.queue_id for r in receipts} == {2}
    assert len({r.msg_id for r in receipts}) == 5


def test_batch_receipts_read_like_a_list_of_receipts(broker):
    with Producer(broker) as producer:
        receipts = producer.send_batch([Message("orders", b"%d" % i) for i in range(3)], queue_id=1)
        assert producer.send_batch([]) == []
    assert isinstance(receipts, SendReceipts)
    assert len(receipts) == 3
    listed = list(receipts)
    assert all(isinstance(r, SendReceipt) for r in listed)
    assert receipts == listed and listed == receipts and receipts != tuple(listed)
    assert receipts[-1] is listed[2] and receipts[1:] == listed[1:]
    assert receipts.msg_ids == [r.msg_id for r in listed]
    assert [r.queue_offset for r in reversed(receipts)] == [2, 1, 0]
    assert receipts.index(listed[1]) == 1 and listed[0] in receipts
    assert receipts != listed[:2] and receipts != "abc"
    assert repr(receipts).startswith("SendReceipts([SendReceipt(msg_id=")
    stored = broker.service.store.get_messages("orders", 1, 0).messages
    assert [(m.msg_id, m.phys_offset) for m in stored] == [
        (r.msg_id, r.phys_offset) for r in receipts
    ]
    with pytest.raises(TypeError, match="unhashable"):
        hash(receipts)


def test_batch_receipts_are_made_once_when_first_read(broker, monkeypatch):
    made = []

    class CountedReceipt(SendReceipt):
        __slots__ = ()

        def __init__(self, *fields):
            made.append(fields[0])
            super().__init__(*fields)

    monkeypatch.setattr(outgoing, "SendReceipt", CountedReceipt)
    with Producer(broker) as producer:
        receipts = producer.send_batch([Message("orders", b"%d" % i) for i in range(5000)])
        assert made == []  # sent and answered, nothing read yet
        assert len(receipts) == 5000 and len(receipts.msg_ids) == 5000 and made == []
        start = threading.Barrier(8)

        def first_receipt(_: int) -> SendReceipt:
            start.wait()
            return receipts[0]

        interval = sys.getswitchinterval()
        sys.setswitchinterval(1e-6)  # readers at once, interleaved: all get the same receipts
        try:
            with ThreadPoolExecutor(8) as pool:
                firsts = list(pool.map(first_receipt, range(8)))
        finally:
            sys.setswitchinterval(interval)
        assert all(first is firsts[0] for first in firsts)
        assert receipts[0].msg_id == receipts.msg_ids[0] == made[0]


def test_async_empty_batch_sends_nothing(broker):
    async def scenario():
        async with AsyncProducer(broker) as producer:
            return await producer.send_batch([])

    empty = asyncio.run(scenario())
    assert isinstance(empty, SendReceipts) and empty == [] and len(empty) == 0
    assert not empty and list(empty) == [] and empty.msg_ids == []


def test_send_async_and_oneway(broker):
    with Producer(broker) as producer:
        future = producer.send_async(Message("orders", b"a"))
        producer.send_oneway(Message("orders", b"b"))
        assert future.result(timeout=10).status == "PUT_OK"
    assert sum(broker.service.store.max_offset("orders", q) for q in range(4)) == 2


class FlakyTransport(InProcessTransport):
    """Fails the first ``failures`` sends as an unreachable broker would."""

    def __init__(self, service, failures: int) -> None:
        super().__init__(service)
        self.failures = failures
        self.attempts = 0
        self.sent_ids: list[list[str]] = []  # the UNIQ_KEYs of each attempt

    def send(self, messages):
        self.attempts += 1
        self.sent_ids.append([m.properties["UNIQ_KEY"] for m in messages])
        if self.attempts <= self.failures:
            raise BrokerUnavailableError("connection refused")
        return super().send(messages)


def test_retriable_failures_are_retried_with_the_same_message_id(broker):
    transport = FlakyTransport(broker.service, failures=2)
    with Producer(transport, retries=2) as producer:
        receipt = producer.send(Message("orders", b"x"))
    assert transport.attempts == 3
    assert transport.sent_ids == [[receipt.msg_id]] * 3  # every attempt, the same message id
    assert (
        broker.service.store.get_messages("orders", receipt.queue_id, 0).messages[0].msg_id
        == receipt.msg_id
    )


def test_retries_run_out(broker):
    transport = FlakyTransport(broker.service, failures=5)
    with Producer(transport, retries=1) as producer, pytest.raises(BrokerUnavailableError):
        producer.send(Message("orders", b"x"))
    assert transport.attempts == 2


def test_a_refused_message_is_not_retried(broker):
    transport = FlakyTransport(broker.service, failures=0)
    too_big = 5 * 1024 * 1024  # the producer allows it, the broker's store does not
    with (
        Producer(transport, max_body_bytes=2 * too_big) as producer,
        pytest.raises(SendRejectedError) as refused,
    ):
        producer.send(Message("orders", b"x" * too_big))
    assert refused.value.status == "MESSAGE_ILLEGAL" and not refused.value.retriable
    assert transport.attempts == 1


def test_a_closed_broker_or_producer(broker):
    producer = Producer(broker, retries=0)
    producer.send(Message("orders", b"x"))
    broker.close()
    with pytest.raises(BrokerUnavailableError):
        producer.send(Message("orders", b"x"))
    producer.close()
    with pytest.raises(ClientClosedError):
        producer.send(Message("orders", b"x"))


def test_async_producer(broker):
    async def scenario():
        async with AsyncProducer(broker) as producer:
            one = await producer.send(Message("orders", b"a"), sharding_key="k")
            many = await producer.send_batch([Message("orders", b"b"), Message("orders", b"c")])
            task = producer.send_async(Message("orders", b"d"))
            producer.send_oneway(Message("orders", b"e"))
            with pytest.raises(InvalidMessageError):
                await producer.send(Message("orders", b""))
            return one, many, await task

    one, many, last = asyncio.run(scenario())
    assert one.status == "PUT_OK" and len(many) == 2 and last.status == "PUT_OK"
    assert sum(broker.service.store.max_offset("orders", q) for q in range(4)) == 5


@pytest.mark.parametrize(("bad", "problem"), FIELD_PROBLEMS)
def test_a_batch_with_a_bad_message_fails_before_any_io(broker, bad, problem):
    with Producer(broker) as producer, pytest.raises(InvalidMessageError, match=problem):
        producer.send_batch([Message("orders", b"fine"), bad])
    assert broker.service.store.topics.get("orders") is None


@pytest.mark.parametrize(
    ("message", "problem"),
    [
        (Message("orders", b"x", delay_level="3"), "delay_level must be an int"),  # type: ignore[arg-type]
        (Message("orders", b"x", delay_level=1.5), "delay_level must be an int"),  # type: ignore[arg-type]
        (Message("orders", b"x", deliver_at_ms="soon"), "deliver_at_ms must be"),  # type: ignore[arg-type]
    ],
)
def test_delays_of_the_wrong_type_fail_before_any_io(broker, message, problem):
    with Producer(broker) as producer, pytest.raises(InvalidMessageError, match=problem):
        producer.send(message)
    assert broker.service.store.topics.get("orders") is None


def test_a_sharding_key_must_be_a_str(broker):
    with Producer(broker) as producer, pytest.raises(InvalidMessageError, match="must be a str"):
        producer.send(Message("orders", b"x"), sharding_key=42)  # type: ignore[arg-type]
    assert broker.service.store.topics.get("orders") is None


def test_keys_given_as_a_list_are_each_found(broker):
    with Producer(broker) as producer:
        producer.send_batch([Message("orders", b"x", keys=["order-1", "user-7"])], queue_id=0)
    store = broker.service.store
    for key in ("order-1", "user-7"):
        assert [m.keys for m in store.query_by_key("orders", key)] == [["order-1", "user-7"]]


BATCH_VARIETY = [
    Message("orders", b"plain"),
    Message("orders", b"tagged", tags="paid"),
    Message("orders", b"keyed", keys=("k1", "k2")),
    Message("orders", b"one key", keys="k3"),
    Message("orders", b"everything", tags="paid", keys=["k4"], properties={"a": "1", "b": ""}),
    Message("orders", bytearray(b"bytes-like"), properties={"c": "3"}),
]


@pytest.mark.parametrize("flags", [(0,) * 6, (5,) * 6, (0, 1, 0, 2, 0, 3)])
def test_a_batch_is_stored_as_the_same_messages_sent_alone(broker, flags):
    """Built as columns (one flag for all) or as messages (flags that differ), a batch's
    records hold what single sends of the same messages hold: body, flag, properties in the
    same order (user's, TAGS, KEYS, UNIQ_KEY); each is found by its keys and its id."""
    messages = [
        Message(m.topic, m.body, m.tags, m.keys, m.properties, flag=flag)
        for m, flag in zip(BATCH_VARIETY, flags, strict=True)
    ]
    store = broker.service.store
    with Producer(broker) as producer:
        batch = producer.send_batch(messages, queue_id=0)
        alone = [producer.send(m, queue_id=1) for m in messages]
    from_batch = store.get_messages("orders", 0, 0).messages
    from_alone = store.get_messages("orders", 1, 0).messages

    def stored_fields(m):
        properties = {k: v for k, v in m.properties.items() if k != "UNIQ_KEY"}
        return m.body, m.flag, list(properties.items()), list(m.properties)[-1]

    assert [stored_fields(m) for m in from_batch] == [stored_fields(m) for m in from_alone]
    assert [stored_text(store, m) for m in from_batch] == [
        stored_text(store, m) for m in from_alone
    ]
    assert [m.msg_id for m in from_batch] == batch.msg_ids
    assert [m.msg_id for m in from_alone] == [r.msg_id for r in alone]
    assert [m.reconsume_times for m in from_batch] == [0] * 6
    for key, bodies in (("k2", [b"keyed"]), ("k4", [b"everything"])):
        found = [m for m in store.query_by_key("orders", key) if m.queue_id == 0]
        assert [m.body for m in found] == bodies
    assert store.query_by_key("orders", batch.msg_ids[4])[0].body == b"everything"


def stored_text(store, message) -> bytes:
    """The record's PROPERTIES text as written, byte for byte, without its own UNIQ_KEY pair
    (the one property that differs between two sends of a message) and without the store's
    mark of a batch's first record (:mod:`localstore.record.put_mark`)."""
    raw = store.get_message_bytes(message.topic, message.queue_id, message.queue_offset).raw
    record = raw[: message.store_size]
    text_at = record_overhead(len(topic_field(message.topic)[1])) + len(message.body)
    text = record[text_at:]
    assert int.from_bytes(record[text_at - 2 : text_at]) == len(text)  # its length field
    uniq_key_pair = f"UNIQ_KEY\x01{message.msg_id}\x02".encode()
    assert text.endswith(uniq_key_pair)
    if text.startswith(MARK_START):
        text = text[text.index(b"\x02") + 1 :]
    return text.removesuffix(uniq_key_pair)


def test_a_batch_message_whose_properties_do_not_fit_is_refused(broker):
    big = Message("orders", b"x", properties={"note": "n" * 32760})
    with Producer(broker) as producer, pytest.raises(InvalidMessageError, match="over the limit"):
        producer.send_batch([Message("orders", b"fine"), big])
    assert broker.service.store.topics.get("orders") is None


def test_a_store_out_of_file_descriptors_is_a_retriable_rejection_not_an_oserror(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The store's first consume-queue file for a new topic cannot be opened (EMFILE, injected
    on the sending thread): the send fails with a typed, retriable error, nothing is stored, and the
    producer's own retry, once descriptors are back, stores the message at queue offset 0."""
    import errno

    from tests.localstore.faults import OsFaults

    with EmbeddedBroker(tmp_path / "broker") as embedded:
        faults = OsFaults(monkeypatch)
        with Producer(embedded, retries=0) as producer:
            with (
                faults.armed(0, errno.EMFILE, only="open"),
                pytest.raises(SendRejectedError) as refused,
            ):
                producer.send(Message("fresh", b"m0"), queue_id=0)
            assert refused.value.retriable and refused.value.status == "CREATE_MAPPED_FILE_FAILED"
            assert "Too many open files" in refused.value.detail
            receipt = producer.send(Message("fresh", b"m1"), queue_id=0)
        assert receipt.queue_offset == 0


def test_a_topics_queue_count_is_asked_again_once_the_route_ttl_passed(broker):
    topics = broker.service.store.topics
    topics.create("grow", 2)
    clock = ManualClock()
    with Producer(broker, route_ttl_s=30.0, clock=clock) as producer:

        def queues_used() -> set[int]:
            return {producer.send(Message("grow", b"x")).queue_id for _ in range(8)}

        assert queues_used() == {0, 1}
        topics.create("grow", 4)  # the topic grows: the cached route does not know yet
        clock.advance(30.0)
        assert queues_used() == {0, 1}
        clock.advance(0.001)  # past the route's time to live: asked again
        assert queues_used() == {0, 1, 2, 3}
