"""The validity walk over one commitlog segment: the inner loop of recovery's CRC scan.

A position holds a valid record when :mod:`localstore.record.frame`'s rules say so, with the
record's log offset known (PHYSICALOFFSET must equal it) and the body CRC checked when asked. A
blank record (magic 0xCBD43194), or fewer than 8 bytes left, ends the segment.

The common record (IPv4 hosts) is accepted by one fused check here; any record that check does
not accept (IPv6 hosts, or damage) is judged by :func:`localstore.record.frame.frame_problem`, so
the walk's verdict is always the shared rules'.

The walk also notes the last record it accepted that opens a put of several records (its
properties start with the put's mark, :mod:`localstore.record.put_mark`: a byte compared per
record), for recovery to check that the log's last put is whole.

Pure: it reads a buffer and returns numbers, so the same function runs in the store's process
and in the worker processes of :mod:`localstore.recovery.parallel_scan`.
"""

from __future__ import annotations

import zlib

from localstore.record.codec import properties_span
from localstore.record.frame import frame_problem
from localstore.record.layout import (
    BLANK_MAGIC,
    BLANK_RECORD_SIZE,
    HEADER_V4_SIZE,
    MAGIC_V1,
    MAGIC_V2,
    SHORT,
    SIZE_AND_MAGIC,
    SYSFLAG_HOSTS_V6,
    WALK_FIELDS_V4,
)
from localstore.record.put_mark import MARK_FIRST_BYTE, marked_at

Buffer = bytes | memoryview

# How a walk over one segment ended.
WALK_INVALID = 0  # an invalid record: the valid log ends where the walk stopped
WALK_SEGMENT_END = 1  # a blank record or the segment's end: the log goes on in the next segment
WALK_LIMIT = 2  # reached or passed the limit it was given (the position says which)


def walk_segment(
    view: Buffer, base: int, size: int, pos: int, limit: int, check_crc: bool
) -> tuple[int, int, int]:
    """Walk valid records of one segment (``view``, ``size`` bytes, at log offset ``base``)
    from ``pos`` while the position is below ``limit``.

    Returns (position after the last valid record, records seen, how it ended: WALK_*).
    """
    return walk_marking(view, base, size, pos, limit, check_crc)[:3]


def walk_marking(
    view: Buffer, base: int, size: int, pos: int, limit: int, check_crc: bool
) -> tuple[int, int, int, int]:
    """:func:`walk_segment`, and the position of the last valid record it saw that opens a put
    of several records (-1 when none did)."""
    records = 0
    last_put = -1
    crc32 = zlib.crc32
    head = WALK_FIELDS_V4.unpack_from
    read_short = SHORT.unpack_from
    header_v4 = HEADER_V4_SIZE
    mark_first_byte = MARK_FIRST_BYTE
    while pos < limit:
        if pos + header_v4 > size:  # no room for an IPv4 header: a blank record, the end, or not
            if (
                pos + BLANK_RECORD_SIZE > size
                or SIZE_AND_MAGIC.unpack_from(view, pos)[1] == BLANK_MAGIC
            ):
                return pos, records, WALK_SEGMENT_END, last_put
            return pos, records, WALK_INVALID, last_put
        total, magic, crc, phys, sys_flag, body_len = head(view, pos)
        if magic == BLANK_MAGIC:
            return pos, records, WALK_SEGMENT_END, last_put
        # The fused check: an IPv4 record of v1 or v2 whose fields add up, at its log offset.
        stop = pos + total
        cursor = pos + header_v4 + body_len
        valid = (
            (magic == MAGIC_V1 or magic == MAGIC_V2)  # noqa: PLR1714, SIM109
            and not sys_flag & SYSFLAG_HOSTS_V6
            and stop <= size
            and phys == base + pos
            and body_len >= 0
            and cursor + 3 <= stop
        )
        if valid:
            if magic == MAGIC_V1:
                cursor += 1 + view[cursor]
            else:
                topic_len = read_short(view, cursor)[0]
                valid = topic_len >= 0  # a signed short: negative would walk backwards
                cursor += 2 + topic_len
            valid = (
                valid and cursor + 2 <= stop and cursor + 2 + read_short(view, cursor)[0] == stop
            )
        if valid and check_crc:
            body_at = pos + header_v4
            valid = crc32(view[body_at : body_at + body_len]) & 0x7FFFFFFF == crc
        if valid:
            props_at = cursor + 2
        elif frame_problem(view, pos, size, phys_offset=base + pos, check_crc=check_crc):
            return pos, records, WALK_INVALID, last_put
        else:  # another shape (IPv6 hosts): its properties found by its length fields
            props_at = properties_span(view, pos)[0]
        if (
            props_at < stop
            and view[props_at] == mark_first_byte
            and marked_at(view, props_at, stop)
        ):
            last_put = pos
        pos = stop
        records += 1
    end = WALK_SEGMENT_END if pos + BLANK_RECORD_SIZE > size else WALK_LIMIT
    return pos, records, end, last_put
