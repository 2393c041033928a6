"""Decode a run of one topic's records from one segment in one loop (the get path's hot loop).

A get hands back up to 32 records of one consume queue, and in the common case they share
their shape: v1 magic, IPv4 hosts, the queue's topic, and a body length seen before. For such
a record one cached ``Struct`` reads everything but the properties in one call:

    HEADER_V4 (TOTALSIZE .. BODYLENGTH)  BODY (B bytes)  TOPIC field (1 + T bytes)  PROPLEN (h)

and the properties are the ``PROPLEN`` bytes that end the record. The record is taken this way
only if its fields agree with each other: magic v1, no IPv6 bit, the topic field equal to the
expected topic's, TOTALSIZE equal to the sum of its parts, the record inside the buffer, its
properties valid UTF-8 (a record so accepted is valid by the shared rules of
:mod:`localstore.record.frame`). Anything else (another shape, or damage) goes through
:func:`localstore.record.codec.decode_record`, which decodes every shape and, by those rules,
names what is wrong; so both routes give the same
:class:`~localstore.record.codec.StoredMessage`, field for field, or the
same error. Either way a record must say it is stored where it was read (PHYSICALOFFSET), and
of the topic and queue and at the queue offset its unit gives (TOPIC, QUEUEID, QUEUEOFFSET: no
CRC covers the header, so a damaged one is caught here or not at all).

The messages are built without ``StoredMessage.__init__`` (slot stores in the loop, no call
per record): every slot of :class:`~localstore.record.codec.StoredMessage` must be set here.
Properties are kept as their stored text, parsed on first read, as ``decode_record`` keeps them.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence

from localstore.record.codec import (
    HOST_TEXTS,
    RecordError,
    StoredMessage,
    decode_record,
    host_text,
)
from localstore.record.layout import (
    BODY_LENGTH_AT_V4,
    HEADER_V4_SIZE,
    INT,
    MAGIC_V1,
    PROPERTIES_LENGTH_BYTES,
    SYSFLAG_HOSTS_V6,
    header_with_body_format,
    topic_field,
)

_INT_AT = INT.unpack_from
_MAX_LAYOUT_BODY = 1 << 16  # larger bodies: one unpack saves nothing next to the copy
_LAYOUTS_PER_TOPIC = 256  # body lengths remembered per topic; others take the general decode
_TOPICS_LIMIT = 4096
MISPLACED = "the record there says it is elsewhere (its PHYSICALOFFSET field names another offset)"


def misqueued(topic: str, queue_id: int, queue_offset: int) -> str:
    """Why a record whose header names another topic, queue or queue offset (``topic``,
    ``queue_id``, ``queue_offset``: what the header says) than its unit's is damaged."""
    return f"the record there says it is {topic}/{queue_id} queue offset {queue_offset}"


class RunDecodeError(RecordError):
    """Record ``index`` of the run is not a record stored where it was read."""

    def __init__(self, index: int, why: str):
        super().__init__(why)
        self.index = index


class TopicLayouts:
    """A v1 topic's encoded field and the one-unpack layouts of its IPv4 records."""

    __slots__ = ("by_body_length", "field", "fixed_size")

    def __init__(self, field: bytes):
        self.field = field
        self.by_body_length: dict[int, struct.Struct] = {}
        # all but body and properties
        self.fixed_size = HEADER_V4_SIZE + len(field) + PROPERTIES_LENGTH_BYTES

    def layout(self, body_length: int) -> struct.Struct | None:
        """The layout for ``body_length``-byte bodies, made now; None where none is kept."""
        layouts = self.by_body_length
        if not 0 <= body_length <= _MAX_LAYOUT_BODY or len(layouts) >= _LAYOUTS_PER_TOPIC:
            return None
        made = layouts[body_length] = struct.Struct(
            f"{header_with_body_format(body_length)}{len(self.field)}sh"
        )
        return made


_TOPICS: dict[str, TopicLayouts | None] = {}  # None: a v2 topic, never the fast shape


def layouts_for(topic: str) -> TopicLayouts | None:
    """``topic``'s one-unpack layouts (None for a v2 topic), kept for the next run: the store's
    run decoder and the consumer's pull-answer decoder share them."""
    if topic in _TOPICS:
        return _TOPICS[topic]
    magic, field = topic_field(topic)
    layouts = TopicLayouts(field) if magic == MAGIC_V1 else None
    if len(_TOPICS) < _TOPICS_LIMIT:
        _TOPICS[topic] = layouts
    return layouts


def decode_run(
    buf: memoryview,
    positions: Sequence[int],
    base: int,
    topic: str,
    queue_id: int,
    first_offset: int,
) -> list[StoredMessage]:
    """The records at ``positions`` of ``buf`` (whose index 0 is commitlog offset ``base``),
    expected to be ``topic``'s, of queue ``queue_id`` at queue offsets ``first_offset``,
    ``first_offset + 1``, ... Raises :class:`RunDecodeError` (with the index in
    ``positions``) for bytes that are not a record, or a record that says it is stored
    elsewhere."""
    layouts = layouts_for(topic)
    if layouts is None:
        return [
            _decode_one(buf, pos, base, index, (topic, queue_id, first_offset + index))
            for index, pos in enumerate(positions)
        ]
    known = layouts.by_body_length
    expected_field = layouts.field
    fixed_size = layouts.fixed_size
    buf_len = len(buf)
    room = buf_len - fixed_size  # a record at pos with a b-byte body fits if pos + b <= room
    hosts = HOST_TEXTS
    new = object.__new__
    messages: list[StoredMessage] = []
    append = messages.append
    for index, pos in enumerate(positions):
        fields = None
        if pos <= room:
            body_length = _INT_AT(buf, pos + BODY_LENGTH_AT_V4)[0]
            layout = known.get(body_length) or layouts.layout(body_length)
            if layout is not None and pos + body_length <= room:
                fields = layout.unpack_from(buf, pos)
        if fields is not None:
            (
                total,
                magic,
                crc,
                stored_queue_id,
                flag,
                queue_offset,
                phys,
                sys_flag,
                born_ts,
                born_host,
                store_ts,
                store_host,
                reconsume,
                prepared,
                body_length,
                body,
                field,
                props_length,
            ) = fields
            end = pos + total
            if (
                magic != MAGIC_V1
                or sys_flag & SYSFLAG_HOSTS_V6
                or field != expected_field
                or total != fixed_size + body_length + props_length
                or props_length < 0
                or end > buf_len
            ):
                fields = None  # another shape, or damage: the general decode decides
            else:
                try:
                    props = str(buf[end - props_length : end], "utf-8")
                except UnicodeDecodeError:
                    fields = None
        if fields is None:
            where = (topic, queue_id, first_offset + index)
            append(_decode_one(buf, pos, base, index, where))
            continue
        if phys != base + pos:
            raise RunDecodeError(index, MISPLACED)
        message = new(StoredMessage)
        message.topic = topic
        message.queue_id = stored_queue_id
        message.queue_offset = queue_offset
        message.phys_offset = phys
        message.store_size = total
        message.body_crc = crc
        message.flag = flag
        message.sys_flag = sys_flag
        message.born_timestamp = born_ts
        message.born_host = hosts.get(born_host) or host_text(born_host)
        message.store_timestamp = store_ts
        message.store_host = hosts.get(store_host) or host_text(store_host)
        message.reconsume_times = reconsume
        message.prepared_transaction_offset = prepared
        message.body = body
        message._properties = props
        message.store_host_raw = store_host
        if stored_queue_id != queue_id or queue_offset != first_offset + index:
            raise RunDecodeError(
                index, misqueued(message.topic, message.queue_id, message.queue_offset)
            )
        append(message)
    return messages


def _decode_one(
    buf: memoryview, pos: int, base: int, index: int, where: tuple[str, int, int]
) -> StoredMessage:
    """Record ``index`` of a run by :func:`~localstore.record.codec.decode_record` (any shape),
    expected at ``where``: topic, queue id, queue offset."""
    try:
        message = decode_record(buf, pos)
    except RecordError as exc:
        raise RunDecodeError(index, str(exc)) from exc
    if message.phys_offset != base + pos:
        raise RunDecodeError(index, MISPLACED)
    if (message.topic, message.queue_id, message.queue_offset) != where:
        raise RunDecodeError(
            index, misqueued(message.topic, message.queue_id, message.queue_offset)
        )
    return message
