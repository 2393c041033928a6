"""Dispatch: turning commitlog records into consume-queue units and index entries.

The put path builds units and index entries for the records it writes; recovery re-dispatches,
with a :class:`Dispatcher`, the records that the queues or the index lack. Dispatch is
idempotent: a record whose end is not past its queue's ``max_phys_offset``, or whose queue
offset the queue already holds, gets no second unit, and the index skips what it already
indexed. After a clean close every record up to the queues' furthest unit has its unit
(``units_known_to``): those are walked for the index alone, so a record whose header was damaged
since (:mod:`localstore.recovery.recover`) cannot make a queue of the topic or queue id it now
names. PREPARED and ROLLBACK transaction records get no unit (ROLLBACK ones no index entry
either).

Damaged records (:mod:`localstore.recovery.damaged`): a record whose header was destroyed cannot be
dispatched, so its queue offset would be missing from its queue. When a queue's next record
skips queue offsets and a damaged range lies between the queue's last record and it, the
missing units are written pointing into that range (physical offsets ``start, start + 1, ...``
so they still increase): queue offsets stay contiguous, no put reuses them, and readers skip
units that point into a damaged range. A skip with no damaged range to explain it is still a
:class:`CorruptStoreError`.
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Mapping

from localstore.errors import CorruptStoreError
from localstore.index.service import IndexService
from localstore.queue.consume_queue import UNIT, ConsumeQueue
from localstore.queue.registry import QueueRegistry
from localstore.record.codec import (
    SYSFLAG_TRANSACTION_PREPARED,
    StoredMessage,
)
from localstore.record.tags import unit_tag_code
from localstore.recovery.damaged import DamagedRanges

log = logging.getLogger(__name__)


class _PendingUnits:
    """Units gathered for one queue, appended in one write at flush."""

    __slots__ = ("first_offset", "next_offset", "phys_end", "queue", "units")

    def __init__(self, queue: ConsumeQueue, first_offset: int):
        self.queue = queue
        self.first_offset = first_offset
        self.next_offset = first_offset
        self.phys_end = 0
        self.units: list[bytes] = []


class Dispatcher:
    """Re-dispatch of many records in commitlog order, batched: units are gathered per queue
    and index keys per run of one topic and store time, then written in one call each (the
    put path's shape). Same outcome as :func:`dispatch` per record."""

    FLUSH_EVERY = 8192  # records between flushes: bounds memory on a long tail

    def __init__(
        self,
        queues: QueueRegistry,
        index: IndexService | None,
        delay_levels: tuple[int, ...],
        damaged: DamagedRanges | None = None,
        *,
        units_known_to: int = 0,
        rebuilt: Collection[tuple[str, int]] = (),
        deleted_topics: Mapping[str, int] | None = None,
    ):
        self._queues = queues
        self._damaged = damaged
        self._index = index
        self._delay_levels = delay_levels
        self._pending: dict[tuple[str, int], _PendingUnits] = {}
        self._index_run: list[StoredMessage] = []
        self._index_started = index is None
        self._units_known_to = units_known_to
        self._queues_end = queues.dispatch_from()  # where the existing queues' units end
        self._rebuilt = frozenset(rebuilt)
        # deleted topic -> commitlog offset of its deletion: its records before get no unit
        self._deleted = dict(deleted_topics or {})
        self._since_flush = 0
        self.units_added = 0

    def add(self, message: StoredMessage) -> None:
        self._add_to_index(message)
        if (
            not message.sys_flag & SYSFLAG_TRANSACTION_PREPARED
            and message.phys_offset + message.store_size > self._units_known_to
            and not self._deleted_before(message)
        ):
            self._add_unit(message)
        self._since_flush += 1
        if self._since_flush >= self.FLUSH_EVERY:
            self.flush()

    def _deleted_before(self, message: StoredMessage) -> bool:
        """Whether ``message`` belongs to a topic deleted after it was stored."""
        deleted = self._deleted
        return bool(deleted) and message.phys_offset < deleted.get(message.topic, -1)

    def _add_to_index(self, message: StoredMessage) -> None:
        if self._index is None:
            return
        if not self._index_started:  # records come in order: once one is new, all later are
            if not self._index.needs(message.phys_offset):
                return
            self._index_started = True
        run = self._index_run
        if run and (
            run[0].topic != message.topic or run[0].store_timestamp != message.store_timestamp
        ):
            self._flush_index()
        self._index_run.append(message)

    def _add_unit(self, message: StoredMessage) -> None:
        key = (message.topic, message.queue_id)
        pending = self._pending.get(key)
        if pending is None:
            queue = self._queues.get(message.topic, message.queue_id)
            if queue is None:
                queue = self._new_queue(message)
            end = message.phys_offset + message.store_size
            if end <= queue.max_phys_offset or message.queue_offset < queue.max_offset:
                return  # already there
            if queue.segments.segments and message.queue_offset > queue.max_offset:
                pending = self._pending[key] = _PendingUnits(queue, queue.max_offset)
                self._fill_damaged(pending, message, queue.max_phys_offset)
            else:
                pending = self._pending[key] = _PendingUnits(queue, message.queue_offset)
        elif message.queue_offset != pending.next_offset:
            if message.queue_offset < pending.next_offset:
                return
            self._fill_damaged(pending, message, pending.phys_end)
        pending.units.append(
            UNIT.pack(
                message.phys_offset,
                message.store_size,
                unit_tag_code(
                    message.topic, message.properties, message.store_timestamp, self._delay_levels
                ),
            )
        )
        pending.next_offset += 1
        pending.phys_end = message.phys_offset + message.store_size

    def _new_queue(self, message: StoredMessage) -> ConsumeQueue:
        """The queue for a record whose queue has no files. Below where the other queues'
        units end, that is news: the queue's files were lost, or the record's header names it
        by damage (:mod:`localstore.recovery.queue_check`); recovery says so."""
        key = (message.topic, message.queue_id)
        if message.phys_offset < self._queues_end and key not in self._rebuilt:
            log.warning(
                "recovery made consume queue %s/%d for the commitlog record at %d (queue offset "
                "%d), below where the other queues' units end (%d): its files were lost, or the "
                "record's header was damaged to name it; `quiver store verify` tells which",
                message.topic,
                message.queue_id,
                message.phys_offset,
                message.queue_offset,
                self._queues_end,
            )
        return self._queues.get_or_create(*key)

    def _fill_damaged(self, pending: _PendingUnits, message: StoredMessage, after: int) -> None:
        """Units for the queue offsets between ``pending``'s next one and ``message``'s, whose
        records lie in a damaged range after commitlog offset ``after`` (module docstring)."""
        missing = message.queue_offset - pending.next_offset
        between = self._damaged.between(after, message.phys_offset) if self._damaged else []
        if not between or between[-1].placeholder_capacity() < missing:
            raise _gap(message, pending.next_offset)
        damaged = between[-1]
        pending.units.extend(damaged.placeholder_units(missing))
        pending.next_offset += missing
        pending.phys_end = damaged.end

    def _flush_index(self) -> None:
        run = self._index_run
        if run and self._index is not None:
            self._index.build_batch(
                run[0].topic, run, [m.phys_offset for m in run], run[0].store_timestamp
            )
        self._index_run = []

    def flush(self) -> None:
        """Write everything gathered so far."""
        for pending in self._pending.values():
            pending.queue.append(pending.first_offset, b"".join(pending.units), pending.phys_end)
            self.units_added += len(pending.units)
        self._pending.clear()
        self._flush_index()
        self._since_flush = 0


def _gap(message: StoredMessage, expected: int) -> CorruptStoreError:
    return CorruptStoreError(
        f"consume queue {message.topic}/{message.queue_id} ends at queue offset {expected} but "
        f"the commitlog record at {message.phys_offset} has {message.queue_offset}: units are "
        "missing"
    )
