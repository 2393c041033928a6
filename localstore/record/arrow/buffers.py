"""Arrow arrays made from places in the record bytes: each value's bytes copied once, by
compiled loops, into the value buffer of a plain ``binary`` or ``string`` array (32-bit
offsets, as Spark reads them).

A place is an offset and a length into the bytes; a length of -1 makes a null. Every place
is checked to lie inside the bytes before a loop copies from it. Strings are checked to be
UTF-8 by Arrow's full validation (``pa.ArrowInvalid`` where one is not), unless the caller
knows them to be parts of a text already checked.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt
import pyarrow as pa

from localstore.record.arrow.jit import (
    BYTES,
    INT32S,
    INTS,
    OUT_BYTES,
    OUT_INTS,
    compiled,
    tuple_of,
    types,
)
from localstore.record.layout import PHYSICAL_OFFSET_AT, header_offsets
from quiver_errors import IllegalStateError

__all__ = ["OFFSET_MSG_ID_CHARS", "checked_places", "key_tokens", "offset_msg_ids", "values_at"]

_STORE_HOST_AT = header_offsets(0)["STOREHOSTADDRESS"]  # IPv4 born host
_MAX_VALUE_BYTES = (1 << 31) - 1  # 32-bit offsets
_LOOP_COPY_MAX = 64  # longer values are copied as slices
_KEY_SEPARATOR = ord(" ")
_HEX_DIGITS = np.frombuffer(b"0123456789ABCDEF", dtype=np.uint8)  # read only
OFFSET_MSG_ID_CHARS = 32
_ID_FIELDS_END = max(_STORE_HOST_AT, PHYSICAL_OFFSET_AT) + 8  # past both fields read


def values_at(
    raw: npt.NDArray[np.uint8],
    at: npt.NDArray[np.int64],
    length: npt.NDArray[np.int64],
    kind: pa.DataType,
    *,
    checked: bool = False,
) -> pa.Array:
    """The ``length[i]`` bytes at ``at[i]`` as a ``kind`` (binary or string) array, null where
    the length is -1. Raises ``pa.ArrowInvalid`` for a string that is not UTF-8, unless
    ``checked``: the caller knows the bytes are (parts of a text already checked, cut at
    ASCII bytes)."""
    count = len(at)
    at, length = checked_places(raw, at, length)
    present = length >= 0
    total = int(length[present].sum())
    if total > _MAX_VALUE_BYTES:
        raise IllegalStateError(f"{total} bytes of values: more than one Arrow array holds")
    offsets, data = _gather(raw, at, length, total)
    validity = None if present.all() else pa.py_buffer(np.packbits(present, bitorder="little"))
    array = pa.Array.from_buffers(
        kind, count, [validity, pa.py_buffer(offsets), pa.py_buffer(data)]
    )
    if kind == pa.string() and not checked:
        array.validate(full=True)  # ArrowInvalid where a value is not UTF-8
    return array


def offset_msg_ids(raw: npt.NDArray[np.uint8], starts: npt.NDArray[np.int64]) -> pa.Array:
    """Upper-case hex of the IPv4 store host (address and port) and PHYSICALOFFSET of the
    records at ``starts``: 32 characters each
    (:func:`~localstore.record.codec.make_offset_msg_id`)."""
    if OFFSET_MSG_ID_CHARS * len(starts) > _MAX_VALUE_BYTES:
        raise IllegalStateError(f"{len(starts)} ids: more than one Arrow array holds")
    if len(starts) and not (starts.min() >= 0 and starts.max() <= len(raw) - _ID_FIELDS_END):
        raise IllegalStateError("the columnar decoder made a place outside its bytes")
    data = _hex_ids(raw, np.ascontiguousarray(starts, np.int64), _HEX_DIGITS)
    offsets = np.arange(0, OFFSET_MSG_ID_CHARS * len(starts) + 1, OFFSET_MSG_ID_CHARS)
    return pa.Array.from_buffers(
        pa.string(),
        len(starts),
        [None, pa.py_buffer(offsets.astype(np.int32)), pa.py_buffer(data)],
    )


def key_tokens(
    raw: npt.NDArray[np.uint8], at: npt.NDArray[np.int64], length: npt.NDArray[np.int64]
) -> tuple[npt.NDArray[np.int32], npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    """The texts at ``at`` (length -1: none) split at spaces, empty tokens dropped: (list
    offsets, a text per record; token offsets; token lengths)."""
    found: tuple[npt.NDArray[np.int32], npt.NDArray[np.int64], npt.NDArray[np.int64]] = (
        _split_at_spaces(raw, *checked_places(raw, at, length))
    )
    return found


def checked_places(
    raw: npt.NDArray[np.uint8], at: npt.NDArray[np.int64], length: npt.NDArray[np.int64]
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    """``at`` and ``length`` as the compiled loops take them, each place (but a null's, length
    -1) checked to lie inside ``raw``: the loops themselves check nothing."""
    if len(at) != len(length):
        raise IllegalStateError(f"{len(at)} offsets for {len(length)} lengths")
    at, length = np.ascontiguousarray(at, np.int64), np.ascontiguousarray(length, np.int64)
    if not (((at >= 0) & (at + length <= len(raw))) | (length == -1)).all():
        raise IllegalStateError("the columnar decoder made a place outside its bytes")
    return at, length


@compiled(tuple_of(INT32S, OUT_BYTES)(BYTES, INTS, INTS, types.int64))
def _gather(
    raw: npt.NDArray[np.uint8],
    at: npt.NDArray[np.int64],
    length: npt.NDArray[np.int64],
    total: int,
) -> tuple[npt.NDArray[np.int32], npt.NDArray[np.uint8]]:  # pragma: no cover - compiled
    offsets = np.empty(len(at) + 1, dtype=np.int32)
    data = np.empty(total, dtype=np.uint8)
    written = 0
    for index in range(len(at)):
        offsets[index] = written
        start, size = at[index], max(length[index], 0)
        if size > _LOOP_COPY_MAX:
            data[written : written + size] = raw[start : start + size]
        else:  # a loop: for short values, faster than making two slices
            for octet in range(size):
                data[written + octet] = raw[start + octet]
        written += size
    offsets[len(at)] = written
    return offsets, data


@compiled(OUT_BYTES(BYTES, INTS, BYTES))
def _hex_ids(
    raw: npt.NDArray[np.uint8], starts: npt.NDArray[np.int64], digits: npt.NDArray[np.uint8]
) -> npt.NDArray[np.uint8]:  # pragma: no cover - compiled
    data = np.empty(OFFSET_MSG_ID_CHARS * len(starts), dtype=np.uint8)
    for record in range(len(starts)):
        out = OFFSET_MSG_ID_CHARS * record
        for field_at in (_STORE_HOST_AT, PHYSICAL_OFFSET_AT):
            for index in range(8):
                octet = raw[starts[record] + field_at + index]
                data[out] = digits[octet >> 4]
                data[out + 1] = digits[octet & 15]
                out += 2
    return data


@compiled(tuple_of(INT32S, OUT_INTS, OUT_INTS)(BYTES, INTS, INTS))
def _split_at_spaces(
    raw: npt.NDArray[np.uint8], at: npt.NDArray[np.int64], length: npt.NDArray[np.int64]
) -> tuple[npt.NDArray[np.int32], npt.NDArray[np.int64], npt.NDArray[np.int64]]:  # pragma: no cover
    room = 0
    for index in range(len(at)):
        room += max(length[index], 0) // 2 + 1  # a token and a space: 2 bytes at least
    lists = np.empty(len(at) + 1, dtype=np.int32)
    token_at = np.empty(room, dtype=np.int64)
    token_length = np.empty(room, dtype=np.int64)
    tokens = 0
    for index in range(len(at)):
        lists[index] = tokens
        start = at[index]
        end = start + max(length[index], 0)
        cursor = start
        while cursor <= end:
            if cursor == end or raw[cursor] == _KEY_SEPARATOR:
                if cursor > start:
                    token_at[tokens] = start
                    token_length[tokens] = cursor - start
                    tokens += 1
                start = cursor + 1
            cursor += 1
    lists[len(at)] = tokens
    return lists, token_at[:tokens], token_length[:tokens]
