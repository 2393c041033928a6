"""What the ``quiver`` source does when retention removed offsets a read asks for (Kafka's
``failOnDataLoss``): plain data, no pyspark.

A read asks for queue offsets from a start; the store serves a queue from its earliest
readable offset (its min offset), which retention raises as it deletes commitlog segments.
A start below that offset is data loss: the offsets in between are gone. With
``failOnDataLoss`` (the default) the read fails with :class:`DataLossError` naming the topic,
the queue and both offsets, so nothing is skipped silently; without it the read logs a
WARNING naming the same and goes on from the earliest readable offset.
"""

from __future__ import annotations

import logging

from quiver_errors import IllegalStateError

log = logging.getLogger(__name__)


class DataLossError(IllegalStateError):
    """Offsets a read asked for were removed by retention (or with a deleted topic) before
    they were read. ``topic``, ``queue_id``, ``requested_offset`` (the first offset asked for)
    and ``earliest_offset`` (the queue's earliest readable offset, above it) say where."""

    def __init__(self, topic: str, queue_id: int, requested_offset: int, earliest_offset: int):
        super().__init__(
            f"failOnDataLoss: {topic!r} queue {queue_id} offsets [{requested_offset}, "
            f"{earliest_offset}) were removed before they were read (retention or a deleted "
            f"topic); the earliest readable offset is {earliest_offset}. Set failOnDataLoss "
            f"to false to go on from there"
        )
        self.topic = topic
        self.queue_id = queue_id
        self.requested_offset = requested_offset
        self.earliest_offset = earliest_offset


def start_within(
    topic: str, queue_id: int, start_offset: int, earliest_offset: int, fail_on_data_loss: bool
) -> int:
    """The offset to read ``topic``/``queue_id`` from when asked for ``start_offset`` and the
    store serves it from ``earliest_offset``: ``start_offset`` when served, else (data loss)
    :class:`DataLossError` with ``fail_on_data_loss``, or a WARNING and ``earliest_offset``."""
    if start_offset >= earliest_offset:
        return start_offset
    if fail_on_data_loss:
        raise DataLossError(topic, queue_id, start_offset, earliest_offset)
    log.warning(
        "%r queue %d offsets [%d, %d) were removed before they were read (retention or a "
        "deleted topic); failOnDataLoss is false, reading on from offset %d",
        topic,
        queue_id,
        start_offset,
        earliest_offset,
        earliest_offset,
    )
    return earliest_offset
