"""A message's ``keys`` do not choose its queue (a Kafka user's expectation); ``sharding_key=``
does: what the producer docstrings and the README say."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from sdk import EmbeddedBroker, Message, Producer


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[EmbeddedBroker]:
    with EmbeddedBroker(tmp_path / "b", commitlog_file_size=1 << 20) as b:
        yield b


def test_keys_leave_the_queue_to_round_robin_and_a_sharding_key_pins_it(
    broker: EmbeddedBroker,
) -> None:
    with Producer(broker) as producer:
        by_keys = [producer.send(Message("orders", b"x", keys=["order-42"])) for _ in range(4)]
        pinned = [
            producer.send(Message("orders", b"x", keys=["order-42"]), sharding_key="order-42")
            for _ in range(4)
        ]
    assert len({receipt.queue_id for receipt in by_keys}) == 4  # round-robin over 4 queues
    assert len({receipt.queue_id for receipt in pinned}) == 1
