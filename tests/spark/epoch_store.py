"""A store written in *epochs* for the tests of the ``quiver`` source's bounds and filters,
and an oracle that reads it back message by message.

:func:`write_epoch_store` creates :data:`TOPICS` (name -> queue count) on an
:class:`EmbeddedBroker` and sends, for each of :data:`EPOCHS` epochs, :data:`PER_QUEUE`
messages to every queue; between epochs it waits until the wall clock has passed the last
store time, so every message of epoch k is stored strictly later than every one of epoch k-1.
Message i of a queue has tag ``t{i % 3}`` but every seventh has none, key ``k{i}``.

The oracle (:class:`Stored`) holds what the store holds, read through the store's plain get,
so the tests compute their expectations without the source's code.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from localstore.read_only import ReadOnlyStore
from localstore.results import GetStatus

TOPICS = {"orders": 3, "orders-eu": 1, "audit": 2}
EPOCHS = 4
PER_QUEUE = 10


def tag_of(i: int) -> str | None:
    return None if i % 7 == 6 else f"t{i % 3}"


def write_epoch_store(root: Path) -> None:
    from sdk import Admin, EmbeddedBroker, Message, Producer

    with EmbeddedBroker(root, flush_mode="async") as broker:
        with Admin(broker) as admin:
            for topic, queues in TOPICS.items():
                admin.create_topic(topic, queue_count=queues)
        with Producer(broker) as producer:
            for epoch in range(EPOCHS):
                last_ms = 0
                for topic, queues in TOPICS.items():
                    for queue_id in range(queues):
                        numbers = range(epoch * PER_QUEUE, (epoch + 1) * PER_QUEUE)
                        batch = [
                            Message(topic, f"{topic}-{i}".encode(), tags=tag_of(i), keys=[f"k{i}"])
                            for i in numbers
                        ]
                        receipts = producer.send_batch(batch, queue_id=queue_id)
                        assert [r.queue_offset for r in receipts] == list(numbers)
                        last_ms = max(last_ms, *(r.store_timestamp for r in receipts))
                while time.time_ns() // 1_000_000 <= last_ms:  # the next epoch is stored later
                    time.sleep(0.001)


@dataclass(frozen=True)
class Row:
    topic: str
    queue_id: int
    queue_offset: int
    store_ms: int
    tags: str | None

    @property
    def store_time(self) -> datetime:
        return datetime.fromtimestamp(self.store_ms / 1000, UTC)


class Stored:
    """Every message of the store, as its plain get returns them."""

    def __init__(self, root: Path) -> None:
        self.rows: list[Row] = []
        with ReadOnlyStore(root) as store:
            for topic in store.topic_names():
                for queue_id in store.queue_ids(topic):
                    offset = store.min_offset(topic, queue_id)
                    while (got := store.get_messages(topic, queue_id, offset)).status == (
                        GetStatus.FOUND
                    ):
                        self.rows += [
                            Row(topic, queue_id, m.queue_offset, m.store_timestamp,
                                m.properties.get("TAGS"))
                            for m in got.messages
                        ]  # fmt: skip
                        offset = got.next_offset

    def epoch_start_ms(self, epoch: int) -> int:
        """The earliest store time of epoch ``epoch`` (its messages' offsets are
        ``epoch * PER_QUEUE`` on)."""
        return min(r.store_ms for r in self.rows if r.queue_offset // PER_QUEUE == epoch)

    def first_at_or_after(self, topic: str, queue_id: int, time_ms: int) -> int:
        """Kafka's offsetsForTimes, by a linear scan: the first offset stored at or after
        ``time_ms``, the queue's end when none is."""
        mine = sorted((r for r in self.rows if (r.topic, r.queue_id) == (topic, queue_id)),
                      key=lambda r: r.queue_offset)  # fmt: skip
        found = [r.queue_offset for r in mine if r.store_ms >= time_ms]
        return found[0] if found else mine[-1].queue_offset + 1

    def keys(self, **where: object) -> list[tuple[str, int, int]]:
        """(topic, queue id, queue offset) of the rows whose fields equal ``where``'s."""
        return sorted(
            (r.topic, r.queue_id, r.queue_offset)
            for r in self.rows
            if all(getattr(r, name) == value for name, value in where.items())
        )
