"""What every consumer hands out, through a real embedded broker: a :class:`sdk.ReceivedMessage`
whose system properties (tags, keys, the message id, a retry's original topic, a transaction's
id, ...) are attributes and whose ``properties`` are the user's alone; a retried message shows
its original topic and how many times it was consumed. And the producer refuses a user property
that would pass for a system one."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from sdk import (
    AsyncPullConsumer,
    AsyncPushConsumer,
    BrokerOptions,
    ConsumeFrom,
    ConsumeResult,
    EmbeddedBroker,
    InvalidMessageError,
    Message,
    Producer,
    PullConsumer,
    PushConsumer,
    ReceivedMessage,
    SendReceipt,
    TransactionalProducer,
    TransactionState,
)

from .brokers import SMALL_GEOMETRY
from .waiting import wait_until

TOPIC = "orders"
WAIT_S = 20.0
DELAY_LEVELS_MS = [200] + [20] * 17  # level 1 for the delayed message; retries (3+) quickly
USER_PROPERTIES = {"color": "red", "tenant": "acme"}


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[EmbeddedBroker]:
    options = BrokerOptions(delay_levels=DELAY_LEVELS_MS)
    with EmbeddedBroker(tmp_path / "data", options=options, **SMALL_GEOMETRY) as embedded:
        yield embedded


def send_both(broker: EmbeddedBroker) -> dict[bytes, tuple[Message, SendReceipt]]:
    """A plain and a delayed message, each with tags, keys and user properties."""
    user = dict(USER_PROPERTIES)
    plain = Message(TOPIC, b"plain", tags="paid", keys=["order-1", "user-7"], properties=user)
    delayed = Message(
        TOPIC, b"delayed", tags="late", keys="order-2", properties=user, delay_level=1
    )
    with Producer(broker) as producer:
        return {m.body: (m, producer.send(m)) for m in (plain, delayed)}


def assert_as_sent(got: ReceivedMessage, sent: dict[bytes, tuple[Message, SendReceipt]]) -> None:
    message, receipt = sent[got.body]
    assert type(got) is ReceivedMessage
    assert (got.topic, got.queue_id, got.msg_id) == (TOPIC, receipt.queue_id, receipt.msg_id)
    assert got.phys_offset == int(got.offset_msg_id[-16:], 16)
    if not message.delay_level:  # (a delayed one's receipt names its schedule copy)
        assert got.queue_offset == receipt.queue_offset
        assert got.offset_msg_id == receipt.offset_msg_id
    assert got.tags == message.tags
    expected_keys = (message.keys,) if isinstance(message.keys, str) else tuple(message.keys)
    assert got.keys == expected_keys
    assert got.properties == USER_PROPERTIES  # no TAGS, KEYS, UNIQ_KEY, DELAY, REAL_TOPIC ...
    with pytest.raises(TypeError):
        got.properties["color"] = "blue"  # type: ignore[index]  # read-only
    assert got.flag == 0 and got.store_size > len(got.body)
    assert 0 < got.born_timestamp <= got.store_timestamp
    if message.delay_level:  # stored again when due: after its delay, under its own topic
        assert got.store_timestamp - got.born_timestamp >= DELAY_LEVELS_MS[0]
    else:
        assert got.store_timestamp == receipt.store_timestamp
    assert got.born_host.startswith("127.0.0.1:") and ":" in got.store_host
    assert got.reconsume_times == 0
    assert got.original_topic is None and got.transaction_id is None


def pull_sync(broker: EmbeddedBroker) -> list[ReceivedMessage]:
    got: list[ReceivedMessage] = []
    with PullConsumer(broker, "pulling", consume_from=ConsumeFrom.FIRST_OFFSET) as consumer:
        consumer.subscribe([TOPIC])
        deadline = time.monotonic() + WAIT_S
        while len(got) < 2 and time.monotonic() < deadline:
            got += consumer.poll(timeout_s=0.5)
    return got


def pull_async(broker: EmbeddedBroker) -> list[ReceivedMessage]:
    async def main() -> list[ReceivedMessage]:
        got: list[ReceivedMessage] = []
        consumer = AsyncPullConsumer(broker, "pulling", consume_from=ConsumeFrom.FIRST_OFFSET)
        async with consumer:
            consumer.subscribe([TOPIC])
            async for message in consumer:
                got.append(message)
                if len(got) == 2:
                    break
        return got

    return asyncio.run(asyncio.wait_for(main(), WAIT_S))


def push_sync(broker: EmbeddedBroker) -> list[ReceivedMessage]:
    got: list[ReceivedMessage] = []
    lock = threading.Lock()

    def listener(messages: list[ReceivedMessage]) -> None:
        with lock:
            got.extend(messages)

    settings = {"consume_from": ConsumeFrom.FIRST_OFFSET}
    with PushConsumer(broker, "pushing", {TOPIC: None}, listener, **settings):
        wait_until(lambda: len(got) >= 2, WAIT_S)
    return got


def push_async(broker: EmbeddedBroker) -> list[ReceivedMessage]:
    async def main() -> list[ReceivedMessage]:
        got: list[ReceivedMessage] = []
        both = asyncio.Event()

        async def listener(messages: list[ReceivedMessage]) -> None:
            got.extend(messages)
            if len(got) >= 2:
                both.set()

        settings = {"consume_from": ConsumeFrom.FIRST_OFFSET}
        async with AsyncPushConsumer(broker, "pushing", {TOPIC: None}, listener, **settings):
            await asyncio.wait_for(both.wait(), WAIT_S)
        return got

    return asyncio.run(main())


CONSUMERS = [pull_sync, pull_async, push_sync, push_async]


@pytest.mark.parametrize("consume", CONSUMERS, ids=lambda c: c.__name__)
def test_every_attribute_through_a_round_trip(
    broker: EmbeddedBroker, consume: Callable[[EmbeddedBroker], list[ReceivedMessage]]
) -> None:
    sent = send_both(broker)
    got = consume(broker)
    assert sorted(m.body for m in got) == [b"delayed", b"plain"]
    for message in got:
        assert_as_sent(message, sent)


def retried_twice(broker: EmbeddedBroker, asynchronous: bool) -> list[ReceivedMessage]:
    """The deliveries of one message whose listener fails it twice, then takes it."""
    got: list[ReceivedMessage] = []
    done = threading.Event()

    def answer(messages: list[ReceivedMessage]) -> ConsumeResult:
        got.extend(messages)
        if len(got) < 3:
            return ConsumeResult.RECONSUME_LATER
        done.set()
        return ConsumeResult.SUCCESS

    async def async_answer(messages: list[ReceivedMessage]) -> ConsumeResult:
        return answer(messages)

    with Producer(broker) as producer:
        producer.send(Message(TOPIC, b"flaky", tags="t", keys=["k"], properties={"a": "1"}))
    settings = {"consume_from": ConsumeFrom.FIRST_OFFSET}
    if not asynchronous:
        with PushConsumer(broker, "retrying", {TOPIC: None}, answer, **settings):
            assert done.wait(WAIT_S)
        return got

    async def main() -> None:
        async with AsyncPushConsumer(broker, "retrying", {TOPIC: None}, async_answer, **settings):
            await asyncio.wait_for(asyncio.to_thread(done.wait, WAIT_S), WAIT_S + 1)

    asyncio.run(main())
    return got


@pytest.mark.parametrize("asynchronous", [False, True], ids=["sync", "async"])
def test_a_retried_message_shows_its_original_topic_and_reconsume_count(
    broker: EmbeddedBroker, asynchronous: bool
) -> None:
    got = retried_twice(broker, asynchronous)
    assert [m.reconsume_times for m in got] == [0, 1, 2]
    assert {m.topic for m in got} == {TOPIC}  # stored in %RETRY%retrying, shown as sent
    assert [m.original_topic for m in got] == [None, TOPIC, TOPIC]
    assert len({m.msg_id for m in got}) == 1 and len({m.phys_offset for m in got}) == 3
    for message in got:
        assert (message.tags, message.keys, message.body) == ("t", ("k",), b"flaky")
        assert message.properties == {"a": "1"}  # no RETRY_TOPIC, ORIGIN_MESSAGE_ID, ...


def test_a_transactional_message_carries_its_transaction_id(broker: EmbeddedBroker) -> None:
    def commit(message: Message) -> TransactionState:
        return TransactionState.COMMIT

    def never_asked(message: ReceivedMessage) -> TransactionState:
        raise AssertionError("the local transaction answered")

    with TransactionalProducer(broker, "payers", never_asked) as producer:
        receipt = producer.send_in_transaction(
            Message(TOPIC, b"paid", keys=["order-9"], properties={"a": "1"}), commit
        )
    (got,) = pull_one(broker)
    assert got.transaction_id == receipt.transaction_id and got.msg_id == receipt.msg_id
    assert got.properties == {"a": "1"}  # no TRAN_MSG, PGROUP, __transactionId__


def pull_one(broker: EmbeddedBroker) -> list[ReceivedMessage]:
    with PullConsumer(broker, "pulling", consume_from=ConsumeFrom.FIRST_OFFSET) as consumer:
        consumer.subscribe([TOPIC])
        deadline = time.monotonic() + WAIT_S
        got: list[ReceivedMessage] = []
        while not got and time.monotonic() < deadline:
            got = consumer.poll(timeout_s=0.5)
    return got


@pytest.mark.parametrize("name", ["TAGS", "UNIQ_KEY", "RETRY_TOPIC", "__QUIVER_DELIVER_AT"])
def test_the_producer_refuses_a_user_property_named_as_a_system_one(
    broker: EmbeddedBroker, name: str
) -> None:
    with Producer(broker) as producer, pytest.raises(InvalidMessageError, match="reserved"):
        producer.send(Message(TOPIC, b"x", properties={name: "1"}))
    assert broker.service.store.max_offset(TOPIC, 0) == 0  # nothing was stored
