"""The mark of a put of several records: how many records it holds, on its first record.

A put is stored all or nothing, also across a kill. Its records are published in log order
(:meth:`~localstore.files.mapped_file.MappedFile.append_publishing_last`,
:meth:`~localstore.files.mapped_file.MappedFile.pwrite`), so a kill while they are written leaves
the first k of them, each whole, as the log's last records, never acknowledged. The mark lets
recovery tell such a prefix from a whole put and cut it (:mod:`localstore.recovery.unfinished_put`).

The mark is the first pair of the first record's properties text
(:mod:`localstore.record.properties`)::

    __QUIVER_PUT_RECORDS \\x01 n \\x02        n: the put's record count, decimal ASCII, n > 1

The n - 1 records that follow the marked one in the log (a blank record aside: a put may go on
in the next segment) are the rest of its put. A put of one record carries no mark. RocketMQ's
readers take it for one more property of the first message; the store's readers never see it
(:func:`~localstore.record.properties.decode_properties` drops it), and a put that names the
property itself is refused, so every mark in a log is one the store wrote.
"""

from __future__ import annotations

from localstore.record.codec import properties_span
from localstore.record.properties import (
    PROPERTY_PUT_RECORDS,
    PROPERTY_SEPARATOR,
    PUT_RECORDS_PAIR_START,
)

__all__ = ["MARK_START", "PROPERTY_PUT_RECORDS", "announced_records", "mark_pair", "marked_at"]

MARK_START = PUT_RECORDS_PAIR_START.encode()
MARK_FIRST_BYTE = MARK_START[0]
_MARK_BYTES = len(MARK_START)
_SEPARATOR = PROPERTY_SEPARATOR.encode()
_MAX_DIGITS = 10


def mark_pair(count: int) -> bytes:
    """The pair a put of ``count`` records puts first in its first record's properties."""
    return b"%s%d%s" % (MARK_START, count, _SEPARATOR)


def marked_at(buf: bytes | memoryview, props_at: int, props_end: int) -> bool:
    """Whether the properties text at ``[props_at, props_end)`` of ``buf`` starts with a mark
    (a byte compared first: the walk over every record asks)."""
    return (
        props_end - props_at > _MARK_BYTES
        and buf[props_at] == MARK_FIRST_BYTE
        and buf[props_at : props_at + _MARK_BYTES] == MARK_START
    )


def announced_records(buf: bytes | memoryview, pos: int) -> int:
    """The record count the mark of the (valid) record at ``pos`` announces; 0 when it holds
    no well-formed mark."""
    props_at, props_end = properties_span(buf, pos)
    if not marked_at(buf, props_at, props_end):
        return 0
    start = props_at + _MARK_BYTES
    digits = bytes(buf[start : min(props_end, start + _MAX_DIGITS + 1)])
    value, separator, _ = digits.partition(_SEPARATOR)
    return int(value) if separator and value.isdigit() else 0
