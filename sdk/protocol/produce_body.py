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
Both sides compute the CRC with zlib-ng's ``crc32`` (the same CRC-32 as ``zlib.crc32``, which the
store uses; about 3x faster on 100-byte bodies: the sender computes one a message, the broker
checks it again).
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
bodies and properties texts kept as they came, and the bodies' CRCs once checked; no message
object: the store encodes it from the columns and computes no CRC again) when the messages
share their flag, as a producer's batch does, or a list of
:class:`~localstore.record.codec.NewMessage` when the flags differ. The columns the key index
reads (``UNIQ_KEY``, ``KEYS``, ``TAGS``) come from the messages' properties texts: read from
all the texts at once when each holds its ``UNIQ_KEY`` alone; else one regular-expression match
for a text of those alone, in the order a producer writes them, and a full parse for any other.
A body that does not follow the layout is refused with :class:`sdk.errors.MalformedBodyError`,
naming the byte offset and the problem.

Equal messages are read and written across the batch. A producer's batch of bodies of one
length, with properties texts of one length, is a column of messages of one size whose heads
differ only in BODYCRC: from :data:`ACROSS_FROM` messages on, its body is written with one
join, the CRC words put in with strided assignments, and read back by checking each shared
head byte of every message with one strided slice. Texts that each hold a ``UNIQ_KEY`` alone,
drawn as a run, are checked as that run with one comparison. Each of these readings gives
exactly what the message-by-message one gives, or declines (returns None) and leaves the
batch to it: so a fault is always found, and named, by the one loop.
"""

from __future__ import annotations

import re
import struct
from collections.abc import Sequence
from itertools import chain, repeat

from zlib_ng.zlib_ng import crc32

from localstore.record.codec import NewMessage
from localstore.record.layout import MAGIC_V1, MAX_PROPERTIES_BYTES, SHORT
from localstore.record.message_id import UNIQ_KEY_COUNTER_DIGITS, UniqKeyRun
from localstore.record.properties import (
    PROPERTY_KEYS,
    PROPERTY_SEPARATOR,
    PROPERTY_TAGS,
    PROPERTY_UNIQ_KEY,
    UNIQ_KEY_PAIR_START,
    decode_written_properties,
    encode_properties,
)
from localstore.record.uniform_batch import DEFAULT_BORN_HOST, UniformBatch
from sdk.errors import InvalidArgumentError, MalformedBodyError

__all__ = [
    "ACROSS_FROM",
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
_INT = struct.Struct(">i")
_PROPERTIES_LENGTH_BYTES = SHORT.size
_FIXED_BYTES = _HEAD_BYTES + _PROPERTIES_LENGTH_BYTES  # a message with empty body and properties
_MAGICS = (MESSAGE_MAGIC, UNCHECKED_MAGIC)
_CRC_AT, _BODY_LENGTH_AT = 8, 16
# The fewest messages a body is written and read across the batch for: below it, one message
# after another is cheaper (the across readings' steps cost the same for any count).
ACROSS_FROM = 16
# The head's bytes every message of a body of equal messages shares: TOTALSIZE and MAGICCODE,
# FLAG and BODYLENGTH (not BODYCRC, at 8-11)
_SHARED_HEAD_BYTES = (*range(0, _CRC_AT), *range(_CRC_AT + 4, _HEAD_BYTES))
_PAIR_END = PROPERTY_SEPARATOR.encode()
# What a body splits into: bodies, properties texts, flags and the bodies' CRCs (None when a
# message came without one: magic 0).
_Split = tuple[list[bytes], list[bytes], list[int], list[int] | None]
_INDEXED = frozenset({PROPERTY_UNIQ_KEY, PROPERTY_KEYS, PROPERTY_TAGS})

_COUNTERS = 0x10000  # a UNIQ_KEY's counter is a short
_HEX_DIGITS = b"0123456789ABCDEF"
# _COUNTER_COLUMNS[d][c]: the d-th hex digit (most significant first) of counter c, upper case:
# four tables of 64 KiB, made at import (a run's counters are a slice of each)
_COUNTER_COLUMNS = tuple(
    b"".join(bytes([hex_digit]) * (_COUNTERS >> 4 * (digit + 1)) for hex_digit in _HEX_DIGITS)
    * (16**digit)
    for digit in range(UNIQ_KEY_COUNTER_DIGITS)
)


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
    equal = _encode_equal(bodies, texts, flags)
    return _encode_each(bodies, texts, flags) if equal is None else equal


def _encode_each(bodies: Sequence[bytes], texts: Sequence[bytes], flags: Sequence[int]) -> bytes:
    """The body, message by message (any batch; raises InvalidArgumentError naming the first
    message the layout cannot hold)."""
    parts: list[bytes] = []
    append, pack_head, pack_short = parts.append, _HEAD.pack, SHORT.pack
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


def _encode_equal(
    bodies: Sequence[bytes], texts: Sequence[bytes], flags: Sequence[int]
) -> bytes | None:
    """:func:`_encode` of messages that share their body length, their properties length and
    their ``int`` flag (a producer's batch of bodies of one length), written across the
    messages; None for any others, and for a batch the loop must refuse (naming the message).

    One join writes every message with a head whose BODYCRC is left 0 (the heads are otherwise
    the same); the CRC words are then written in, one strided assignment a byte of them."""
    count = len(bodies)
    body_bytes, text_bytes, flag = len(bodies[0]), len(texts[0]), flags[0]
    if (
        count < ACROSS_FROM
        or not count == len(texts) == len(flags)
        or text_bytes > MAX_PROPERTIES_BYTES
        or set(map(type, flags)) != {int}
        or len(set(map(len, bodies))) != 1
        or len(set(map(len, texts))) != 1
        or flags.count(flag) != count
    ):
        return None
    total = _FIXED_BYTES + body_bytes + text_bytes
    try:
        head = _HEAD.pack(total, MESSAGE_MAGIC, 0, flag, body_bytes)
    except struct.error:
        return None
    length = SHORT.pack(text_bytes)
    body = bytearray(
        b"".join(chain.from_iterable(zip(repeat(head), bodies, repeat(length), texts)))
    )
    crcs = struct.pack(f">{count}i", *[crc & 0x7FFFFFFF for crc in map(crc32, bodies)])
    for byte in range(4):
        body[_CRC_AT + byte :: total] = crcs[byte::4]
    return bytes(body)


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
    bodies, texts, flags, body_crcs = _split(body)
    if count is not None and count != len(bodies):
        raise MalformedBodyError(
            len(body), f"it holds {len(bodies)} messages, the request names {count}"
        )
    uniq_keys, keys, tags, plain = _indexed_columns(texts, body)
    first_flag = flags[0]
    if flags.count(first_flag) == len(flags):
        return UniformBatch(
            topic,
            queue_id,
            bodies,
            texts,
            uniq_keys,
            keys,
            tags,
            plain=plain,
            flag=first_flag,
            born_timestamp=born_timestamp,
            born_host=born_host,
            body_crcs=body_crcs,
        )
    return [
        NewMessage(topic, data, queue_id, _parse(text), flag, 0, born_timestamp, born_host)
        for data, text, flag in zip(bodies, texts, flags, strict=True)
    ]


def _split(body: bytes | bytearray | memoryview) -> _Split:
    """Bodies, properties texts, flags and body CRCs of every message, checked: read across
    the messages when they are alike (:func:`_split_equal`), else one by one."""
    data = body if isinstance(body, bytes) else bytes(body)
    if not data:
        raise MalformedBodyError(0, "the body holds no message")
    equal = _split_equal(data)
    return _split_each(data) if equal is None else equal


def _split_each(data: bytes) -> _Split:
    """:func:`_split`, message by message (any body). The loop runs once a message on the
    broker's produce path: it does the fewest steps a well-formed message needs, and hands a
    failed check to :func:`_check_sizes` for its message."""
    end = len(data)
    bodies: list[bytes] = []
    texts: list[bytes] = []
    flags: list[int] = []
    crcs: list[int] = []
    unchecked = False  # a message came with magic 0: no CRC
    unpack_head, unpack_short = _HEAD.unpack_from, SHORT.unpack_from
    fixed, head_bytes, length_bytes = _FIXED_BYTES, _HEAD_BYTES, _PROPERTIES_LENGTH_BYTES
    position = 0
    while position < end:
        left = end - position
        if left < fixed:
            raise MalformedBodyError(
                position, f"truncated: {left} bytes left, a message takes at least {fixed}"
            )
        total, magic, crc, flag, body_bytes = unpack_head(data, position)
        if (
            magic not in _MAGICS
            or not fixed <= total <= left
            or not 0 <= body_bytes <= total - fixed
        ):
            _check_sizes(position, total, magic, body_bytes, left)  # raises, naming the field
        body_at = position + head_bytes
        length_at = body_at + body_bytes
        (text_bytes,) = unpack_short(data, length_at)
        if text_bytes < 0 or fixed + body_bytes + text_bytes != total:
            raise MalformedBodyError(
                length_at,
                f"properties length {text_bytes} does not add up: total size {total} must be "
                f"{fixed} + body length {body_bytes} + properties length",
            )
        message_body = data[body_at:length_at]
        if magic == MESSAGE_MAGIC:
            if crc32(message_body) & 0x7FFFFFFF != crc:
                raise MalformedBodyError(
                    position + _CRC_AT,
                    f"body CRC {crc} does not match the body's {crc32(message_body) & 0x7FFFFFFF}",
                )
        else:
            unchecked = True
        crcs.append(crc)
        bodies.append(message_body)
        text_at = length_at + length_bytes
        texts.append(data[text_at : position + total])
        flags.append(flag)
        position += total
    return bodies, texts, flags, None if unchecked else crcs


def _split_equal(data: bytes) -> _Split | None:
    """:func:`_split` of a body whose messages share their size, magic code, flag and body
    length (a producer's batch of bodies of one length, their texts of one length), read field
    by field across the messages instead of message by message; None for any other body, and
    for one that breaks the layout anywhere, which the loop then reads (naming the fault).

    Each shared field is checked byte by byte: the byte of every message, taken with one
    strided slice, against the first message's byte repeated. The CRC words are gathered the
    same way, four strided slices, and unpacked at once."""
    end = len(data)
    if end < _FIXED_BYTES * ACROSS_FROM:  # fewer messages than the across readings take
        return None
    total, magic, _, flag, body_bytes = _HEAD.unpack_from(data)
    if (
        total < _FIXED_BYTES
        or end % total
        or magic not in _MAGICS
        or not 0 <= body_bytes <= total - _FIXED_BYTES
    ):
        return None
    count = end // total
    if count < ACROSS_FROM:
        return None
    length_at = _HEAD_BYTES + body_bytes
    text_bytes = total - _FIXED_BYTES - body_bytes
    if SHORT.unpack_from(data, length_at)[0] != text_bytes:
        return None
    for at in (*_SHARED_HEAD_BYTES, length_at, length_at + 1):
        if data[at::total] != data[at : at + 1] * count:
            return None
    bodies = [data[at : at + body_bytes] for at in range(_HEAD_BYTES, _HEAD_BYTES + end, total)]
    text_at = length_at + _PROPERTIES_LENGTH_BYTES
    texts = [data[at : at + text_bytes] for at in range(text_at, text_at + end, total)]
    if magic != MESSAGE_MAGIC:
        return bodies, texts, [flag] * count, None
    words = bytearray(4 * count)
    for byte in range(4):
        words[byte::4] = data[_CRC_AT + byte :: total]
    crcs = list(struct.unpack(f">{count}i", words))
    if [crc & 0x7FFFFFFF for crc in map(crc32, bodies)] != crcs:
        return None
    return bodies, texts, [flag] * count, crcs


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


_Columns = tuple[Sequence[str | None], list[str | None], list[str | None] | None, bool]

# What a producer writes when a message has no property but the indexed ones, in the order it
# writes them (sdk.outgoing): the text then needs no general parse.
_INDEXED_ONLY = re.compile(
    rb"(?:TAGS\x01([^\x01\x02]*)\x02)?(?:KEYS\x01([^\x01\x02]*)\x02)?UNIQ_KEY\x01([^\x01\x02]*)\x02"
)
_UNIQ_KEY_PAIR = UNIQ_KEY_PAIR_START.encode()


def _indexed_columns(texts: list[bytes], body: bytes | bytearray | memoryview) -> _Columns:
    """UNIQ_KEY, KEYS and TAGS of every message (TAGS None when no message has one), and
    whether no other property is set (plain). A batch whose texts hold their UNIQ_KEY alone is
    read at once (:func:`_uniq_keys_alone`); otherwise a text of the indexed properties alone,
    as a producer writes it, is read with one match, and any other is parsed whole (strictly:
    the text a writer made). ``body`` is what the texts came from: an error names the byte
    offset of the text at fault in it."""
    alone = _uniq_keys_alone(texts)
    if alone is not None:
        return alone, [None] * len(texts), None, True
    uniq_keys: list[str | None] = []
    keys: list[str | None] = []
    tags: list[str | None] = []
    plain = True
    indexed_only = _INDEXED_ONLY.fullmatch
    for index, text in enumerate(texts):
        try:
            found = indexed_only(text)
            if found is not None:
                tag, key, uniq_key = found.groups()
                uniq_keys.append(uniq_key.decode())
                keys.append(None if key is None else key.decode())
                tags.append(None if tag is None else tag.decode())
                continue
            properties = _parse(text)
        except ValueError as exc:  # UnicodeDecodeError too
            raise MalformedBodyError(
                _text_offset(body, index),
                f"the properties are not UTF-8 name\\x01value\\x02 pairs: {exc}",
            ) from exc
        uniq_keys.append(properties.get(PROPERTY_UNIQ_KEY))
        keys.append(properties.get(PROPERTY_KEYS))
        tags.append(properties.get(PROPERTY_TAGS))
        if plain and not _INDEXED.issuperset(properties):
            plain = False
    return uniq_keys, keys, tags if any(tag is not None for tag in tags) else None, plain


def _uniq_keys_alone(texts: list[bytes]) -> list[str] | None:
    """The UNIQ_KEYs of texts that each are ``UNIQ_KEY\\x01value\\x02`` and nothing else (a
    producer's batch without tags or keys), read from all the texts at once; None when a text
    is anything else. Keys a client drew as a run (:func:`_drawn_run`) come back as that
    :class:`UniqKeyRun`, which the key index hashes from a table. Every text starts with the
    pair's name and ends with a pair separator, and there are as many pair separators as
    texts: so each text holds that one pair."""
    joined = b"".join(texts)
    run = _drawn_run(texts, joined)
    if run is not None:
        return run
    if not (
        joined.count(_PAIR_END) == len(texts)
        and all(map(bytes.startswith, texts, repeat(_UNIQ_KEY_PAIR)))
        and all(map(bytes.endswith, texts, repeat(_PAIR_END)))
    ):
        return None
    try:
        text = joined.decode()
    except UnicodeDecodeError:
        return None  # the text-by-text reading names the one at fault
    values = text.split(PROPERTY_SEPARATOR)
    values.pop()  # after the last separator: nothing
    start = len(UNIQ_KEY_PAIR_START)
    return [value[start:] for value in values]


def _drawn_run(texts: list[bytes], joined: bytes) -> UniqKeyRun | None:
    """The UNIQ_KEYs of ``texts`` as the run a client drew them in, or None: each text
    ``UNIQ_KEY\\x01value\\x02`` and nothing else, each value its predecessor's with the
    counter (its last 4 hex digits) one up.

    Checked across the texts at once, not text by text: the texts of such a run are all of
    the first's length, and are the first text repeated, each with its own counter. So the
    lengths and the first text are checked, then the repeat is made with the counters written
    in, one strided assignment a digit (:data:`_COUNTER_COLUMNS`), and compared with
    ``joined`` (all the texts, joined)."""
    first_text = texts[0]
    size = len(first_text)
    count = len(texts)
    counter_at = size - len(_PAIR_END) - UNIQ_KEY_COUNTER_DIGITS
    if (
        counter_at < len(_UNIQ_KEY_PAIR)
        or count > _COUNTERS
        or set(map(len, texts)) != {size}  # the join alone would not see a moved boundary
        or not first_text.startswith(_UNIQ_KEY_PAIR)
        or first_text.find(_PAIR_END) != size - len(_PAIR_END)
    ):
        return None
    try:
        first = int(first_text[counter_at : counter_at + UNIQ_KEY_COUNTER_DIGITS], 16)
    except ValueError:
        return None
    if not 0 <= first < _COUNTERS:  # int() takes a sign
        return None
    drawn = bytearray(first_text * count)
    stop = first + count
    for digit, column in enumerate(_COUNTER_COLUMNS):
        counters = (
            column[first:stop] if stop <= _COUNTERS else column[first:] + column[: stop - _COUNTERS]
        )
        drawn[counter_at + digit :: size] = counters
    if drawn != joined:
        return None
    try:
        text = joined.decode()
    except UnicodeDecodeError:
        return None
    chars = len(text) // count  # every text is the first's characters but the counter's
    start = len(UNIQ_KEY_PAIR_START)
    key_chars = chars - start - len(PROPERTY_SEPARATOR)
    run = UniqKeyRun([text[at : at + key_chars] for at in range(start, len(text), chars)])
    run.head = run[0][:-UNIQ_KEY_COUNTER_DIGITS]
    run.first = first
    return run


def _text_offset(body: bytes | bytearray | memoryview, index: int) -> int:
    """The byte offset in ``body`` (a well-framed produce body) of message ``index``'s
    properties text."""
    position = 0
    for _ in range(index):
        position += int(_INT.unpack_from(body, position)[0])
    body_bytes = int(_INT.unpack_from(body, position + _BODY_LENGTH_AT)[0])
    return position + _HEAD_BYTES + body_bytes + _PROPERTIES_LENGTH_BYTES


def _parse(text: bytes) -> dict[str, str]:
    """A properties text as written, strictly (ValueError for anything else)."""
    if text and not text.endswith(_PAIR_END):
        raise ValueError("the text does not end with \\x02")
    return decode_written_properties(text)
