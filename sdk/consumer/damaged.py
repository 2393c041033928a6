"""How a consumer reads one queue's pull answer, and moves past a damaged record.

A damaged record (its bytes do not decode, or its body fails its CRC on a store opened with
``check_crc_on_read``) must not stop its queue, nor any other. The broker answers each queue on
its own (:mod:`sdk.transport.models`); for one queue:

* The broker named a damaged record (``answer.damaged``): the records before it are taken, the
  damaged one is logged at ERROR (topic, queue, queue offset, commitlog offset, what is wrong),
  counted in :attr:`ConsumerStats.damaged_skipped`, and the queue goes on at its queue offset
  + 1. The record stays in the log: the consumer steps over it, the store does not hide it.
* The broker copied the records without decoding them, and one does not decode here, or names
  another topic, queue or queue offset than the pull it answers (no CRC covers a record's
  header; the pulled queue offsets must increase within ``[pulled offset, next offset)``):
  the records before it are taken, and the queue's next pull starts just after them with
  ``check`` set, so the broker decodes the records and names the damaged one (above).

So every message before and after a damaged record is delivered, in queue order. The records
are decoded here straight into :class:`sdk.message.ReceivedMessage`
(:mod:`sdk.consumer.received_records`): this is where every consumer's messages become the
SDK's.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass, field
from typing import NamedTuple

from localstore.record.codec import RecordError
from localstore.record.run_decoder import misqueued
from offsetstore import MessageQueue
from sdk.consumer.received_records import decode_received
from sdk.message import ReceivedMessage
from sdk.transport.models import QueuePullResult

__all__ = ["ConsumerStats", "QueueAnswer", "read_queue_answer"]

log = logging.getLogger(__name__)


@dataclass(slots=True)
class ConsumerStats:
    """What a consumer counts (read it as ``consumer.stats``).

    ``damaged_skipped``: records the consumer moved past because they could not be read (each
    also logged at ERROR with its topic, queue, queue offset and commitlog offset)."""

    damaged_skipped: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def count_damaged(self) -> None:
        with self._lock:
            self.damaged_skipped += 1


class QueueAnswer(NamedTuple):
    """One queue's pull answer, read: its messages in queue order (before any tag re-check),
    where the queue's next pull starts, and whether that pull must ask the broker to check."""

    messages: list[ReceivedMessage]
    next_offset: int
    check: bool


def read_queue_answer(
    queue: MessageQueue, pulled_offset: int, answer: QueuePullResult, stats: ConsumerStats
) -> QueueAnswer:
    """Read ``answer``, the reply to a pull of ``queue`` from ``pulled_offset`` that found
    messages or named a damaged record (see the module docstring)."""
    # bytes, not a view of the answer's body: each record's fields are read faster from them
    messages, error = decode_received(bytes(answer.raw), queue.topic)
    misplaced = _first_misplaced(queue, pulled_offset, answer.next_offset, messages)
    if misplaced is not None:
        wrong = messages[misplaced]
        error = RecordError(misqueued(wrong.stored_topic, wrong.queue_id, wrong.queue_offset))
        del messages[misplaced:]
    if error is not None:  # the broker copied them: it will decode them when asked to check
        resume = messages[-1].queue_offset + 1 if messages else pulled_offset
        log.warning(
            "%s: a record at or after queue offset %d cannot be read here (%s); asking the broker",
            queue,
            resume,
            error,
        )
        return QueueAnswer(messages, resume, True)
    damaged = answer.damaged
    if damaged is None:
        return QueueAnswer(messages, answer.next_offset, False)
    log.error(
        "skipping damaged record: topic %s queue %d queue offset %d commitlog offset %d: %s",
        queue.topic,
        queue.queue_id,
        damaged.queue_offset,
        damaged.phys_offset,
        damaged.reason,
    )
    stats.count_damaged()
    return QueueAnswer(messages, damaged.queue_offset + 1, False)


def _first_misplaced(
    queue: MessageQueue, pulled_offset: int, next_offset: int, messages: list[ReceivedMessage]
) -> int | None:
    """The index of the first of ``messages`` whose header does not place it in ``queue``
    between ``pulled_offset`` and ``next_offset``, after the one before it; None if all do."""
    previous = pulled_offset - 1
    for index, message in enumerate(messages):
        if not (
            previous < message.queue_offset < next_offset
            and message.queue_id == queue.queue_id
            and message.stored_topic == queue.topic
        ):
            return index
        previous = message.queue_offset
    return None
