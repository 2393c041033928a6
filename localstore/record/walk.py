"""The validity walk over one commitlog segment: the inner loop of recovery's CRC scan.

A position holds a valid record when its magic is v1/v2, its TOTALSIZE fits the segment and
equals the sum of its fields (header by SYSFLAG's host widths, body, topic of 1 (v1) or 2 (v2)
length bytes, properties of 2), its PHYSICALOFFSET field equals the position in the log, and
(when asked) the CRC32 of its body, masked to 31 bits, equals BODYCRC. A blank record (magic
0xCBD43194), or fewer than 8 bytes left, ends the segment.

Pure: it reads a buffer and returns numbers, so the same function runs in the store's process
and in the worker processes of :mod:`localstore.recovery.parallel_scan`.
"""

from __future__ import annotations

import struct
import zlib

from localstore.record.codec import (
    BLANK_MAGIC,
    HEADER_STRUCTS,
    INT,
    MAGIC_V1,
    MAGIC_V2,
    SHORT,
    SYSFLAG_HOSTS_V6,
)

Buffer = bytes | memoryview

# How a walk over one segment ended.
WALK_INVALID = 0  # an invalid record: the valid log ends where the walk stopped
WALK_SEGMENT_END = 1  # a blank record or the segment's end: the log goes on in the next segment
WALK_LIMIT = 2  # reached or passed the limit it was given (the position says which)

# The fields the walk checks, read in one call from the 88-byte header of a record with IPv4
# hosts: TOTALSIZE, MAGICCODE, BODYCRC, PHYSICALOFFSET, SYSFLAG, BODYLENGTH (the rest skipped).
_HEAD_V4 = struct.Struct(">iii16xqi44xi")
_HEADER_V4_SIZE = HEADER_STRUCTS[0].size
_PAIR = struct.Struct(">ii")  # total, magic
_HEADER_SIZES = tuple(h.size for h in HEADER_STRUCTS)


def walk_segment(
    view: Buffer, base: int, size: int, pos: int, limit: int, check_crc: bool
) -> tuple[int, int, int]:
    """Walk valid records of one segment (``view``, ``size`` bytes, at log offset ``base``)
    from ``pos`` while the position is below ``limit``.

    Returns (position after the last valid record, records seen, how it ended: WALK_*).
    """
    records = 0
    crc32 = zlib.crc32
    head = _HEAD_V4.unpack_from
    read_int = INT.unpack_from
    read_short = SHORT.unpack_from
    header_v4 = _HEADER_V4_SIZE
    while pos < limit:
        if pos + header_v4 > size:  # no room for a record: a blank one, the end, or garbage
            if pos + 8 > size or _PAIR.unpack_from(view, pos)[1] == BLANK_MAGIC:
                return pos, records, WALK_SEGMENT_END
            return pos, records, WALK_INVALID
        total, magic, crc, phys, sys_flag, body_len = head(view, pos)
        if magic == BLANK_MAGIC:
            return pos, records, WALK_SEGMENT_END
        stop = pos + total
        if (
            (magic != MAGIC_V1 and magic != MAGIC_V2)  # noqa: PLR1714
            or total <= 0
            or stop > size
            or phys != base + pos
        ):
            return pos, records, WALK_INVALID
        if sys_flag & SYSFLAG_HOSTS_V6:  # longer header: BODYLENGTH sits further on
            body_at = pos + _HEADER_SIZES[(sys_flag >> 4) & 3]
            if body_at > stop:
                return pos, records, WALK_INVALID
            body_len = read_int(view, body_at - 4)[0]
        else:
            body_at = pos + header_v4
        cursor = body_at + body_len
        if body_len < 0 or cursor + 3 > stop:
            return pos, records, WALK_INVALID
        if magic == MAGIC_V1:
            cursor += 1 + view[cursor]
        else:
            topic_len = read_short(view, cursor)[0]
            if topic_len < 0:  # a signed short: negative would walk backwards
                return pos, records, WALK_INVALID
            cursor += 2 + topic_len
        if cursor + 2 > stop or cursor + 2 + read_short(view, cursor)[0] != stop:
            return pos, records, WALK_INVALID
        if check_crc and crc32(view[body_at : body_at + body_len]) & 0x7FFFFFFF != crc:
            return pos, records, WALK_INVALID
        pos = stop
        records += 1
    return pos, records, WALK_SEGMENT_END if pos + 8 > size else WALK_LIMIT
