"""The start offsets of stored records laid end to end, by their TOTALSIZE chain.

Two ways, one answer. First the magic: every record of the common shape holds MAGICCODE (v1
or v2) 4 bytes after its start, so the positions where one lies are the candidates, found in
a few numpy passes over the bytes; they are the starts when they chain exactly (the first at
0, each one's TOTALSIZE reaching the next, the last the end), which is what the walk would
find. Else (a body holding a magic's bytes, a blank or damaged record, another magic) the
walk itself decides, record after record. The bytes are searched a slice at a time, and bodies
dense in the magic's first byte send the search to the walk at once: the search's arrays stay
a fraction of the slice, whatever the bodies hold.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from localstore.record.codec import RecordError, decode_record
from localstore.record.layout import INT, MAGIC_AT, MAGIC_V1, MAGIC_V2, MIN_RECORD_SIZE

__all__ = ["record_starts"]

_INT_AT = INT.unpack_from
_RUN_PROBE_MIN = 16
_RUN_PROBE_MAX = 1 << 16
_MAGIC_FIRST_BYTE = (MAGIC_V1 >> 24) & 0xFF  # 0xDA, of both magics
_SCAN_BYTES = 1 << 18  # record positions searched for a magic at a time
# More bytes 0xDA than one in this many at magic places: bodies full of them, not records.
_MAX_FIRST_BYTE_SHARE = 16


def record_starts(view: bytes | memoryview, count: int | None) -> npt.NDArray[np.int64]:
    """The start offsets of the records in ``view`` (the first ``count`` of them), by their
    TOTALSIZE chain; a size that cannot be a record's is decode_record's to explain."""
    by_magic = _starts_by_magic(view, count)
    return by_magic if by_magic is not None else _walk(view, count)


def _starts_by_magic(view: bytes | memoryview, count: int | None) -> npt.NDArray[np.int64] | None:
    """The starts when the positions holding a magic at MAGICCODE's place chain exactly as
    the walk would go (see the module docstring); None when they do not."""
    end = len(view)
    if end < MIN_RECORD_SIZE or count == 0:
        return None
    ints = np.ndarray((end - 3,), dtype=">i4", buffer=view, strides=(1,))
    starts = _magic_positions(view, ints, count)
    if starts is None:
        return None
    if count is not None:
        starts = starts[:count]
        if len(starts) < count:
            return None
    if not len(starts) or starts[0] != 0:
        return None
    ends = starts + ints[starts]
    last_end = int(ends[-1])
    if (
        (ends[:-1] != starts[1:]).any()
        or (ends - starts < MIN_RECORD_SIZE).any()
        or last_end > end
        or (count is None and last_end != end)
    ):
        return None
    found: npt.NDArray[np.int64] = starts.astype(np.int64)
    return found


def _magic_positions(
    view: bytes | memoryview, ints: npt.NDArray[np.int32], count: int | None
) -> npt.NDArray[np.intp] | None:
    """The positions p, in order, where MAGIC_V1 or MAGIC_V2 lies at p + MAGIC_AT (the first
    ``count`` or more of them when given), searched a slice at a time; None when a slice holds
    more candidates than records could start there (bodies dense in 0xDA or in magics)."""
    octets = np.frombuffer(view, dtype=np.uint8)
    positions = len(view) - 3 - MAGIC_AT  # p such that an int can be read at p + MAGIC_AT
    found: list[npt.NDArray[np.intp]] = []
    total = 0
    for first in range(0, positions, _SCAN_BYTES):
        span = min(_SCAN_BYTES, positions - first)
        window = octets[first + MAGIC_AT : first + MAGIC_AT + span]
        hits = np.flatnonzero(window == _MAGIC_FIRST_BYTE)
        if len(hits) > span // _MAX_FIRST_BYTE_SHARE + 1:
            return None
        hits += first
        magic = ints[hits + MAGIC_AT]
        hits = hits[(magic == MAGIC_V1) | (magic == MAGIC_V2)]
        if len(hits) > span // MIN_RECORD_SIZE + 1:  # closer than chained records can be
            return None
        found.append(hits)
        total += len(hits)
        if count is not None and total >= count:
            break
    return np.concatenate(found) if found else np.empty(0, dtype=np.intp)


def _walk(view: bytes | memoryview, count: int | None) -> npt.NDArray[np.int64]:
    """The starts, following TOTALSIZE from record to record.

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
