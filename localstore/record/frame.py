"""Whether bytes are a valid record: the rules every reader of the commitlog shares.

A record at ``pos``, with ``end`` the end of the segment (or buffer) that holds it, is valid when

1. at least 8 bytes are left, and its MAGICCODE is v1 or v2 (:func:`head_problem`);
2. its TOTALSIZE is at least the smallest record's and fits in what is left (:func:`head_problem`);
3. its fields add up to TOTALSIZE: the header by SYSFLAG's host bits, a BODYLENGTH of zero or
   more, the TOPIC length (1 byte in v1, a non-negative short in v2), a non-negative PROPERTIES
   length, and nothing left over;
4. when the reader knows where it is in the log, PHYSICALOFFSET equals that log offset;
5. when asked, BODYCRC equals the body's CRC.

:func:`frame_problem` applies them all and says which one failed, or None. Who uses them and
what each keeps as its own:

* :func:`localstore.record.codec.decode_record` (rules 1 to 3) also needs the TOPIC and the
  PROPERTIES text to be UTF-8; its one-unpack fast path asks here why whenever it rejects;
* :func:`localstore.record.run_decoder.decode_run` decodes by ``decode_record`` what its fused
  fast check does not accept, and adds that the record names the queue and queue offset its unit
  gives (rules 4 and the queue are its own: a get knows both);
* :func:`localstore.record.walk.walk_segment` (recovery's scan, rules 1 to 5) accepts IPv4 records
  with its fused check and asks here for everything else; a blank record ends its segment;
* :mod:`localstore.recovery.verify` reports rules 1 to 3 as a broken frame and steps over
  rules 4 and 5 as problems of a record it can still read;
* the commitlog's ``record_size_at`` and the offset index's walk need only rules 1 and 2.

Pure: no I/O, nothing but the buffer is read.
"""

from __future__ import annotations

import zlib

from localstore.record.layout import (
    BLANK_RECORD_SIZE,
    BODY_CRC_AT,
    HEADER_SIZES,
    INT,
    LONG,
    MAGIC_V1,
    MAGIC_V2,
    MIN_RECORD_SIZE,
    PHYSICAL_OFFSET_AT,
    PROPERTIES_LENGTH_BYTES,
    SHORT,
    SIZE_AND_MAGIC,
    SYSFLAG_AT,
)

Buffer = bytes | bytearray | memoryview


def head_problem(total: int, magic: int, room: int) -> str | None:
    """Rules 1 and 2 for a record whose first 8 bytes read (``total``, ``magic``) with ``room``
    bytes left from its start: why they cannot start a record, or None."""
    if magic != MAGIC_V1 and magic != MAGIC_V2:  # noqa: PLR1714 - two int compares are faster
        if total == 0 and magic == 0:
            return "zero bytes where a record should start"
        return f"bad magic code {magic & 0xFFFFFFFF:#010x}"
    if total > room:
        return f"record size {total} does not fit the {room} bytes left"
    if total < MIN_RECORD_SIZE:
        return f"record declares {total} bytes, fewer than the smallest record's {MIN_RECORD_SIZE}"
    return None


def frame_problem(
    buf: Buffer, pos: int, end: int, *, phys_offset: int | None = None, check_crc: bool = False
) -> str | None:
    """Why the bytes at ``pos`` (of a segment or buffer ending at ``end``) are not a valid record
    (the module's rules; 4 only given ``phys_offset``, 5 only with ``check_crc``), or None."""
    room = end - pos
    if room < BLANK_RECORD_SIZE:
        return f"only {room} bytes are left in the segment"
    total, magic = SIZE_AND_MAGIC.unpack_from(buf, pos)
    problem = head_problem(total, magic, room)
    if problem is not None:
        return problem
    stop = pos + total
    fields_end = _fields_end(buf, pos, stop, magic)
    if isinstance(fields_end, str):
        return fields_end
    if fields_end != stop:
        return f"record declares {total} bytes but its fields take {fields_end - pos}"
    if phys_offset is not None:
        stored = LONG.unpack_from(buf, pos + PHYSICAL_OFFSET_AT)[0]
        if stored != phys_offset:
            return f"PHYSICALOFFSET field says {stored}"
    if check_crc:
        header_size = HEADER_SIZES[(INT.unpack_from(buf, pos + SYSFLAG_AT)[0] >> 4) & 3]
        body_at = pos + header_size
        body_len = INT.unpack_from(buf, body_at - 4)[0]
        crc = INT.unpack_from(buf, pos + BODY_CRC_AT)[0]
        if zlib.crc32(buf[body_at : body_at + body_len]) & 0x7FFFFFFF != crc:
            return "body CRC mismatch"
    return None


def _fields_end(buf: Buffer, pos: int, stop: int, magic: int) -> int | str:
    """Where a record's fields end, read within [pos, stop); or why they cannot be read there."""
    header_size = HEADER_SIZES[(INT.unpack_from(buf, pos + SYSFLAG_AT)[0] >> 4) & 3]
    topic_length_bytes = 1 if magic == MAGIC_V1 else 2
    if pos + header_size + topic_length_bytes + PROPERTIES_LENGTH_BYTES > stop:
        return f"record declares {stop - pos} bytes, fewer than its {header_size}-byte header takes"
    body_len = INT.unpack_from(buf, pos + header_size - 4)[0]
    if body_len < 0:
        return f"negative body length {body_len}"
    cursor = pos + header_size + body_len
    if cursor + topic_length_bytes + PROPERTIES_LENGTH_BYTES > stop:
        return f"a body of {body_len} bytes runs past the record's end"
    if magic == MAGIC_V1:
        topic_len = buf[cursor]
    else:
        topic_len = SHORT.unpack_from(buf, cursor)[0]
        if topic_len < 0:
            return f"negative topic length {topic_len}"
    cursor += topic_length_bytes + topic_len
    if cursor + PROPERTIES_LENGTH_BYTES > stop:
        return f"a topic of {topic_len} bytes runs past the record's end"
    props_len = SHORT.unpack_from(buf, cursor)[0]
    if props_len < 0:
        return f"negative properties length {props_len}"
    return int(cursor + PROPERTIES_LENGTH_BYTES + props_len)
