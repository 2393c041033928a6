"""Walking the commitlog record by record (recovery, verify, rebuilding derived files).

A position holds a valid record when its magic is v1/v2, its TOTALSIZE fits the segment and
equals the sum of its fields, its PHYSICALOFFSET field equals the position, and (when asked) its
body CRC matches. A blank record (magic 0xCBD43194) moves the walk to the next segment's start.

Anything else is damage, and the walk resynchronises (:func:`next_record_start`): it searches
forward, in this segment and then in the later ones, for the next position that holds a valid
record (magic code, PHYSICALOFFSET equal to the position, sizes that add up, CRC checked). A
record stores its own log offset, so a body that merely contains a magic code is not taken for
a record. If one is found, the bytes from the damage to it form a *damaged range* and the walk
goes on; if none is, the damage is the torn tail and the valid log ends before it. Searching
reads only the data regions of a segment file (``SEEK_DATA``/``SEEK_HOLE``): the unwritten,
sparse rest of a preallocated segment costs nothing.

``scan_log`` is the fast path (:func:`localstore.record.walk.walk_segment`: header fields
and the body CRC through a memoryview, no decoding of strings), cut into pieces walked by worker
processes when the log is long and split hints are known; ``iter_records`` decodes each record
for dispatch, stepping over what it cannot decode the same way.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from localstore.commitlog.log import CommitLog
from localstore.record.codec import (
    BLANK_MAGIC,
    INT,
    RecordError,
    StoredMessage,
    body_crc,
    decode_record,
)
from localstore.record.walk import WALK_INVALID, Buffer, walk_marking, walk_segment
from localstore.recovery import parallel_scan

SplitHints = Callable[[int], Sequence[int]]  # segment start -> record starts it believes in

_MAGIC_PREFIX = b"\xda\xa3\x20"  # both magic codes (v1 ...a7, v2 ...ab) start so
_MAGIC_LAST = (0xA7, 0xAB)
_SEARCH_CHUNK = 1 << 20


@dataclass(slots=True)
class LogScan:
    """What a walk of the commitlog found."""

    end: int  # end of the last valid record: where the next record goes
    records: int  # valid records seen
    damaged: list[tuple[int, int]] = field(default_factory=list)  # [start, end) followed by valid
    last_put: int | None = None  # log offset of the last valid record opening a put of several


def scan_valid_end(
    commitlog: CommitLog,
    start: int,
    *,
    check_crc: bool,
    split_hints: SplitHints | None = None,
) -> tuple[int, int]:
    """(end of the valid log, records seen): :func:`scan_log` without the damaged ranges."""
    scan = scan_log(commitlog, start, check_crc=check_crc, split_hints=split_hints)
    return scan.end, scan.records


def scan_log(
    commitlog: CommitLog,
    start: int,
    *,
    check_crc: bool,
    split_hints: SplitHints | None = None,
) -> LogScan:
    """Walk valid records from ``start`` to the end of the log, stepping over damage that valid
    records follow (module docstring).

    The end is where the next record would go: after a segment's last record, the blank record
    that closes the segment is not part of the valid log unless a record follows it. The scan
    notes the last record that opens a put of several records (``last_put``,
    :mod:`localstore.record.put_mark`), for :mod:`localstore.recovery.unfinished_put`.

    ``split_hints`` names positions (relative to a segment's start) where records are believed
    to start, such as the sparse offset index's entries. With them a long walk is cut at those
    positions and the pieces walked by worker processes (:mod:`localstore.recovery.parallel_scan`);
    a hint is trusted only if the walk before it lands exactly on it, so wrong hints cost time,
    never a different answer.
    """
    scan = LogScan(start, 0)
    position = start
    while True:
        segment = commitlog.segments.find(position)
        if segment is None:
            return scan
        base = segment.start_offset
        pos = position - base
        hints = split_hints(base) if split_hints is not None else ()
        if parallel_scan.worth_splitting(pos, hints):
            pos_after, count, status, last_put = parallel_scan.walk_split(
                segment.path, segment.view, base, segment.size, pos, hints, check_crc
            )
        else:
            pos_after, count, status, last_put = walk_marking(
                segment.view, base, segment.size, pos, segment.size, check_crc
            )
        if last_put >= 0:
            scan.last_put = base + last_put
        if count:
            scan.records += count
            scan.end = base + pos_after
        if status != WALK_INVALID:
            position = base + segment.size  # blank record or segment end: the next segment
            continue
        damage_at = base + pos_after
        resume = next_record_start(commitlog, damage_at + 1, check_crc=check_crc)
        if resume is None:
            return scan  # nothing valid follows: a torn tail
        scan.damaged.extend(_damaged_spans(commitlog, damage_at, resume))
        position = resume


def _damaged_spans(commitlog: CommitLog, start: int, stop: int) -> list[tuple[int, int]]:
    """[start, stop) cut at segment ends (a range never spans two segment files)."""
    spans = []
    while start < stop:
        segment = commitlog.segments.find(start)
        end = stop if segment is None else min(stop, segment.end_offset)
        spans.append((start, end))
        start = end
    return spans


def next_record_start(commitlog: CommitLog, position: int, *, check_crc: bool) -> int | None:
    """The first log offset at or after ``position`` that holds a valid record, or None."""
    while True:
        segment = commitlog.segments.find(position)
        if segment is None:
            later = [s for s in commitlog.segments.segments if s.start_offset > position]
            if not later:
                return None
            segment = later[0]
            position = segment.start_offset
        found = record_start_in(
            segment.view,
            segment.start_offset,
            segment.size,
            position - segment.start_offset,
            check_crc,
            segment.path,
        )
        if found is not None:
            return segment.start_offset + found
        position = segment.end_offset


def record_start_in(
    view: Buffer, base: int, size: int, pos: int, check_crc: bool, path: Path | None = None
) -> int | None:
    """The first position at or after ``pos`` of one segment that holds a valid record."""
    for begin, stop in _data_regions(path, pos, size):
        at = begin
        while at < stop:
            chunk_end = min(stop, at + _SEARCH_CHUNK)
            chunk = bytes(view[at : min(size, chunk_end + 3)])
            hit = chunk.find(_MAGIC_PREFIX)
            while hit != -1 and at + hit < chunk_end:
                candidate = at + hit - 4
                if (
                    candidate >= pos
                    and hit + 3 < len(chunk)
                    and chunk[hit + 3] in _MAGIC_LAST
                    and walk_segment(view, base, size, candidate, candidate + 1, check_crc)[1]
                ):
                    return candidate
                hit = chunk.find(_MAGIC_PREFIX, hit + 1)
            at = chunk_end
    return None


def _data_regions(path: Path | None, pos: int, size: int) -> Iterator[tuple[int, int]]:
    """[start, end) regions of the segment file from ``pos`` that may hold data: the holes of
    a sparse file read as zeros and hold no record. The whole rest when the file system
    cannot say."""
    fd = -1
    if path is not None:
        try:
            fd = os.open(path, os.O_RDONLY)
        except OSError:
            fd = -1
    if fd < 0:
        yield pos, size
        return
    try:
        at = pos
        while at < size:
            try:
                data = os.lseek(fd, at, os.SEEK_DATA)
                hole = os.lseek(fd, data, os.SEEK_HOLE)
            except OSError as exc:
                if exc.errno != errno.ENXIO:  # ENXIO: no data after ``at``
                    yield at, size
                return
            if data >= size:
                return
            yield data, min(hole, size)
            at = max(hole, data + 1)
    finally:
        os.close(fd)


SegmentView = Callable[[int], "tuple[memoryview, int] | None"]
"""``segment_view(offset)``: the whole segment holding a log offset and the position in it, or
None when no segment holds it (:meth:`CommitLog.segment_view`, or the index process's own
read-only mappings)."""


def iter_records(
    segment_view: SegmentView,
    start: int,
    end: int,
    *,
    body: bool = True,
    on_skip: Callable[[int, int], None] | None = None,
) -> Iterator[StoredMessage]:
    """Decoded records in [start, end) (a range ``scan_log`` walked); ``body=False`` leaves
    bodies out. Bytes that do not decode as the record of their position (a damaged range)
    are stepped over to the next valid record of the segment (:func:`record_start_in`), or to
    the next segment; ``on_skip(start, stop)`` hears of each such range. The walk ends early
    where no segment holds the next offset."""
    position = start
    while position < end:
        located = segment_view(position)
        if located is None:
            return
        view, pos = located
        if pos + 8 > len(view) or INT.unpack_from(view, pos + 4)[0] == BLANK_MAGIC:
            position += len(view) - pos  # the segment's end: the next one
            continue
        try:
            message: StoredMessage | None = decode_record(view, pos, body=body)
        except RecordError:
            message = None
        if message is None or message.phys_offset != position:
            resume = record_start_in(view, position - pos, len(view), pos + 1, True)
            skipped_to = position + (len(view) if resume is None else resume) - pos
            if on_skip is not None:
                on_skip(position, min(skipped_to, end))
            position = skipped_to
            continue
        yield message
        position += message.store_size


def first_record_ok(commitlog: CommitLog, position: int) -> StoredMessage | None:
    """The record at ``position`` if it is a valid one (CRC checked), else None."""
    segment = commitlog.segments.find(position)
    if segment is None:
        return None
    try:
        message = decode_record(segment.view, position - segment.start_offset)
    except RecordError:
        return None
    if message.phys_offset != position or body_crc(message.body) != message.body_crc:
        return None
    return message
