"""Stored records laid end to end, decoded column by column into one Arrow record batch.

Input: the bytes of whole records back to back, as a store's ``get_message_bytes(...).raw``, a
pull answer's ``raw`` or a commitlog range holds them (no blank record among them). The record
layout is :mod:`localstore.record.layout`'s; the common shape, v1 or v2 magic and IPv4 hosts
(SYSFLAG & 0x30 == 0), is

    off  size  field
      0     4  TOTALSIZE       (the walk from one record to the next)
      4     4  MAGICCODE
     12     4  QUEUEID
     20     8  QUEUEOFFSET
     28     8  PHYSICALOFFSET
     36     4  SYSFLAG
     40     8  BORNTIMESTAMP   (ms)
     56     8  STORETIMESTAMP  (ms)
     64     8  STOREHOSTADDRESS (4 address bytes + int port: with PHYSICALOFFSET, offset_msg_id)
     72     4  RECONSUMETIMES
     84     4  BODYLENGTH B, then B body bytes at 88
  88+B  1|2+T  TOPIC (v1: 1-byte length, v2: 2-byte length)
     .    2+P  PROPERTIES (``name\\x01value\\x02`` pairs)

How: one loop walks the TOTALSIZE chain to the records' start offsets; every fixed-offset field
of every record is then one numpy gather from an overlapping big-endian view of the buffer (an
int at every byte position); bodies, topics and properties texts are Arrow binary views into
the buffer (offset and length per record, no copy per value) that Arrow turns into the plain
``binary`` / ``string`` arrays Spark reads; ``tags``, ``keys`` and the ``UNIQ_KEY`` come out of
the properties texts by vectorised regular expressions that follow
:func:`~localstore.record.properties.decode_properties`' rules (a pair with an empty name or
value does not count; of a repeated name the last pair counts).

Invariant: the batch holds, row for row, exactly what
:func:`localstore.record.codec.decode_record` reads from each record. A record the vectorised
path does not take (IPv6 hosts, or fields that do not add up) is decoded by ``decode_record``
itself, so a damaged record raises the same :class:`~localstore.record.codec.RecordError`.
Columns left out (``include_body=False``, ``include_properties=False``) are not decoded at all.

The column types are what Spark's ``to_arrow_schema`` makes of the schema declared with
Spark's defaults (every field nullable): a Python data source must yield batches of exactly
that schema. This module needs numpy and pyarrow (the ``spark`` extra); nothing in ``sdk``'s
client side imports it.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from localstore.record.codec import RecordError, StoredMessage, decode_record
from localstore.record.layout import (
    HEADER_V4_SIZE,
    INT,
    MAGIC_V1,
    MAGIC_V2,
    MIN_RECORD_SIZE,
    PROPERTIES_LENGTH_BYTES,
    SYSFLAG_HOSTS_V6,
    header_offsets,
)
from localstore.record.properties import (
    PROPERTY_KEYS,
    PROPERTY_TAGS,
    PROPERTY_UNIQ_KEY,
    decode_properties,
    split_keys,
)

__all__ = ["arrow_schema", "decode_record_batch"]

_TIMESTAMP = pa.timestamp("us", tz="UTC")
_KEYS = pa.list_(pa.field("element", pa.string()))
_PROPERTIES = pa.map_(pa.string(), pa.string())
_BODY_FIELD = pa.field("body", pa.binary())
_PROPERTIES_FIELD = pa.field("properties", _PROPERTIES)
_FIELDS_BEFORE_BODY = (
    pa.field("topic", pa.string()),
    pa.field("queue_id", pa.int32()),
    pa.field("queue_offset", pa.int64()),
    pa.field("msg_id", pa.string()),
    pa.field("offset_msg_id", pa.string()),
    pa.field("tags", pa.string()),
    pa.field("keys", _KEYS),
)
_FIELDS_AFTER_BODY = (
    pa.field("born_timestamp", _TIMESTAMP),
    pa.field("store_timestamp", _TIMESTAMP),
    pa.field("reconsume_times", pa.int32()),
)


def arrow_schema(*, include_body: bool = True, include_properties: bool = False) -> pa.Schema:
    """The schema of :func:`decode_record_batch`'s batches, in this column order: topic,
    queue_id, queue_offset, msg_id, offset_msg_id, tags, keys, body (with ``include_body``),
    born_timestamp, store_timestamp, reconsume_times, properties (with
    ``include_properties``). It equals Spark's ``to_arrow_schema`` of the Spark schema
    ``topic string, queue_id int, queue_offset bigint, msg_id string, offset_msg_id string,
    tags string, keys array<string>, body binary, born_timestamp timestamp, store_timestamp
    timestamp, reconsume_times int, properties map<string,string>`` (columns left out alike)."""
    fields = [*_FIELDS_BEFORE_BODY]
    if include_body:
        fields.append(_BODY_FIELD)
    fields.extend(_FIELDS_AFTER_BODY)
    if include_properties:
        fields.append(_PROPERTIES_FIELD)
    return pa.schema(fields)


def decode_record_batch(
    raw: bytes | bytearray | memoryview,
    count: int | None = None,
    *,
    include_body: bool = True,
    include_properties: bool = False,
) -> pa.RecordBatch:
    """The records laid end to end in ``raw`` as one record batch of :func:`arrow_schema`'s
    schema, one row per record in their order.

    ``topic`` is the record's TOPIC (a retry topic's name for a record stored there);
    ``msg_id`` its ``UNIQ_KEY`` property, else its ``offset_msg_id`` (as the SDK's
    ``ReceivedMessage.msg_id``); ``tags`` the ``TAGS`` property or null; ``keys`` the ``KEYS``
    property split at spaces (empty: none); ``properties`` every stored property, system ones
    included. ``count``: decode only the first ``count`` records (None: every record ``raw``
    holds). Without ``include_body`` / ``include_properties`` the column is absent and never
    decoded.

    Raises :class:`~localstore.record.codec.RecordError` for bytes that are not whole records
    (the error :func:`~localstore.record.codec.decode_record` gives for the first bad one), or
    when ``raw`` holds fewer than ``count`` records.
    """
    view = memoryview(raw).cast("B") if not isinstance(raw, bytes) else raw
    starts = _record_starts(view, count)
    schema = arrow_schema(include_body=include_body, include_properties=include_properties)
    if len(starts) == 0:
        return _empty_batch(schema)
    header = _Headers(view, starts)
    fast = header.common_shape()
    if fast.all():
        try:
            return _vectorised(view, header, schema, include_body, include_properties)
        except pa.ArrowInvalid:  # a topic or properties text is not UTF-8: decode_record says
            return _general(view, starts, schema, include_body, include_properties)
    fast_rows = np.flatnonzero(fast)
    other_rows = np.flatnonzero(~fast)
    # decoded first: a damaged record raises before any vectorised work
    others = _general(view, starts[other_rows], schema, include_body, include_properties)
    if len(fast_rows) == 0:
        return others
    try:
        common = _vectorised(
            view, header.subset(fast_rows), schema, include_body, include_properties
        )
    except pa.ArrowInvalid:
        return _general(view, starts, schema, include_body, include_properties)
    order = np.empty(len(starts), dtype=np.int64)
    order[np.concatenate([fast_rows, other_rows])] = np.arange(len(starts))
    table = pa.Table.from_batches([common, others]).take(pa.array(order))
    return table.combine_chunks().to_batches()[0]


def _empty_batch(schema: pa.Schema) -> pa.RecordBatch:
    return pa.RecordBatch.from_arrays([pa.array([], type=f.type) for f in schema], schema=schema)


_INT_AT = INT.unpack_from


def _record_starts(view: bytes | memoryview, count: int | None) -> npt.NDArray[np.int64]:
    """The start offsets of the records in ``view`` (the first ``count`` of them), by their
    TOTALSIZE chain; a size that cannot be a record's is decode_record's to explain."""
    starts: list[int] = []
    append = starts.append
    end = len(view)
    limit = end if count is None else count
    pos = 0
    while pos < end and len(starts) < limit:
        total = _INT_AT(view, pos)[0] if pos + 4 <= end else 0
        if total < MIN_RECORD_SIZE or pos + total > end:
            _raise_at(view, pos)
        append(pos)
        pos += total
    if count is not None and len(starts) < count:
        raise RecordError(f"the bytes hold {len(starts)} records, not the {count} expected")
    return np.array(starts, dtype=np.int64)


def _raise_at(view: bytes | memoryview, pos: int) -> None:
    """Raise decode_record's error for the record at ``pos`` (or a plain one should it decode:
    its size did not fit what the bytes hold)."""
    decode_record(view, pos, body=False)
    raise RecordError(f"record at buffer position {pos}: its TOTALSIZE runs past the bytes")


_V4 = header_offsets(0)


class _Headers:
    """The fixed-offset fields of the records at ``starts``, IPv4 shape, one array each (those
    of a record of another shape are wrong and unused: it takes the general decoder)."""

    def __init__(self, view: bytes | memoryview, starts: npt.NDArray[np.int64]) -> None:
        self.view = view
        self.starts = starts
        size = len(view)
        # an int at every byte position: element p reads bytes p .. p+3 (p+7), big-endian
        self._ints = np.ndarray((size - 3,), dtype=">i4", buffer=view, strides=(1,))
        self._longs = np.ndarray((size - 7,), dtype=">i8", buffer=view, strides=(1,))
        self._shorts = np.ndarray((size - 1,), dtype=">i2", buffer=view, strides=(1,))
        self.total = self.int_at("TOTALSIZE")
        self.magic = self.int_at("MAGICCODE")
        self.sys_flag = self.int_at("SYSFLAG")
        self.body_length = self.int_at("BODYLENGTH")
        self.body_at = starts + HEADER_V4_SIZE
        topic_field_at = np.minimum(self.body_at + np.maximum(self.body_length, 0), size - 2)
        is_v2 = self.magic == MAGIC_V2
        v1_length = np.frombuffer(view, dtype=np.uint8)[topic_field_at]
        v2_length = self._shorts[topic_field_at]
        self.topic_length = np.where(is_v2, v2_length, v1_length).astype(np.int64)
        self.topic_at = topic_field_at + np.where(is_v2, 2, 1)
        properties_field_at = np.minimum(self.topic_at + np.maximum(self.topic_length, 0), size - 2)
        self.properties_length = self._shorts[properties_field_at].astype(np.int64)
        self.properties_at = properties_field_at + PROPERTIES_LENGTH_BYTES

    def int_at(self, name: str) -> npt.NDArray[np.int64]:
        return self._ints[self.starts + _V4[name]].astype(np.int64)

    def long_at(self, name: str) -> npt.NDArray[np.int64]:
        return self._longs[self.starts + _V4[name]].astype(np.int64)

    def common_shape(self) -> npt.NDArray[np.bool_]:
        """Per record: of the shape the vectorised path reads, its fields adding up."""
        takes: npt.NDArray[np.bool_] = (
            ((self.magic == MAGIC_V1) | (self.magic == MAGIC_V2))
            & (self.sys_flag & SYSFLAG_HOSTS_V6 == 0)
            & (self.body_length >= 0)
            & (self.topic_length >= 0)
            & (self.properties_length >= 0)
            & (self.properties_at + self.properties_length == self.starts + self.total)
        )
        return takes

    def subset(self, rows: npt.NDArray[np.int64]) -> _Headers:
        """These headers of records ``rows`` only."""
        chosen = object.__new__(_Headers)
        chosen.view, chosen._ints, chosen._longs = self.view, self._ints, self._longs
        chosen._shorts = self._shorts
        for name in (
            "starts",
            "total",
            "magic",
            "sys_flag",
            "body_length",
            "body_at",
            "topic_length",
            "topic_at",
            "properties_length",
            "properties_at",
        ):
            setattr(chosen, name, getattr(self, name)[rows])
        return chosen


def _vectorised(
    view: bytes | memoryview,
    header: _Headers,
    schema: pa.Schema,
    include_body: bool,
    include_properties: bool,
) -> pa.RecordBatch:
    """The batch of records all of the common shape. Raises ``pa.ArrowInvalid`` when a topic
    or properties text is not UTF-8."""
    data = pa.py_buffer(view)
    topic = _slices(view, data, header.topic_at, header.topic_length, True)
    properties_text = _slices(view, data, header.properties_at, header.properties_length, True)
    offset_msg_id = _offset_msg_ids(header)
    uniq_key = _last_value(properties_text, PROPERTY_UNIQ_KEY)
    columns: dict[str, pa.Array] = {
        "topic": topic,
        "queue_id": pa.array(header.int_at("QUEUEID").astype(np.int32)),
        "queue_offset": pa.array(header.long_at("QUEUEOFFSET")),
        "msg_id": pc.coalesce(uniq_key, offset_msg_id),
        "offset_msg_id": offset_msg_id,
        "tags": _last_value(properties_text, PROPERTY_TAGS),
        "keys": _split_keys(_last_value(properties_text, PROPERTY_KEYS)),
        "born_timestamp": _timestamps(header.long_at("BORNTIMESTAMP")),
        "store_timestamp": _timestamps(header.long_at("STORETIMESTAMP")),
        "reconsume_times": pa.array(header.int_at("RECONSUMETIMES").astype(np.int32)),
    }
    if include_body:
        columns["body"] = _slices(view, data, header.body_at, header.body_length, False)
    if include_properties:
        columns["properties"] = _properties_maps(properties_text)
    return pa.RecordBatch.from_arrays([columns[name] for name in schema.names], schema=schema)


def _slices(
    view: bytes | memoryview,
    data: pa.Buffer,
    at: npt.NDArray[np.int64],
    length: npt.NDArray[np.int64],
    as_text: bool,
) -> pa.Array:
    """The ``length[i]`` bytes at ``at[i]`` of ``data`` as a plain binary or string array:
    Arrow views (16 bytes each: the length, then the bytes themselves up to 12, else their
    first 4, buffer 0 and the offset) that Arrow copies into one values buffer. Raises
    ``pa.ArrowInvalid`` for a string that is not UTF-8."""
    count = len(at)
    views = np.zeros((count, 16), dtype=np.uint8)
    words = views.view("<i4")
    words[:, 0] = length
    inline_bytes = np.arange(12)
    gather = np.minimum(at[:, None] + inline_bytes, len(view) - 1)
    heads = np.frombuffer(view, dtype=np.uint8)[gather]
    heads[inline_bytes >= length[:, None]] = 0  # an inline value is zero-padded
    views[:, 4:16] = heads
    long_values = length > 12
    words[long_values, 2] = 0  # buffer 0: every value lies in ``data``
    words[long_values, 3] = at[long_values]
    viewed = pa.Array.from_buffers(pa.binary_view(), count, [None, pa.py_buffer(views), data])
    copied = viewed.cast(pa.binary())
    return copied.cast(pa.string()) if as_text else copied  # the cast checks UTF-8


_HEX_DIGITS = np.array([ord(c) for c in "0123456789ABCDEF"], dtype=np.uint8)


def _offset_msg_ids(header: _Headers) -> pa.Array:
    """Upper-case hex of the IPv4 store host (address and port) and PHYSICALOFFSET: 32
    characters per record (:func:`~localstore.record.codec.make_offset_msg_id`)."""
    count = len(header.starts)
    packed = np.empty((count, 2), dtype=">i8")
    packed[:, 0] = header.long_at("STOREHOSTADDRESS")
    packed[:, 1] = header.long_at("PHYSICALOFFSET")
    octets = packed.view(np.uint8).reshape(count, 16)
    text = np.empty((count, 32), dtype=np.uint8)
    text[:, 0::2] = _HEX_DIGITS[octets >> 4]
    text[:, 1::2] = _HEX_DIGITS[octets & 0xF]
    offsets = np.arange(0, 32 * count + 1, 32, dtype=np.int32)
    return pa.Array.from_buffers(
        pa.string(), count, [None, pa.py_buffer(offsets), pa.py_buffer(text)]
    )


def _last_value(properties_text: pa.Array, name: str) -> pa.Array:
    """Per record, the value of property ``name`` as decode_properties reads it (the last
    pair of that name with a value; null without one)."""
    # a pair starts the text or follows a \x02; the greedy prefix skips to the last such pair
    pattern = r"^(?s:.*\x02)?" + name + r"\x01(?P<value>[^\x02]+)"
    return pc.struct_field(pc.extract_regex(properties_text, pattern=pattern), [0])


def _split_keys(keys_text: pa.Array) -> pa.Array:
    """The KEYS values split at spaces, empty tokens dropped (:func:`split_keys`); a record
    without keys has an empty list."""
    pieces = pc.split_pattern(keys_text, pattern=" ")
    owners = np.asarray(pc.list_parent_indices(pieces))
    tokens = pc.list_flatten(pieces)
    kept = np.asarray(pc.not_equal(tokens, "")).astype(bool)
    per_record = np.bincount(owners[kept], minlength=len(keys_text))
    offsets = np.zeros(len(keys_text) + 1, dtype=np.int32)
    np.cumsum(per_record, out=offsets[1:])
    return pa.ListArray.from_arrays(pa.array(offsets), tokens.filter(pa.array(kept)), type=_KEYS)


def _properties_maps(properties_text: pa.Array) -> pa.Array:
    """Every record's properties as a map, by decode_properties' rules."""
    segments = pc.split_pattern(properties_text, pattern="\x02")
    owners = np.asarray(pc.list_parent_indices(segments))
    pairs = pc.extract_regex(
        pc.list_flatten(segments), pattern=r"^(?P<name>[^\x01]+)\x01(?s:(?P<value>.+))$"
    )
    valid = np.asarray(pc.is_valid(pairs)).astype(bool)
    owners = owners[valid]
    pairs = pairs.filter(pa.array(valid))
    names, values = pc.struct_field(pairs, [0]), pc.struct_field(pairs, [1])
    count = len(properties_text)
    per_record = np.bincount(owners, minlength=count)
    distinct = pa.table({"owner": owners, "name": names}).group_by(["owner", "name"]).aggregate([])
    if distinct.num_rows != len(owners):  # a repeated name: the later value, in the first place
        texts = properties_text.to_pylist()
        return pa.array([list(decode_properties(text).items()) for text in texts], type=_PROPERTIES)
    offsets = np.zeros(count + 1, dtype=np.int32)
    np.cumsum(per_record, out=offsets[1:])
    return pa.MapArray.from_arrays(pa.array(offsets), names, values, type=_PROPERTIES)


def _timestamps(millis: npt.NDArray[np.int64]) -> pa.Array:
    return pa.array(millis * 1000, type=_TIMESTAMP)


def _general(
    view: bytes | memoryview,
    starts: npt.NDArray[np.int64],
    schema: pa.Schema,
    include_body: bool,
    include_properties: bool,
) -> pa.RecordBatch:
    """The batch of the records at ``starts``, each read by decode_record."""
    rows: dict[str, list[Any]] = {name: [] for name in schema.names}
    for pos in starts.tolist():
        message = decode_record(view, pos, body=include_body)
        for name, value in _row(message, include_properties).items():
            if name in rows:
                rows[name].append(value)
    arrays = [
        _timestamps(np.array(rows[f.name], dtype=np.int64))
        if f.type == _TIMESTAMP
        else pa.array(rows[f.name], type=f.type)
        for f in schema
    ]
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


def _row(message: StoredMessage, include_properties: bool) -> dict[str, Any]:
    properties = message.properties
    keys = properties.get(PROPERTY_KEYS)
    return {
        "topic": message.topic,
        "queue_id": message.queue_id,
        "queue_offset": message.queue_offset,
        "msg_id": properties.get(PROPERTY_UNIQ_KEY) or message.offset_msg_id,
        "offset_msg_id": message.offset_msg_id,
        "tags": properties.get(PROPERTY_TAGS),
        "keys": split_keys(keys) if keys else [],
        "body": message.body,
        "born_timestamp": message.born_timestamp,
        "store_timestamp": message.store_timestamp,
        "reconsume_times": message.reconsume_times,
        "properties": list(properties.items()) if include_properties else None,
    }
