"""Walking the commitlog record by record (recovery, verify, rebuilding derived files).

A position holds a valid record when its magic is v1/v2, its TOTALSIZE fits the segment and
equals the sum of its fields, its PHYSICALOFFSET field equals the position, and (when asked) its
body CRC matches. A blank record (magic 0xCBD43194) moves the walk to the next segment's start;
anything else ends the valid log there.

``scan_valid_end`` is the fast path (header fields and the body CRC through a memoryview, no
decoding of strings); ``iter_records`` decodes each record for dispatch.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Iterator

from localstore.codec import (
    BLANK_MAGIC,
    HEADER_STRUCTS,
    INT,
    MAGIC_V1,
    MAGIC_V2,
    SHORT,
    RecordError,
    StoredMessage,
    body_crc,
    decode_record,
)
from localstore.commitlog import CommitLog

_PREFIX = struct.Struct(">iiiiiqqi")  # total, magic, crc, queue id, flag, queue offset, phys, sys
_PAIR = struct.Struct(">ii")  # total, magic
_HEADER_SIZES = tuple(h.size for h in HEADER_STRUCTS)


def scan_valid_end(commitlog: CommitLog, start: int, *, check_crc: bool) -> tuple[int, int]:
    """Walk valid records from ``start``; returns (end of the last valid record, records seen).

    The end is where the next record would go: after a segment's last record, the blank record
    that closes the segment is not part of the valid log unless a record follows it.
    """
    position = start
    end = start
    records = 0
    crc32 = zlib.crc32
    prefix = _PREFIX.unpack_from
    pair = _PAIR.unpack_from
    read_int = INT.unpack_from
    read_short = SHORT.unpack_from
    header_sizes = _HEADER_SIZES
    while True:
        segment = commitlog.segments.find(position)
        if segment is None:
            return end, records
        view, size, base = segment.view, segment.size, segment.start_offset
        pos = position - base
        while pos + 8 <= size:
            if pos + _PREFIX.size <= size:
                total, magic, crc, _, _, _, phys, sys_flag = prefix(view, pos)
            else:  # only room for a blank record here
                total, magic = pair(view, pos)
                crc = phys = sys_flag = 0
            if magic == BLANK_MAGIC:
                break
            stop = pos + total
            if (magic != MAGIC_V1 and magic != MAGIC_V2) or total <= 0 or stop > size:  # noqa: PLR1714
                return end, records
            body_at = pos + header_sizes[(sys_flag >> 4) & 3]
            body_len = read_int(view, body_at - 4)[0]
            cursor = body_at + body_len
            if phys != base + pos or body_len < 0 or cursor + 3 > stop:
                return end, records
            if magic == MAGIC_V1:
                cursor += 1 + view[cursor]
            else:
                cursor += 2 + read_short(view, cursor)[0]
            if cursor + 2 > stop or cursor + 2 + read_short(view, cursor)[0] != stop:
                return end, records
            if check_crc and crc32(view[body_at : body_at + body_len]) & 0x7FFFFFFF != crc:
                return end, records
            pos = stop
            end = base + pos
            records += 1
        position = base + size  # blank record or segment end: continue in the next segment


def iter_records(
    commitlog: CommitLog, start: int, end: int, *, body: bool = True
) -> Iterator[StoredMessage]:
    """Decoded records in [start, end) (a range ``scan_valid_end`` found valid); ``body=False``
    leaves bodies out."""
    position = start
    while position < end:
        segment = commitlog.segments.find(position)
        if segment is None:
            return
        view, pos = segment.view, position - segment.start_offset
        if pos + 8 > segment.size or INT.unpack_from(view, pos + 4)[0] == BLANK_MAGIC:
            position = segment.end_offset
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
