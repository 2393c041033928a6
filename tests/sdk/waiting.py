"""Waiting in tests for what other threads do: poll a condition, fail the test at a bound."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable

from localstore.record.tags import SCHEDULE_TOPIC
from sdk import PushConsumer
from sdk.broker.service import BrokerService


def wait_until(predicate: Callable[[], object], timeout_s: float = 10.0) -> None:
    """Poll ``predicate`` every 10 ms until it is true; fail the test after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not reached within {timeout_s} s")
        time.sleep(0.01)


def group_settled(
    service: BrokerService, consumer: PushConsumer, group: str, topics: Iterable[str]
) -> bool:
    """True once nothing of ``group`` is pending: every delayed message (a send-back on its
    way to the retry topic) left the schedule, and ``consumer`` committed every queue of
    ``topics`` to its end. What the group was delivered by then is all it will be delivered,
    so a test asserts "nothing more came" after this instead of after a sleep."""
    consumer.persist_offsets()
    schedule = service.schedule
    for level in range(1, len(schedule.delays) + 1):
        if schedule.offsets.get(level, 0) < service.max_offset(SCHEDULE_TOPIC, level - 1):
            return False
    return all(
        (service.query_offset(group, topic, queue_id) or 0) >= service.max_offset(topic, queue_id)
        for topic in topics
        for queue_id in range(service.queue_count(topic))
    )
