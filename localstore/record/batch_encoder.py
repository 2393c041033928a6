"""Encode a batch of messages for one topic-queue into commitlog bytes and consume-queue units.

This is the put path's hot loop, so it is one loop per batch with no helper call per message:
per record one ``Struct.pack`` of the header, the body, and the topic + properties tail appended
to a list, then one ``b"".join`` per segment run. The caller writes the runs; nothing here does
I/O, so the function is pure and testable on its own.

Unpublished runs: every record's size and magic (its first 8 bytes, the blank record's too) are
zero in the runs, and given apart as ``heads`` (position in its segment, size, magic), in log
order, so
that the writer stores a run and then publishes its records first to last without parsing or
copying it again (:meth:`~localstore.files.mapped_file.MappedFile.append_publishing_last`);
:meth:`EncodedBatch.published_runs` gives the runs as they read once written.

A put of several records is marked: its first record's properties start with the put's record
count (:mod:`localstore.record.put_mark`), which recovery reads to cut a put that a kill cut
short.

Segment ends: a record is placed in the current segment only if its size + 8 fits in the room
left; otherwise the 8-byte blank record ``(room, BLANK_MAGIC)`` ends the segment and the record
starts the next run (the next segment). Records of PREPARED or ROLLBACK transactions get queue
offset 0 and no consume-queue unit, as in RocketMQ.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Sequence
from typing import NamedTuple

from localstore.record.codec import NewMessage
from localstore.record.layout import (
    BLANK_MAGIC,
    BLANK_RECORD_SIZE,
    BLANK_STRUCT,
    HEADER_STRUCTS,
    HOST_V6_BYTES,
    LONG,
    MAX_PROPERTIES_BYTES,
    PROPERTIES_LENGTH_BYTES,
    QUEUE_ID_AND_FLAG,
    RECONSUME_AND_PREPARED,
    SHORT,
    SIZE_AND_MAGIC,
    SYSFLAG_AND_BORN_TIMESTAMP,
    SYSFLAG_BORNHOST_V6,
    SYSFLAG_HOSTS_V6,
    SYSFLAG_STOREHOST_V6,
    SYSFLAG_TRANSACTION_PREPARED,
    SYSFLAG_TRANSACTION_ROLLBACK,
    UNIFORM_HEADERS,
)
from localstore.record.layout import topic_field as encode_topic_field
from localstore.record.properties import PROPERTY_DELAY, PROPERTY_TAGS, encode_properties
from localstore.record.put_mark import mark_pair
from localstore.record.tags import _TAG_CODES, schedule_tag_code, tag_code
from localstore.record.uniform_batch import UniformBatch

_V6_BITS = ~SYSFLAG_HOSTS_V6
# PREPARED (0x4) and ROLLBACK (0xC) are the transaction types with bit 0x4 set.
_PREPARED_OR_ROLLBACK = SYSFLAG_TRANSACTION_PREPARED & SYSFLAG_TRANSACTION_ROLLBACK


class RejectedMessageError(Exception):
    """A message of the batch cannot be stored; ``status`` is the PutStatus name."""

    def __init__(self, status: str, detail: str):
        super().__init__(detail)
        self.status = status
        self.detail = detail


Head = tuple[int, int, int]  # a record's position in its segment, its TOTALSIZE and MAGICCODE


class EncodedBatch(NamedTuple):
    """What the commitlog and the consume queue write for one batch."""

    runs: list[bytes]  # runs[0] goes at ``position``; each later run starts a new segment;
    # every record's size and magic zeroed (unpublished: see the module docstring)
    units: bytes  # consume-queue units, in queue-offset order
    phys_offsets: list[int]  # one per message
    next_queue_offset: int
    end_offset: int  # commitlog offset after the batch
    last_unit_phys_end: int  # end of the last record that got a unit
    heads: list[list[Head]]  # per run, the size and magic of its records (the blank record's)

    def published_runs(self) -> list[bytearray]:
        """The runs with every record's size and magic in place: the bytes the log holds
        once they are written."""
        return [publish(run, heads) for run, heads in zip(self.runs, self.heads, strict=True)]


def publish(run: bytes, heads: list[Head]) -> bytearray:
    """A copy of an unpublished ``run`` with its ``heads`` stored (its first head is at the
    run's start)."""
    published = bytearray(run)
    if not heads:
        return published
    start = heads[0][0]
    pack = SIZE_AND_MAGIC.pack_into
    for phys, size, magic in heads:
        pack(published, phys - start, size, magic)
    return published


def encode_batch(
    messages: Sequence[NewMessage],
    topic: str,
    queue_id: int,
    queue_offset: int,
    position: int,
    segment_size: int,
    store_timestamp: int,
    store_host: bytes,
    max_record_size: int,
    delay_levels: tuple[int, ...] | None = None,
) -> EncodedBatch:
    """Encode ``messages`` (all of ``topic``/``queue_id``) starting at commitlog ``position``.

    ``delay_levels`` is given for ``SCHEDULE_TOPIC_XXXX``, whose tag codes are delivery times.
    Raises :class:`RejectedMessageError` for a message whose properties or record are too large.
    A :class:`~localstore.record.uniform_batch.UniformBatch` (its own topic and queue) is encoded
    from its columns by :func:`encode_uniform`, to the same bytes, unless ``delay_levels`` is given.
    """
    if isinstance(messages, UniformBatch) and delay_levels is None:
        return encode_uniform(
            messages,
            queue_offset,
            position,
            segment_size,
            store_timestamp,
            store_host,
            max_record_size,
        )
    magic, topic_field = _topic_field(topic)
    store_bit = SYSFLAG_STOREHOST_V6 if len(store_host) == HOST_V6_BYTES else 0
    plain_header = HEADER_STRUCTS[store_bit >> 4]
    fixed = len(topic_field) + PROPERTIES_LENGTH_BYTES
    segment_end = position - position % segment_size + segment_size
    tails: dict[int, bytes] = {}  # properties length -> topic field + length field
    tag_codes = _TAG_CODES
    crc32 = zlib.crc32
    runs: list[bytes] = []
    parts: list[bytes] = []
    append = parts.append
    heads: list[Head] = []  # the current run's
    add_head = heads.append
    run_heads: list[list[Head]] = []  # the closed runs'
    mark = mark_pair(len(messages)) if len(messages) > 1 else b""
    units: list[int] = []  # (phys, size, tag code) per unit, packed once per batch
    phys_offsets: list[int] = []
    add_phys = phys_offsets.append
    unit_end = 0
    plain_size = plain_header.size + fixed  # a plain record's size but body and properties
    fits_below = segment_end - BLANK_RECORD_SIZE  # a record must end here or before
    prepared_or_rollback = _PREPARED_OR_ROLLBACK

    for message in messages:
        properties = message.properties
        if properties:
            props = encode_properties(properties).encode()
            tags = properties.get(PROPERTY_TAGS)
        else:
            props = b""
            tags = None
        if mark:  # the first record of a put of several
            props, mark = mark + props, b""
        props_len = len(props)
        body = message.body
        body_len = len(body)
        born_host = message.born_host
        sys_flag = message.sys_flag
        if sys_flag or len(born_host) != 8:
            sys_flag = (sys_flag & _V6_BITS) | store_bit
            if len(born_host) == HOST_V6_BYTES:
                sys_flag |= SYSFLAG_BORNHOST_V6
            header = HEADER_STRUCTS[(sys_flag >> 4) & 3]
            size = header.size + fixed + body_len + props_len
        else:
            sys_flag = store_bit
            header = plain_header
            size = plain_size + body_len + props_len
        if (
            position + size > fits_below
            or size > max_record_size
            or props_len > MAX_PROPERTIES_BYTES
        ):
            _check_sizes(messages, message, size, props_len, max_record_size, segment_size)
            position = _end_segment(
                parts, runs, heads, run_heads, position, segment_end, segment_size
            )
            segment_end += segment_size
            fits_below += segment_size
        if sys_flag & prepared_or_rollback:
            record_queue_offset = 0
        else:
            record_queue_offset = queue_offset
            queue_offset += 1
            if delay_levels is None:
                code = tag_codes.get(tags)
                if code is None:
                    code = tag_code(tags)
            else:
                code = schedule_tag_code(
                    store_timestamp, properties.get(PROPERTY_DELAY), delay_levels
                )
            units += (position, size, code)
            unit_end = position + size
        add_head((position % segment_size, size, magic))
        append(
            header.pack(
                0,  # size and magic: published by the writer (heads)
                0,
                crc32(body) & 0x7FFFFFFF,
                queue_id,
                message.flag,
                record_queue_offset,
                position,
                sys_flag,
                message.born_timestamp or store_timestamp,
                born_host,
                store_timestamp,
                store_host,
                message.reconsume_times,
                message.prepared_transaction_offset,
                body_len,
            )
        )
        append(body)
        tail = tails.get(props_len)
        if tail is None:
            tail = tails[props_len] = topic_field + SHORT.pack(props_len)
        append(tail)
        append(props)
        add_phys(position)
        position += size

    runs.append(b"".join(parts))
    run_heads.append(heads)
    return EncodedBatch(
        runs,
        _units_struct(len(units) // 3).pack(*units),
        phys_offsets,
        queue_offset,
        position,
        unit_end,
        run_heads,
    )


def encode_uniform(
    batch: UniformBatch,
    queue_offset: int,
    position: int,
    segment_size: int,
    store_timestamp: int,
    store_host: bytes,
    max_record_size: int,
) -> EncodedBatch:
    """:func:`encode_batch` for a :class:`~localstore.record.uniform_batch.UniformBatch`, with the
    same bytes out. The header fields the messages share (queue id and flag; SYSFLAG to
    prepared-transaction offset) are packed once for the batch, so each record's header is one
    ``pack`` of the five fields that differ: size, body CRC, queue offset, commitlog offset and
    body length. Never for ``SCHEDULE_TOPIC_XXXX`` (its tag codes are delivery times)."""
    magic, topic_field = _topic_field(batch.topic)
    born_host = batch.born_host
    sys_flag = (SYSFLAG_STOREHOST_V6 if len(store_host) == HOST_V6_BYTES else 0) | (
        SYSFLAG_BORNHOST_V6 if len(born_host) == HOST_V6_BYTES else 0
    )
    shared = (
        SYSFLAG_AND_BORN_TIMESTAMP.pack(sys_flag, batch.born_timestamp or store_timestamp)
        + born_host
        + LONG.pack(store_timestamp)
        + store_host
        + _NO_RECONSUME_NO_PREPARED
    )
    header = UNIFORM_HEADERS[(sys_flag >> 4) & 3]
    pack = header.pack
    queue_and_flag = QUEUE_ID_AND_FLAG.pack(batch.queue_id, batch.flag)
    # a record's size but body and properties
    plain_size = header.size + len(topic_field) + PROPERTIES_LENGTH_BYTES
    segment_end = position - position % segment_size + segment_size
    fits_below = segment_end - BLANK_RECORD_SIZE
    tails: dict[int, bytes] = {}
    tag_codes = _TAG_CODES
    tags_column = batch.tags
    no_tag_code = tag_code(None)
    crc32 = zlib.crc32
    runs: list[bytes] = []
    parts: list[bytes] = []
    append = parts.append
    heads: list[Head] = []  # the current run's
    add_head = heads.append
    run_heads: list[list[Head]] = []  # the closed runs'
    mark = mark_pair(len(batch)) if len(batch) > 1 else b""
    units: list[int] = []
    phys_offsets: list[int] = []
    add_phys = phys_offsets.append
    first_offset = queue_offset
    size = 0
    body_crcs = batch.body_crcs
    for index, (body, text) in enumerate(zip(batch.bodies, batch.properties, strict=True)):
        if mark:  # the first record of a put of several
            props, mark = mark + text, b""
        else:
            props = text
        body_len = len(body)
        props_len = len(props)
        size = plain_size + body_len + props_len
        if (
            position + size > fits_below
            or size > max_record_size
            or props_len > MAX_PROPERTIES_BYTES
        ):
            mark_bytes = len(mark_pair(len(batch))) if index == 0 and len(batch) > 1 else 0
            _check_record(index, size, props_len, max_record_size, segment_size, mark_bytes)
            position = _end_segment(
                parts, runs, heads, run_heads, position, segment_end, segment_size
            )
            segment_end += segment_size
            fits_below += segment_size
        if tags_column is None:
            code = no_tag_code
        else:
            tags = tags_column[index]
            known_code = tag_codes.get(tags)
            code = known_code if known_code is not None else tag_code(tags)
        units += (position, size, code)
        add_head((position % segment_size, size, magic))
        append(
            pack(
                0,  # size and magic: published by the writer (heads)
                0,
                crc32(body) & 0x7FFFFFFF if body_crcs is None else body_crcs[index],
                queue_and_flag,
                queue_offset,
                position,
                shared,
                body_len,
            )
        )
        append(body)
        tail = tails.get(props_len)
        if tail is None:
            tail = tails[props_len] = topic_field + SHORT.pack(props_len)
        append(tail)
        append(props)
        add_phys(position)
        position += size
        queue_offset += 1

    runs.append(b"".join(parts))
    run_heads.append(heads)
    return EncodedBatch(
        runs,
        _units_struct(queue_offset - first_offset).pack(*units),
        phys_offsets,
        queue_offset,
        position,
        position if phys_offsets else 0,
        run_heads,
    )


def _end_segment(
    parts: list[bytes],
    runs: list[bytes],
    heads: list[Head],
    run_heads: list[list[Head]],
    position: int,
    segment_end: int,
    segment_size: int,
) -> int:
    """Close the current segment's run (``parts``, ``heads``) with the blank record that fills
    it from ``position`` (unpublished, as the records are) and move it to ``runs`` and
    ``run_heads``; returns where the next record goes (the next segment's start)."""
    parts.append(_UNPUBLISHED_BLANK)
    heads.append((position % segment_size, segment_end - position, BLANK_MAGIC))
    runs.append(b"".join(parts))
    parts.clear()
    run_heads.append(heads.copy())
    heads.clear()
    return segment_end


_NO_RECONSUME_NO_PREPARED = RECONSUME_AND_PREPARED.pack(0, 0)
_UNPUBLISHED_BLANK = BLANK_STRUCT.pack(0, 0)
_TOPIC_FIELDS: dict[str, tuple[int, bytes]] = {}
_UNITS_STRUCTS: dict[int, struct.Struct] = {}


def _units_struct(count: int) -> struct.Struct:
    """One Struct for ``count`` consume-queue units: one pack call per batch."""
    known = _UNITS_STRUCTS.get(count)
    if known is None:
        known = struct.Struct(">" + "qiq" * count)
        if count <= 4096:
            _UNITS_STRUCTS[count] = known
    return known


def _topic_field(topic: str) -> tuple[int, bytes]:
    """:func:`localstore.record.codec.topic_field`, cached per topic for the put path."""
    known = _TOPIC_FIELDS.get(topic)
    if known is None:
        known = encode_topic_field(topic)
        if len(_TOPIC_FIELDS) < 65536:
            _TOPIC_FIELDS[topic] = known
    return known


def _check_sizes(
    messages: Sequence[NewMessage],
    message: NewMessage,
    size: int,
    props_len: int,
    max_record_size: int,
    segment_size: int,
) -> None:
    """Raise for a message that can never be stored (the caller then handles a segment end)."""
    index = next(i for i, m in enumerate(messages) if m is message)
    mark_bytes = len(mark_pair(len(messages))) if index == 0 and len(messages) > 1 else 0
    _check_record(index, size, props_len, max_record_size, segment_size, mark_bytes)


def _check_record(
    index: int,
    size: int,
    props_len: int,
    max_record_size: int,
    segment_size: int,
    mark_bytes: int = 0,
) -> None:
    """Raise for message ``index`` if its record can never be stored; ``mark_bytes``: the put
    mark its properties carry (the first message of a put of several), counted in
    ``props_len``."""
    if props_len > MAX_PROPERTIES_BYTES:
        with_mark = (
            f", {props_len} with the {mark_bytes}-byte mark the store puts on the first "
            "message of a put of several (send it alone or not first)"
            if mark_bytes
            else ""
        )
        raise RejectedMessageError(
            "PROPERTIES_SIZE_EXCEEDED",
            f"message {index}: properties take {props_len - mark_bytes} bytes{with_mark}, "
            f"more than {MAX_PROPERTIES_BYTES}",
        )
    if size > max_record_size or size + BLANK_RECORD_SIZE > segment_size:
        raise RejectedMessageError(
            "MESSAGE_ILLEGAL",
            f"message {index}: record of {size} bytes does not fit a segment of "
            f"{segment_size} bytes or the limit of {max_record_size}",
        )
