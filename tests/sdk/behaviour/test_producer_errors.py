"""Producer errors: bad messages fail before any I/O; an unreachable broker and a closed
producer fail with their own errors."""

from __future__ import annotations

import collections
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from sdk import (
    BrokerUnavailableError,
    ClientClosedError,
    InvalidMessageError,
    Message,
    Producer,
    QuiverError,
)
from sdk.transport.resolve import resolve

from .conftest import Harness

TOPIC = "audit"
MAX_BODY = 4 * 1024 * 1024


class CountingTransport:
    """A transport that counts the calls it forwards (anything the seam offers)."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.calls: collections.Counter[str] = collections.Counter()

    def __getattr__(self, name: str) -> Any:
        attribute = getattr(self.inner, name)
        if not callable(attribute):
            return attribute

        def call(*args: Any, **kwargs: Any) -> Any:
            self.calls[name] += 1
            return attribute(*args, **kwargs)

        return call


@pytest.fixture
def counted(harness: Harness) -> Iterator[CountingTransport]:
    transport = resolve(harness.broker_target)
    yield CountingTransport(transport)
    transport.close()  # an HTTP transport holds connections


BAD_MESSAGES: dict[str, Callable[[], Message]] = {
    "empty-topic": lambda: Message("", b"x"),
    "illegal-characters": lambda: Message("audit log", b"x"),
    "too-long-topic": lambda: Message("t" * 200, b"x"),
    "system-topic": lambda: Message("SCHEDULE_TOPIC_XXXX", b"x"),
    "empty-body": lambda: Message(TOPIC, b""),
    "body-not-bytes": lambda: Message(TOPIC, "text"),  # type: ignore[arg-type]
    "oversized-body": lambda: Message(TOPIC, bytes(MAX_BODY + 1)),
    "reserved-property-uniq-key": lambda: Message(TOPIC, b"x", properties={"UNIQ_KEY": "mine"}),
    "reserved-property-delay": lambda: Message(TOPIC, b"x", properties={"DELAY": "3"}),
    "reserved-property-tags": lambda: Message(TOPIC, b"x", properties={"TAGS": "a"}),
}


@pytest.mark.parametrize("make", BAD_MESSAGES.values(), ids=BAD_MESSAGES.keys())
def test_invalid_messages_fail_before_any_io(
    harness: Harness, counted: CountingTransport, make: Callable[[], Message]
) -> None:
    with Producer(counted) as producer:
        message = make()
        with pytest.raises(InvalidMessageError) as raised:
            producer.send(message)
        assert not raised.value.retriable
        with pytest.raises(InvalidMessageError):
            producer.send_async(message)
        with pytest.raises(InvalidMessageError):
            producer.send_batch([message])
    assert counted.calls == {}
    assert harness.service.store.topics.get(TOPIC) is None


def test_oversized_properties_fail_before_any_io(counted: CountingTransport) -> None:
    message = Message(TOPIC, b"x", properties={"big": "v" * 40_000})
    with Producer(counted) as producer:
        with pytest.raises(InvalidMessageError):
            producer.send(message)
        with pytest.raises(InvalidMessageError):
            producer.send_batch([message])
        with pytest.raises(InvalidMessageError):
            producer.send_async(message)  # documented: "a bad message raises here, at once"
    assert counted.calls == {}


def test_a_delayed_message_leaves_room_for_the_schedule_properties(
    counted: CountingTransport,
) -> None:
    """Just under the limit alone, over it with what the broker adds to delay it."""
    message = Message(TOPIC, b"x", properties={"big": "v" * 32_700}, delay_level=1)
    with Producer(counted) as producer, pytest.raises(InvalidMessageError, match="properties"):
        producer.send(message)
    assert counted.calls == {}


def test_oversized_properties_are_refused(harness: Harness) -> None:
    """Whatever the moment, such a message is refused and nothing is stored."""
    message = Message(TOPIC, b"x", properties={"big": "v" * 40_000})
    with Producer(harness.broker_target) as producer, pytest.raises(InvalidMessageError):
        producer.send(message)
    assert all(harness.service.max_offset(TOPIC, q) == 0 for q in range(4))


def test_a_smaller_body_limit_is_enforced_by_the_producer(counted: CountingTransport) -> None:
    with Producer(counted, max_body_bytes=1024) as producer:
        with pytest.raises(InvalidMessageError, match="1025"):
            producer.send(Message(TOPIC, bytes(1025)))
        assert counted.calls == {}
        producer.send(Message(TOPIC, bytes(1024)))
    assert counted.calls["send"] == 1


def test_a_batch_with_a_bad_message_stores_nothing(
    harness: Harness, counted: CountingTransport
) -> None:
    good = [Message(TOPIC, f"entry {i}".encode()) for i in range(3)]
    cases = [
        [*good, Message("other-topic", b"x")],
        [*good, Message(TOPIC, b"later", delay_level=1)],
        [*good, Message(TOPIC, b"")],
    ]
    with Producer(counted) as producer:
        for batch in cases:
            with pytest.raises(InvalidMessageError):
                producer.send_batch(batch)
    assert counted.calls["send"] == 0
    assert all(harness.service.max_offset(TOPIC, q) == 0 for q in range(4))


def test_send_to_a_stopped_broker_raises_unavailable_after_retries(
    harness: Harness, counted: CountingTransport
) -> None:
    with Producer(counted, retries=2) as producer:
        producer.send(Message(TOPIC, b"before"))  # learns the route
        harness.stop()
        sends = counted.calls["send"]
        with pytest.raises(BrokerUnavailableError) as raised:
            producer.send(Message(TOPIC, b"after"))
        assert raised.value.retriable
        assert counted.calls["send"] - sends == 3  # the first attempt and two retries
        future = producer.send_async(Message(TOPIC, b"after, in the background"))
        assert isinstance(future.exception(timeout=10), BrokerUnavailableError)


def test_a_closed_producer_refuses_to_send(harness: Harness, counted: CountingTransport) -> None:
    producer = Producer(counted)
    producer.send(Message(TOPIC, b"while open"))
    producer.close()
    producer.close()  # idempotent
    for attempt in (
        lambda: producer.send(Message(TOPIC, b"x")),
        lambda: producer.send_batch([Message(TOPIC, b"x")]),
        lambda: producer.send_async(Message(TOPIC, b"x")),
    ):
        with pytest.raises(ClientClosedError):
            attempt()
    assert counted.calls["send"] == 1
    assert issubclass(ClientClosedError, QuiverError)


def test_a_bad_queue_choice_is_refused(counted: CountingTransport) -> None:
    with Producer(counted) as producer, pytest.raises(InvalidMessageError, match="queue 9"):
        producer.send(Message(TOPIC, b"x"), queue_id=9)
    assert counted.calls["send"] == 0
