"""Dispatch: turning a commitlog record into its consume-queue unit and index entries.

The put path builds units and index entries for the records it writes; recovery re-dispatches
records that the queues or the index lack. Dispatch is idempotent: a record whose end is not past
its queue's ``max_phys_offset``, or whose queue offset the queue already holds, gets no second
unit, and the index skips what it already indexed. PREPARED and ROLLBACK transaction records get
no unit (ROLLBACK ones no index entry either).
"""

from __future__ import annotations

from localstore.codec import (
    PROPERTY_DELAY,
    PROPERTY_TAGS,
    SYSFLAG_TRANSACTION_PREPARED,
    StoredMessage,
)
from localstore.consume_queue import UNIT
from localstore.errors import CorruptStoreError
from localstore.index_service import IndexService
from localstore.queue_registry import QueueRegistry
from localstore.tags import SCHEDULE_TOPIC, schedule_tag_code, tag_code


def dispatch(
    queues: QueueRegistry,
    index: IndexService | None,
    message: StoredMessage,
    delay_levels: tuple[int, ...],
) -> bool:
    """Add what ``message`` lacks; True if a consume-queue unit was added."""
    if index is not None:
        index.dispatch(message)
    if message.sys_flag & SYSFLAG_TRANSACTION_PREPARED:  # PREPARED (0x4) and ROLLBACK (0xC)
        return False
    queue = queues.get_or_create(message.topic, message.queue_id)
    end = message.phys_offset + message.store_size
    if end <= queue.max_phys_offset or message.queue_offset < queue.max_offset:
        return False
    if queue.segments.segments and message.queue_offset > queue.max_offset:
        raise CorruptStoreError(
            f"consume queue {message.topic}/{message.queue_id} ends at queue offset "
            f"{queue.max_offset} but the commitlog record at {message.phys_offset} has "
            f"{message.queue_offset}: units are missing"
        )
    if message.topic == SCHEDULE_TOPIC:
        code = schedule_tag_code(
            message.store_timestamp, message.properties.get(PROPERTY_DELAY), delay_levels
        )
    else:
        code = tag_code(message.properties.get(PROPERTY_TAGS))
    unit = UNIT.pack(message.phys_offset, message.store_size, code)
    queue.append(message.queue_offset, unit, end)
    return True
