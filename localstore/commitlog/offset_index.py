"""Sparse offset index of the commitlog: record number -> byte position (Kafka's OffsetIndex).

One file per commitlog segment, ``offsetindex/{20-digit segment start}.index``. Entries,
big-endian, 8 bytes each::

    off  size  field
      0     4  relative message number: how many records precede this one in the segment
      4     4  byte position of the record in the segment

Both fields are unsigned, so segments of up to 4 GiB are indexed. As in Kafka the segment's
first record (number 0, position 0) is implicit and never stored. Rule (the put path and a
rebuild apply the same one): after an entry at position ``p`` (0 at first) the next one is due
at ``p + interval`` and goes to the first record that starts at or after it. So both fields
strictly increase, every entry is the start of a record (never the blank record that ends a
segment), neighbouring indexed boundaries are at most ``interval`` + one record apart, and a
file holds at most ``segment_size // interval`` entries.

Interval: 64 KiB by default. A boundary lookup scans at most one interval of record headers
(about 650 at 100-byte records, well under a millisecond); the index of a 1 GiB segment is
16,384 entries, 128 KiB (0.012 % of the log). Kafka's 4 KiB would make it 2 MiB per GiB for
split points that need megabyte, not kilobyte, precision.

Files: the newest is mapped and preallocated to ``segment_size // interval + 1`` entries, and
trimmed to its entries when the log rolls to the next segment and on close (see
:class:`~localstore.queue.time_index.SparseIndexFile`). Older files are read lazily, on first use,
so opening a store with a long log costs nothing per old segment. When a new file cannot be
created the index stops growing (``error`` says why) instead of failing the put; the next load
completes it.

Validation (derived files, rebuilt rather than trusted): a file whose length is not a multiple
of 8, whose entries do not strictly increase (after the zero tail a crash leaves in an
untrimmed file), or whose first or last entry does not name a record (valid magic, its
PHYSICALOFFSET field equal to the position) is rebuilt by scanning the segment's records (size
field + magic code; the blank record or the end of the written data ends a segment). Entries
past the log's end (cut by recovery) are dropped, and every file is completed by scanning from
its last entry, which also repairs a file truncated by whole entries.

The put path calls :meth:`CommitLogOffsetIndex.append_batch` with a batch's record offsets: one
comparison when no entry is due, else one bisect per entry. The index counts records, so it
must see every batch in order after ``load``; a batch that does not continue the last one
leaves its segment's numbering unknown: that segment gets no more entries until the next
``load`` completes it by scanning (the next segment is indexed normally). The store's single put
notes its one record without the call when no entry is due: a record that starts at
``noted_end`` below ``next_due`` adds one to ``records`` and moves ``noted_end`` to its end,
which is what :meth:`CommitLogOffsetIndex.append_batch` does then.

Threads: as :mod:`localstore.queue.time_index` (one writer under the store's put lock; lookups from
any thread, but not concurrently with load, rebuild or close).
"""

from __future__ import annotations

import os
import struct
import threading
from bisect import bisect_left
from collections.abc import Sequence
from pathlib import Path

from localstore.commitlog.log import CommitLog
from localstore.files.mapped_file import segment_name
from localstore.queue.time_index import (
    IndexBuffer,
    SparseIndexFile,
    read_index_file,
    stored_entries,
)
from localstore.record.frame import head_problem
from localstore.record.layout import LONG, PHYSICAL_OFFSET_AT, SIZE_AND_MAGIC
from quiver_errors import InvalidArgumentError

DEFAULT_INTERVAL_BYTES = 64 * 1024
ENTRY = struct.Struct(">II")
ENTRY_SIZE = ENTRY.size
FILE_SUFFIX = ".index"
DIRECTORY_NAME = "offsetindex"
_POSITION = struct.Struct(">I")
_UINT32_LIMIT = 1 << 32
_NO_UPPER = 1 << 62

Buffer = bytes | memoryview  # a commitlog segment's mapped bytes


class _OffsetSegment:
    __slots__ = ("file", "start")

    def __init__(self, start: int, file: SparseIndexFile | None):
        self.start = start
        self.file = file  # None: not read yet (loaded on first use)


class CommitLogOffsetIndex:
    """The offset index of the whole commitlog: one :class:`SparseIndexFile` per segment."""

    def __init__(
        self,
        directory: Path,
        commitlog: CommitLog,
        interval_bytes: int = DEFAULT_INTERVAL_BYTES,
    ):
        if interval_bytes < 1:
            raise InvalidArgumentError(f"interval_bytes must be positive, got {interval_bytes}")
        if commitlog.segment_size > _UINT32_LIMIT:
            raise InvalidArgumentError(
                f"segments of {commitlog.segment_size} bytes need 4-byte positions"
            )
        self.directory = directory
        self.commitlog = commitlog
        self.interval = interval_bytes
        self.segment_size = commitlog.segment_size
        self.capacity = commitlog.segment_size // interval_bytes + 1
        self._segments: dict[int, _OffsetSegment] = {}
        self._build_lock = threading.Lock()
        self._active: SparseIndexFile | None = None
        self._segment_start = 0
        self._segment_end = 0  # 0: no active segment yet
        # Read and moved by the single put too (see the module docstring):
        self.records = 0  # records of the active segment seen so far
        self.next_due = 0  # commitlog offset from which the next entry is due
        self.noted_end = 0  # end of the last batch seen
        self._lost = False  # the active segment's record numbers are unknown
        self.error: OSError | None = None  # why indexing stopped (see _give_up)

    @classmethod
    def open(
        cls, root: Path, commitlog: CommitLog, interval_bytes: int = DEFAULT_INTERVAL_BYTES
    ) -> CommitLogOffsetIndex:
        """The loaded offset index of store ``root``."""
        index = cls(root / DIRECTORY_NAME, commitlog, interval_bytes)
        index.load()
        return index

    # -- put path --------------------------------------------------------------------------
    def append_batch(self, phys_offsets: Sequence[int], end_offset: int) -> None:
        """Note a batch's records (``EncodedBatch.phys_offsets``, ``end_offset``)."""
        if phys_offsets and (
            phys_offsets[0] != self.noted_end or phys_offsets[-1] >= self.next_due
        ):
            self._append_due(phys_offsets)
        else:
            self.records += len(phys_offsets)
        self.noted_end = end_offset

    def _append_due(self, offsets: Sequence[int]) -> None:
        size = self.segment_size
        first = offsets[0]
        if first < self._segment_start:
            return  # older than what the index holds: nothing to add
        if first < self._segment_end and first != self.noted_end:
            self._lose_segment()  # a batch was missed: numbering in this segment unknown
        i, count = 0, len(offsets)
        while i < count:
            phys = offsets[i]
            if phys >= self._segment_end:
                self._start_segment(phys - phys % size, lost=phys % size != 0)
            j = (
                bisect_left(offsets, self._segment_end, i)
                if offsets[-1] >= self._segment_end
                else count
            )
            if not self._lost:
                self._add_entries(offsets, i, j)
            self.records += j - i
            i = j

    def _add_entries(self, offsets: Sequence[int], i: int, j: int) -> None:
        """Entries for the records ``offsets[i:j]``, all in the active segment."""
        active = self._active
        assert active is not None
        first_number = self.records - i  # record number of offsets[k] is first_number + k
        start, interval = self._segment_start, self.interval
        k = bisect_left(offsets, self.next_due, i, j)
        while k < j:
            phys = offsets[k]
            active.append(ENTRY.pack(first_number + k, phys - start))
            self.next_due = min(phys + interval, self._segment_end)
            k = bisect_left(offsets, phys + interval, k + 1, j)

    def _start_segment(self, start: int, *, lost: bool) -> None:
        try:
            if self._active is not None:
                self._active.seal()
            file = SparseIndexFile(self._path(start), ENTRY_SIZE, b"", self.capacity)
        except OSError as exc:
            self._give_up(exc)
            return
        self._activate(start, file, records=0)
        if lost:
            self._lose_segment()

    def _give_up(self, error: OSError) -> None:
        """A file cannot be written (a full disk, say): stop indexing until the next load; the
        put path is not failed for a derived file."""
        self.error = error
        self._active = None
        self._lost = True
        self._segment_end = self.next_due = _NO_UPPER

    def _activate(self, start: int, file: SparseIndexFile, *, records: int) -> None:
        if self._active is not None:
            self._active.seal()
        self._segments = {**self._segments, start: _OffsetSegment(start, file)}
        self._active = file
        self._segment_start = start
        self._segment_end = start + self.segment_size
        self.records = records
        self._lost = False
        last_position = _position(file.buf, file.count - 1) if file.count else 0
        self.next_due = min(start + last_position + self.interval, self._segment_end)

    def _lose_segment(self) -> None:
        self._lost = True
        self.next_due = self._segment_end  # the fast path carries on until the next segment

    # -- lookups ---------------------------------------------------------------------------
    def record_boundary_at_or_after(self, phys_offset: int) -> int:
        """The first record start >= ``phys_offset``, clamped to the readable log
        [min offset, confirmed offset]; the confirmed offset when no record starts after."""
        low, high = self.commitlog.min_offset, self.commitlog.confirmed_offset
        if phys_offset <= low or high <= low:
            return low
        if phys_offset >= high:
            return high
        start = phys_offset - phys_offset % self.segment_size
        position = 0
        file = self._segment_file(start)
        if file is not None:
            buf, count = file.buf, file.count
            i = _last_at_or_before(buf, count, phys_offset - start)
            if i >= 0:
                position = _position(buf, i)
        located = self.commitlog.segment_view(start)
        if located is None:
            return min(start + self.segment_size, high)
        limit = min(self.segment_size, high - start)
        found = _record_at_or_after(located[0], start, position, phys_offset - start, limit)
        return start + found if found >= 0 else min(start + self.segment_size, high)

    def split_points(self, n: int) -> list[int]:
        """Cut the readable log [min offset, confirmed offset) into at most ``n`` ranges.

        Returns the boundaries ``b[0] = min offset < b[1] < ... < b[-1] = confirmed offset``;
        range k is [b[k], b[k+1]) and every b[k] but the last is the start of a record. Each
        inner boundary is the indexed record start nearest to an even cut, so ranges differ from
        even by at most about one interval; a log with fewer indexed starts than ``n`` gets
        fewer ranges. An empty log gives ``[min offset]`` (no range).
        """
        if n < 1:
            raise InvalidArgumentError(f"n must be positive, got {n}")
        low, high = self.commitlog.min_offset, self.commitlog.confirmed_offset
        if high <= low:
            return [low]
        points = [low]
        for k in range(1, n):
            boundary = self._nearest_indexed(low + (high - low) * k // n, high)
            if points[-1] < boundary < high:
                points.append(boundary)
        points.append(high)
        return points

    def entries(self, segment_start: int) -> list[tuple[int, int]]:
        """The stored entries (relative message number, position) of one segment."""
        file = self._segment_file(segment_start)
        return list(ENTRY.iter_unpack(file.data())) if file is not None else []

    def _nearest_indexed(self, target: int, high: int) -> int:
        """The indexed record start (an entry or a segment start) nearest to ``target``, the
        earlier one on a tie or when the later one lies at or past ``high`` (not readable)."""
        start = target - target % self.segment_size
        below, above = start, start + self.segment_size
        file = self._segment_file(start)
        if file is not None:
            buf, count = file.buf, file.count
            i = _last_at_or_before(buf, count, target - start)
            if i >= 0:
                below = start + _position(buf, i)
            if i + 1 < count:
                above = start + _position(buf, i + 1)
        if above >= high:
            return below
        return below if target - below <= above - target else above

    # -- load, rebuild, retention, close ---------------------------------------------------
    def load(self) -> None:
        """Take in the files of the commitlog's segments: the last one is validated, completed
        and mapped for the put path; older ones are validated on first use. Files of segments
        the log no longer has are deleted."""
        self.close()
        segments = list(self.commitlog.segments.segments)
        starts = {segment.start_offset for segment in segments}
        for name in self._existing_files():
            if int(name[: -len(FILE_SUFFIX)]) not in starts:
                (self.directory / name).unlink()
        self._segments = {s.start_offset: _OffsetSegment(s.start_offset, None) for s in segments}
        end = self.commitlog.confirmed_offset
        self.noted_end = end
        if segments:
            start = segments[-1].start_offset
            data, records = self._build(start, end)
            file = SparseIndexFile(self._path(start), ENTRY_SIZE, data, self.capacity)
            self._activate(start, file, records=records)

    def rebuild(self) -> None:
        """Delete every file and build the whole index again from the commitlog."""
        self.close()
        for name in self._existing_files():
            (self.directory / name).unlink()
        self.load()
        for start in list(self._segments):
            self._segment_file(start)

    def drop_before(self, phys_offset: int) -> None:
        """Delete the files of segments that end at or before ``phys_offset`` (retention),
        never the one the put path appends to."""
        gone = [
            s
            for s in self._segments.values()
            if s.start + self.segment_size <= phys_offset and s.start != self._segment_start
        ]
        if gone:
            self._segments = {k: s for k, s in self._segments.items() if s not in gone}
            for segment in gone:
                self._path(segment.start).unlink(missing_ok=True)

    def close(self) -> None:
        """Trim the file being written; forget everything (``load`` starts over)."""
        if self._active is not None:
            self._active.seal()
        self._active = None
        self._segments = {}
        self._segment_start = self._segment_end = self.records = self.next_due = 0
        self.noted_end = 0
        self._lost = False
        self.error = None

    # -- helpers ---------------------------------------------------------------------------
    def _path(self, start: int) -> Path:
        return self.directory / (segment_name(start) + FILE_SUFFIX)

    def _existing_files(self) -> list[str]:
        if not self.directory.is_dir():
            return []
        return [
            n
            for n in os.listdir(self.directory)
            if n.endswith(FILE_SUFFIX) and n[: -len(FILE_SUFFIX)].isdigit()
        ]

    def _segment_file(self, start: int) -> SparseIndexFile | None:
        """The file of the segment at ``start``, read, checked and completed on first use."""
        segment = self._segments.get(start)
        if segment is None:
            return None
        if segment.file is None:
            with self._build_lock:
                if segment.file is None:
                    data, _ = self._build(start, self.commitlog.confirmed_offset)
                    path = self._path(start)
                    if read_index_file(path) == data:
                        segment.file = SparseIndexFile(path, ENTRY_SIZE, data)
                    else:
                        segment.file = SparseIndexFile.write_sealed(path, ENTRY_SIZE, data)
        return segment.file

    def _build(self, start: int, end: int) -> tuple[bytes, int]:
        """(entries, records) of the segment at ``start`` from its stored file, checked and
        completed by scanning its records below commitlog offset ``end``."""
        located = self.commitlog.segment_view(start)
        if located is None:
            return b"", 0
        view = located[0]
        limit = max(0, min(self.segment_size, end - start))
        entries = self._valid_entries(read_index_file(self._path(start)), view, start, limit)
        number, position = entries[-1] if entries else (0, 0)
        due = position + self.interval if entries else self.interval
        while position + 8 <= limit:
            if not _is_record(view, start, position, limit):
                break
            if position >= due:
                entries.append((number, position))
                due = position + self.interval
            number += 1
            position += SIZE_AND_MAGIC.unpack_from(view, position)[0]
        return b"".join(ENTRY.pack(*entry) for entry in entries), number

    def _valid_entries(
        self, stored: bytes | None, view: Buffer, start: int, limit: int
    ) -> list[tuple[int, int]]:
        """The stored entries that can be kept; [] to scan the segment from its start."""
        raw = stored_entries(stored, ENTRY, self.capacity)
        if raw is None:
            return []
        entries: list[tuple[int, int]] = []
        previous_number = previous_position = 0
        for number, position in raw:
            if number <= previous_number or position <= previous_position:
                return []
            previous_number, previous_position = number, position
            if position < limit:
                entries.append((number, position))
        if entries and not all(
            _is_record(view, start, p, limit) for _, p in (entries[0], entries[-1])
        ):
            return []
        return entries


def stored_record_starts(root: Path, segment_start: int) -> list[int]:
    """The record positions the offset index file of one segment of store ``root`` names, read
    as they are, unchecked: split hints for a walk that verifies them (recovery's CRC scan
    runs before the index is loaded and repaired). Empty when there is no usable file."""
    try:
        stored = read_index_file(
            root / DIRECTORY_NAME / (segment_name(segment_start) + FILE_SUFFIX)
        )
    except OSError:  # unreadable: no hints, the walk is not split (the index is rebuilt later)
        return []
    if not stored or len(stored) % ENTRY_SIZE:
        return []
    return [position for _, position in ENTRY.iter_unpack(stored) if position]


def stored_split_points(root: Path, commitlog: CommitLog, n: int) -> list[int]:
    """As :meth:`CommitLogOffsetIndex.split_points`, for a log another process holds
    (:class:`~localstore.read_only.ReadOnlyStore`): the readable log [min offset, max offset)
    cut into at most ``n`` ranges at record starts, reading the stored index files as they lie
    and writing nothing. Each inner boundary is chosen as ``split_points`` chooses it, among
    the cut's segment's start, the next segment's start and the positions the segment's stored
    file names that hold a record of the log (a stale or missing file only makes the ranges
    less even)."""
    if n < 1:
        raise InvalidArgumentError(f"n must be positive, got {n}")
    low, high = commitlog.min_offset, commitlog.max_offset
    if high <= low:
        return [low]
    size = commitlog.segment_size
    starts: dict[int, list[int]] = {}
    points = [low]
    for k in range(1, n):
        target = low + (high - low) * k // n
        segment = target - target % size
        if segment not in starts:
            starts[segment] = _checked_starts(root, commitlog, segment, high)
        below = max(start for start in starts[segment] if start <= target)
        above = min((start for start in starts[segment] if start > target), default=segment + size)
        nearest = below if above >= high or target - below <= above - target else above
        if points[-1] < nearest < high:
            points.append(nearest)
    points.append(high)
    return points


def _checked_starts(root: Path, commitlog: CommitLog, segment_start: int, high: int) -> list[int]:
    """The log offsets of the record starts of one segment that its stored index file names
    and that hold a record below ``high``, the segment's start first."""
    located = commitlog.segment_view(segment_start)
    if located is None:
        return [segment_start]
    view = located[0]
    limit = max(0, min(commitlog.segment_size, high - segment_start))
    hints = stored_record_starts(root, segment_start)
    return [segment_start] + [
        segment_start + position
        for position in hints
        if _is_record(view, segment_start, position, limit)
    ]


def _is_record(view: Buffer, start: int, position: int, limit: int) -> bool:
    """Whether a record (not the blank one) of the segment at ``start`` begins at
    ``position`` and ends within ``limit``."""
    if position + PHYSICAL_OFFSET_AT + 8 > limit:
        return False
    size, magic = SIZE_AND_MAGIC.unpack_from(view, position)
    if head_problem(size, magic, limit - position) is not None:
        return False
    return bool(LONG.unpack_from(view, position + PHYSICAL_OFFSET_AT)[0] == start + position)


def _record_at_or_after(view: Buffer, start: int, position: int, target: int, limit: int) -> int:
    """Walk records from ``position`` (a record start) to the first one starting at or after
    ``target``; -1 when the segment's records end first."""
    while position < target:
        if not _is_record(view, start, position, limit):
            return -1
        position += SIZE_AND_MAGIC.unpack_from(view, position)[0]
    return position if _is_record(view, start, position, limit) else -1


def _position(buf: IndexBuffer, i: int) -> int:
    return int(_POSITION.unpack_from(buf, i * ENTRY_SIZE + 4)[0])


def _last_at_or_before(buf: IndexBuffer, count: int, position: int) -> int:
    """Index of the last of ``count`` entries at or before ``position``; -1: none."""
    lo, hi = -1, count
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if _position(buf, mid) <= position:
            lo = mid
        else:
            hi = mid
    return lo
