"""A store a test writes through a broker in its own process, for the tests of the ``quiver``
source's streaming read and data loss: sync flush, so a send returns once its record is on
disk, where Spark's read-only opens see it; small segments (:data:`GEOMETRY`), so retention
has segments to remove."""

from __future__ import annotations

from pathlib import Path
from types import TracebackType

from localstore.read_only import ReadOnlyStore
from sdk import Admin, EmbeddedBroker, Message, Producer
from tests.spark.store_writer import GEOMETRY, QUEUES, TOPIC, body_of

RUN = 10  # consecutive messages sent to one queue in one batch


def queue_of(number: int) -> int:
    """Runs of RUN messages go to queues 0, 1, 2, 0, 0, 1, 2, 0, ...: queue 0 holds half."""
    return (number // RUN % (QUEUES + 1)) % QUEUES


class Store:
    """The test's store, written by a broker in this process; message ``i`` of a topic has
    key ``k{i}`` and body :func:`body_of` ``(i)``."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.broker = EmbeddedBroker(root, flush_mode="sync", **GEOMETRY)
        self.producer = Producer(self.broker)
        self.sent: dict[str, int] = {}
        self.queues: dict[str, int] = {}
        self.create_topic(TOPIC, QUEUES)

    def create_topic(self, topic: str, queues: int) -> None:
        with Admin(self.broker) as admin:
            admin.create_topic(topic, queue_count=queues)
        self.sent[topic] = 0
        self.queues[topic] = queues

    def write(self, count: int, topic: str = TOPIC) -> None:
        """``count`` more messages of ``topic``, in runs of RUN to one queue."""
        first = self.sent[topic]
        for start in range(first, first + count, RUN):
            numbers = range(start, min(start + RUN, first + count))
            batch = [Message(topic, body_of(i), keys=[f"k{i}"]) for i in numbers]
            self.producer.send_batch(batch, queue_id=queue_of(start) % self.queues[topic])
        self.sent[topic] = first + count

    def remove_old_segments(self) -> dict[int, int]:
        """Retention, forced: every commitlog segment but the last goes. Each queue's new
        earliest offset."""
        report = self.broker.service.store.clean(force=True)
        assert report.commitlog_files  # something was removed
        with ReadOnlyStore(self.root) as store:
            return {q: store.min_offset(TOPIC, q) for q in range(QUEUES)}

    def close(self) -> None:
        self.producer.close()
        self.broker.close()

    def __enter__(self) -> Store:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
