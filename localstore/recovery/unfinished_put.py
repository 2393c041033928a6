"""An unfinished put at the log's end: a put of several records that a kill cut short.

A put of n > 1 records carries n on its first record (:mod:`localstore.record.put_mark`) and its
records are published in log order, so a kill while they are written leaves its first k < n
records, each whole, as the log's last valid records; the put was never acknowledged. The
recovery scan notes the last record that opens such a put (:attr:`LogScan.last_put`);
:func:`find_unfinished_put` counts the records from it to the valid end and, when fewer than
announced lie there, answers where the put starts: recovery moves the valid end back there, so
the put is cut whole, as a torn tail is.

A crashed store's scan starts at a segment's start (the newest whose first record the checkpoint
says was flushed), which may lie inside a put that the segment before opens: the scan then sees
none of its marks, and :func:`put_opened_before` finds the put's first record in that segment.

Damage between the put's first record and the valid end (valid records follow it) is left to
the damage rules: nothing is cut then. The records counted were checked by the scan, so the
count follows their sizes only, and stops once it has found the announced number.
"""

from __future__ import annotations

from dataclasses import dataclass

from localstore.commitlog.log import CommitLog
from localstore.record.layout import BLANK_MAGIC, SIZE_AND_MAGIC
from localstore.record.put_mark import announced_records
from localstore.record.walk import WALK_SEGMENT_END, walk_marking
from localstore.recovery.log_scan import LogScan


@dataclass(frozen=True, slots=True)
class UnfinishedPut:
    """The first ``found`` of the ``announced`` records of a put at ``phys_offset``, up to the
    old valid end ``end_offset``."""

    phys_offset: int
    announced: int
    found: int
    end_offset: int

    def __str__(self) -> str:
        return (
            f"a put of {self.announced} records at commitlog offset {self.phys_offset} holds "
            f"only {self.found} (bytes [{self.phys_offset}, {self.end_offset}))"
        )


def find_unfinished_put(commitlog: CommitLog, scan: LogScan) -> UnfinishedPut | None:
    """The put the log's valid end (``scan.end``) cuts short, or None (see the module
    docstring)."""
    start, end = scan.last_put, scan.end
    if start is None or start >= end or any(stop > start for _, stop in scan.damaged):
        return None
    located = commitlog.segment_view(start)
    if located is None:
        return None
    announced = announced_records(*located)
    found, position = 0, start
    while found < announced and position < end:
        located = commitlog.segment_view(position)
        if located is None:
            break
        view, pos = located
        if pos + SIZE_AND_MAGIC.size > len(view):
            position += len(view) - pos
            continue
        size, magic = SIZE_AND_MAGIC.unpack_from(view, pos)
        if magic == BLANK_MAGIC:  # the put goes on in the next segment
            position += len(view) - pos
            continue
        if size <= 0:  # not a record the scan accepted: no count to trust
            return None
        found += 1
        position += size
    if found >= announced:
        return None
    return UnfinishedPut(start, announced, found, end)


def put_opened_before(commitlog: CommitLog, start: int) -> int | None:
    """The log offset of the last record opening a put of several in the segment that ends at
    the segment start ``start``, when that segment reads whole (none for damage, left to the
    damage rules); None when there is none. Walked without CRCs: only the records' frames
    count here, and the recovery scan checks the records from ``start`` on."""
    segment = commitlog.segments.find(start - 1)
    if segment is None or segment.end_offset != start:
        return None
    size = segment.size
    _, _, status, last_put = walk_marking(segment.view, segment.start_offset, size, 0, size, False)
    if status != WALK_SEGMENT_END or last_put < 0:
        return None
    return segment.start_offset + last_put
