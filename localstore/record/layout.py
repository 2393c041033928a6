"""The commitlog record's field table: the one source of its Structs, field offsets, field
indexes and limits (RocketMQ's stored-message layout, v1 and v2).

Every integer is big-endian. One record per message; records never span two segments.

    off  size  field                        index in a header Struct's tuple
      0     4  TOTALSIZE                     0  whole record length, this field included
      4     4  MAGICCODE                     1  v1 0xDAA320A7, v2 0xDAA320AB
      8     4  BODYCRC                       2  zlib.crc32(body) & 0x7FFFFFFF, body as stored
     12     4  QUEUEID                       3
     16     4  FLAG                          4  the producer's int flag
     20     8  QUEUEOFFSET                   5  slot in the consume queue (0: prepared/rollback)
     28     8  PHYSICALOFFSET                6  this record's commitlog byte position
     36     4  SYSFLAG                       7  bits below
     40     8  BORNTIMESTAMP                 8  producer ms
     48   8|20 BORNHOST                      9  IPv4 (4) or IPv6 (16) address + int port
      .     8  STORETIMESTAMP               10  broker ms
      .   8|20 STOREHOSTADDRESS             11  as BORNHOST
      .     4  RECONSUMETIMES               12
      .     8  PREPARED_TRANSACTION_OFFSET  13
      .     4  BODYLENGTH                   14  B, then the B body bytes
      .     B  BODY
      . 1|2+T  TOPIC                            v1: 1-byte length, v2: 2-byte length; UTF-8
      .   2+P  PROPERTIES                       short length P, then ``name\\x01value\\x02``
                                                pairs in UTF-8 (:mod:`localstore.record.properties`)

The header is TOTALSIZE to BODYLENGTH. Its shape depends on SYSFLAG's host bits only: 0x10 makes
BORNHOST 20 bytes, 0x20 makes STOREHOSTADDRESS 20 bytes. ``host_shape(sys_flag)``, 0 to 3, indexes
:data:`HEADER_STRUCTS` (and every per-shape table here); with IPv4 hosts (shape 0) the header is
88 bytes and the smallest v1 record 91. Fields up to BORNHOST sit at the same offset in every
shape (the ``*_AT`` constants); the later ones at ``header_offsets(shape)[name]``.

A record goes into a segment only if at least 8 bytes remain after it; otherwise the segment
ends with the 8-byte blank record ``(remaining: int, 0xCBD43194: int)`` and the rest of the
segment stays zero.

SYSFLAG bits: 0x1 compressed body, 0x2 multi tags, 0xC transaction type (0x0 NOT, 0x4 PREPARED,
0x8 COMMIT, 0xC ROLLBACK), 0x10 born host IPv6, 0x20 store host IPv6, 0x40 need-unwrap (batch),
0x80 inner batch, 0x700 compression type.

Everything here is made once, at import, from :data:`HEADER_FIELDS`: the hot paths index tuples
and never build a format.
"""

from __future__ import annotations

import struct
from collections.abc import Collection, Sequence

MAGIC_V1 = -626843481  # 0xDAA320A7: a 1-byte topic length
MAGIC_V2 = -626843477  # 0xDAA320AB: a 2-byte topic length
BLANK_MAGIC = -875286124  # 0xCBD43194
BLANK_RECORD_SIZE = 8

# Limits of the variable fields.
MAX_PROPERTIES_BYTES = 32767  # PROPERTIES' length is a signed short
MAX_V1_TOPIC_BYTES = 127  # longer topics are written as v2 records
MAX_V2_TOPIC_BYTES = 32767  # TOPIC's v2 length is a signed short

SYSFLAG_COMPRESSED = 0x1
SYSFLAG_MULTI_TAGS = 0x2
SYSFLAG_TRANSACTION_MASK = 0xC
SYSFLAG_TRANSACTION_NOT = 0x0
SYSFLAG_TRANSACTION_PREPARED = 0x4
SYSFLAG_TRANSACTION_COMMIT = 0x8
SYSFLAG_TRANSACTION_ROLLBACK = 0xC
SYSFLAG_BORNHOST_V6 = 0x10
SYSFLAG_STOREHOST_V6 = 0x20
SYSFLAG_HOSTS_V6 = SYSFLAG_BORNHOST_V6 | SYSFLAG_STOREHOST_V6  # either host IPv6: a longer header

HOST_V4_BYTES = 8  # 4 address bytes + an int port
HOST_V6_BYTES = 20  # 16 address bytes + an int port

# (name, struct code) of the header's fields in order; "host" is BORNHOST/STOREHOSTADDRESS,
# 8 or 20 bytes by the host shape.
HEADER_FIELDS: tuple[tuple[str, str], ...] = (
    ("TOTALSIZE", "i"),
    ("MAGICCODE", "i"),
    ("BODYCRC", "i"),
    ("QUEUEID", "i"),
    ("FLAG", "i"),
    ("QUEUEOFFSET", "q"),
    ("PHYSICALOFFSET", "q"),
    ("SYSFLAG", "i"),
    ("BORNTIMESTAMP", "q"),
    ("BORNHOST", "host"),
    ("STORETIMESTAMP", "q"),
    ("STOREHOSTADDRESS", "host"),
    ("RECONSUMETIMES", "i"),
    ("PREPARED_TRANSACTION_OFFSET", "q"),
    ("BODYLENGTH", "i"),
)
FIELD_NAMES = tuple(name for name, _ in HEADER_FIELDS)

(
    TOTAL_SIZE_INDEX,
    MAGIC_INDEX,
    BODY_CRC_INDEX,
    QUEUE_ID_INDEX,
    FLAG_INDEX,
    QUEUE_OFFSET_INDEX,
    PHYSICAL_OFFSET_INDEX,
    SYSFLAG_INDEX,
    BORN_TIMESTAMP_INDEX,
    BORN_HOST_INDEX,
    STORE_TIMESTAMP_INDEX,
    STORE_HOST_INDEX,
    RECONSUME_TIMES_INDEX,
    PREPARED_OFFSET_INDEX,
    BODY_LENGTH_INDEX,
) = range(len(HEADER_FIELDS))

HOST_SHAPES = 4  # bit 0: born host IPv6, bit 1: store host IPv6


def host_shape(sys_flag: int) -> int:
    """The header shape SYSFLAG's host bits give, 0 to 3 (hot paths inline ``(f >> 4) & 3``)."""
    return (sys_flag >> 4) & 3


def _field_sizes(shape: int) -> list[tuple[str, str, int]]:
    """(name, struct code, byte size) of every header field in shape ``shape``."""
    born = HOST_V6_BYTES if shape & 1 else HOST_V4_BYTES
    store = HOST_V6_BYTES if shape & 2 else HOST_V4_BYTES
    sized = []
    for name, code in HEADER_FIELDS:
        if code == "host":
            width = born if name == "BORNHOST" else store
            sized.append((name, f"{width}s", width))
        else:
            sized.append((name, code, struct.calcsize(">" + code)))
    return sized


def header_offsets(shape: int) -> dict[str, int]:
    """Field name -> offset from the record's start, in header shape ``shape``."""
    offsets, at = {}, 0
    for name, _, width in _field_sizes(shape):
        offsets[name] = at
        at += width
    return offsets


def header_format(
    shape: int = 0,
    *,
    first: str = "TOTALSIZE",
    last: str = "BODYLENGTH",
    unread: Collection[str] = (),
    as_bytes: Sequence[tuple[str, str]] = (),
) -> str:
    """A big-endian struct format for header fields ``first`` to ``last`` of shape ``shape``:
    each field named in ``unread`` skipped (pad bytes), each ``(from, to)`` span of
    ``as_bytes`` read or packed as one bytes item."""
    sized = _field_sizes(shape)
    names = [name for name, _, _ in sized]
    chosen = sized[names.index(first) : names.index(last) + 1]
    spans = {names.index(start): names.index(end) for start, end in as_bytes}
    codes: list[str] = []
    pad = 0
    index = names.index(first)
    while index <= names.index(last):
        name, code, width = chosen[index - names.index(first)]
        if index in spans:
            end = spans[index]
            width = sum(w for _, _, w in sized[index : end + 1])
            code, index = f"{width}s", end
        if name in unread:
            pad += width
        else:
            if pad:
                codes.append(f"{pad}x")
                pad = 0
            codes.append(code)
        index += 1
    if pad:
        codes.append(f"{pad}x")
    return ">" + "".join(codes)


# Indexed by host_shape(sys_flag): the whole header, TOTALSIZE to BODYLENGTH.
HEADER_STRUCTS: tuple[struct.Struct, ...] = tuple(
    struct.Struct(header_format(shape)) for shape in range(HOST_SHAPES)
)
HEADER_SIZES: tuple[int, ...] = tuple(header.size for header in HEADER_STRUCTS)
HEADER_V4 = HEADER_STRUCTS[0]
HEADER_V4_SIZE = HEADER_V4.size
BODY_LENGTH_AT_V4 = HEADER_V4_SIZE - 4  # BODYLENGTH ends the header

_SAME_IN_EVERY_SHAPE = header_offsets(0)
TOTAL_SIZE_AT = _SAME_IN_EVERY_SHAPE["TOTALSIZE"]
MAGIC_AT = _SAME_IN_EVERY_SHAPE["MAGICCODE"]
BODY_CRC_AT = _SAME_IN_EVERY_SHAPE["BODYCRC"]
QUEUE_ID_AT = _SAME_IN_EVERY_SHAPE["QUEUEID"]
FLAG_AT = _SAME_IN_EVERY_SHAPE["FLAG"]
QUEUE_OFFSET_AT = _SAME_IN_EVERY_SHAPE["QUEUEOFFSET"]
PHYSICAL_OFFSET_AT = _SAME_IN_EVERY_SHAPE["PHYSICALOFFSET"]
SYSFLAG_AT = _SAME_IN_EVERY_SHAPE["SYSFLAG"]
BORN_TIMESTAMP_AT = _SAME_IN_EVERY_SHAPE["BORNTIMESTAMP"]
BORN_HOST_AT = _SAME_IN_EVERY_SHAPE["BORNHOST"]
# STORETIMESTAMP by the born host's width (SYSFLAG & 0x10).
STORE_TIMESTAMP_AT = (BORN_HOST_AT + HOST_V4_BYTES, BORN_HOST_AT + HOST_V6_BYTES)

# A record beyond its header: the TOPIC length field (v1 1 byte, v2 2) and PROPERTIES' (2).
TOPIC_LENGTH_BYTES = {MAGIC_V1: 1, MAGIC_V2: 2}
PROPERTIES_LENGTH_BYTES = 2
MIN_RECORD_SIZE = HEADER_V4_SIZE + 1 + PROPERTIES_LENGTH_BYTES  # v1, IPv4, all empty

# Struct readers of the record's parts.
INT = struct.Struct(">i")
SHORT = struct.Struct(">h")
LONG = struct.Struct(">q")
SIZE_AND_MAGIC = struct.Struct(header_format(first="TOTALSIZE", last="MAGICCODE"))
BLANK_STRUCT = SIZE_AND_MAGIC  # a blank record: (remaining, BLANK_MAGIC)
# The header less TOTALSIZE and MAGICCODE, IPv4 hosts: what the single put packs before it
# writes the record's first 8 bytes.
HEADER_V4_AFTER_MAGIC = struct.Struct(header_format(first="BODYCRC"))
# The fields a validity walk reads from an IPv4 header, in one call: TOTALSIZE, MAGICCODE,
# BODYCRC, PHYSICALOFFSET, SYSFLAG, BODYLENGTH.
WALK_FIELDS_V4 = struct.Struct(
    header_format(
        unread=(
            "QUEUEID",
            "FLAG",
            "QUEUEOFFSET",
            "BORNTIMESTAMP",
            "BORNHOST",
            "STORETIMESTAMP",
            "STOREHOSTADDRESS",
            "RECONSUMETIMES",
            "PREPARED_TRANSACTION_OFFSET",
        )
    )
)
# Per host shape: the header with the fields a batch shares packed once as bytes. Items:
# TOTALSIZE, MAGICCODE, BODYCRC, QUEUEID..FLAG (bytes), QUEUEOFFSET, PHYSICALOFFSET,
# SYSFLAG..PREPARED_TRANSACTION_OFFSET (bytes), BODYLENGTH.
SHARED_QUEUE_FIELDS = ("QUEUEID", "FLAG")
SHARED_MIDDLE_FIELDS = ("SYSFLAG", "PREPARED_TRANSACTION_OFFSET")
UNIFORM_HEADERS: tuple[struct.Struct, ...] = tuple(
    struct.Struct(header_format(shape, as_bytes=(SHARED_QUEUE_FIELDS, SHARED_MIDDLE_FIELDS)))
    for shape in range(HOST_SHAPES)
)
QUEUE_ID_AND_FLAG = struct.Struct(header_format(first="QUEUEID", last="FLAG"))
SYSFLAG_AND_BORN_TIMESTAMP = struct.Struct(header_format(first="SYSFLAG", last="BORNTIMESTAMP"))
RECONSUME_AND_PREPARED = struct.Struct(
    header_format(first="RECONSUMETIMES", last="PREPARED_TRANSACTION_OFFSET")
)


def header_with_body_format(body_length: int) -> str:
    """An IPv4 header followed by a ``body_length``-byte body, as one format."""
    return f"{HEADER_V4.format}{body_length}s"


def record_overhead(topic_field_len: int, born_v6: bool = False, store_v6: bool = False) -> int:
    """Bytes of a record beyond its body and properties text: header, topic field, the
    properties length."""
    shape = int(born_v6) | int(store_v6) << 1
    return HEADER_SIZES[shape] + topic_field_len + PROPERTIES_LENGTH_BYTES


def topic_field(topic: str) -> tuple[int, bytes]:
    """(magic, encoded TOPIC field): v1 with a 1-byte length up to 127 bytes, v2 (2-byte
    length) above."""
    raw = topic.encode()
    if len(raw) <= MAX_V1_TOPIC_BYTES:
        return MAGIC_V1, bytes((len(raw),)) + raw
    return MAGIC_V2, SHORT.pack(len(raw)) + raw
