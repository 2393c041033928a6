"""Recovery on open: find the valid end of the commitlog, make consume queues and index agree.

Normal recovery (no ``abort`` marker: the last run closed cleanly). Every record before the end
of the queues' last units was dispatched, so the walk starts there: at the end of the record the
newest unit points at, or at the last indexed message when the index lags. That starting point is
checked first (the unit must point at a record of its own queue); if it is not sound the store
is treated as crashed.

Abnormal recovery (``abort`` present). As RocketMQ does: walk back from the newest commitlog
segment to the first one whose first record is valid and was stored no later than the
checkpoint's ``min_timestamp`` (everything before it was flushed), or the first segment when
none qualifies, and walk forward from there checking body CRCs. A long walk is cut at the record
starts the sparse offset index names and its pieces walked by worker processes
(:mod:`localstore.recovery.parallel_scan`), with the same answer.

Recovery cuts only a torn tail (both paths), and an unfinished put at the log's end: a put of
several records of which a kill left only the first (:mod:`.unfinished_put`), never
acknowledged, is cut whole with the tail, logged at WARNING with its offsets and counts and
reported (``RecoveryReport.unfinished_put``). A damaged record that valid records follow is not a
torn tail (:func:`localstore.recovery.log_scan.scan_log` resynchronises on the next valid record):
its
bytes stay on disk, its range is recorded in :mod:`localstore.recovery.damaged` (``damaged.json``)
and logged at ERROR with file, offset and length, and readers skip it. Damage with nothing valid
after it is the torn tail: cut, and logged at WARNING with its byte range when it held bytes.

Consume queues are checked against the log, cheaply (:mod:`.queue_check`: first and last units,
missing first or last files, units lost past a damaged one, records whose header was damaged),
and a queue whose files do not load is rebuilt. Unsound queues are deleted and rebuilt from the
whole log (walked first, so its damage is known and stepped over), logged at WARNING.

Both then: cut the commitlog at the valid end (later segments deleted, a trailing all-zero
preallocated segment included), cut consume-queue units that point past it (with sync flush a
unit can be written before its record reaches the file; or a damaged unit points there), and
re-dispatch the records from where the queues, a cut queue or the index stop to the end. Index
files newer than the checkpoint were dropped when the index loaded after a crash, and are rebuilt
here.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

from localstore.commitlog.log import CommitLog
from localstore.commitlog.offset_index import stored_record_starts
from localstore.index.service import IndexService
from localstore.queue.dispatch import Dispatcher
from localstore.queue.registry import QueueRegistry
from localstore.record.walk import walk_segment
from localstore.recovery.checkpoint import Checkpoint
from localstore.recovery.damaged import DamagedRange, DamagedRanges
from localstore.recovery.log_scan import (
    LogScan,
    SplitHints,
    first_record_ok,
    iter_records,
    scan_log,
)
from localstore.recovery.queue_check import QueueCheck, queue_name
from localstore.recovery.unfinished_put import (
    UnfinishedPut,
    find_unfinished_put,
    put_opened_before,
)

log = logging.getLogger(__name__)

_PAGE = 4096


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
    damaged: list[DamagedRange] = field(default_factory=list)  # found by this recovery, kept
    cut_tail: tuple[int, int] | None = None  # [start, end) of the torn bytes cut, if any
    unfinished_put: UnfinishedPut | None = None  # a put cut whole because a kill cut it short


def recover(
    commitlog: CommitLog,
    queues: QueueRegistry,
    checkpoint: Checkpoint,
    *,
    crashed: bool,
    delay_levels: tuple[int, ...],
    index: IndexService | None = None,
    damaged: DamagedRanges | None = None,
    deleted_topics: Mapping[str, int] | None = None,
) -> RecoveryReport:
    """Recover the store's commitlog, consume queues and index in place. ``deleted_topics``
    (topic -> commitlog offset of its deletion) get no unit for their records before it."""
    damaged = damaged if damaged is not None else DamagedRanges(commitlog.directory.parent)
    queue_check = QueueCheck(commitlog, queues, damaged)
    start = None if crashed else _normal_start(commitlog, queues, index, queue_check)
    abnormal = start is None
    if start is None:
        start = _abnormal_start(commitlog, checkpoint)
    scan = _scan(commitlog, start)
    if abnormal and scan.last_put is None and start > commitlog.min_offset:
        scan.last_put = put_opened_before(commitlog, start)  # a put may go on past ``start``
    unsound = queue_check.unsound_queues(scan.end) + queues.unloadable
    if unsound and start > commitlog.min_offset:  # rebuilt from the whole log: walk it all
        scan = _scan(commitlog, commitlog.min_offset)
    _forget_mended(commitlog, damaged)
    found = _record_damage(commitlog, damaged, scan.damaged)
    unfinished = find_unfinished_put(commitlog, scan)
    if unfinished is not None:
        _log_unfinished(commitlog, unfinished)
        scan.end, scan.records = unfinished.phys_offset, scan.records - unfinished.found
    cut_tail = _cut_tail(commitlog, scan.end, unfinished)
    commitlog.set_end(
        scan.end, cut_records_to=None if unfinished is None else unfinished.end_offset
    )
    damaged.drop_from(scan.end)
    truncated, cut_queues_end = _truncate_queues(queues, scan.end)
    old_ends = {name: _old_end(queues, name) for name in unsound}
    dropped = _drop_queues(queues, unsound)
    rebuilt = unsound
    redispatch_from = min(queues.dispatch_from(), scan.end, cut_queues_end)
    if index is not None:
        redispatch_from = min(redispatch_from, index.end_phy_offset)
    if rebuilt:
        redispatch_from = commitlog.min_offset
    redispatch_from = max(redispatch_from, commitlog.min_offset)
    units_known_to = 0 if abnormal or rebuilt else queues.dispatch_from()
    dispatcher = Dispatcher(
        queues,
        index,
        delay_levels,
        damaged,
        units_known_to=units_known_to,
        rebuilt=dropped,
        deleted_topics=deleted_topics,
    )

    def undecodable(start: int, stop: int) -> None:  # frame valid, fields not (properties)
        found.extend(_record_damage(commitlog, damaged, [(start, stop)]))

    records = iter_records(
        commitlog.segment_view, redispatch_from, scan.end, body=False, on_skip=undecodable
    )
    for message in records:
        dispatcher.add(message)
    dispatcher.flush()
    _keep_damaged_offsets(queues, damaged, old_ends)
    if abnormal:
        _log_abnormal(commitlog, crashed, start, scan, dispatcher.units_added)
    return RecoveryReport(
        abnormal,
        start,
        scan.end,
        scan.records,
        dispatcher.units_added,
        truncated,
        rebuilt,
        found,
        cut_tail,
        unfinished,
    )


def _truncate_queues(queues: QueueRegistry, end: int) -> tuple[int, int]:
    """Cut the units that point past the log's ``end``; answers how many, and where the
    earliest of the cut queues now ends: dispatch resumes there, since a cut unit may be a
    damaged one whose record lies before ``end``, not a unit written ahead of its record."""
    truncated, cut_queues_end = 0, end
    for queue in list(queues.queues.values()):
        cut = queue.truncate_beyond(end)
        if cut:
            truncated += cut
            cut_queues_end = min(cut_queues_end, queue.max_phys_offset)
    return truncated, cut_queues_end


def _log_unfinished(commitlog: CommitLog, unfinished: UnfinishedPut) -> None:
    """Say at WARNING that a put a kill cut short is cut whole (it was never acknowledged)."""
    log.warning(
        "commitlog of %s: %s, so a kill stopped it while it was written; it was never "
        "acknowledged and is cut whole with the tail (all or nothing)",
        commitlog.directory.parent,
        unfinished,
    )


def _forget_mended(commitlog: CommitLog, damaged: DamagedRanges) -> None:
    """Forget recorded ranges that now hold valid records end to end (mended from a copy)."""
    mended = []
    for damage in damaged:
        segment = commitlog.segments.find(damage.phys_offset)
        if segment is None:
            continue
        base = segment.start_offset
        pos, count, _ = walk_segment(
            segment.view, base, segment.size, damage.phys_offset - base, damage.end - base, True
        )
        if count and base + pos == damage.end:
            mended.append(damage)
    if mended:
        log.warning(
            "commitlog ranges %s hold valid records again: no longer damaged",
            ", ".join(map(str, mended)),
        )
        damaged.remove(mended)


def _log_abnormal(
    commitlog: CommitLog, crashed: bool, start: int, scan: LogScan, units_added: int
) -> None:
    """Say at WARNING that the store did not open from a clean close, and what that cost."""
    log.warning(
        "store %s: %s, so the commitlog was walked with CRC checks from offset %d to its end "
        "%d (%d records) and %d consume-queue units were re-dispatched",
        commitlog.directory.parent,
        "the abort marker was present (the last run did not close cleanly)"
        if crashed
        else "the clean state was not sound",
        start,
        scan.end,
        scan.records,
        units_added,
    )


def _old_end(queues: QueueRegistry, name: str) -> tuple[int, int] | None:
    """(max offset, last unit's phys offset) of a queue about to be rebuilt, or None."""
    topic, _, queue_id = name.rpartition("/")
    queue = queues.get(topic, int(queue_id))
    if queue is None or queue.max_offset <= queue.min_offset:
        return None
    return queue.max_offset, queue.unit_head(queue.max_offset - 1)[0]


def _keep_damaged_offsets(
    queues: QueueRegistry, damaged: DamagedRanges, old_ends: dict[str, tuple[int, int] | None]
) -> None:
    """A rebuilt queue whose old last units pointed into a damaged range gets them back
    (pointing into that range), so that no put reuses their queue offsets."""
    for name, old in old_ends.items():
        if old is None:
            continue
        old_max, old_phys = old
        damage = damaged.containing(old_phys)
        topic, _, queue_id = name.rpartition("/")
        queue = queues.get(topic, int(queue_id))
        if damage is None or queue is None or queue.max_offset >= old_max:
            continue
        start = queue.max_offset
        missing = min(old_max - start, damage.placeholder_capacity())
        if start == 0 and not queue.segments.segments:
            continue  # nothing of it was rebuilt: it starts where the log says
        queue.append(start, b"".join(damage.placeholder_units(missing)), damage.end)
        log.warning(
            "consume queue %s: queue offsets [%d, %d) point into damaged %s, kept so that no put "
            "reuses them",
            name,
            start,
            start + missing,
            damage,
        )


def _scan(commitlog: CommitLog, start: int) -> LogScan:
    return scan_log(commitlog, start, check_crc=True, split_hints=split_hints(commitlog))


def _record_damage(
    commitlog: CommitLog, damaged: DamagedRanges, spans: list[tuple[int, int]]
) -> list[DamagedRange]:
    """Record damaged ``spans`` that valid records follow; log the new ones at ERROR."""
    root = commitlog.directory.parent
    ranges = []
    for start, stop in spans:
        segment = commitlog.segments.find(start)
        name = str(segment.path.relative_to(root)) if segment is not None else "commitlog"
        ranges.append(DamagedRange(start, stop - start, name))
    fresh = damaged.add(ranges)
    for damage in fresh:
        log.error(
            "damaged commitlog record(s) in %s kept on disk: valid records follow, so nothing "
            "was cut; readers skip them and `quiver store verify` lists them",
            damage,
        )
    return fresh


def _cut_tail(
    commitlog: CommitLog, end: int, unfinished: UnfinishedPut | None
) -> tuple[int, int] | None:
    """The byte range of the torn tail past ``end`` that :meth:`CommitLog.set_end` is about to
    cut (an unfinished put's records, then non-zero bytes up to the first all-zero page, and
    later segments), logged at WARNING; None when only zeros follow ``end``."""
    stop = end
    records_end = end if unfinished is None else unfinished.end_offset
    segment = commitlog.segments.find(records_end)
    if segment is not None:
        stop = segment.start_offset + _nonzero_extent(
            segment.view, records_end - segment.start_offset
        )
    later = [s for s in commitlog.segments.segments if s.start_offset > end]
    later_data = [s for s in later if _nonzero_extent(s.view, 0)]
    if later_data:
        stop = later_data[-1].start_offset + _nonzero_extent(later_data[-1].view, 0)
    if stop <= end and not later:
        return None
    names = ", ".join(Path(s.path).name for s in later)
    log.warning(
        "commitlog of %s: cut the torn tail [%d, %d) (%d bytes)%s",
        commitlog.directory.parent,
        end,
        max(stop, end),
        max(stop - end, 0),
        f", deleting later segment(s) {names}" if later else "",
    )
    return end, max(stop, end)


def _nonzero_extent(view: memoryview, pos: int) -> int:
    """Position of the first all-zero page boundary at or after ``pos`` (``pos`` itself when
    the bytes from ``pos`` to its page's end are all zero)."""
    end = pos
    size = len(view)
    while end < size:
        stop = min(size, (end // _PAGE + 1) * _PAGE)
        if not view[end:stop].tobytes().strip(b"\x00"):
            break
        end = stop
    return end


def _normal_start(
    commitlog: CommitLog,
    queues: QueueRegistry,
    index: IndexService | None,
    queue_check: QueueCheck,
) -> int | None:
    """Where a cleanly closed store's walk starts, or None if its state is not sound."""
    newest = max(queues.queues.values(), key=lambda q: q.max_phys_offset, default=None)
    start = commitlog.min_offset
    if newest is not None and newest.max_phys_offset > start:
        if not queue_check.last_unit_sound(newest, check_crc=True):
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


def _drop_queues(queues: QueueRegistry, names: list[str]) -> list[tuple[str, int]]:
    """Delete the consume queues ``names`` (:mod:`.queue_check`); recovery's dispatch
    rebuilds them from the commitlog. Answers their keys (topic, queue id)."""
    dropped = []
    for key, queue in list(queues.queues.items()):
        if queue_name(queue) in names:
            queue.destroy()
            del queues.queues[key]
            dropped.append(key)
    return dropped


def split_hints(commitlog: CommitLog) -> SplitHints:
    """Where the offset index believes records start, per segment: lets a long CRC scan be
    walked in parallel pieces (the walk checks every hint it uses)."""
    return partial(stored_record_starts, commitlog.directory.parent)
