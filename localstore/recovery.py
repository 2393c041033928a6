"""Recovery on open: find the valid end of the commitlog, make consume queues and index agree.

Normal recovery (no ``abort`` marker: the last run closed cleanly). Every record before the end
of the queues' last units was dispatched, so the walk starts there: at the end of the record the
newest unit points at, or at the last indexed message when the index lags. That starting point is
checked first (the unit must point at a record of its own queue); if it is not sound the store
is treated as crashed.

Abnormal recovery (``abort`` present). As RocketMQ does: walk back from the newest commitlog
segment to the first one whose first record is valid and was stored no later than the
checkpoint's ``min_timestamp`` (everything before it was flushed), or the first segment when
none qualifies, and walk forward from there checking body CRCs. A torn or corrupt record ends
the log. A long walk is cut at the record starts the sparse offset index names and its pieces
walked by worker processes (:mod:`localstore.parallel_scan`), with the same answer.

Both then: cut the commitlog at the valid end (later segments deleted, a trailing all-zero
preallocated segment included), cut consume-queue units that point past it (with sync flush a
unit can be written before its record reaches the file), and re-dispatch the records from where
the queues or the index stop to the end. Index files newer than the checkpoint were dropped when
the index loaded after a crash, and are rebuilt here.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial

from localstore.checkpoint import Checkpoint
from localstore.codec import RecordError, body_crc, decode_record
from localstore.commitlog import CommitLog
from localstore.consume_queue import ConsumeQueue
from localstore.dispatch import Dispatcher
from localstore.errors import StoreError
from localstore.index_service import IndexService
from localstore.log_scan import SplitHints, first_record_ok, iter_records, scan_valid_end
from localstore.offset_index import stored_record_starts
from localstore.queue_registry import QueueRegistry


@dataclass(slots=True)
class RecoveryReport:
    """What recovery did on open."""

    abnormal: bool  # the abort marker was present (or the clean state was not sound)
    start_offset: int  # where the CRC-checked walk began
    end_offset: int  # the commitlog's valid end
    records_scanned: int
    records_dispatched: int
    units_truncated: int  # consume-queue units cut because they pointed past the end
    rebuilt_queues: list[str]  # queues whose files were unsound and were rebuilt


def recover(
    commitlog: CommitLog,
    queues: QueueRegistry,
    checkpoint: Checkpoint,
    *,
    crashed: bool,
    delay_levels: tuple[int, ...],
    index: IndexService | None = None,
) -> RecoveryReport:
    """Recover the store's commitlog, consume queues and index in place."""
    start = None if crashed else _normal_start(commitlog, queues, index)
    abnormal = start is None
    if start is None:
        start = _abnormal_start(commitlog, checkpoint)
    end, scanned = scan_valid_end(
        commitlog, start, check_crc=True, split_hints=split_hints(commitlog)
    )
    unsound = _unsound_queues(commitlog, queues, end)
    if unsound:  # they are rebuilt from the whole log: it must read, or nothing is touched
        _check_rebuildable(commitlog, end, unsound)
    commitlog.set_end(end)
    truncated = sum(queue.truncate_beyond(end) for queue in list(queues.queues.values()))
    rebuilt = _drop_queues(queues, unsound)
    redispatch_from = min(queues.dispatch_from(), end)
    if index is not None:
        redispatch_from = min(redispatch_from, index.end_phy_offset)
    if rebuilt:
        redispatch_from = commitlog.min_offset
    redispatch_from = max(redispatch_from, commitlog.min_offset)
    dispatcher = Dispatcher(queues, index, delay_levels)
    for message in iter_records(commitlog.segment_view, redispatch_from, end, body=False):
        dispatcher.add(message)
    dispatcher.flush()
    return RecoveryReport(abnormal, start, end, scanned, dispatcher.units_added, truncated, rebuilt)


def _normal_start(
    commitlog: CommitLog, queues: QueueRegistry, index: IndexService | None
) -> int | None:
    """Where a cleanly closed store's walk starts, or None if its state is not sound."""
    newest = max(queues.queues.values(), key=lambda q: q.max_phys_offset, default=None)
    start = commitlog.min_offset
    if newest is not None and newest.max_phys_offset > start:
        if not _last_unit_sound(commitlog, newest, check_crc=True):
            return None
        start = newest.max_phys_offset
    if index is not None and index.end_phy_offset and index.end_phy_offset < start:
        if first_record_ok(commitlog, index.end_phy_offset) is None:
            return None
        start = index.end_phy_offset
    return start


def _abnormal_start(commitlog: CommitLog, checkpoint: Checkpoint) -> int:
    """The newest segment whose first record was flushed before the checkpoint's time."""
    bound = checkpoint.min_timestamp
    for segment in reversed(commitlog.segments.segments):
        first = first_record_ok(commitlog, segment.start_offset)
        if first is not None and 0 < first.store_timestamp <= bound:
            return segment.start_offset
    return commitlog.min_offset


def _last_unit_sound(commitlog: CommitLog, queue: ConsumeQueue, *, check_crc: bool) -> bool:
    """The queue's last unit points at a whole record of this queue, of the unit's size (and,
    for the log's newest record, with an intact body: a clean close leaves no torn tail)."""
    last = queue.max_offset - 1
    if last < queue.min_offset:
        return True
    return _unit_sound(commitlog, queue, last, check_crc=check_crc)


def _unit_sound(commitlog: CommitLog, queue: ConsumeQueue, last: int, *, check_crc: bool) -> bool:
    """Unit ``last`` of ``queue`` points at a whole record of this queue (see above)."""
    phys, size = queue.unit_head(last)
    if phys < commitlog.min_offset:
        return True  # its record was deleted by retention: nothing left to check against
    located = commitlog.segment_view(phys)
    if located is None:
        return False
    try:
        message = decode_record(*located)
    except RecordError:
        return False
    return (
        message.phys_offset == phys
        and message.store_size == size
        and (not check_crc or body_crc(message.body) == message.body_crc)
        and message.topic == queue.topic
        and message.queue_id == queue.queue_id
        and message.queue_offset == last
    )


def _unsound_queues(commitlog: CommitLog, queues: QueueRegistry, end: int) -> list[str]:
    """Consume queues whose last unit, once the log ends at ``end``, does not point at their
    own record: damaged files, to be rebuilt from the commitlog. Found without changing
    anything (a unit past ``end`` is about to be cut, not a sign of damage)."""
    unsound = []
    for queue in queues.queues.values():
        last = queue.last_unit_within(end)
        if last is not None and not _unit_sound(commitlog, queue, last, check_crc=False):
            unsound.append(_queue_name(queue))
    return unsound


def _queue_name(queue: ConsumeQueue) -> str:
    return f"{queue.topic}/{queue.queue_id}"


def _check_rebuildable(commitlog: CommitLog, end: int, unsound: list[str]) -> None:
    """Raise :class:`StoreError`, before any file changes, if a damaged record between the
    log's start and ``end`` would stop the rebuild of the ``unsound`` queues half-way (their
    files deleted, the next open showing them empty)."""
    position = commitlog.min_offset
    try:
        for message in iter_records(commitlog.segment_view, position, end, body=False):
            position = message.phys_offset + message.store_size
    except RecordError as exc:
        raise StoreError(
            f"consume queue(s) {', '.join(unsound)} of {commitlog.directory.parent} point at "
            f"records they do not hold and must be rebuilt from the commitlog, but the record "
            f"at commitlog offset {position} cannot be read ({exc}); nothing was changed. "
            f"RocketMQ's own tools, or a copy of the damaged segment from a backup, can repair "
            f"it"
        ) from exc


def _drop_queues(queues: QueueRegistry, names: list[str]) -> list[str]:
    """Delete the consume queues ``names`` (:func:`_unsound_queues`); recovery's dispatch
    rebuilds them from the commitlog. Answers the names."""
    for key, queue in list(queues.queues.items()):
        if _queue_name(queue) in names:
            queue.destroy()
            del queues.queues[key]
    return names


def split_hints(commitlog: CommitLog) -> SplitHints:
    """Where the offset index believes records start, per segment: lets a long CRC scan be
    walked in parallel pieces (the walk checks every hint it uses)."""
    return partial(stored_record_starts, commitlog.directory.parent)
