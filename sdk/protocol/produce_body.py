"""A produce request's body: a batch of messages for one topic-queue, in the encoding RocketMQ's
own clients give a ``MessageBatch`` (``MessageDecoder.encodeMessages``).

The messages lie end to end, nothing before, between or after them. Every integer is
big-endian and signed (Java's ``ByteBuffer``). Per message:

    off  size  field
      0     4  TOTALSIZE      the message's length, this field included: 22 + B + P
      4     4  MAGICCODE      0xDAA320A7 (RocketMQ's MESSAGE_MAGIC_CODE), or 0
      8     4  BODYCRC        zlib.crc32(body) & 0x7FFFFFFF under 0xDAA320A7; 0 under magic 0
     12     4  FLAG           the producer's int flag
     16     4  BODYLENGTH     B, then the B body bytes
   20+B     2  PROPERTIESLEN  P (at most 32767), then the P bytes of the properties text:
                              ``name\\x01value\\x02`` per property, UTF-8
                              (:mod:`localstore.record.properties`)

RocketMQ's ``encodeMessage`` writes 0 in MAGICCODE and BODYCRC, and its broker reads neither.
:func:`encode_produce_body` writes the magic code and the CRC (readers that ignore them, as
RocketMQ's ``decodeMessages`` does, are unaffected), so the broker checks each body end to end;
a message with magic 0, as RocketMQ's clients send it, is taken with its CRC unchecked. Any
other magic code is refused.

Only flag, body and properties travel in the body: the topic, the queue id, the message count
and the born time and host are the request's (the route and its header), as in RocketMQ's
``SendMessageRequestHeader``. The body has no count of its own, so a body cut exactly between
two messages is itself well formed: the decoder takes the request's count and refuses a body
that holds another number of messages.

The broker turns a body into what the store's batch put takes with
:func:`decode_produce_body`: a :class:`~localstore.record.uniform_batch.UniformBatch` (columns:
bodies and properties texts kept as they came, no message object; the store encodes it from the
columns) when the messages share their flag, as a producer's batch does, or a list of
:class:`~localstore.record.codec.NewMessage` when the flags differ. Each message's properties
text is parsed once, for the columns the key index reads (``UNIQ_KEY``, ``KEYS``, ``TAGS``).
A body that does not follow the layout is refused with :class:`sdk.errors.MalformedBodyError`,
naming the byte offset and the problem.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Sequence

from localstore.record.codec import NewMessage
from localstore.record.layout import MAGIC_V1, MAX_PROPERTIES_BYTES, SHORT
from localstore.record.properties import (
    PROPERTY_KEYS,
    PROPERTY_SEPARATOR,
    PROPERTY_TAGS,
    PROPERTY_UNIQ_KEY,
    decode_written_properties,
    encode_properties,
)
from localstore.record.uniform_batch import DEFAULT_BORN_HOST, UniformBatch
from sdk.errors import InvalidArgumentError, MalformedBodyError

__all__ = [
    "MESSAGE_MAGIC",
    "UNCHECKED_MAGIC",
    "decode_produce_body",
    "encode_produce_body",
]

MESSAGE_MAGIC = MAGIC_V1  # 0xDAA320A7: the body CRC is checked
UNCHECKED_MAGIC = 0  # what RocketMQ's clients write: no CRC

# TOTALSIZE, MAGICCODE, BODYCRC, FLAG, BODYLENGTH
_HEAD = struct.Struct(">iiiii")
_HEAD_BYTES = _HEAD.size
_PROPERTIES_LENGTH_BYTES = SHORT.size
_FIXED_BYTES = _HEAD_BYTES + _PROPERTIES_LENGTH_BYTES  # a message with empty body and properties
_MAGICS = (MESSAGE_MAGIC, UNCHECKED_MAGIC)
_CRC_AT, _BODY_LENGTH_AT = 8, 16
_PAIR_END = PROPERTY_SEPARATOR.encode()
# What a body splits into: bodies, (byte offset, properties text) pairs and flags.
_Split = tuple[list[bytes], list[tuple[int, bytes]], list[int]]
_INDEXED = frozenset({PROPERTY_UNIQ_KEY, PROPERTY_KEYS, PROPERTY_TAGS})


def encode_produce_body(messages: Sequence[NewMessage]) -> bytes:
    """The body of a produce request carrying ``messages`` (one topic-queue; see the module
    docstring for what travels). A :class:`UniformBatch` is encoded from its columns.

    Raises InvalidArgumentError for an empty batch, a flag outside a 32-bit int or properties
    longer than 32767 bytes (naming the message)."""
    if not messages:
        raise InvalidArgumentError("a produce body needs at least one message")
    if isinstance(messages, UniformBatch):
        return _encode(messages.bodies, messages.properties, [messages.flag] * len(messages))
    texts = [encode_properties(message.properties).encode() for message in messages]
    return _encode(
        [message.body for message in messages], texts, [message.flag for message in messages]
    )


def _encode(bodies: Sequence[bytes], texts: Sequence[bytes], flags: Sequence[int]) -> bytes:
    parts: list[bytes] = []
    append, pack_head, pack_short, crc32 = parts.append, _HEAD.pack, SHORT.pack, zlib.crc32
    for index, (body, text, flag) in enumerate(zip(bodies, texts, flags, strict=True)):
        text_bytes = len(text)
        if text_bytes > MAX_PROPERTIES_BYTES:
            raise InvalidArgumentError(
                f"message {index}: its properties take {text_bytes} bytes, "
                f"more than the {MAX_PROPERTIES_BYTES} a produce body can carry"
            )
        body_bytes = len(body)
        try:
            head = pack_head(
                _FIXED_BYTES + body_bytes + text_bytes,
                MESSAGE_MAGIC,
                crc32(body) & 0x7FFFFFFF,
                flag,
                body_bytes,
            )
        except struct.error as exc:
            raise InvalidArgumentError(
                f"message {index}: flag {flag!r} or body length {body_bytes} "
                "does not fit a 32-bit int"
            ) from exc
        append(head)
        append(body)
        append(pack_short(text_bytes))
        append(text)
    return b"".join(parts)


def decode_produce_body(
    body: bytes | bytearray | memoryview,
    topic: str,
    queue_id: int,
    *,
    count: int | None = None,
    born_timestamp: int = 0,
    born_host: bytes = DEFAULT_BORN_HOST,
) -> Sequence[NewMessage]:
    """The messages of a produce body for ``topic``/``queue_id``, in the form the store's batch
    put takes (a UniformBatch when the flags agree, else NewMessages; see the module
    docstring). ``count``, the request's message count, when given must match.

    Raises MalformedBodyError (naming the byte offset) for a body that does not follow the
    layout: empty, truncated, sizes that do not add up, a wrong magic code, a body CRC that
    does not match, a properties text that is not UTF-8 pairs, or another count."""
    bodies, texts, flags = _split(body)
    if count is not None and count != len(bodies):
        raise MalformedBodyError(
            len(body), f"it holds {len(bodies)} messages, the request names {count}"
        )
    columns = _indexed_columns(texts)
    first_flag = flags[0]
    if all(flag == first_flag for flag in flags):
        uniq_keys, keys, tags, plain, _ = columns
        return UniformBatch(
            topic,
            queue_id,
            bodies,
            [text for _, text in texts],
            uniq_keys,
            keys,
            tags if any(tag is not None for tag in tags) else None,
            plain=plain,
            flag=first_flag,
            born_timestamp=born_timestamp,
            born_host=born_host,
        )
    return [
        NewMessage(topic, data, queue_id, properties, flag, 0, born_timestamp, born_host)
        for data, properties, flag in zip(bodies, columns[4], flags, strict=True)
    ]


def _split(body: bytes | bytearray | memoryview) -> _Split:
    """Bodies, (offset, properties text) pairs and flags of every message, checked."""
    end = len(body)
    if not end:
        raise MalformedBodyError(0, "the body holds no message")
    view = memoryview(body)
    bodies: list[bytes] = []
    texts: list[tuple[int, bytes]] = []
    flags: list[int] = []
    position = 0
    while position < end:
        left = end - position
        if left < _FIXED_BYTES:
            raise MalformedBodyError(
                position, f"truncated: {left} bytes left, a message takes at least {_FIXED_BYTES}"
            )
        total, magic, crc, flag, body_bytes = _HEAD.unpack_from(view, position)
        _check_sizes(position, total, magic, body_bytes, left)
        body_at = position + _HEAD_BYTES
        text_at = body_at + body_bytes + _PROPERTIES_LENGTH_BYTES
        (text_bytes,) = SHORT.unpack_from(view, text_at - _PROPERTIES_LENGTH_BYTES)
        if text_bytes < 0 or _FIXED_BYTES + body_bytes + text_bytes != total:
            raise MalformedBodyError(
                text_at - _PROPERTIES_LENGTH_BYTES,
                f"properties length {text_bytes} does not add up: total size {total} must be "
                f"{_FIXED_BYTES} + body length {body_bytes} + properties length",
            )
        data = bytes(view[body_at : body_at + body_bytes])
        if magic == MESSAGE_MAGIC and zlib.crc32(data) & 0x7FFFFFFF != crc:
            raise MalformedBodyError(
                position + _CRC_AT,
                f"body CRC {crc} does not match the body's {zlib.crc32(data) & 0x7FFFFFFF}",
            )
        bodies.append(data)
        texts.append((text_at, bytes(view[text_at : text_at + text_bytes])))
        flags.append(flag)
        position += total
    return bodies, texts, flags


def _check_sizes(position: int, total: int, magic: int, body_bytes: int, left: int) -> None:
    """Refuse a message whose magic code or sizes cannot be right (``left``: body bytes from
    ``position`` on)."""
    if magic not in _MAGICS:
        raise MalformedBodyError(
            position + 4,
            f"magic code 0x{magic & 0xFFFFFFFF:08X} is neither 0x{MESSAGE_MAGIC & 0xFFFFFFFF:08X} "
            "nor 0",
        )
    if total < _FIXED_BYTES:
        raise MalformedBodyError(
            position, f"total size {total} is below the smallest message's {_FIXED_BYTES}"
        )
    if total > left:
        raise MalformedBodyError(
            position, f"truncated: total size {total} runs past the body's end ({left} bytes left)"
        )
    if body_bytes < 0 or body_bytes > total - _FIXED_BYTES:
        raise MalformedBodyError(
            position + _BODY_LENGTH_AT,
            f"body length {body_bytes} does not fit in total size {total}",
        )


_Columns = tuple[list[str | None], list[str | None], list[str | None], bool, list[dict[str, str]]]


def _indexed_columns(texts: Sequence[tuple[int, bytes]]) -> _Columns:
    """UNIQ_KEY, KEYS and TAGS of every message, whether no other property is set (plain),
    and each message's properties (parsed once, strictly: the text a writer made)."""
    uniq_keys: list[str | None] = []
    keys: list[str | None] = []
    tags: list[str | None] = []
    parsed: list[dict[str, str]] = []
    plain = True
    for text_at, text in texts:
        try:
            if text and not text.endswith(_PAIR_END):
                raise ValueError("the text does not end with \\x02")
            properties = decode_written_properties(text)
        except ValueError as exc:  # UnicodeDecodeError too
            raise MalformedBodyError(
                text_at, f"the properties are not UTF-8 name\\x01value\\x02 pairs: {exc}"
            ) from exc
        uniq_keys.append(properties.get(PROPERTY_UNIQ_KEY))
        keys.append(properties.get(PROPERTY_KEYS))
        tags.append(properties.get(PROPERTY_TAGS))
        if plain and not _INDEXED.issuperset(properties):
            plain = False
        parsed.append(properties)
    return uniq_keys, keys, tags, plain, parsed
