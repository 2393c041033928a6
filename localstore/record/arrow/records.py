"""Where each record laid end to end lies and what its fixed fields hold: one compiled walk.

The walk follows TOTALSIZE from the first byte, record after record, and for each record of
the common shape (v1 or v2 magic, IPv4 hosts) reads its header and finds its three variable
fields, checking that they add up to TOTALSIZE. The answer is one table, a row per field
(the ``*_ROW`` constants) and a column per record:

    row             what
    START           the record's offset in the bytes
    QUEUE_ID ...    QUEUEID, QUEUEOFFSET, BORNTIMESTAMP, STORETIMESTAMP, RECONSUMETIMES
    BODY_AT/LENGTH  where its body lies (``_AT``: offset in the bytes; ``_LENGTH``: bytes)
    TOPIC_AT/LENGTH, PROPERTIES_AT/LENGTH alike
    COMMON          1 when the record is of the common shape and its fields add up, else 0

A record whose COMMON is 0 holds garbage in its other rows (but START): the general decoder
reads it. Every read is checked to lie inside the record first: compiled code has no bounds
checks of its own. The records are walked twice, once to count them (the table's size) and
once to find their bounds, which checks every size again; the fields are then read within
those bounds, no size read a third time. Bytes written in between never make a read astray
(an error where a size no longer fits, else the records as read).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import ParamSpec, TypeVar

import numpy as np
import numpy.typing as npt

from localstore.record.arrow.jit import BYTES, INTS, OUT_INTS, TABLE, compiled, tuple_of, types
from localstore.record.codec import RecordError, decode_record
from localstore.record.layout import (
    BODY_LENGTH_AT_V4,
    BORN_TIMESTAMP_AT,
    HEADER_V4_SIZE,
    MAGIC_AT,
    MAGIC_V1,
    MAGIC_V2,
    MIN_RECORD_SIZE,
    PROPERTIES_LENGTH_BYTES,
    QUEUE_ID_AT,
    QUEUE_OFFSET_AT,
    STORE_TIMESTAMP_AT,
    SYSFLAG_AT,
    SYSFLAG_HOSTS_V6,
    header_offsets,
)

__all__ = [
    "BODY_AT_ROW",
    "BODY_LENGTH_ROW",
    "BORN_TIMESTAMP_ROW",
    "COMMON_ROW",
    "PROPERTIES_AT_ROW",
    "PROPERTIES_LENGTH_ROW",
    "QUEUE_ID_ROW",
    "QUEUE_OFFSET_ROW",
    "RECONSUME_TIMES_ROW",
    "START_ROW",
    "STORE_TIMESTAMP_ROW",
    "TOPIC_AT_ROW",
    "TOPIC_LENGTH_ROW",
    "Bytes",
    "holding_no_views",
    "int_at",
    "long_at",
    "record_starts",
    "record_table",
]

(
    START_ROW,
    QUEUE_ID_ROW,
    QUEUE_OFFSET_ROW,
    BORN_TIMESTAMP_ROW,
    STORE_TIMESTAMP_ROW,
    RECONSUME_TIMES_ROW,
    BODY_AT_ROW,
    BODY_LENGTH_ROW,
    TOPIC_AT_ROW,
    TOPIC_LENGTH_ROW,
    PROPERTIES_AT_ROW,
    PROPERTIES_LENGTH_ROW,
    COMMON_ROW,
) = range(13)
_ROWS = 13  # the table's rows: the fields above
P = ParamSpec("P")
R = TypeVar("R")

Bytes = bytes | bytearray | memoryview | npt.NDArray[np.uint8]
"""Records laid end to end, in any buffer."""

_STORE_TIMESTAMP_AT = STORE_TIMESTAMP_AT[0]  # IPv4 born host
_RECONSUME_TIMES_AT = header_offsets(0)["RECONSUMETIMES"]


def holding_no_views(function: Callable[P, R]) -> Callable[P, R]:
    """``function`` raising its RecordError without the traceback it was raised with, whose
    frames hold numpy views of the caller's buffer: a caller closing that buffer (an mmap) as
    the error passes would otherwise get ``BufferError`` in its place."""

    @functools.wraps(function)
    def call(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return function(*args, **kwargs)
        except RecordError as exc:
            exc.__context__ = None  # an error it replaced, with its own traceback
            raise exc.with_traceback(None) from None

    return call


@holding_no_views
def record_table(raw: Bytes, count: int | None) -> npt.NDArray[np.int64]:
    """The table of the records in ``raw`` (the first ``count`` of them; None: every one).

    Raises :class:`~localstore.record.codec.RecordError` for bytes whose records do not chain
    by TOTALSIZE (naming the first fault in the bytes' order, as the general decoder does),
    or when ``raw`` holds fewer than ``count`` records; ``ValueError`` for a negative
    ``count``."""
    octets = read_only_bytes(raw)
    return _fill_table(octets, _record_bounds(octets, _records_in(octets, count)))


@holding_no_views
def record_starts(raw: Bytes, count: int | None) -> npt.NDArray[np.int64]:
    """The start offsets of the records in ``raw`` (the first ``count`` of them), by their
    TOTALSIZE chain; raises as :func:`record_table` does."""
    octets = read_only_bytes(raw)
    return _record_bounds(octets, _records_in(octets, count))[:-1]


def read_only_bytes(raw: Bytes) -> npt.NDArray[np.uint8]:
    """``raw`` as the one array type the compiled loops take: bytes, read only."""
    octets = np.frombuffer(raw, dtype=np.uint8)
    octets.flags.writeable = False
    return octets


def _records_in(octets: npt.NDArray[np.uint8], count: int | None) -> int:
    """How many records the walk finds (``count`` exactly when given), else raise."""
    if count is not None and count < 0:
        raise ValueError(f"count must be 0 or more, not {count}")
    limit = len(octets) if count is None else min(count, len(octets))  # a record has bytes
    found, stopped_at = _count_records(octets, limit)
    if stopped_at >= 0 or (count is not None and found < count):
        for start in _record_bounds(octets, found)[:-1].tolist():  # the first fault in order
            decode_record(octets.data, start, body=False)
        if stopped_at >= 0:
            _raise_at(octets, stopped_at)
        raise RecordError(f"the bytes hold {found} records, not the {count} expected")
    return int(found)


def _record_bounds(octets: npt.NDArray[np.uint8], count: int) -> npt.NDArray[np.int64]:
    """Where the first ``count`` records (counted by the first walk) start, and where the
    last ends: ``count + 1`` offsets. Raises when a size no longer fits (bytes written since
    the count)."""
    bounds: npt.NDArray[np.int64] = _bounds(octets, count)
    if bounds[-1] < 0:
        raise RecordError("the records changed while they were read")
    return bounds


@compiled(types.int64(BYTES, types.int64))
def int_at(raw: npt.NDArray[np.uint8], at: int) -> int:  # pragma: no cover - compiled
    """The big-endian signed 32-bit int at ``at`` (4 bytes there, checked by the caller)."""
    value = (
        (np.int64(raw[at]) << 24)
        | (np.int64(raw[at + 1]) << 16)
        | (np.int64(raw[at + 2]) << 8)
        | np.int64(raw[at + 3])
    )
    return int(value - (np.int64(1) << 32) if value >= (np.int64(1) << 31) else value)


@compiled(types.int64(BYTES, types.int64))
def long_at(raw: npt.NDArray[np.uint8], at: int) -> int:  # pragma: no cover - compiled
    """The big-endian signed 64-bit int at ``at`` (8 bytes there, checked by the caller)."""
    value = np.uint64(0)
    for index in range(8):
        value = (value << np.uint64(8)) | np.uint64(raw[at + index])
    return int(np.int64(value))


@compiled(tuple_of(types.int64, types.int64)(BYTES, types.int64))
def _count_records(raw: npt.NDArray[np.uint8], limit: int) -> tuple[int, int]:  # pragma: no cover
    """(records found, the offset of a record whose TOTALSIZE does not fit, else -1)."""
    end = len(raw)
    found, at = 0, 0
    while at < end and found < limit:
        total = int_at(raw, at) if at + 4 <= end else 0
        if total < MIN_RECORD_SIZE or total > end - at:
            return found, at
        found += 1
        at += total
    return found, -1


@compiled(types.int64(BYTES, types.int64, types.int64, TABLE, types.int64))
def _read_common_shape(
    raw: npt.NDArray[np.uint8], at: int, total: int, table: npt.NDArray[np.int64], row: int
) -> int:  # pragma: no cover - compiled
    """Fill ``row`` of ``table`` from the record of ``total`` bytes at ``at``: 1 when it is of
    the common shape and its fields add up, else 0. TOTALSIZE is at least MIN_RECORD_SIZE."""
    magic = int_at(raw, at + MAGIC_AT)
    if magic not in (MAGIC_V1, MAGIC_V2):
        return 0
    if int_at(raw, at + SYSFLAG_AT) & SYSFLAG_HOSTS_V6:
        return 0
    end = at + total
    body_length = int_at(raw, at + BODY_LENGTH_AT_V4)
    topic_field = at + HEADER_V4_SIZE + body_length
    topic_length_bytes = 1 if magic == MAGIC_V1 else 2
    if body_length < 0 or topic_field + topic_length_bytes > end:
        return 0
    if topic_length_bytes == 1:
        topic_length = np.int64(raw[topic_field])
    else:
        topic_length = (np.int64(raw[topic_field]) << 8) | np.int64(raw[topic_field + 1])
        if topic_length >= 1 << 15:
            return 0  # a negative short
    properties_field = topic_field + topic_length_bytes + topic_length
    if properties_field + PROPERTIES_LENGTH_BYTES > end:
        return 0
    properties_length = (np.int64(raw[properties_field]) << 8) | np.int64(raw[properties_field + 1])
    if properties_length >= 1 << 15:
        return 0
    properties_at = properties_field + PROPERTIES_LENGTH_BYTES
    if properties_at + properties_length != end:
        return 0
    table[QUEUE_ID_ROW, row] = int_at(raw, at + QUEUE_ID_AT)
    table[QUEUE_OFFSET_ROW, row] = long_at(raw, at + QUEUE_OFFSET_AT)
    table[BORN_TIMESTAMP_ROW, row] = long_at(raw, at + BORN_TIMESTAMP_AT)
    table[STORE_TIMESTAMP_ROW, row] = long_at(raw, at + _STORE_TIMESTAMP_AT)
    table[RECONSUME_TIMES_ROW, row] = int_at(raw, at + _RECONSUME_TIMES_AT)
    table[BODY_AT_ROW, row] = at + HEADER_V4_SIZE
    table[BODY_LENGTH_ROW, row] = body_length
    table[TOPIC_AT_ROW, row] = topic_field + topic_length_bytes
    table[TOPIC_LENGTH_ROW, row] = topic_length
    table[PROPERTIES_AT_ROW, row] = properties_at
    table[PROPERTIES_LENGTH_ROW, row] = properties_length
    return 1


@compiled(OUT_INTS(BYTES, types.int64))
def _bounds(raw: npt.NDArray[np.uint8], count: int) -> npt.NDArray[np.int64]:  # pragma: no cover
    """The second walk: the first ``count`` starts and the last record's end, each size
    checked again; the end -1 when a size no longer fits (the bytes changed since)."""
    bounds = np.empty(count + 1, dtype=np.int64)
    end = len(raw)
    at = 0
    for row in range(count):
        total = int_at(raw, at) if at + 4 <= end else 0
        if total < MIN_RECORD_SIZE or total > end - at:
            bounds[count] = -1
            return bounds
        bounds[row] = at
        at += total
    bounds[count] = at
    return bounds


@compiled(TABLE(BYTES, INTS))
def _fill_table(  # pragma: no cover - compiled
    raw: npt.NDArray[np.uint8], bounds: npt.NDArray[np.int64]
) -> npt.NDArray[np.int64]:
    """The table of the records between ``bounds`` (each at least MIN_RECORD_SIZE long and
    inside ``raw``, as the walk found them: no size is read again)."""
    count = len(bounds) - 1
    table = np.zeros((_ROWS, count), dtype=np.int64)
    for row in range(count):
        at = bounds[row]
        table[START_ROW, row] = at
        table[COMMON_ROW, row] = _read_common_shape(raw, at, bounds[row + 1] - at, table, row)
    return table


def _raise_at(octets: npt.NDArray[np.uint8], at: int) -> None:
    """Raise decode_record's error for the record at ``at`` (or a plain one should it decode:
    its size did not fit what the bytes hold)."""
    decode_record(octets.data, at, body=False)
    raise RecordError(f"record at buffer position {at}: its TOTALSIZE runs past the bytes")
