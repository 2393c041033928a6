"""Repairing one consume-queue unit from the commitlog (the log is the truth; a unit is derived).

A unit is damaged when the record it points at is not its own: no record starts there, or the
record there names another topic, queue id or queue offset, or the unit's offset or size cannot be
a record's. When a get meets such a unit (:mod:`localstore.reader` names it in a
:class:`~localstore.errors.DamagedRecordError`), the store asks :func:`repair_unit` to rebuild it
before it reports anything, and reads again.

Where the unit's record is. Units are written in log order, so the record of unit ``n`` lies
after the record of any unit before it and before the record of any unit after it. The nearest
sound unit on each side (one that points at a record naming it; at most
:data:`NEIGHBOURS_CHECKED` are looked at) bounds the search; the records between are walked and
the one whose header names the unit's topic, queue id and queue offset is its record. With no
unit on a side, the commitlog's min offset or the log's visible end bounds it.
A walk longer than :data:`MAX_SEARCH_BYTES` is not made (a queue so sparse that its neighbours
lie that far apart is left to ``quiver store verify --repair``, which has no bound).

Found: the unit is rewritten (offset, size, tagsCode), synced, and the repair logged at
WARNING naming the queue, the queue offset and the old and new unit. Not found: the unit is left
as it is, and the get reports the record as damaged, saying why the unit was not rebuilt (a
consumer logs it at ERROR and steps over it). That is the right answer when
the unit is right and its record is what was damaged (no CRC covers a record's header, so a
damaged header names another queue offset: the record at the unit's offset is then the only
candidate, and it names another unit), or when the record lies in a damaged range.

The caller holds the store's put lock: no put, retention run or topic change touches the queue
meanwhile. Readers on other threads may read the unit while it is rewritten; a unit read half
old, half new is damaged to them, and their own repair finds it sound.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from localstore.commitlog.log import CommitLog
from localstore.queue.consume_queue import UNIT, UNIT_SIZE, ConsumeQueue
from localstore.record.codec import (
    SYSFLAG_TRANSACTION_MASK,
    SYSFLAG_TRANSACTION_PREPARED,
    SYSFLAG_TRANSACTION_ROLLBACK,
    RecordError,
    StoredMessage,
    decode_record,
)
from localstore.record.tags import unit_tag_code
from localstore.recovery.damaged import DamagedRanges
from localstore.recovery.log_scan import iter_records

log = logging.getLogger(__name__)

MAX_SEARCH_BYTES = 4 * 1024 * 1024  # a get's repair walks at most this much of the log (puts wait)
NEIGHBOURS_CHECKED = 16  # units on each side looked at for a sound one to bound the search
_NO_UNIT = (SYSFLAG_TRANSACTION_PREPARED, SYSFLAG_TRANSACTION_ROLLBACK)


@dataclass(frozen=True, slots=True)
class UnitRepair:
    """What :func:`repair_unit` found: ``repaired`` (the unit was rewritten), ``sound``
    (nothing to rebuild: the unit points at its own record, so what is damaged, if anything, is
    the record; or into a damaged range recovery kept; or retention has deleted it), or
    neither, with ``why`` the unit cannot be rebuilt."""

    repaired: bool
    sound: bool
    why: str = ""


_SOUND = UnitRepair(False, True)


def repair_unit(
    commitlog: CommitLog,
    queue: ConsumeQueue,
    queue_offset: int,
    delays: tuple[int, ...],
    damaged: DamagedRanges | None = None,
    *,
    max_search_bytes: int | None = MAX_SEARCH_BYTES,
    topic_since: int = 0,
) -> UnitRepair:
    """Rebuild unit ``queue_offset`` of ``queue`` from the log if it does not point at its own
    record (see the module docstring); ``max_search_bytes`` None: walk any distance.
    ``topic_since``: the commitlog offset from which the queue's topic is the one the queue
    holds (where it was last deleted, if it was: the records before name a topic gone)."""
    if queue_offset < queue.min_offset:
        return _SOUND  # retention deleted its record meanwhile: nothing to rebuild
    if queue_offset >= queue.max_offset:
        return UnitRepair(False, False, f"queue offset {queue_offset} holds no unit")
    phys, size, code = UNIT.unpack(queue.read_units(queue_offset, 1))
    if damaged is not None and phys >= 0 and damaged.containing(phys) is not None:
        return _SOUND  # a placeholder for a record recovery found damaged: nothing to find
    own = _own_record(commitlog, queue, queue_offset, phys)
    if own is not None and (own.store_size, _tags_code(own, delays)) == (size, code):
        return _SOUND
    if own is None:
        bounds = _search_bounds(commitlog, queue, queue_offset, topic_since)
        if isinstance(bounds, str):
            return UnitRepair(False, False, bounds)
        low, high = bounds
        if max_search_bytes is not None and high - low > max_search_bytes:
            return UnitRepair(
                False,
                False,
                f"its neighbours' records lie {high - low} bytes apart, more than a read "
                f"searches ({max_search_bytes})",
            )
        own = _find_record(commitlog, queue, queue_offset, low, high)
        if own is None:
            return UnitRepair(
                False, False, f"no record between its neighbours' ([{low}, {high})) names it"
            )
    tags_code = _tags_code(own, delays)
    _rewrite(queue, queue_offset, own.phys_offset, own.store_size, tags_code)
    log.warning(
        "consume queue %s/%d offset %d was damaged (unit %d, %d, %d: offset, size, tagsCode): "
        "rebuilt from its commitlog record as (%d, %d, %d)",
        queue.topic,
        queue.queue_id,
        queue_offset,
        phys,
        size,
        code,
        own.phys_offset,
        own.store_size,
        tags_code,
    )
    return UnitRepair(True, False)


def _tags_code(record: StoredMessage, delays: tuple[int, ...]) -> int:
    """The tagsCode the record's unit carries (a DELAY that is no number: as if none)."""
    try:
        return unit_tag_code(record.topic, record.properties, record.store_timestamp, delays)
    except ValueError:
        return unit_tag_code(record.topic, {}, record.store_timestamp, delays)


def _own_record(
    commitlog: CommitLog, queue: ConsumeQueue, queue_offset: int, phys: int
) -> StoredMessage | None:
    """The record at ``phys`` if it is unit ``queue_offset``'s own, else None."""
    if not commitlog.min_offset <= phys < commitlog.confirmed_offset:
        return None
    located = commitlog.segment_view(phys)
    if located is None:
        return None
    try:
        record = decode_record(located[0], located[1], body=False)
    except RecordError:
        return None
    if record.phys_offset != phys or record.store_size <= 0:
        return None
    if phys + record.store_size > commitlog.confirmed_offset:
        return None
    if (record.topic, record.queue_id, record.queue_offset) != (
        queue.topic,
        queue.queue_id,
        queue_offset,
    ):
        return None
    return record


def _search_bounds(
    commitlog: CommitLog, queue: ConsumeQueue, queue_offset: int, topic_since: int
) -> tuple[int, int] | str:
    """[after the record of the nearest sound unit before it, the record of the nearest sound
    unit after it) of the log (where the queue has none: the log's min offset or where its
    topic was last deleted, and the log's visible end), or why its neighbours cannot bound the
    search: each of the :data:`NEIGHBOURS_CHECKED` on a side is damaged too. Units after it
    whose records are not visible yet (a put under sync flush waiting for its flush) end the
    queue for the search."""
    before = _nearest_sound(commitlog, queue, range(queue_offset - 1, queue.min_offset - 1, -1))
    after = _nearest_sound(
        commitlog, queue, range(queue_offset + 1, _visible_units_end(commitlog, queue))
    )
    if isinstance(before, str):
        return before
    if isinstance(after, str):
        return after
    floor = max(commitlog.min_offset, topic_since)
    low = floor if before is None else before[0] + before[1]
    high = commitlog.confirmed_offset if after is None else after[0]
    if low >= high:
        return f"its neighbours' records leave no room for it ([{low}, {high}))"
    return low, high


def _visible_units_end(commitlog: CommitLog, queue: ConsumeQueue) -> int:
    """The queue offset past the queue's last unit whose record is visible: units a put has
    written ahead of its flush (sync flush) point at or past the log's visible end."""
    end = queue.max_offset
    visible = commitlog.confirmed_offset
    while end > queue.min_offset and queue.unit_head(end - 1)[0] >= visible:
        end -= 1
    return end


def _nearest_sound(
    commitlog: CommitLog, queue: ConsumeQueue, offsets: range
) -> tuple[int, int] | str | None:
    """(commitlog offset, size) of the first of ``offsets`` whose unit points at its own
    record; None when ``offsets`` is empty, why not when none of the first few does."""
    for queue_offset in offsets[:NEIGHBOURS_CHECKED]:
        phys = queue.unit_head(queue_offset)[0]
        record = _own_record(commitlog, queue, queue_offset, phys)
        if record is not None:
            return phys, record.store_size
    if not offsets:
        return None
    checked = min(len(offsets), NEIGHBOURS_CHECKED)
    return f"its {checked} nearest neighbours on one side are damaged too"


def _find_record(
    commitlog: CommitLog, queue: ConsumeQueue, queue_offset: int, low: int, high: int
) -> StoredMessage | None:
    """The record in [low, high) of the log whose header names unit ``queue_offset``."""
    where = (queue.topic, queue.queue_id, queue_offset)
    for record in iter_records(commitlog.segment_view, low, high, body=False):
        if (record.topic, record.queue_id, record.queue_offset) != where:
            continue
        if record.sys_flag & SYSFLAG_TRANSACTION_MASK in _NO_UNIT:
            continue
        if record.phys_offset + record.store_size <= high:
            return record
    return None


def _rewrite(queue: ConsumeQueue, queue_offset: int, phys: int, size: int, tags_code: int) -> None:
    """Overwrite the unit in its file and make it durable."""
    position = queue_offset * UNIT_SIZE
    segment = queue.segments.find(position)
    assert segment is not None  # the unit was read above, under the same lock
    segment.write_at(position - segment.start_offset, UNIT.pack(phys, size, tags_code))
    segment.sync()
