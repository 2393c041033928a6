"""The per-queue state both put paths share: one dict lookup finds, for a topic-queue already
written to in this run, its consume queue and time index, the queue offset of its next unit, and
the parts of its records' bytes that repeat (the topic field and the header's size).

Invariant: ``next_offset`` is the queue offset of the next unit (the consume queue's max offset
when the state was made, then advanced by every put under the store's put lock); the general
path (:mod:`localstore.put.path`) makes a state on a queue's first put and both paths advance
it. Record layout: :mod:`localstore.record.layout` (``plain_size`` is a v1 record with IPv4
hosts, less its body and properties).
"""

from __future__ import annotations

from localstore.queue.consume_queue import ConsumeQueue
from localstore.queue.time_index import QueueTimeIndex
from localstore.record.layout import (
    HEADER_V4_SIZE,
    MAGIC_V1,
    MAGIC_V2,
    PROPERTIES_LENGTH_BYTES,
    SHORT,
    topic_field,
)

# A record's first 8 bytes by MAGICCODE, then by TOTALSIZE, shared by every queue: sizes repeat,
# and one pack of two ints costs more than a dict lookup (the single put fills it, bounded).
_FIRSTS: dict[int, dict[int, bytes]] = {MAGIC_V1: {}, MAGIC_V2: {}}


class QueuePutState:
    """One writable topic-queue as the put paths see it."""

    __slots__ = (
        "firsts",
        "magic",
        "next_offset",
        "plain_size",
        "queue",
        "retired",
        "tails",
        "time_index",
        "topic_field",
    )

    def __init__(self, queue: ConsumeQueue, time_index: QueueTimeIndex):
        self.queue = queue
        self.time_index = time_index
        self.next_offset = queue.max_offset  # queue offset of the next unit
        # Set under the put lock when the topic's config changed: puts take the general path.
        self.retired = False
        self.magic, self.topic_field = topic_field(queue.topic)
        # A v1 record with IPv4 hosts, less its body and properties.
        self.plain_size = HEADER_V4_SIZE + len(self.topic_field) + PROPERTIES_LENGTH_BYTES
        self.tails: dict[int, bytes] = {}  # properties length -> topic field + length field
        self.firsts = _FIRSTS[self.magic]  # record size -> TOTALSIZE and MAGICCODE, packed

    def tail(self, properties_length: int) -> bytes:
        """The record's bytes between body and properties: topic field, properties length."""
        tail = self.topic_field + SHORT.pack(properties_length)
        if len(self.tails) < 256:
            self.tails[properties_length] = tail
        return tail
