"""Retention: deleting old commitlog segments, then the consume-queue and index files that only
point into them (RocketMQ's CleanCommitLogService, CleanConsumeQueueService, index deletion and
``correctMinOffset``).

When a run is due (:func:`decide`): the local hour of ``now`` is in ``delete_when``; or the disk
holding the commitlog is more than ``disk_max_used_ratio`` % used (or its usage is unknown); or
the run is manual (an operator asked) or forced. Above ``disk_clean_forcibly_ratio`` % (and
above ``disk_warning_ratio`` %, which also reports the disk as full) the run "cleans
immediately": with ``clean_forcibly_enable`` segments are deleted whatever their age. A forced
run always cleans immediately. Ratios are clamped as RocketMQ clamps them: the used ratio to
[10, 95], the forcible one to [30, 85], the warning one to [35, 90]; comparisons are strict (>).

Rules, in the order a run applies them:

1. Commitlog: walk the segments oldest first, never the last one. A segment is expired when
   ``now >= mtime + file_reserved_hours`` (or when cleaning immediately). Delete expired ones
   until ``delete_batch_max`` are deleted; stop at the first one that is not expired, so the log
   never gets a hole. The commitlog's min offset is then the first remaining segment's start.
2. Consume queues' min offsets (``correctMinOffset``): the first unit whose record is at or past
   the commitlog's min offset (binary search from the current minimum; units are in commitlog
   order), or the queue's end when its last unit points below it (the queue is empty but keeps
   its max offset). A min offset never moves back.
3. Consume-queue files: per queue, delete leading files (never the last) whose last unit's
   physical offset is below the commitlog's min offset; stop at the first file kept.
4. Index files: delete leading files (never the last) whose ``end_phy_offset`` is below the
   commitlog's min offset; stop at the first file kept.

RocketMQ corrects min offsets after deleting consume-queue files; doing it first gives the same
result (the file holding the new minimum always has a last unit at or past the commitlog's min,
so it is kept) and means a concurrent reader is told OFFSET_TOO_SMALL rather than finding a
queue file gone. Between steps 1 and 2 a unit whose record is gone reads as
MESSAGE_WAS_REMOVING, as in RocketMQ. Steps 2-4 run on every call, due or not: they are cheap
and idempotent, and they also repair min offsets that a reopen computed from the files alone.

Concurrency. The caller holds the store's put lock (no writer runs); readers and the flush thread
may run on other threads. A deleted file is first taken out of its list by rebinding the list
(never mutating it in place: a reader that took the old list keeps a consistent snapshot, and
``SegmentQueue.find`` indexes relative to the list's first element), then unlinked (a crash
leaves a prefix deleted, never a hole; the inode lives on while mapped: the file is first pinned
mapped, out of the reach of the pool of open segments), and handed to
:class:`~localstore.files.retired.RetiredFiles`, which closes its mapping only after a grace
period (a reader may still hold a view of it). Disk space comes back when the last mapping
closes. The store must call ``RetiredFiles.close`` when it closes.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from itertools import pairwise
from pathlib import Path
from typing import Protocol

from localstore.commitlog.log import CommitLog
from localstore.files.retired import RetiredFiles
from localstore.files.segments import SegmentQueue
from localstore.index.service import KeyIndex
from localstore.queue.consume_queue import UNIT, UNIT_SIZE, ConsumeQueue
from quiver_errors import InvalidArgumentError

HOUR_MS = 3_600_000

DiskUsage = Callable[[Path], float]  # used percent of the disk holding a path; < 0: unknown


class QueueSet(Protocol):
    """What retention needs of the store's queue registry."""

    @property
    def queues(self) -> Mapping[tuple[str, int], ConsumeQueue]: ...


def _clamp(value: int, low: int, high: int) -> int:
    return min(max(value, low), high)


@dataclass(frozen=True, slots=True)
class RetentionPolicy:
    """RocketMQ's cleanup settings (``MessageStoreConfig``); ratios are percent of the disk."""

    file_reserved_hours: int = 72  # fileReservedTime
    delete_when: str = "04"  # deleteWhen: local hours, ';'-separated
    disk_max_used_ratio: int = 75  # diskMaxUsedSpaceRatio, clamped to [10, 95]
    disk_clean_forcibly_ratio: int = 85  # diskSpaceCleanForciblyRatio, clamped to [30, 85]
    disk_warning_ratio: int = 90  # diskSpaceWarningLevelRatio, clamped to [35, 90]
    clean_forcibly_enable: bool = True  # cleanFileForciblyEnable
    delete_batch_max: int = 10  # deleteFileBatchMax: commitlog segments per run
    delete_hours: frozenset[int] = field(init=False, default=frozenset())

    def __post_init__(self) -> None:
        if self.file_reserved_hours < 0:
            raise InvalidArgumentError(
                f"file_reserved_hours must be >= 0, got {self.file_reserved_hours}"
            )
        if self.delete_batch_max < 1:
            raise InvalidArgumentError(
                f"delete_batch_max must be >= 1, got {self.delete_batch_max}"
            )
        clamped = {
            "disk_max_used_ratio": _clamp(self.disk_max_used_ratio, 10, 95),
            "disk_clean_forcibly_ratio": _clamp(self.disk_clean_forcibly_ratio, 30, 85),
            "disk_warning_ratio": _clamp(self.disk_warning_ratio, 35, 90),
            "delete_hours": parse_delete_when(self.delete_when),
        }
        for name, value in clamped.items():
            object.__setattr__(self, name, value)

    @property
    def reserved_ms(self) -> int:
        return self.file_reserved_hours * HOUR_MS


def parse_delete_when(text: str) -> frozenset[int]:
    """``"04;16"`` -> {4, 16}; empty parts are ignored, anything else must be an hour 0-23."""
    hours = set()
    for part in (p.strip() for p in text.split(";")):
        if not part:
            continue
        if not part.isdigit() or not 0 <= int(part) <= 23:
            raise InvalidArgumentError(f"delete_when {text!r}: {part!r} is not an hour 0-23")
        hours.add(int(part))
    return frozenset(hours)


def disk_used_percent(path: Path) -> float:
    """Used percent of the disk holding ``path`` (RocketMQ's getDiskPartitionSpaceUsedPercent:
    blocks in use, reserved ones included, over all blocks); -1.0 when it cannot be measured."""
    try:
        usage = shutil.disk_usage(path)
    except OSError:
        return -1.0
    return 100.0 * usage.used / usage.total if usage.total else -1.0


@dataclass(frozen=True, slots=True)
class Trigger:
    """Whether a run is due, why, and how hard it cleans."""

    due: bool
    reason: str  # "forced", "manual", "disk", "time" or "" (not due)
    clean_immediately: bool  # delete segments whatever their age
    disk_full: bool  # usage over the warning ratio (RocketMQ then refuses puts)
    disk_used_percent: float


def decide(
    policy: RetentionPolicy,
    now_ms: int,
    used_percent: float,
    *,
    force: bool = False,
    manual: bool = False,
) -> Trigger:
    """RocketMQ's isTimeToDelete / isSpaceToDelete / manual delete, for one run."""
    disk_full = used_percent > policy.disk_warning_ratio
    immediately = disk_full or used_percent > policy.disk_clean_forcibly_ratio
    space = immediately or used_percent < 0 or used_percent > policy.disk_max_used_ratio
    if force:
        reason = "forced"
    elif manual:
        reason = "manual"
    elif space:
        reason = "disk"
    elif time.localtime(now_ms / 1000).tm_hour in policy.delete_hours:
        reason = "time"
    else:
        reason = ""
    return Trigger(
        due=bool(reason),
        reason=reason,
        clean_immediately=force or (immediately and policy.clean_forcibly_enable),
        disk_full=disk_full,
        disk_used_percent=used_percent,
    )


@dataclass(slots=True)
class CleanReport:
    """What one run did."""

    trigger: Trigger
    commitlog_files: list[Path] = field(default_factory=list)
    queue_files: list[Path] = field(default_factory=list)
    index_files: list[Path] = field(default_factory=list)
    commitlog_min_offset: int = 0
    queue_min_offsets: dict[tuple[str, int], int] = field(default_factory=dict)  # changed only
    still_mapped: int = 0  # deleted files whose mapping is not closed yet

    @property
    def deleted(self) -> list[Path]:
        return self.commitlog_files + self.queue_files + self.index_files


def clean(
    commitlog: CommitLog,
    queues: QueueSet,
    index: KeyIndex | None,
    policy: RetentionPolicy,
    now_ms: int,
    *,
    force: bool = False,
    manual: bool = False,
    disk_usage: DiskUsage = disk_used_percent,
    retired: RetiredFiles | None = None,
) -> CleanReport:
    """One cleanup run (call it under the store's put lock). ``retired`` carries files whose
    mappings are not closed yet from run to run; without one, mappings close at once (fine when
    no reader runs, e.g. the CLI on a store it opened itself)."""
    if retired is None:
        retired = RetiredFiles(grace_s=0.0)
    retired.reap()
    trigger = decide(policy, now_ms, disk_usage(commitlog.directory), force=force, manual=manual)
    report = CleanReport(trigger)
    if trigger.due:
        report.commitlog_files = delete_expired_segments(
            commitlog, policy, now_ms, trigger.clean_immediately, retired
        )
    floor = report.commitlog_min_offset = commitlog.min_offset
    for key, queue in list(queues.queues.items()):
        before = queue.min_offset
        if correct_min_offset(queue, floor) != before:
            report.queue_min_offsets[key] = queue.min_offset
        report.queue_files += delete_queue_files(queue, floor, retired)
    if index is not None:
        report.index_files = index.delete_files_before(floor, retired)
    report.still_mapped = retired.reap()
    return report


def delete_expired_segments(
    commitlog: CommitLog,
    policy: RetentionPolicy,
    now_ms: int,
    clean_immediately: bool,
    retired: RetiredFiles,
) -> list[Path]:
    """Step 1: the oldest expired commitlog segments, at most a batch; never the last, nor one
    past what readers may see (``confirmed_offset``: under sync flush, bytes still in the
    write-behind buffer, such as those a failed flush kept for its retry, which would otherwise
    be written through a closed file)."""
    count = 0
    for segment in commitlog.segments.segments[:-1]:
        if count >= policy.delete_batch_max or segment.end_offset > commitlog.confirmed_offset:
            break
        if not clean_immediately and now_ms < _mtime_ms(segment.path) + policy.reserved_ms:
            break
        count += 1
    return _drop_leading(commitlog.segments, count, retired)


def correct_min_offset(queue: ConsumeQueue, commitlog_min: int) -> int:
    """Step 2: move the queue's min offset to its first unit whose record is at or past
    ``commitlog_min`` (the queue's end if none is); returns the new min (a queue offset).

    Units point at increasing offsets, so a binary search finds the first; a damaged unit
    must not make it skip sound ones. A negative offset is never taken for a deleted record,
    and when the units around the found boundary are out of order (one of them is damaged),
    the units are walked from the old min instead, stopping at the first that is not below."""
    segments = queue.segments.segments
    if not segments:
        return queue.min_offset
    start = max(queue.min_offset, segments[0].start_offset // UNIT_SIZE)
    end = queue.max_offset

    def below(offset: int) -> bool:
        return 0 <= queue.unit_head(offset)[0] < commitlog_min

    lo, hi = start, end
    while lo < hi:
        mid = (lo + hi) // 2
        if below(mid):
            lo = mid + 1
        else:
            hi = mid
    if lo > start and not _boundary_in_order(queue, start, lo, end):
        lo = start
        while lo < end and below(lo):
            lo += 1
    queue.min_logic_offset = max(queue.min_logic_offset, lo * UNIT_SIZE)
    return queue.min_offset


def _boundary_in_order(queue: ConsumeQueue, start: int, boundary: int, end: int) -> bool:
    """Whether the units just before ``boundary`` and the one at it point at increasing
    commitlog offsets (``start`` <= those units < ``end``)."""
    heads = [queue.unit_head(o)[0] for o in range(max(start, boundary - 2), min(end, boundary + 1))]
    return all(a < b for a, b in pairwise(heads))


def delete_queue_files(
    queue: ConsumeQueue, commitlog_min: int, retired: RetiredFiles
) -> list[Path]:
    """Step 3: leading files of one queue (never the last) whose every unit lies before the
    queue's min offset (step 2) and whose last unit's record is below ``commitlog_min``. A
    damaged unit (a negative offset) is never taken for a deleted record."""
    count = 0
    min_logic_offset = queue.min_logic_offset
    for segment in queue.segments.segments[:-1]:
        last_unit_at = segment.wrote_position - UNIT_SIZE
        if last_unit_at < 0 or segment.start_offset + segment.wrote_position > min_logic_offset:
            break
        if not 0 <= UNIT.unpack_from(segment.view, last_unit_at)[0] < commitlog_min:
            break
        count += 1
    return _drop_leading(queue.segments, count, retired)


def _drop_leading(queue: SegmentQueue, count: int, retired: RetiredFiles) -> list[Path]:
    """Rebind the queue's list without its first ``count`` segments, then retire those oldest
    first."""
    dropped = queue.segments[:count]
    if dropped:
        queue.segments = queue.segments[count:]
    for segment in dropped:
        with contextlib.suppress(OSError):  # cannot be mapped: a reader gets a typed error
            segment.keep_mapped()  # readable by readers that found it, until it is closed
        retired.retire(segment.path, segment.destroy)
    return [segment.path for segment in dropped]


def _mtime_ms(path: Path) -> int:
    """The file's modification time (RocketMQ's lastModified); a missing file counts as old."""
    try:
        return os.stat(path).st_mtime_ns // 1_000_000
    except FileNotFoundError:
        return 0
