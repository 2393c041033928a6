"""Arrow rows to produce-body records, column at a time (pyarrow compute and numpy, no loop
over rows): the sink's per-row cost.

A row becomes one message of a produce body (:mod:`sdk.protocol.produce_body`), laid out as

    TOTALSIZE (>i4) | MAGICCODE 0 | BODYCRC 0 | FLAG 0 | BODYLENGTH (>i4) | body
    | PROPERTIESLEN (>i2) | properties text

with magic 0, the form RocketMQ's clients send (the broker takes the body without a CRC check),
so no per-row checksum is computed here. The properties text holds the user's properties, then
``TAGS``, ``KEYS`` and ``UNIQ_KEY``, in the order the SDK's producer writes them (the broker
reads such a text with one match). Each row's record is one item of a binary array, so a batch's
body is a slice of that array's data buffer.

The checks are the SDK producer's (:class:`sdk.outgoing.MessageBuilder`), made per column: a
body is not null; tags, keys, property names and values hold no property separator (``\\x01``,
``\\x02``); a tag holds no ``||``; a key is not empty and holds no space; a property name is
neither RocketMQ's nor Quiver's own; a properties text fits 32,767 bytes. A row that fails one
is refused with :class:`~quiver_errors.InvalidArgumentError` naming the column and the row.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from localstore.record.layout import MAX_PROPERTIES_BYTES
from localstore.record.properties import (
    KEYS_PAIR_START,
    NAME_VALUE_SEPARATOR,
    PROPERTY_SEPARATOR,
    TAGS_PAIR_START,
    UNIQ_KEY_PAIR_START,
)
from quiver_errors import InvalidArgumentError
from sdk.message import QUIVER_PROPERTY_PREFIX, RESERVED_PROPERTIES

_HEAD = np.dtype([(name, ">i4") for name in ("total", "magic", "crc", "flag", "body_length")])
_HEX = np.frombuffer(b"0123456789ABCDEF", np.uint8)
_SEPARATORS = "[\x01\x02]"
_RESERVED = pa.array(sorted(RESERVED_PROPERTIES), pa.string())
_PAIR_END = PROPERTY_SEPARATOR


def hex_digits(values: np.ndarray, width: int) -> np.ndarray:
    """Each of ``values`` (non-negative integers) as ``width`` upper-case hex digits: an
    ``(n, width)`` uint8 array."""
    shifts = np.arange(width - 1, -1, -1, dtype=np.uint64) * np.uint64(4)
    nibbles = (values.astype(np.uint64)[:, None] >> shifts) & np.uint64(0xF)
    digits: np.ndarray = _HEX[nibbles]
    return digits


def message_ids(prefix: str, first_row: int, count: int) -> pa.Array:
    """The ids ``prefix + 12 hex digits of the row`` of rows ``first_row ..``, a string array."""
    rows = np.arange(first_row, first_row + count, dtype=np.uint64) & np.uint64(0xFFFFFFFFFFFF)
    width = len(prefix) + 12
    table = np.empty((count, width), np.uint8)
    table[:, : len(prefix)] = np.frombuffer(prefix.encode(), np.uint8)
    table[:, len(prefix) :] = hex_digits(rows, 12)
    offsets = np.arange(0, (count + 1) * width, width, dtype=np.int32)
    return pa.StringArray.from_buffers(
        count, pa.py_buffer(offsets.tobytes()), pa.py_buffer(table.tobytes())
    )


def bodies(column: pa.Array, first_row: int) -> pa.Array:
    """The ``body``/``value`` column as binary, refusing a null."""
    if column.null_count:
        row = first_row + pc.index(pc.is_null(column), True).as_py()
        raise InvalidArgumentError(f"body: row {row} has a null body")
    return column.cast(pa.binary())


def properties_texts(
    ids: pa.Array,
    tags: pa.Array | None,
    keys: pa.Array | None,
    properties: pa.Array | None,
    first_row: int,
) -> pa.Array:
    """Each row's stored properties text (see the module docstring), a binary array."""
    parts = []
    if properties is not None:
        parts.append(_user_properties(properties, first_row))
    if tags is not None:
        parts.append(_pair(TAGS_PAIR_START, _checked_tags(tags, first_row)))
    if keys is not None:
        parts.append(_pair(KEYS_PAIR_START, _joined_keys(keys, first_row)))
    parts.append(_pair(UNIQ_KEY_PAIR_START, ids))
    text = parts[0] if len(parts) == 1 else pc.binary_join_element_wise(*parts, "")
    lengths = pc.binary_length(text)
    too_long = pc.greater(lengths, MAX_PROPERTIES_BYTES)
    if pc.any(too_long).as_py():
        row = first_row + pc.index(too_long, True).as_py()
        raise InvalidArgumentError(
            f"properties: row {row}'s stored properties take more than {MAX_PROPERTIES_BYTES} bytes"
        )
    return text.cast(pa.binary())


def encode_records(body: pa.Array, text: pa.Array) -> tuple[pa.Array, np.ndarray]:
    """Each row's produce-body record (a binary array) and its body's length (numpy)."""
    count = len(body)
    body_lengths = pc.binary_length(body).to_numpy(zero_copy_only=False).astype(np.int64)
    text_lengths = pc.binary_length(text).to_numpy(zero_copy_only=False).astype(np.int64)
    head = np.zeros(count, _HEAD)
    head["total"] = 22 + body_lengths + text_lengths
    head["body_length"] = body_lengths
    length = text_lengths.astype(">i2")
    heads = pa.FixedSizeBinaryArray.from_buffers(
        pa.binary(_HEAD.itemsize), count, [None, pa.py_buffer(head.tobytes())]
    ).cast(pa.binary())
    text_heads = pa.FixedSizeBinaryArray.from_buffers(
        pa.binary(2), count, [None, pa.py_buffer(length.tobytes())]
    ).cast(pa.binary())
    joined = pc.binary_join_element_wise(heads, body, text_heads, text, b"")
    return joined, body_lengths


def concatenated(records_array: pa.Array) -> bytes:
    """The records of ``records_array`` end to end: a produce body."""
    _validity, offset_buffer, data = records_array.buffers()
    at = records_array.offset
    offsets = np.frombuffer(offset_buffer, np.int32)[at : at + len(records_array) + 1]
    if data is None or not len(records_array):
        return b""
    body: bytes = data[int(offsets[0]) : int(offsets[-1])].to_pybytes()
    return body


# -- the columns -------------------------------------------------------------------------------
def _pair(start: str, values: pa.Array) -> pa.Array:
    """``start + value + \\x02`` per row; an empty text where ``values`` is null or empty."""
    text = pc.binary_join_element_wise(start, values, _PAIR_END, "")
    empty = pc.or_kleene(pc.is_null(values), pc.equal(pc.binary_length(values), 0))
    return pc.if_else(empty, "", text)


def _checked_tags(tags: pa.Array, first_row: int) -> pa.Array:
    _refuse(tags, pc.match_substring_regex(tags, _SEPARATORS), "tags", first_row, "a separator")
    _refuse(tags, pc.match_substring(tags, "||"), "tags", first_row, "'||'")
    return tags


def _joined_keys(keys: pa.Array, first_row: int) -> pa.Array:
    """The ``KEYS`` value per row: a string key as it is, a list joined by spaces."""
    if pa.types.is_string(keys.type) or pa.types.is_large_string(keys.type):
        single = keys
    else:
        flat = pc.list_flatten(keys)
        bad = pc.or_kleene(
            pc.or_kleene(pc.equal(pc.binary_length(flat), 0), pc.match_substring(flat, " ")),
            pc.match_substring_regex(flat, _SEPARATORS),
        )
        if pc.any(pc.fill_null(bad, True)).as_py():
            parents = pc.list_parent_indices(keys)
            row = first_row + parents[pc.index(pc.fill_null(bad, True), True).as_py()].as_py()
            raise InvalidArgumentError(
                f"keys: row {row} holds a key that is empty or null, or holds a space or a "
                "separator"
            )
        return pc.binary_join(keys, " ")
    _refuse(
        single,
        pc.or_kleene(
            pc.match_substring(single, " "), pc.match_substring_regex(single, _SEPARATORS)
        ),
        "keys",
        first_row,
        "a space or a separator",
    )
    return single


def _user_properties(column: pa.Array, first_row: int) -> pa.Array:
    """``name\\x01value\\x02`` per entry, joined per row ("" for a null or empty map)."""
    if column.offset:  # a slice: its keys and items would be the whole array's
        column = pa.concat_arrays([column])
    names, values = column.keys, column.items
    reserved = pc.or_kleene(
        pc.is_in(names, value_set=_RESERVED), pc.starts_with(names, QUIVER_PROPERTY_PREFIX)
    )
    bad = pc.or_kleene(
        pc.or_kleene(reserved, pc.match_substring_regex(names, _SEPARATORS)),
        pc.or_kleene(pc.is_null(values), pc.match_substring_regex(values, _SEPARATORS)),
    )
    if len(bad) and pc.any(pc.fill_null(bad, True)).as_py():
        entry = pc.index(pc.fill_null(bad, True), True).as_py()
        offsets = column.offsets.to_numpy()
        row = first_row + int(np.searchsorted(offsets, entry, side="right")) - 1
        raise InvalidArgumentError(
            f"properties: row {row} has property {names[entry].as_py()!r}: a name of RocketMQ's "
            "or Quiver's own, a null value, or a separator"
        )
    pairs = pc.binary_join_element_wise(names, values, NAME_VALUE_SEPARATOR)
    pairs = pc.binary_join_element_wise(pairs, _PAIR_END, "")
    per_row = pa.ListArray.from_arrays(column.offsets, pairs)
    joined = pc.binary_join(per_row, "")
    return pc.fill_null(joined, "")


def _refuse(values: pa.Array, bad: pa.Array, name: str, first_row: int, what: str) -> None:
    bad = pc.fill_null(bad, False)
    if pc.any(bad).as_py():
        row = first_row + pc.index(bad, True).as_py()
        raise InvalidArgumentError(f"{name}: row {row}'s value holds {what}")
