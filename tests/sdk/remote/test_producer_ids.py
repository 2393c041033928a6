"""A producer id given by the user (``RemoteBroker(url, producer_id=...)``) names the producer
in the log; it is not a promise that the sends of two transports are the same sends. Two
producers made from one RemoteBroker, or a producer started again under the same id, must each
have every message they send stored, never answered with another batch's receipt."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from sdk import EmbeddedBroker, Message, Producer, RemoteBroker
from tests.sdk.remote.loopback_server import LoopbackServer, loopback_server

pytestmark = pytest.mark.integration

TOPIC = "Named"


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[EmbeddedBroker, LoopbackServer]]:
    with (
        EmbeddedBroker(tmp_path / "b", commitlog_file_size=1 << 20) as broker,
        loopback_server(broker) as front,
    ):
        yield broker, front


def _send_all(target: RemoteBroker, bodies: list[bytes]) -> list[str]:
    with Producer(target) as producer:
        return [producer.send(Message(TOPIC, body), queue_id=0).offset_msg_id for body in bodies]


def test_a_producer_started_again_under_its_id_has_every_message_stored(
    served: tuple[EmbeddedBroker, LoopbackServer],
) -> None:
    broker, front = served
    target = RemoteBroker(front.url, producer_id="orders-app")
    first = _send_all(target, [b"a", b"b", b"c"])
    again = _send_all(target, [b"d", b"e", b"f"])  # a restart: the same id, a new transport
    assert len(set(first + again)) == 6
    assert broker.service.max_offset(TOPIC, 0) == 6


def test_two_producers_of_one_remote_broker_have_every_message_stored(
    served: tuple[EmbeddedBroker, LoopbackServer],
) -> None:
    broker, front = served
    target = RemoteBroker(front.url, producer_id="orders-app")
    with Producer(target) as one, Producer(target) as two:
        for body in (b"1", b"2", b"3"):
            one.send(Message(TOPIC, body), queue_id=0)
            two.send(Message(TOPIC, body + b"'"), queue_id=0)
    assert broker.service.max_offset(TOPIC, 0) == 6
