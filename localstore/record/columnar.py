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
from quiver_errors import IllegalStateError

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


_RUN_PROBE_MIN = 16
_RUN_PROBE_MAX = 1 << 16


def _record_starts(view: bytes | memoryview, count: int | None) -> npt.NDArray[np.int64]:
    """The start offsets of the records in ``view`` (the first ``count`` of them), by their
    TOTALSIZE chain; a size that cannot be a record's is decode_record's to explain.

    Records of one size often follow each other: from a record of size S the walk checks, in
    one numpy gather, that the records S, 2S, ... further on have size S too, and takes the
    run up to the first that has not (each start so found is exact: the record before it has
    size S). A walk whose runs stay short steps one record at a time for a while."""
    runs: list[npt.NDArray[np.int64] | list[int]] = []
    single: list[int] = []
    end = len(view)
    limit = end if count is None else count
    sizes = np.ndarray((max(end - 3, 0),), dtype=">i4", buffer=view, strides=(1,))
    found, pos, probe, plain_steps = 0, 0, _RUN_PROBE_MIN, 0
    while pos < end and found < limit:
        total = _INT_AT(view, pos)[0] if pos + 4 <= end else 0
        if total < MIN_RECORD_SIZE or pos + total > end:
            _raise_at(view, pos)
        if plain_steps:
            plain_steps -= 1
            single.append(pos)
            found, pos = found + 1, pos + total
            continue
        room = min((end - pos) // total, limit - found, probe)
        candidates = pos + total * np.arange(room, dtype=np.int64)
        differs = np.flatnonzero(sizes[candidates] != total)
        run = int(differs[0]) if len(differs) else room
        if run < 4:  # short runs: a while without probing
            plain_steps = _RUN_PROBE_MIN
        probe = min(probe * 2, _RUN_PROBE_MAX) if run == room else _RUN_PROBE_MIN
        runs.append(single)
        runs.append(candidates[:run])
        single = []
        found, pos = found + run, pos + run * total
    runs.append(single)
    if count is not None and found < count:
        raise RecordError(f"the bytes hold {found} records, not the {count} expected")
    return np.concatenate([np.asarray(run, dtype=np.int64) for run in runs])


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
    records = _Bytes(np.frombuffer(view, dtype=np.uint8), pa.py_buffer(view))
    topic = records.slices(header.topic_at, header.topic_length, pa.string())
    properties_text = records.slices(header.properties_at, header.properties_length, pa.string())
    found = _PropertyFinder(properties_text)
    offset_msg_id = _offset_msg_ids(header)
    columns: dict[str, pa.Array] = {
        "topic": topic,
        "queue_id": pa.array(header.int_at("QUEUEID").astype(np.int32)),
        "queue_offset": pa.array(header.long_at("QUEUEOFFSET")),
        "msg_id": pc.coalesce(found.values(PROPERTY_UNIQ_KEY), offset_msg_id),
        "offset_msg_id": offset_msg_id,
        "tags": found.values(PROPERTY_TAGS),
        "keys": _split_keys(found.values(PROPERTY_KEYS)),
        "born_timestamp": _timestamps(header.long_at("BORNTIMESTAMP")),
        "store_timestamp": _timestamps(header.long_at("STORETIMESTAMP")),
        "reconsume_times": pa.array(header.int_at("RECONSUMETIMES").astype(np.int32)),
    }
    if include_body:
        columns["body"] = records.slices(header.body_at, header.body_length, pa.binary())
    if include_properties:
        columns["properties"] = _properties_maps(properties_text, found)
    return pa.RecordBatch.from_arrays([columns[name] for name in schema.names], schema=schema)


_INLINE_BYTES = 12  # a binary view holds a value up to 12 bytes itself


class _Bytes:
    """A byte buffer (as numpy and as Arrow) whose slices become Arrow arrays."""

    def __init__(self, octets: npt.NDArray[np.uint8], buffer: pa.Buffer) -> None:
        self.octets = octets
        self.buffer = buffer
        size = len(octets)
        # a little-endian word at every byte position, for the views' inline bytes
        self.words = np.ndarray((max(size - 3, 0),), dtype="<u4", buffer=octets, strides=(1,))

    def slices(
        self,
        at: npt.NDArray[np.int64],
        length: npt.NDArray[np.int64],
        kind: pa.DataType,
        valid: npt.NDArray[np.bool_] | None = None,
    ) -> pa.Array:
        """The ``length[i]`` bytes at ``at[i]`` as a ``kind`` (binary or string) array, null
        where ``valid`` is False: Arrow views (16 bytes each: the length, then the bytes
        themselves up to 12, else their first 4, buffer 0 and the offset) that Arrow copies
        into one values buffer. Raises ``pa.ArrowInvalid`` for a string that is not UTF-8."""
        count = len(at)
        inside = (at >= 0) & (length >= 0) & (at + length <= len(self.octets))
        if not (inside if valid is None else inside | ~valid).all():  # Arrow would read astray
            raise IllegalStateError("the columnar decoder made a slice outside its buffer")
        views = np.zeros((count, 4), dtype="<u4")
        views[:, 0] = length
        self._inline(views, at, length)
        outside = length > _INLINE_BYTES
        views[outside, 2] = 0  # buffer 0: every value lies in ``buffer``
        views[outside, 3] = at[outside]
        validity = None if valid is None else pa.py_buffer(np.packbits(valid, bitorder="little"))
        viewed = pa.Array.from_buffers(
            pa.binary_view(), count, [validity, pa.py_buffer(views), self.buffer]
        )
        copied = viewed.cast(pa.binary())
        return copied if kind == pa.binary() else copied.cast(kind)  # the cast checks UTF-8

    def _inline(
        self,
        views: npt.NDArray[np.uint32],
        at: npt.NDArray[np.int64],
        length: npt.NDArray[np.int64],
    ) -> None:
        """Fill views' bytes 4 to 16 with each value's first 12 bytes, zero-padded."""
        size = len(self.octets)
        room = at + _INLINE_BYTES <= size
        everywhere = bool(room.all())
        roomy = at if everywhere else at[room]
        for word in range(3):
            bytes_in_word = np.clip(length - 4 * word, 0, 4)
            first = (
                self.words[roomy + 4 * word]
                & _LOW_BYTES[bytes_in_word if everywhere else bytes_in_word[room]]
            )
            if everywhere:
                views[:, 1 + word] = first
            else:
                views[room, 1 + word] = first
        if not everywhere:  # values near the buffer's end: byte by byte, clipped
            near_end = ~room
            spread = np.minimum(at[near_end, None] + np.arange(_INLINE_BYTES), max(size - 1, 0))
            tail = self.octets[spread] if size else np.zeros(spread.shape, np.uint8)
            tail[np.arange(_INLINE_BYTES) >= length[near_end, None]] = 0
            views[near_end, 1:] = tail.view("<u4")


# a little-endian word's first n bytes, n = 0 to 4
_LOW_BYTES = np.array([0, 0xFF, 0xFFFF, 0xFFFFFF, 0xFFFFFFFF], dtype=np.uint32)


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


class _PropertyFinder:
    """Where properties of given names are in records' properties texts (a string array), by
    decode_properties' rules: a pair starts a text or follows a ``\\x02``, its name ends at
    its first ``\\x01``, its value at the next ``\\x02`` or the text's end; a pair with an
    empty value does not count; of pairs of one name the last counts."""

    def __init__(self, texts: pa.Array) -> None:
        self.count = len(texts)
        _, offsets, data = texts.buffers()
        self.offsets = np.frombuffer(offsets, dtype=np.int32)[
            texts.offset : texts.offset + self.count + 1
        ].astype(np.int64)
        octets = np.frombuffer(data, dtype=np.uint8) if data is not None else np.zeros(0, np.uint8)
        self.text = _Bytes(octets, data if data is not None else pa.py_buffer(b""))
        self.separators = np.flatnonzero(octets == 0x02)
        after = self.separators + 1
        starts_a_text = np.zeros(len(octets) + 1, dtype=bool)
        starts_a_text[self.offsets] = True
        self.text_starts = self.offsets[:-1]
        self.pair_starts = after[~starts_a_text[after]]  # the later pairs of each text

    def every_pair(self) -> tuple[npt.NDArray[np.int64], pa.Array, pa.Array]:
        """(owner text, name, value) of every pair that counts, in text order (repeats of a
        name included)."""
        octets = self.text.octets
        is_start = np.zeros(len(octets) + 1, dtype=bool)
        is_start[self.offsets] = True
        is_start[self.separators + 1] = True
        starts = np.flatnonzero(is_start[:-1])
        owners = np.searchsorted(self.offsets, starts, side="right") - 1
        ends = np.minimum(self._next(self.separators, starts), self.offsets[owners + 1])
        name_ends = self._next(np.flatnonzero(octets == 0x01), starts)
        counts = (starts < name_ends) & (name_ends < ends - 1)  # a name, \x01 and a value
        starts, ends, name_ends, owners = (
            starts[counts],
            ends[counts],
            name_ends[counts],
            owners[counts],
        )
        names = self.text.slices(starts, name_ends - starts, pa.string())
        values = self.text.slices(name_ends + 1, ends - name_ends - 1, pa.string())
        return owners, names, values

    @staticmethod
    def _next(positions: npt.NDArray[np.int64], at: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
        """The first of the sorted ``positions`` at or after each of ``at`` (int64 max: none)."""
        beyond = np.append(positions, np.iinfo(np.int64).max)
        return beyond[np.searchsorted(positions, at)]

    def values(self, name: str) -> pa.Array:
        """Per text, the value of property ``name`` (null without one)."""
        prefix = np.frombuffer((name + "\x01").encode(), dtype=np.uint8)
        at = np.full(self.count, -1, dtype=np.int64)
        # first pairs, then later ones: a later pair of the name overrides an earlier one
        for starts in (self.text_starts, self.pair_starts):
            owners, value_at = self._pairs_named(starts, prefix)
            at[owners] = value_at
        found = at >= 0
        value_at = np.where(found, at, 0)
        value_end = np.minimum(self._next(self.separators, value_at), self.offsets[1:])
        length = np.where(found, value_end - value_at, 0)
        return self.text.slices(value_at, length, pa.string(), found)

    def _pairs_named(
        self, starts: npt.NDArray[np.int64], prefix: npt.NDArray[np.uint8]
    ) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
        """(owner text, value offset) of the pairs at ``starts`` named ``prefix`` (the name
        and ``\\x01``) with a value, in ascending order."""
        octets = self.text.octets
        last = len(octets) - 1
        if last < 0:
            return np.zeros(0, np.int64), np.zeros(0, np.int64)
        words = self.text.words
        checked = 0
        while len(prefix) - checked >= 4 and len(words):  # 4 bytes at once, then one by one
            word = int(prefix[checked : checked + 4].view("<u4")[0])
            starts = starts[words[np.minimum(starts + checked, len(words) - 1)] == word]
            checked += 4
        for index in range(checked, len(prefix)):
            starts = starts[octets[np.minimum(starts + index, last)] == prefix[index]]
        owners = np.searchsorted(self.offsets, starts, side="right") - 1
        value_at = starts + len(prefix)
        has_value = value_at < self.offsets[owners + 1]  # the text goes on after the name
        has_value[has_value] &= octets[value_at[has_value]] != 0x02
        owners, value_at = owners[has_value], value_at[has_value]
        last_of_owner = np.append(owners[1:] != owners[:-1], True)[: len(owners)]
        return owners[last_of_owner], value_at[last_of_owner]


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


def _properties_maps(properties_text: pa.Array, found: _PropertyFinder) -> pa.Array:
    """Every record's properties as a map, by decode_properties' rules (its ``found``)."""
    owners, names, values = found.every_pair()
    count = len(properties_text)
    repeated = _repeats_a_name(owners, _codes(names))
    if repeated:  # a repeated name: the later value, in the first one's place (rare)
        texts = properties_text.to_pylist()
        return pa.array([list(decode_properties(text).items()) for text in texts], type=_PROPERTIES)
    offsets = np.zeros(count + 1, dtype=np.int32)
    np.cumsum(np.bincount(owners, minlength=count), out=offsets[1:])
    return pa.MapArray.from_arrays(pa.array(offsets), names, values, type=_PROPERTIES)


def _repeats_a_name(owners: npt.NDArray[np.int64], codes: npt.NDArray[np.int64]) -> bool:
    """Whether a text holds two pairs of one name (code); a text's pairs are adjacent."""
    most = int(np.bincount(owners).max()) if len(owners) else 0
    if most > 16:
        return len(pc.unique(pa.array(owners * (int(codes.max()) + 1) + codes))) < len(owners)
    return any(
        bool(((owners[lag:] == owners[:-lag]) & (codes[lag:] == codes[:-lag])).any())
        for lag in range(1, most)
    )


def _codes(names: pa.Array) -> npt.NDArray[np.int64]:
    """An int per name, equal for equal names."""
    encoded = pc.dictionary_encode(names)
    return np.asarray(encoded.indices).astype(np.int64)


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
