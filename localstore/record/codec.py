"""The commitlog record: RocketMQ's stored-message layout, encoded and decoded.

Every integer is big-endian. One record per message; records never span two segments.

    off  size  field
      0     4  TOTALSIZE            whole record length, this field included
      4     4  MAGICCODE            v1 0xDAA320A7, v2 0xDAA320AB (2-byte topic length)
      8     4  BODYCRC              zlib.crc32(body) & 0x7FFFFFFF, over the body as stored
     12     4  QUEUEID
     16     4  FLAG                 the producer's int flag
     20     8  QUEUEOFFSET          slot in the consume queue (0 for prepared/rollback records)
     28     8  PHYSICALOFFSET       this record's commitlog byte position
     36     4  SYSFLAG              bits below
     40     8  BORNTIMESTAMP        producer ms
     48   8|20 BORNHOST             IPv4 (4) or IPv6 (16) address + int port; 20 when SYSFLAG & 0x10
      .     8  STORETIMESTAMP       broker ms
      .   8|20 STOREHOSTADDRESS     as BORNHOST; 20 when SYSFLAG & 0x20
      .     4  RECONSUMETIMES
      .     8  PREPARED_TRANSACTION_OFFSET
      .   4+B  BODY                 int length, then the bytes
      . 1|2+T  TOPIC                v1: 1-byte length, v2: 2-byte length, then UTF-8 bytes
      .   2+P  PROPERTIES           short length, then ``name\\x01value\\x02`` pairs in UTF-8

With IPv4 hosts the fixed part is 91 bytes (v1) and the body starts at 88. A record goes into a
segment only if at least 8 bytes remain after it; otherwise the segment ends with the 8-byte blank
record ``(remaining: int, 0xCBD43194: int)`` and the rest of the segment stays zero.

SYSFLAG bits: 0x1 compressed body, 0x2 multi tags, 0xC transaction type (0x0 NOT, 0x4 PREPARED,
0x8 COMMIT, 0xC ROLLBACK), 0x10 born host IPv6, 0x20 store host IPv6, 0x40 need-unwrap (batch),
0x80 inner batch, 0x700 compression type.
"""

from __future__ import annotations

import copy
import ipaddress
import struct
import threading
import zlib
from dataclasses import dataclass, field
from typing import Any

MAGIC_V1 = -626843481  # 0xDAA320A7
MAGIC_V2 = -626843477  # 0xDAA320AB
BLANK_MAGIC = -875286124  # 0xCBD43194
BLANK_RECORD_SIZE = 8
MAX_PROPERTIES_BYTES = 32767
MAX_V1_TOPIC_BYTES = 127

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

NAME_VALUE_SEPARATOR = "\x01"
PROPERTY_SEPARATOR = "\x02"


def holds_property_separator(text: str) -> bool:
    """Whether ``text``, stored as a property name or value, would cut or forge a property:
    it holds one of the two separators of the ``name\\x01value\\x02`` pairs."""
    return NAME_VALUE_SEPARATOR in text or PROPERTY_SEPARATOR in text


# Well-known property names (MessageConst).
PROPERTY_KEYS = "KEYS"
PROPERTY_TAGS = "TAGS"
PROPERTY_UNIQ_KEY = "UNIQ_KEY"
PROPERTY_WAIT = "WAIT"
PROPERTY_DELAY = "DELAY"
PROPERTY_REAL_TOPIC = "REAL_TOPIC"
PROPERTY_REAL_QUEUE_ID = "REAL_QID"
PROPERTY_TRANSACTION_PREPARED = "TRAN_MSG"
PROPERTY_RETRY_TOPIC = "RETRY_TOPIC"
PROPERTY_ORIGIN_MESSAGE_ID = "ORIGIN_MESSAGE_ID"
PROPERTY_RECONSUME_TIME = "RECONSUME_TIME"
PROPERTY_MAX_RECONSUME_TIMES = "MAX_RECONSUME_TIMES"

KEY_SEPARATOR = " "

# Offsets of fields that sit before any host field.
OFFSET_TOTAL_SIZE = 0
OFFSET_MAGIC = 4
OFFSET_BODY_CRC = 8
OFFSET_QUEUE_ID = 12
OFFSET_QUEUE_OFFSET = 20
OFFSET_PHYSICAL_OFFSET = 28
OFFSET_SYSFLAG = 36
OFFSET_BORN_HOST = 48


def _header_struct(born_v6: bool, store_v6: bool) -> struct.Struct:
    born = "20s" if born_v6 else "8s"
    store = "20s" if store_v6 else "8s"
    # total, magic, crc, queue id, flag, queue offset, phys offset, sysflag, born ts, born host,
    # store ts, store host, reconsume times, prepared tx offset, body length
    return struct.Struct(f">iiiiiqqiq{born}q{store}iqi")


# Indexed by (sysflag >> 4) & 3: bit 0 = born host IPv6, bit 1 = store host IPv6.
HEADER_STRUCTS: tuple[struct.Struct, ...] = (
    _header_struct(False, False),
    _header_struct(True, False),
    _header_struct(False, True),
    _header_struct(True, True),
)
HEADER_V4 = HEADER_STRUCTS[0]

BLANK_STRUCT = struct.Struct(">ii")
INT = struct.Struct(">i")
SHORT = struct.Struct(">h")
LONG = struct.Struct(">q")


def body_crc(body: bytes) -> int:
    """RocketMQ's body CRC: CRC-32 masked to a non-negative Java int."""
    return zlib.crc32(body) & 0x7FFFFFFF


def pack_host(host: str, port: int) -> bytes:
    """Pack ``host:port`` as RocketMQ stores it: 4 or 16 address bytes, then an int port."""
    return ipaddress.ip_address(host).packed + INT.pack(port)


_IPV4_MAPPED_PREFIX = bytes(10) + b"\xff\xff"


def unpack_host(raw: bytes) -> str:
    """Packed host -> ``'127.0.0.1:40001'``; IPv6 as Java prints it: ``'0:0:0:0:0:0:0:1:40001'``."""
    port = INT.unpack_from(raw, len(raw) - 4)[0]
    if len(raw) == 8:
        return f"{raw[0]}.{raw[1]}.{raw[2]}.{raw[3]}:{port}"
    if raw[:12] == _IPV4_MAPPED_PREFIX:  # Java turns an IPv4-mapped address into IPv4
        return f"{raw[12]}.{raw[13]}.{raw[14]}.{raw[15]}:{port}"
    groups = struct.unpack(">8H", raw[:16])
    return ":".join(f"{g:x}" for g in groups) + f":{port}"


def encode_properties(properties: dict[str, str]) -> str:
    """``name\\x01value\\x02`` for every entry, in the dict's order."""
    return "\x02".join(map("\x01".join, properties.items())) + "\x02" if properties else ""


def decode_properties(text: str) -> dict[str, str]:
    """Parse a properties string the way RocketMQ's ``string2messageProperties`` does.

    Segments without a separator, with an empty name or an empty value are skipped; a repeated
    name keeps the later value.
    """
    items = text.split(PROPERTY_SEPARATOR)
    if not items[-1]:
        items.pop()
    try:  # fast path: every segment is exactly name \x01 value
        result = dict([item.split(NAME_VALUE_SEPARATOR) for item in items])
    except ValueError:
        return _decode_properties_tolerantly(items)
    if "" in result or "" in result.values():
        return _decode_properties_tolerantly(items)
    return result


def _decode_properties_tolerantly(items: list[str]) -> dict[str, str]:
    result: dict[str, str] = {}
    for item in items:
        name, sep, value = item.partition(NAME_VALUE_SEPARATOR)
        if sep and name and value:
            result[name] = value
    return result


def split_keys(keys: str) -> list[str]:
    """The ``KEYS`` property holds keys separated by single spaces; empty tokens are dropped."""
    return [key for key in keys.split(KEY_SEPARATOR) if key]


def topic_field(topic: str) -> tuple[int, bytes]:
    """(magic, encoded TOPIC field): v1 with a 1-byte length up to 127 bytes, v2 (2-byte
    length) above."""
    raw = topic.encode()
    if len(raw) <= MAX_V1_TOPIC_BYTES:
        return MAGIC_V1, bytes((len(raw),)) + raw
    return MAGIC_V2, SHORT.pack(len(raw)) + raw


def record_overhead(topic_field_len: int, born_v6: bool = False, store_v6: bool = False) -> int:
    """Bytes of a record beyond its body and properties string: header, topic, lengths."""
    return HEADER_STRUCTS[int(born_v6) | int(store_v6) << 1].size + topic_field_len + 2


@dataclass(slots=True)
class NewMessage:
    """A message to be stored. ``born_host`` is packed (see :func:`pack_host`)."""

    topic: str
    body: bytes
    queue_id: int = 0
    properties: dict[str, str] = field(default_factory=dict)
    flag: int = 0
    sys_flag: int = 0
    born_timestamp: int = 0
    born_host: bytes = b"\x7f\x00\x00\x01\x00\x00\x00\x00"
    reconsume_times: int = 0
    prepared_transaction_offset: int = 0


_PARSE_LOCK = threading.Lock()
_STORED_FIELDS = (
    "topic",
    "queue_id",
    "queue_offset",
    "phys_offset",
    "store_size",
    "body_crc",
    "flag",
    "sys_flag",
    "born_timestamp",
    "born_host",
    "store_timestamp",
    "store_host",
    "reconsume_times",
    "prepared_transaction_offset",
    "body",
    "properties",
    "store_host_raw",
)


class StoredMessage:
    """A message as read back from the commitlog, every field of the record.

    ``properties`` may be given as the record's properties string: it is then parsed (as
    :func:`decode_properties` does) on first read, so a reader that never looks at properties
    does not pay for the parse, which is most of a decode's cost; a reader that does pays what
    an eager decode would. Equality compares every field, properties parsed.
    """

    # every field in its own slot, but properties: stored or parsed, behind a property
    # (localstore.record.run_decoder fills these slots itself: a new field goes there too)
    __slots__ = ("_properties", *(name for name in _STORED_FIELDS if name != "properties"))
    __hash__ = None  # type: ignore[assignment]  # mutable, compared by value

    def __init__(
        self,
        topic: str,
        queue_id: int,
        queue_offset: int,
        phys_offset: int,
        store_size: int,
        body_crc: int,
        flag: int,
        sys_flag: int,
        born_timestamp: int,
        born_host: str,
        store_timestamp: int,
        store_host: str,
        reconsume_times: int,
        prepared_transaction_offset: int,
        body: bytes,
        properties: dict[str, str] | str,
        store_host_raw: bytes = b"",
    ) -> None:
        self.topic = topic
        self.queue_id = queue_id
        self.queue_offset = queue_offset
        self.phys_offset = phys_offset
        self.store_size = store_size
        self.body_crc = body_crc
        self.flag = flag
        self.sys_flag = sys_flag
        self.born_timestamp = born_timestamp
        self.born_host = born_host
        self.store_timestamp = store_timestamp
        self.store_host = store_host
        self.reconsume_times = reconsume_times
        self.prepared_transaction_offset = prepared_transaction_offset
        self.body = body
        self._properties = properties
        self.store_host_raw = store_host_raw

    @property
    def properties(self) -> dict[str, str]:
        """The message's properties (parsed on first read when stored as text)."""
        properties = self._properties
        if type(properties) is str:
            parsed = decode_properties(properties) if properties else {}
            with _PARSE_LOCK:  # two threads reading at once must end up with one dict
                properties = self._properties
                if type(properties) is str:
                    properties = self._properties = parsed
        return properties  # type: ignore[return-value]  # a dict once parsed

    @properties.setter
    def properties(self, value: dict[str, str]) -> None:
        self._properties = value

    def replace(self, **changes: Any) -> StoredMessage:
        """A copy with ``changes`` (field name -> value) applied, as ``dataclasses.replace``."""
        unknown = changes.keys() - set(_STORED_FIELDS)
        if unknown:
            raise TypeError(f"StoredMessage has no field {', '.join(sorted(unknown))}")
        copied = copy.copy(self)
        for name, value in changes.items():
            setattr(copied, name, value)
        return copied

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, StoredMessage):
            return NotImplemented
        return all(getattr(self, name) == getattr(other, name) for name in _STORED_FIELDS)

    def __repr__(self) -> str:
        fields = ", ".join(f"{name}={getattr(self, name)!r}" for name in _STORED_FIELDS)
        return f"StoredMessage({fields})"

    @property
    def tags(self) -> str | None:
        return self.properties.get(PROPERTY_TAGS)

    @property
    def keys(self) -> list[str]:
        raw = self.properties.get(PROPERTY_KEYS)
        return split_keys(raw) if raw else []

    @property
    def msg_id(self) -> str | None:
        """The producer-side id (``UNIQ_KEY``), what RocketMQ's clients show as the message id."""
        return self.properties.get(PROPERTY_UNIQ_KEY)

    @property
    def offset_msg_id(self) -> str:
        """The server-side id: store host, port and commitlog offset in upper-case hex."""
        return make_offset_msg_id(self.store_host_raw, self.phys_offset)


def make_offset_msg_id(store_host_raw: bytes, phys_offset: int) -> str:
    """offsetMsgId: packed store host (address + port) and the commitlog offset, upper-case hex
    (32 characters for IPv4, 56 for IPv6)."""
    return format_offset_msg_id(store_host_raw.hex().upper(), phys_offset)


def format_offset_msg_id(store_host_hex: str, phys_offset: int) -> str:
    """:func:`make_offset_msg_id` from the store host already in upper-case hex (what send
    results carry): many ids of one host format without hexing it again."""
    return f"{store_host_hex}{phys_offset:016X}"


class RecordError(ValueError):
    """Bytes at a position are not a valid record (bad magic, size, length or CRC). Every
    decoder here raises it, never the ``struct.error``, ``IndexError`` or
    ``UnicodeDecodeError`` the bytes provoke; the store's reads turn it into a
    :class:`~localstore.errors.DamagedRecordError` that names the queue and offsets."""


def decode_record(buf: bytes | memoryview, pos: int, *, body: bool = True) -> StoredMessage:
    """Decode the record starting at ``pos`` of ``buf`` (whose index 0 is not a phys offset).
    ``body=False`` skips copying the body and parses the properties at once: dispatch needs
    every field but the body, properties included. With the body they are parsed on first read.

    Raises :class:`RecordError` when the bytes there are not a complete v1/v2 record.
    """
    try:
        # Common case in one unpack: IPv4 hosts and a body length seen before, whose cached
        # Struct reads the header and the body together (without the body: the header and an
        # empty field). BODYLENGTH is read where an IPv4 header keeps it; a record with an IPv6
        # host (SYSFLAG says so) is read again below.
        layout = (
            _V4_WITH_BODY.get(_INT_AT(buf, pos + _V4_BODY_LENGTH_AT)[0]) if body else _V4_NO_BODY
        )
        fields = None
        header_size = _V4_HEADER_SIZE
        if layout is not None:
            try:
                fields = layout.unpack_from(buf, pos)
            except struct.error:  # not a v4 record after all: the general path decides
                fields = None
            if fields is not None and fields[7] & SYSFLAG_HOSTS_V6:
                fields = None
        if fields is None:
            header = HEADER_STRUCTS[(_INT_AT(buf, pos + OFFSET_SYSFLAG)[0] >> 4) & 3]
            head = header.unpack_from(buf, pos)
            header_size = header.size
            body_bytes = b""
            if body:
                start = pos + header_size
                body_bytes = bytes(buf[start : start + head[14]])
                if len(body_bytes) == head[14] and not head[7] & SYSFLAG_HOSTS_V6:
                    _remember_layout(head[14])
            fields = (*head, body_bytes)
        (
            total,
            magic,
            crc,
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
            prepared,
            body_len,
            body_bytes,
        ) = fields
        cursor = pos + header_size + body_len
        if magic != MAGIC_V1 and magic != MAGIC_V2:  # noqa: PLR1714 - two int compares are faster
            raise RecordError(f"bad magic code {magic & 0xFFFFFFFF:#x} at buffer position {pos}")
        if magic == MAGIC_V1:
            topic_end = cursor + 1 + buf[cursor]
            topic = str(buf[cursor + 1 : topic_end], "utf-8")
        else:
            topic_end = cursor + 2 + _SHORT_AT(buf, cursor)[0]
            topic = str(buf[cursor + 2 : topic_end], "utf-8")
        props_len = _SHORT_AT(buf, topic_end)[0]
        cursor = topic_end + 2 + props_len
        if cursor > len(buf):
            raise RecordError(f"record at buffer position {pos} is cut off in its properties")
        props = str(buf[topic_end + 2 : cursor], "utf-8") if props_len > 0 else ""
    except (struct.error, IndexError, UnicodeDecodeError) as exc:
        raise RecordError(f"truncated or malformed record at buffer position {pos}: {exc}") from exc
    if cursor - pos != total or (body and len(body_bytes) != body_len) or props_len < 0:
        raise RecordError(
            f"record at buffer position {pos} declares {total} bytes but its fields take "
            f"{cursor - pos}"
        )
    return StoredMessage(
        topic,
        queue_id,
        queue_offset,
        phys,
        total,
        crc,
        flag,
        sys_flag,
        born_ts,
        HOST_TEXTS.get(born_host) or host_text(born_host),
        store_ts,
        HOST_TEXTS.get(store_host) or host_text(store_host),
        reconsume,
        prepared,
        body_bytes,
        props if body else (decode_properties(props) if props else {}),
        store_host,
    )


_INT_AT = INT.unpack_from
_SHORT_AT = SHORT.unpack_from
_V4_HEADER_SIZE = HEADER_V4.size
_V4_BODY_LENGTH_AT = _V4_HEADER_SIZE - 4
_V4_WITH_BODY: dict[int, struct.Struct] = {}  # body length -> IPv4 header + body
_V4_NO_BODY = struct.Struct(f"{HEADER_V4.format}0s")  # the header and an empty "body" field
_LAYOUT_CACHE_LIMIT = 4096
_MAX_LAYOUT_BODY = 1 << 16  # larger bodies: the unpack saves nothing next to the copy


def _remember_layout(body_len: int) -> None:
    """Cache the one-unpack layout of IPv4 records with ``body_len``-byte bodies."""
    if 0 <= body_len <= _MAX_LAYOUT_BODY and len(_V4_WITH_BODY) < _LAYOUT_CACHE_LIMIT:
        _V4_WITH_BODY[body_len] = struct.Struct(f"{HEADER_V4.format}{body_len}s")


HOST_TEXTS: dict[bytes, str] = {}  # a stored host's bytes -> "address:port", by host_text
_HOST_CACHE_LIMIT = 4096


def host_text(raw: bytes) -> str:
    """:func:`unpack_host`, remembered in :data:`HOST_TEXTS` (decoders look there first: a
    store's records name few hosts)."""
    text = unpack_host(raw)
    if len(HOST_TEXTS) < _HOST_CACHE_LIMIT:
        HOST_TEXTS[raw] = text
    return text


def read_store_timestamp(buf: bytes | memoryview, pos: int) -> int:
    """The STORETIMESTAMP of the record at ``pos`` without decoding the rest."""
    sys_flag = INT.unpack_from(buf, pos + OFFSET_SYSFLAG)[0]
    born_len = 20 if sys_flag & SYSFLAG_BORNHOST_V6 else 8
    return int(LONG.unpack_from(buf, pos + OFFSET_BORN_HOST + born_len)[0])


def read_properties(buf: bytes | memoryview, pos: int) -> dict[str, str]:
    """The properties of the record at ``pos``, skipping over its body without copying it.

    Raises :class:`RecordError` for bytes that do not read as a record's properties (damage
    that still reads, such as a length pointing elsewhere, is left to a full decode)."""
    try:
        (magic,) = INT.unpack_from(buf, pos + OFFSET_MAGIC)
        (sys_flag,) = INT.unpack_from(buf, pos + OFFSET_SYSFLAG)
        cursor = pos + HEADER_STRUCTS[(sys_flag >> 4) & 3].size
        cursor += INT.unpack_from(buf, cursor - 4)[0]
        if magic == MAGIC_V1:
            cursor += 1 + buf[cursor]
        else:
            cursor += 2 + SHORT.unpack_from(buf, cursor)[0]
        (props_len,) = SHORT.unpack_from(buf, cursor)
        return decode_properties(str(buf[cursor + 2 : cursor + 2 + props_len], "utf-8"))
    except (struct.error, IndexError, UnicodeDecodeError) as exc:
        raise RecordError(f"truncated or malformed record at buffer position {pos}: {exc}") from exc
