"""One queue's stored records, laid end to end as a pull answer carries them, decoded into
:class:`sdk.message.ReceivedMessage` s in one loop: the consumer's hot loop.

In the common case the records share their shape: v1 magic, IPv4 hosts, the pulled queue's
topic, a body length seen before. For such a record one cached ``Struct`` reads everything but
the properties in one call:

    HEADER_V4 (TOTALSIZE .. BODYLENGTH)  BODY (B bytes)  TOPIC field (1 + T bytes)  PROPLEN (h)

and the properties are the ``PROPLEN`` bytes that end the record. The record is taken this way
only if its fields agree with each other: magic v1, no IPv6 bit, the topic field the pulled
topic's, TOTALSIZE the sum of its parts, the record inside the buffer, its properties valid
UTF-8. Anything else (another shape, another topic, or damage) goes through
:func:`sdk.transport.models.decode_records_before_damage` (the records from there on, one by one
by :func:`localstore.record.codec.decode_record`), which decodes every shape and names what is
wrong; both routes give equal messages.

The messages are made without ``ReceivedMessage.__init__`` (slot stores in the loop, no call per
record): every slot its ``__init__`` sets must be set here. The properties stay their stored
text, parsed on first read, as ``__init__`` keeps them.
"""

from __future__ import annotations

from localstore.record.codec import HOST_TEXTS, RecordError, host_text
from localstore.record.layout import (
    BODY_LENGTH_AT_V4,
    INT,
    MAGIC_V1,
    SYSFLAG_HOSTS_V6,
)
from localstore.record.run_decoder import layouts_for
from sdk.message import ReceivedMessage
from sdk.transport.models import decode_records_before_damage

__all__ = ["decode_received"]

_INT_AT = INT.unpack_from


def decode_received(raw: bytes, topic: str) -> tuple[list[ReceivedMessage], RecordError | None]:
    """The records of ``raw`` (pulled from a queue of ``topic``) as received messages, up to
    the first that does not decode: the messages before it, and its error (None when every
    record decoded)."""
    layouts = layouts_for(topic)
    messages: list[ReceivedMessage] = []
    append = messages.append
    end = len(raw)
    position = 0
    if layouts is not None:
        known = layouts.by_body_length
        expected_field = layouts.field
        fixed_size = layouts.fixed_size
        room = end - fixed_size  # a record at p with a b-byte body fits if p + b <= room
        hosts = HOST_TEXTS
        new = object.__new__
        while position <= room:
            body_length = _INT_AT(raw, position + BODY_LENGTH_AT_V4)[0]
            layout = known.get(body_length) or layouts.layout(body_length)
            if layout is None or position + body_length > room:
                break
            (
                total,
                magic,
                _crc,
                queue_id,
                flag,
                queue_offset,
                phys,
                sys_flag,
                born_ts,
                born_host,
                store_ts,
                store_host,
                reconsume,
                _prepared,
                body_length,
                body,
                field,
                props_length,
            ) = layout.unpack_from(raw, position)
            record_end = position + total
            if (
                magic != MAGIC_V1
                or sys_flag & SYSFLAG_HOSTS_V6
                or field != expected_field
                or total != fixed_size + body_length + props_length
                or props_length < 0
                or record_end > end
            ):
                break  # another shape, or damage: the general decode decides
            try:
                props = str(raw[record_end - props_length : record_end], "utf-8")
            except UnicodeDecodeError:
                break
            message = new(ReceivedMessage)
            message.stored_topic = topic
            message.queue_id = queue_id
            message.queue_offset = queue_offset
            message.phys_offset = phys
            message.store_size = total
            message.flag = flag
            message.born_timestamp = born_ts
            message.born_host = hosts.get(born_host) or host_text(born_host)
            message.store_timestamp = store_ts
            message.store_host = hosts.get(store_host) or host_text(store_host)
            message.reconsume_times = reconsume
            message.body = body
            message._properties = props
            message._store_host_raw = store_host
            append(message)
            position = record_end
    rest, error = decode_records_before_damage(raw, ReceivedMessage, start=position)
    messages += rest
    return messages, error
