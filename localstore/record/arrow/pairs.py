"""The properties of many records, found in their properties texts by one compiled pass.

The rules are :func:`~localstore.record.properties.decode_properties`': the text is cut at
each ``\\x02`` (an empty piece after the last one does not count); a piece's name ends at its
first ``\\x01`` and its value runs to the piece's end; a piece with no ``\\x01``, an empty
name or an empty value does not count; of pairs of one name the last value counts, in the
first one's place. A text that starts with the store's own pair
(:data:`~localstore.record.properties.PROPERTY_PUT_RECORDS`) and holds a ``\\x02`` loses it.

Found values are given as places in the record bytes: an offset and a length, the length -1
where a record has no such property.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from localstore.record.arrow.buffers import checked_places
from localstore.record.arrow.jit import BYTES, INTS, OUT_INTS, TABLE, compiled, tuple_of, types
from localstore.record.properties import PUT_RECORDS_PAIR_START

__all__ = ["Pairs", "every_pair", "values_named"]

_NAME_END = 0x01
_PAIR_END = 0x02
_PUT_MARK = np.frombuffer(PUT_RECORDS_PAIR_START.encode(), dtype=np.uint8)  # read only


def values_named(
    raw: npt.NDArray[np.uint8],
    text_at: npt.NDArray[np.int64],
    text_length: npt.NDArray[np.int64],
    names: list[str],
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    """(value offsets, value lengths), each of shape (len(names), records): where each
    record's value of each of ``names`` lies (length -1: the record has none)."""
    packed = [np.frombuffer(name.encode(), dtype=np.uint8) for name in names]
    name_bytes = np.concatenate(packed) if packed else np.zeros(0, np.uint8)
    name_ends = np.cumsum([len(name) for name in packed], dtype=np.int64)
    value_at, value_length = _find_values(
        raw, *checked_places(raw, text_at, text_length), name_bytes, name_ends, _PUT_MARK
    )
    return value_at, value_length


Pairs = tuple[
    npt.NDArray[np.int64],  # per record, its first pair's index (one more: the end)
    npt.NDArray[np.int64],  # name offset, a row per pair
    npt.NDArray[np.int64],  # name length
    npt.NDArray[np.int64],  # value offset
    npt.NDArray[np.int64],  # value length
]


def every_pair(
    raw: npt.NDArray[np.uint8],
    text_at: npt.NDArray[np.int64],
    text_length: npt.NDArray[np.int64],
) -> Pairs:
    """Every pair that counts, in the order of a dict the text decodes to: record after
    record, each name once."""
    pairs: Pairs = _every_pair(raw, *checked_places(raw, text_at, text_length), _PUT_MARK)
    return pairs


@compiled(types.int64(BYTES, types.int64, types.int64, BYTES))
def _first_pair_at(
    raw: npt.NDArray[np.uint8], at: int, end: int, put_mark: npt.NDArray[np.uint8]
) -> int:  # pragma: no cover - compiled
    """Where the text at ``at`` .. ``end`` has its first pair that may count: past the
    store's own pair when the text starts with it and holds a ``\\x02``."""
    if end - at < len(put_mark):
        return at
    for index in range(len(put_mark)):
        if raw[at + index] != put_mark[index]:
            return at
    for cursor in range(at + len(put_mark), end):
        if raw[cursor] == _PAIR_END:
            return cursor + 1
    return at


@compiled(tuple_of(types.int64, types.int64)(BYTES, types.int64, types.int64))
def _piece(raw: npt.NDArray[np.uint8], at: int, end: int) -> tuple[int, int]:  # pragma: no cover
    """(the end of the piece starting at ``at``, its first ``\\x01`` or -1)."""
    name_end = -1
    cursor = at
    while cursor < end and raw[cursor] != _PAIR_END:
        if name_end < 0 and raw[cursor] == _NAME_END:
            name_end = cursor
        cursor += 1
    return cursor, name_end


@compiled(types.boolean(BYTES, types.int64, BYTES, types.int64, types.int64))
def _same_bytes(
    raw: npt.NDArray[np.uint8], at: int, other: npt.NDArray[np.uint8], other_at: int, length: int
) -> bool:  # pragma: no cover - compiled
    for index in range(length):  # noqa: SIM110 - compiled: a loop, no generator
        if raw[at + index] != other[other_at + index]:
            return False
    return True


@compiled(tuple_of(TABLE, TABLE)(BYTES, INTS, INTS, BYTES, INTS, BYTES))
def _find_values(
    raw: npt.NDArray[np.uint8],
    text_at: npt.NDArray[np.int64],
    text_length: npt.NDArray[np.int64],
    name_bytes: npt.NDArray[np.uint8],
    name_ends: npt.NDArray[np.int64],
    put_mark: npt.NDArray[np.uint8],
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:  # pragma: no cover - compiled
    names = len(name_ends)
    count = len(text_at)
    value_at = np.zeros((names, count), dtype=np.int64)
    value_length = np.full((names, count), -1, dtype=np.int64)
    for record in range(count):
        end = text_at[record] + text_length[record]
        at = _first_pair_at(raw, text_at[record], end, put_mark)
        while at < end:
            piece_end, name_end = _piece(raw, at, end)
            if at < name_end < piece_end - 1:  # a name, \x01 and a value
                for name in range(names):
                    name_at = name_ends[name - 1] if name else 0
                    if name_end - at == name_ends[name] - name_at and _same_bytes(
                        raw, at, name_bytes, name_at, name_end - at
                    ):
                        value_at[name, record] = name_end + 1
                        value_length[name, record] = piece_end - name_end - 1
            at = piece_end + 1
    return value_at, value_length


@compiled(tuple_of(OUT_INTS, OUT_INTS, OUT_INTS, OUT_INTS, OUT_INTS)(BYTES, INTS, INTS, BYTES))
def _every_pair(
    raw: npt.NDArray[np.uint8],
    text_at: npt.NDArray[np.int64],
    text_length: npt.NDArray[np.int64],
    put_mark: npt.NDArray[np.uint8],
) -> tuple[
    npt.NDArray[np.int64],
    npt.NDArray[np.int64],
    npt.NDArray[np.int64],
    npt.NDArray[np.int64],
    npt.NDArray[np.int64],
]:  # pragma: no cover - compiled
    count = len(text_at)
    room = 0
    for record in range(count):  # a pair takes 3 bytes at least: a bound on their number
        room += text_length[record] // 3 + 1
    first = np.zeros(count + 1, dtype=np.int64)
    name_at = np.empty(room, dtype=np.int64)
    name_length = np.empty(room, dtype=np.int64)
    value_at = np.empty(room, dtype=np.int64)
    value_length = np.empty(room, dtype=np.int64)
    pairs = 0
    for record in range(count):
        first[record] = pairs
        end = text_at[record] + text_length[record]
        at = _first_pair_at(raw, text_at[record], end, put_mark)
        while at < end:
            piece_end, name_end = _piece(raw, at, end)
            if at < name_end < piece_end - 1:
                length = name_end - at
                seen = first[record]
                while seen < pairs and not (
                    name_length[seen] == length and _same_bytes(raw, at, raw, name_at[seen], length)
                ):
                    seen += 1
                if seen == pairs:  # a new name
                    name_at[pairs], name_length[pairs] = at, length
                    pairs += 1
                value_at[seen] = name_end + 1
                value_length[seen] = piece_end - name_end - 1
            at = piece_end + 1
    first[count] = pairs
    return first, name_at[:pairs], name_length[:pairs], value_at[:pairs], value_length[:pairs]
