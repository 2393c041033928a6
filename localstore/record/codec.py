"""The commitlog record: RocketMQ's stored-message layout, encoded and decoded.

The byte layout, its Structs, offsets and limits are :mod:`localstore.record.layout`'s; the
properties text is :mod:`localstore.record.properties`'; whether bytes are a valid record is
:mod:`localstore.record.frame`'s. This module holds the message types (:class:`NewMessage` to
store, :class:`StoredMessage` read back), host and message-id helpers, and the decoders of one
record (:func:`decode_record`, :func:`read_properties`, :func:`read_store_timestamp`). The names
of those three modules that readers of stored records use are importable from here too.
"""

from __future__ import annotations

import copy
import ipaddress
import struct
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar, overload

from localstore.record.frame import frame_problem
from localstore.record.layout import (
    BLANK_MAGIC,
    BLANK_RECORD_SIZE,
    BLANK_STRUCT,
    BODY_LENGTH_AT_V4,
    BODY_LENGTH_INDEX,
    HEADER_STRUCTS,
    HEADER_V4,
    HEADER_V4_SIZE,
    INT,
    LONG,
    MAGIC_AT,
    MAGIC_V1,
    MAGIC_V2,
    MAX_PROPERTIES_BYTES,
    MAX_V1_TOPIC_BYTES,
    SHORT,
    STORE_TIMESTAMP_AT,
    SYSFLAG_AT,
    SYSFLAG_BORNHOST_V6,
    SYSFLAG_COMPRESSED,
    SYSFLAG_HOSTS_V6,
    SYSFLAG_INDEX,
    SYSFLAG_MULTI_TAGS,
    SYSFLAG_STOREHOST_V6,
    SYSFLAG_TRANSACTION_COMMIT,
    SYSFLAG_TRANSACTION_MASK,
    SYSFLAG_TRANSACTION_NOT,
    SYSFLAG_TRANSACTION_PREPARED,
    SYSFLAG_TRANSACTION_ROLLBACK,
    header_with_body_format,
    record_overhead,
    topic_field,
)
from localstore.record.properties import (
    KEY_SEPARATOR,
    NAME_VALUE_SEPARATOR,
    PROPERTY_DELAY,
    PROPERTY_KEYS,
    PROPERTY_MAX_RECONSUME_TIMES,
    PROPERTY_ORIGIN_MESSAGE_ID,
    PROPERTY_REAL_QUEUE_ID,
    PROPERTY_REAL_TOPIC,
    PROPERTY_RECONSUME_TIME,
    PROPERTY_RETRY_TOPIC,
    PROPERTY_SEPARATOR,
    PROPERTY_TAGS,
    PROPERTY_TRANSACTION_PREPARED,
    PROPERTY_UNIQ_KEY,
    PROPERTY_WAIT,
    decode_properties,
    encode_properties,
    holds_property_separator,
    parse_once,
    split_keys,
)
from quiver_errors import ArgumentTypeError, QuiverError

__all__ = [  # the layout's and the properties' names readers of stored records use, here too
    "BLANK_MAGIC",
    "BLANK_RECORD_SIZE",
    "BLANK_STRUCT",
    "HEADER_STRUCTS",
    "HEADER_V4",
    "HOST_TEXTS",
    "INT",
    "KEY_SEPARATOR",
    "LONG",
    "MAGIC_V1",
    "MAGIC_V2",
    "MAX_PROPERTIES_BYTES",
    "MAX_V1_TOPIC_BYTES",
    "NAME_VALUE_SEPARATOR",
    "PROPERTY_DELAY",
    "PROPERTY_KEYS",
    "PROPERTY_MAX_RECONSUME_TIMES",
    "PROPERTY_ORIGIN_MESSAGE_ID",
    "PROPERTY_REAL_QUEUE_ID",
    "PROPERTY_REAL_TOPIC",
    "PROPERTY_RECONSUME_TIME",
    "PROPERTY_RETRY_TOPIC",
    "PROPERTY_SEPARATOR",
    "PROPERTY_TAGS",
    "PROPERTY_TRANSACTION_PREPARED",
    "PROPERTY_UNIQ_KEY",
    "PROPERTY_WAIT",
    "SHORT",
    "SYSFLAG_BORNHOST_V6",
    "SYSFLAG_COMPRESSED",
    "SYSFLAG_HOSTS_V6",
    "SYSFLAG_MULTI_TAGS",
    "SYSFLAG_STOREHOST_V6",
    "SYSFLAG_TRANSACTION_COMMIT",
    "SYSFLAG_TRANSACTION_MASK",
    "SYSFLAG_TRANSACTION_NOT",
    "SYSFLAG_TRANSACTION_PREPARED",
    "SYSFLAG_TRANSACTION_ROLLBACK",
    "NewMessage",
    "RecordError",
    "StoredMessage",
    "body_crc",
    "decode_properties",
    "decode_record",
    "encode_properties",
    "format_offset_msg_id",
    "holds_property_separator",
    "host_text",
    "make_offset_msg_id",
    "pack_host",
    "properties_span",
    "read_properties",
    "read_store_timestamp",
    "record_overhead",
    "split_keys",
    "topic_field",
    "unpack_host",
]


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
        return parse_once(self) if type(properties) is str else properties  # type: ignore[return-value]

    @properties.setter
    def properties(self, value: dict[str, str]) -> None:
        self._properties = value

    def replace(self, **changes: Any) -> StoredMessage:
        """A copy with ``changes`` (field name -> value) applied, as ``dataclasses.replace``."""
        unknown = changes.keys() - set(_STORED_FIELDS)
        if unknown:
            raise ArgumentTypeError(f"StoredMessage has no field {', '.join(sorted(unknown))}")
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
    results carry): many ids of one host format without hexing it again. The offset is its
    8 bytes as stored (a negative one, from damage, in two's complement, as RocketMQ's
    ``createMessageId`` writes it)."""
    return f"{store_host_hex}{phys_offset & _LONG_BITS:016X}"


_LONG_BITS = (1 << 64) - 1


class RecordError(QuiverError, ValueError):
    """Bytes at a position are not a valid record (bad magic, size, length or CRC). Every
    decoder here raises it, never the ``struct.error``, ``IndexError`` or
    ``UnicodeDecodeError`` the bytes provoke; the store's reads turn it into a
    :class:`~localstore.errors.DamagedRecordError` that names the queue and offsets."""


_Decoded = TypeVar("_Decoded")


@overload
def decode_record(buf: bytes | memoryview, pos: int, *, body: bool = True) -> StoredMessage: ...


@overload
def decode_record(
    buf: bytes | memoryview, pos: int, *, body: bool = True, make: Callable[..., _Decoded]
) -> _Decoded: ...


def decode_record(
    buf: bytes | memoryview,
    pos: int,
    *,
    body: bool = True,
    make: Callable[..., Any] = StoredMessage,
) -> Any:
    """Decode the record starting at ``pos`` of ``buf`` (whose index 0 is not a phys offset).
    ``body=False`` skips copying the body and parses the properties at once: dispatch needs
    every field but the body, properties included. With the body they are parsed on first read.
    ``make`` builds the result from the fields, given as :class:`StoredMessage`'s are: a reader
    with its own message class (the SDK's ``ReceivedMessage``) builds it with no
    ``StoredMessage`` in between.

    Raises :class:`RecordError` when the bytes there are not a complete v1/v2 record (the rules
    of :mod:`localstore.record.frame`, which names what is wrong) or its topic or properties are
    not UTF-8.
    """
    try:
        # Common case in one unpack: IPv4 hosts and a body length seen before, whose cached
        # Struct reads the header and the body together (without the body: the header and an
        # empty field). Any other record is read by _read_any_shape.
        layout = (
            _V4_WITH_BODY.get(_INT_AT(buf, pos + BODY_LENGTH_AT_V4)[0]) if body else _V4_NO_BODY
        )
        fields = None
        if layout is not None:
            try:
                fields = layout.unpack_from(buf, pos)
            except struct.error:  # not a v4 record after all: the general path decides
                fields = None
            if fields is not None and fields[SYSFLAG_INDEX] & SYSFLAG_HOSTS_V6:
                fields = None
        header_size = HEADER_V4_SIZE
        if fields is None:
            fields, header_size = _read_any_shape(buf, pos, body)
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
        if magic == MAGIC_V1:
            topic_end = cursor + 1 + buf[cursor]
            topic = str(buf[cursor + 1 : topic_end], "utf-8")
        elif magic == MAGIC_V2:
            topic_end = cursor + 2 + _SHORT_AT(buf, cursor)[0]
            if topic_end < cursor + 2:  # a negative length would read backwards
                raise _invalid(buf, pos)
            topic = str(buf[cursor + 2 : topic_end], "utf-8")
        else:
            raise _invalid(buf, pos)
        props_len = _SHORT_AT(buf, topic_end)[0]
        cursor = topic_end + 2 + props_len
        if cursor - pos != total or cursor > len(buf) or body_len < 0 or props_len < 0:
            raise _invalid(buf, pos)
        props = str(buf[topic_end + 2 : cursor], "utf-8") if props_len > 0 else ""
    except (struct.error, IndexError, UnicodeDecodeError) as exc:
        raise _invalid(buf, pos, exc) from exc
    return make(
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


def _read_any_shape(buf: bytes | memoryview, pos: int, body: bool) -> tuple[tuple[Any, ...], int]:
    """(header fields and the body, header size) of a record of any host shape; remembers the
    one-unpack layout of an IPv4 record's body length for the next one."""
    header = HEADER_STRUCTS[(_INT_AT(buf, pos + SYSFLAG_AT)[0] >> 4) & 3]
    head = header.unpack_from(buf, pos)
    body_bytes = b""
    if body:
        start = pos + header.size
        body_len = head[BODY_LENGTH_INDEX]
        body_bytes = bytes(buf[start : start + body_len])
        if len(body_bytes) == body_len and not head[SYSFLAG_INDEX] & SYSFLAG_HOSTS_V6:
            _remember_layout(body_len)
    return (*head, body_bytes), header.size


def _invalid(buf: bytes | memoryview, pos: int, exc: Exception | None = None) -> RecordError:
    """The error for bytes at ``pos`` that did not decode: what the shared rules say is wrong,
    else (their frame is sound) the text that is not UTF-8."""
    problem = frame_problem(buf, pos, len(buf))
    if problem is None:
        problem = f"malformed: its topic or properties are not UTF-8 ({exc})"
    return RecordError(f"record at buffer position {pos}: {problem}")


_INT_AT = INT.unpack_from
_SHORT_AT = SHORT.unpack_from
_V4_WITH_BODY: dict[int, struct.Struct] = {}  # body length -> IPv4 header + body
_V4_NO_BODY = struct.Struct(header_with_body_format(0))  # the header and an empty "body" field
_LAYOUT_CACHE_LIMIT = 4096
_MAX_LAYOUT_BODY = 1 << 16  # larger bodies: the unpack saves nothing next to the copy


def _remember_layout(body_len: int) -> None:
    """Cache the one-unpack layout of IPv4 records with ``body_len``-byte bodies."""
    if 0 <= body_len <= _MAX_LAYOUT_BODY and len(_V4_WITH_BODY) < _LAYOUT_CACHE_LIMIT:
        _V4_WITH_BODY[body_len] = struct.Struct(header_with_body_format(body_len))


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
    sys_flag = INT.unpack_from(buf, pos + SYSFLAG_AT)[0]
    born_v6 = 1 if sys_flag & SYSFLAG_BORNHOST_V6 else 0
    return int(LONG.unpack_from(buf, pos + STORE_TIMESTAMP_AT[born_v6])[0])


def read_properties(buf: bytes | memoryview, pos: int) -> dict[str, str]:
    """The properties of the record at ``pos``, skipping over its body without copying it.

    Raises :class:`RecordError` for bytes that do not read as a record's properties (damage
    that still reads, such as a length pointing elsewhere, is left to a full decode)."""
    start, end = properties_span(buf, pos)
    try:
        return decode_properties(str(buf[start:end], "utf-8"))
    except UnicodeDecodeError as exc:
        raise RecordError(f"truncated or malformed record at buffer position {pos}: {exc}") from exc


def properties_span(buf: bytes | memoryview, pos: int) -> tuple[int, int]:
    """[start, end) of the properties text of the record at ``pos`` in ``buf``, read from its
    length fields (the record's validity is the caller's); :class:`RecordError` when those
    fields cannot be read."""
    try:
        (magic,) = INT.unpack_from(buf, pos + MAGIC_AT)
        (sys_flag,) = INT.unpack_from(buf, pos + SYSFLAG_AT)
        cursor = pos + HEADER_STRUCTS[(sys_flag >> 4) & 3].size
        cursor += INT.unpack_from(buf, cursor - 4)[0]
        if magic == MAGIC_V1:
            cursor += 1 + buf[cursor]
        else:
            cursor += 2 + SHORT.unpack_from(buf, cursor)[0]
        (props_len,) = SHORT.unpack_from(buf, cursor)
    except (struct.error, IndexError) as exc:
        raise RecordError(f"truncated or malformed record at buffer position {pos}: {exc}") from exc
    return cursor + 2, cursor + 2 + props_len
