"""The offset-store protocol: RocketMQ's OffsetStore operations in Python form.

Offsets are "next to consume" everywhere: the committed offset of a queue is the queue offset of
the first message not yet processed. A queue is (topic, broker name, queue id).

Reading answers an :class:`int` offset, or one of two sentinels a reader tells apart at a glance
(RocketMQ uses -1 and -2):

* :data:`NOT_FOUND`: no offset is recorded for the queue (a new consumer group: the consumer
  decides where to start, e.g. LAST_OFFSET).
* :data:`READ_FAILED`: the offset could not be read (the broker did not answer); the consumer
  must not start the queue from a guess.

Both are members of :class:`OffsetStatus`, never ints, so ``offset >= 0`` style mistakes fail
loudly in type checks and ``isinstance(offset, int)`` tells a real offset.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Protocol, TypeAlias

from quiver_errors import QuiverError


@dataclass(frozen=True, slots=True, order=True)
class MessageQueue:
    """One queue of a topic on one broker (RocketMQ's ``MessageQueue``)."""

    topic: str
    broker_name: str
    queue_id: int

    def __str__(self) -> str:  # what RocketMQ's MessageQueue.toString() prints
        return (
            f"MessageQueue [topic={self.topic}, brokerName={self.broker_name}, "
            f"queueId={self.queue_id}]"
        )


class ReadOffsetType(enum.Enum):
    """Where :meth:`OffsetStore.read_offset` looks."""

    MEMORY = "READ_FROM_MEMORY"  # only the in-memory table
    STORE = "READ_FROM_STORE"  # the file or the broker; the answer replaces the memory entry
    MEMORY_FIRST_THEN_STORE = "MEMORY_FIRST_THEN_STORE"


class OffsetStatus(enum.Enum):
    """Answers of :meth:`OffsetStore.read_offset` that are not offsets."""

    NOT_FOUND = "NOT_FOUND"  # RocketMQ's -1
    READ_FAILED = "READ_FAILED"  # RocketMQ's -2

    def __repr__(self) -> str:
        return f"OffsetStatus.{self.name}"


NOT_FOUND = OffsetStatus.NOT_FOUND
READ_FAILED = OffsetStatus.READ_FAILED
ReadResult: TypeAlias = int | OffsetStatus


class OffsetStoreError(QuiverError):
    """Base class of offsetstore's errors (a :class:`~quiver_errors.QuiverError`)."""


class OffsetFileError(OffsetStoreError):
    """An offsets file and its backup are both unreadable (never a silent restart from 0)."""


class OffsetStore(Protocol):
    """What every offset store does (RocketMQ's ``OffsetStore``).

    Thread safety: implementations are safe to call from several threads at once.
    """

    def load(self) -> None:
        """Read persisted offsets into memory (local file stores; a no-op for the broker's)."""

    def update_offset(self, queue: MessageQueue, offset: int, increase_only: bool) -> None:
        """Set the in-memory offset; with ``increase_only`` a smaller offset is ignored. A
        frozen entry (see :meth:`update_and_freeze_offset`) ignores every update."""

    def update_and_freeze_offset(self, queue: MessageQueue, offset: int) -> None:
        """Set the offset and ignore later updates until :meth:`remove_offset` (used when the
        broker moved a queue's offset and in-flight results must not move it back)."""

    def read_offset(self, queue: MessageQueue, read_type: ReadOffsetType) -> ReadResult:
        """The offset, :data:`NOT_FOUND`, or :data:`READ_FAILED`."""

    def persist(self, queue: MessageQueue) -> None:
        """Make one queue's in-memory offset durable."""

    def persist_all(self, queues: Iterable[MessageQueue]) -> None:
        """Make the in-memory offsets of ``queues`` durable."""

    def remove_offset(self, queue: MessageQueue) -> None:
        """Forget a queue (after it was revoked and persisted)."""

    def discard(self, queue: MessageQueue) -> None:
        """Forget a queue this consumer lost to another member, and any failed commit of it
        still waiting to be retried, so nothing of ours overwrites the new owner's progress."""

    def pending(self) -> dict[MessageQueue, int]:
        """Commits that failed and wait to be sent again, by queue."""

    def close(self) -> None:
        """Stop periodic persisting and persist what is in memory."""

    def clone_offset_table(self, topic: str) -> dict[MessageQueue, int]:
        """A copy of the in-memory offsets of ``topic``'s queues."""


class OffsetWriteError(OffsetStoreError, OSError):
    """Writing an offsets file failed (read-only folder, full disk, ...); the last good file is
    left as it was. Also an :class:`OSError`, so ``errno`` and ``filename`` are set."""
