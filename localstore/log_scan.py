"""Walking the commitlog record by record (recovery, verify, rebuilding derived files).

A position holds a valid record when its magic is v1/v2, its TOTALSIZE fits the segment and
equals the sum of its fields, its PHYSICALOFFSET field equals the position, and (when asked) its
body CRC matches. A blank record (magic 0xCBD43194) moves the walk to the next segment's start;
anything else ends the valid log there.

``scan_valid_end`` is the fast path (:func:`localstore.record_walk.walk_segment`: header fields
and the body CRC through a memoryview, no decoding of strings), cut into pieces walked by worker
processes when the log is long and split hints are known; ``iter_records`` decodes each record
for dispatch.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence

from localstore import parallel_scan
from localstore.codec import BLANK_MAGIC, INT, RecordError, StoredMessage, body_crc, decode_record
from localstore.commitlog import CommitLog
from localstore.record_walk import WALK_INVALID, walk_segment

SplitHints = Callable[[int], Sequence[int]]  # segment start -> record starts it believes in


def scan_valid_end(
    commitlog: CommitLog,
    start: int,
    *,
    check_crc: bool,
    split_hints: SplitHints | None = None,
) -> tuple[int, int]:
    """Walk valid records from ``start``; returns (end of the last valid record, records seen).

    The end is where the next record would go: after a segment's last record, the blank record
    that closes the segment is not part of the valid log unless a record follows it.

    ``split_hints`` names positions (relative to a segment's start) where records are believed
    to start, such as the sparse offset index's entries. With them a long walk is cut at those
    positions and the pieces walked by worker processes (:mod:`localstore.parallel_scan`); a
    hint is trusted only if the walk before it lands exactly on it, so wrong hints cost time,
    never a different answer.
    """
    position = start
    end = start
    records = 0
    while True:
        segment = commitlog.segments.find(position)
        if segment is None:
            return end, records
        base = segment.start_offset
        pos = position - base
        hints = split_hints(base) if split_hints is not None else ()
        if parallel_scan.worth_splitting(pos, hints):
            pos_after, count, status = parallel_scan.walk_split(
                segment.path, segment.view, base, segment.size, pos, hints, check_crc
            )
        else:
            pos_after, count, status = walk_segment(
                segment.view, base, segment.size, pos, segment.size, check_crc
            )
        if count:
            records += count
            end = base + pos_after
        if status == WALK_INVALID:
            return end, records
        position = base + segment.size  # blank record or segment end: go on in the next one


SegmentView = Callable[[int], "tuple[memoryview, int] | None"]
"""``segment_view(offset)``: the whole segment holding a log offset and the position in it, or
None when no segment holds it (:meth:`CommitLog.segment_view`, or the index process's own
read-only mappings)."""


def iter_records(
    segment_view: SegmentView, start: int, end: int, *, body: bool = True
) -> Iterator[StoredMessage]:
    """Decoded records in [start, end) (a range ``scan_valid_end`` found valid); ``body=False``
    leaves bodies out. The walk ends early where no segment holds the next offset."""
    position = start
    while position < end:
        located = segment_view(position)
        if located is None:
            return
        view, pos = located
        if pos + 8 > len(view) or INT.unpack_from(view, pos + 4)[0] == BLANK_MAGIC:
            position += len(view) - pos  # the segment's end: the next one
            continue
        message = decode_record(view, pos, body=body)
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
