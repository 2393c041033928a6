"""Sparse time index of one topic-queue: store time -> queue offset (Kafka's TimeIndex).

One file per consume-queue segment, ``timeindex/{topic}/{queueId}/{20-digit base}.timeindex``,
``base`` being the queue offset of the segment's first unit (the consume-queue file's start byte
offset / 20). The directory sits beside ``consumequeue/``, never inside it: RocketMQ's loader
refuses files it does not expect there. Entries, big-endian, 12 bytes each::

    off  size  field
      0     8  store timestamp (ms): the STORETIMESTAMP of the record of the unit named below
      8     4  queue offset of that unit minus ``base``

Rule (the put path and a rebuild apply the same one): the segment's first unit always gets an
entry; after an entry at offset ``o`` the next one is *due* at ``o + interval``, and goes to the
first unit at or after that point whose store time is greater than the last entry's (Kafka's
``maybeAppend``: never an equal or smaller timestamp). So within a file timestamps and offsets
strictly increase, entries are at least ``interval`` units apart, and a file holds at most
``ceil(units_per_file / interval)`` entries.

Interval: 1024 units by default. A lookup ends with a binary search between two neighbouring
entries, about log2(1024) = 10 commitlog reads when store times advance; the index of a full
RocketMQ-sized segment (300,000 units) is 293 entries, 3.5 KB: one page. Writing it costs the
put path one comparison per batch (an entry is due once per 1024 units).

Files: the newest is preallocated (blocks allocated, so a full disk is an OSError at creation)
to ``ceil(units_per_file / interval) + 1`` entries and written with ``pwrite``, never mapped (a
mapping per queue would hold a descriptor per queue: :class:`SparseIndexFile`); when the queue
moves on to the next segment, and on close, it is trimmed to its entries, which are then kept as
bytes. A file left untrimmed by a crash ends in zeros, which load ignores. When a new file cannot be
created the index stops growing (``error`` says why) instead of failing the put; lookups stay
exact, and the next load completes the index.

Load (derived files, rebuilt rather than trusted): a file is rebuilt from the consume queue and
the store timestamps in the commitlog when it is missing, its length is not a multiple of 12,
its entries do not strictly increase or fall outside the segment, its first entry is not the
segment's first unit, or the timestamp of its first or last entry differs from the record's.
Entries past the queue's end (cut by recovery) are dropped, and every file is then completed
from its last entry to the segment's end (units dispatched by recovery, or a truncated file).

Lookup (:func:`offset_for_timestamp`, RocketMQ 5's ``getOffsetInQueueByTime``): the first queue
offset whose store time is >= ``ts``, within [min offset, max offset]. The index gives a bracket:
the last entry with timestamp < ts and the entry after it (the next file's first entry, or the
queue's end); a binary search between them reads store times from the commitlog. Store times of
one queue are non-decreasing unless the broker's clock stepped back. The answer ``r`` always
satisfies store_time(r - 1) < ts <= store_time(r) (outside the queue, -inf and +inf): with
non-decreasing times that is exactly the first such offset; after a clock step it is one such
crossing, as RocketMQ's binary search gives. A unit whose record retention already deleted
counts as older than any ``ts``.

Threads: ``append``, ``load``, ``rebuild``, ``drop_before`` and ``close`` run on one thread at a
time (the store's put lock); lookups may run concurrently with them, except with load, rebuild
and close. A lookup reads the file list once and each file's ``buf``/``count`` once; the put
path only adds entries, rebinds lists and swaps a sealed file's mapping for a bytes copy.
"""

from __future__ import annotations

import mmap
import os
import struct
from bisect import bisect_left
from operator import attrgetter
from pathlib import Path

from localstore.commitlog.log import CommitLog
from localstore.files.mapped_file import segment_name
from localstore.queue.consume_queue import UNIT_SIZE, ConsumeQueue
from localstore.reader import visible_max_offset
from localstore.record.codec import read_store_timestamp
from quiver_errors import InvalidArgumentError

DEFAULT_INTERVAL_UNITS = 1024
ENTRY = struct.Struct(">qi")
ENTRY_SIZE = ENTRY.size
FILE_SUFFIX = ".timeindex"
DIRECTORY_NAME = "timeindex"
_TIMESTAMP = struct.Struct(">q")
_PHYS = _TIMESTAMP  # a unit starts with the record's 8-byte commitlog offset
_RELATIVE = struct.Struct(">i")
_NO_UPPER = 1 << 62
_INT32_MAX = 0x7FFFFFFF

IndexBuffer = bytes | bytearray | mmap.mmap  # a SparseIndexFile's entries (see the class)


def time_index_directory(root: Path, topic: str, queue_id: int) -> Path:
    """``{root}/timeindex/{topic}/{queueId}``: the files of one queue's time index."""
    return root / DIRECTORY_NAME / topic / str(queue_id)


class SparseIndexFile:
    """One file of fixed-width entries: preallocated while written, trimmed after.

    ``buf`` holds ``count`` valid entries. While written, ``buf`` is the file's mapping
    (``mapped``: the commitlog offset index, one file per store, appended to often) or a
    bytearray of the same fixed size whose entries are also ``pwrite``-n to the file, opened
    per entry (the time indexes: one file per queue, so a mapping each would hold a descriptor
    each (CPython's mmap keeps a duplicate) and exhaust ``ulimit -n`` with many queues; an
    entry is due once per ``interval`` units, so the open costs little). Sealing first swaps
    ``buf`` for a bytes copy, then trims the file and drops the mapping or array (CPython
    unmaps it once no reader holds it), so a reader that took the buffer just before only
    reads entries that stay in the file.
    """

    __slots__ = ("_map", "_writing", "buf", "capacity", "count", "entry_size", "path")

    def __init__(
        self,
        path: Path,
        entry_size: int,
        data: bytes,
        capacity: int = 0,
        *,
        mapped: bool = True,
    ):
        """``data``: whole entries. ``capacity`` > 0: write them to the file, preallocated to
        that many entries, for appending (``mapped``: through a mapping); 0: a sealed file
        whose content is ``data``."""
        self.path = path
        self.entry_size = entry_size
        self.count = len(data) // entry_size
        self.capacity = 0
        self._map: mmap.mmap | None = None
        self._writing: bytearray | None = None
        self.buf: IndexBuffer = data
        if capacity > 0:
            self.capacity = max(capacity, self.count + 1)
            size = self.capacity * entry_size
            path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                os.ftruncate(fd, 0)  # drop whatever stood there: the tail must read as zeros
                os.ftruncate(fd, size)
                os.posix_fallocate(fd, 0, size)  # a full disk fails here, not as SIGBUS later
                if mapped:
                    self._map = mmap.mmap(fd, size, access=mmap.ACCESS_WRITE)
                else:
                    os.pwrite(fd, data, 0)
            finally:
                os.close(fd)
            if self._map is not None:
                self._map[: len(data)] = data
                self.buf = self._map
            else:
                self._writing = bytearray(size)
                self._writing[: len(data)] = data
                self.buf = self._writing

    @classmethod
    def write_sealed(cls, path: Path, entry_size: int, data: bytes) -> SparseIndexFile:
        """Write ``data`` as the file's whole content and return it sealed."""
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        return cls(path, entry_size, data)

    def append(self, entry: bytes) -> bool:
        """Add one entry; False (nothing written) when the file is sealed or full."""
        mapping = self._map if self._map is not None else self._writing
        if mapping is None or self.count >= self.capacity:
            return False
        position = self.count * self.entry_size
        mapping[position : position + self.entry_size] = entry
        self.count += 1
        if mapping is self._writing:
            self._write_through(position, entry)
        return True

    def _write_through(self, position: int, data: bytes) -> None:
        """pwrite to the file; a failure (no descriptor left, say) is made good at sealing,
        or by the next load, which completes an index file from the consume queue."""
        try:
            fd = os.open(self.path, os.O_WRONLY)
        except OSError:
            return
        try:
            os.pwrite(fd, data, position)
        except OSError:
            pass
        finally:
            os.close(fd)

    def data(self) -> bytes:
        return bytes(self.buf[: self.count * self.entry_size])

    def seal(self) -> None:
        """Trim the file to its entries and keep them as bytes (idempotent)."""
        mapping = self._map if self._map is not None else self._writing
        if mapping is None:
            return
        size = self.count * self.entry_size
        self.buf = bytes(mapping[:size])
        if mapping is self._writing:
            self._writing = None
            self._write_through(0, self.buf)  # any entry a failed write missed
        self._map = None
        os.truncate(self.path, size)
        del mapping


def read_index_file(path: Path) -> bytes | None:
    try:
        return path.read_bytes()
    except FileNotFoundError:
        return None


def stored_entries(
    stored: bytes | None, entry: struct.Struct, capacity: int
) -> list[tuple[int, int]] | None:
    """The (a, b) entries of a sparse index file's bytes, without the all-zero tail a
    preallocated file keeps after a crash; None when the bytes cannot be an index file."""
    if not stored or len(stored) % entry.size:
        return None
    raw = list(entry.iter_unpack(stored))
    end = len(raw)
    while end and raw[end - 1] == (0, 0):
        end -= 1
    return raw[:end] if end <= capacity else None


class _TimeSegment:
    __slots__ = ("base", "file", "first_offset", "first_ts")

    def __init__(self, base: int, file: SparseIndexFile):
        self.base = base
        self.file = file
        self.first_ts, relative = ENTRY.unpack_from(file.buf, 0)
        self.first_offset = base + relative


_FIRST_TS = attrgetter("first_ts")


class QueueTimeIndex:
    """The time index of one topic-queue: one :class:`SparseIndexFile` per consume-queue file."""

    def __init__(
        self,
        directory: Path,
        consume_queue: ConsumeQueue,
        commitlog: CommitLog,
        interval_units: int = DEFAULT_INTERVAL_UNITS,
    ):
        units_per_file = consume_queue.segments.segment_size // UNIT_SIZE
        if interval_units < 1:
            raise InvalidArgumentError(f"interval_units must be positive, got {interval_units}")
        if units_per_file > _INT32_MAX:
            raise InvalidArgumentError(
                f"{units_per_file} units per file do not fit a 4-byte offset"
            )
        self.directory = directory
        self.consume_queue = consume_queue
        self.commitlog = commitlog
        self.interval = interval_units
        self.units_per_file = units_per_file
        self.capacity = -(-units_per_file // interval_units) + 1
        self._segments: list[_TimeSegment] = []
        self._active: _TimeSegment | None = None
        self._last_ts = 0
        self.next_due = 0  # queue offset from which the next entry is due (read by SinglePut)
        self._segment_end = 0  # queue offset just past the active segment
        self.error: OSError | None = None  # why indexing stopped (see _give_up)

    @classmethod
    def open(
        cls,
        root: Path,
        consume_queue: ConsumeQueue,
        commitlog: CommitLog,
        interval_units: int = DEFAULT_INTERVAL_UNITS,
    ) -> QueueTimeIndex:
        """The loaded time index of ``consume_queue`` in store ``root``."""
        directory = time_index_directory(root, consume_queue.topic, consume_queue.queue_id)
        index = cls(directory, consume_queue, commitlog, interval_units)
        index.load()
        return index

    # -- put path --------------------------------------------------------------------------
    def append(self, queue_offset: int, count: int, store_timestamp: int) -> None:
        """Note ``count`` units from ``queue_offset``, all stored at ``store_timestamp`` (one
        batch). O(1): one comparison unless an entry is due."""
        end = queue_offset + count
        if end > self.next_due:
            self._append_due(queue_offset, end, store_timestamp)

    def _append_due(self, first: int, end: int, timestamp: int) -> None:
        while first < end and end > self.next_due:
            unit = max(first, self.next_due)
            if unit >= self._segment_end:
                self._start_segment(unit, timestamp)
            elif timestamp > self._last_ts:
                self._add_entry(unit, timestamp)
            elif end > self._segment_end:
                first = self._segment_end  # the batch goes on in the next file
            else:
                return

    def _start_segment(self, unit: int, timestamp: int) -> None:
        base = unit - unit % self.units_per_file
        try:
            if self._active is not None:
                self._active.file.seal()
            file = SparseIndexFile(
                self._path(base),
                ENTRY_SIZE,
                ENTRY.pack(timestamp, unit - base),
                self.capacity,
                mapped=False,
            )
        except OSError as exc:
            self._give_up(exc)
            return
        self._activate(_TimeSegment(base, file), [*self._segments])

    def _give_up(self, error: OSError) -> None:
        """A file cannot be written (a full disk, say): stop indexing until the next load. The
        put path is not failed for a derived file; lookups stay exact, searching more units."""
        self.error = error
        self._active = None
        self.next_due = self._segment_end = _NO_UPPER

    def _add_entry(self, unit: int, timestamp: int) -> None:
        active = self._active
        assert active is not None
        active.file.append(ENTRY.pack(timestamp, unit - active.base))  # full: stays sparser
        self._last_ts = timestamp
        self.next_due = min(unit + self.interval, self._segment_end)

    def _activate(self, segment: _TimeSegment, earlier: list[_TimeSegment]) -> None:
        """Make ``segment`` the one the put path appends to, after ``earlier``."""
        file = segment.file
        last_ts, relative = ENTRY.unpack_from(file.buf, (file.count - 1) * ENTRY_SIZE)
        self._segments = [*earlier, segment]
        self._active = segment
        self._last_ts = last_ts
        self._segment_end = segment.base + self.units_per_file
        self.next_due = min(segment.base + relative + self.interval, self._segment_end)

    # -- lookups ---------------------------------------------------------------------------
    def bracket(self, timestamp_ms: int) -> tuple[int, int]:
        """(lo, hi): ``lo`` the queue offset of the last entry stored before ``timestamp_ms``
        (-1: none), ``hi`` that of the entry after it (a huge number: none)."""
        segments = self._segments
        s = bisect_left(segments, timestamp_ms, key=_FIRST_TS) - 1
        if s < 0:
            return -1, segments[0].first_offset if segments else _NO_UPPER
        segment = segments[s]
        count = segment.file.count
        buf = segment.file.buf
        i = _last_before(buf, count, timestamp_ms)
        lo = segment.base + _RELATIVE.unpack_from(buf, i * ENTRY_SIZE + 8)[0]
        if i + 1 < count:
            hi = segment.base + _RELATIVE.unpack_from(buf, i * ENTRY_SIZE + 20)[0]
        elif s + 1 < len(segments):
            hi = segments[s + 1].first_offset
        else:
            hi = _NO_UPPER
        return lo, hi

    def floor_entry(self, timestamp_ms: int) -> tuple[int, int] | None:
        """Kafka's lookup: (timestamp, queue offset) of the last entry whose timestamp is
        <= ``timestamp_ms``, or None."""
        segments = self._segments
        s = bisect_left(segments, timestamp_ms + 1, key=_FIRST_TS) - 1
        if s < 0:
            return None
        segment = segments[s]
        count = segment.file.count
        buf = segment.file.buf
        ts, relative = ENTRY.unpack_from(
            buf, _last_before(buf, count, timestamp_ms + 1) * ENTRY_SIZE
        )
        return ts, segment.base + relative

    def store_time(self, queue_offset: int) -> int:
        """Store time of the unit at ``queue_offset`` as the commitlog holds it (-1: removed)."""
        return _store_time(self.consume_queue, self.commitlog, queue_offset)

    def entries(self) -> list[tuple[int, int]]:
        """Every entry as (timestamp, absolute queue offset), oldest first."""
        return [
            (ts, segment.base + relative)
            for segment in self._segments
            for ts, relative in ENTRY.iter_unpack(segment.file.data())
        ]

    # -- load, rebuild, retention, close ---------------------------------------------------
    def load(self) -> None:
        """Open the files of the consume queue's segments, validating, repairing and completing
        them (see the module docstring); delete files of segments the queue no longer has."""
        self.close()
        queue = self.consume_queue
        low = queue.min_offset
        high = visible_max_offset(queue, self.commitlog)
        stale = self._existing_files()
        built: list[tuple[int, bytes, bytes | None]] = []
        for mapped in list(queue.segments.segments):
            base = mapped.start_offset // UNIT_SIZE
            first_unit, end_unit = max(base, low), min(base + self.units_per_file, high)
            if first_unit >= end_unit:
                continue
            path = self._path(base)
            stale.discard(path.name)
            stored = read_index_file(path)
            entries = self._valid_entries(stored, base, first_unit, end_unit)
            self._complete(entries, base, first_unit, end_unit)
            data = b"".join(ENTRY.pack(ts, offset - base) for ts, offset in entries)
            built.append((base, data, stored))
        for name in stale:
            (self.directory / name).unlink(missing_ok=True)
        segments: list[_TimeSegment] = []
        for base, data, stored in built[:-1]:
            path = self._path(base)
            file = (
                SparseIndexFile(path, ENTRY_SIZE, data)
                if data == stored
                else SparseIndexFile.write_sealed(path, ENTRY_SIZE, data)
            )
            segments.append(_TimeSegment(base, file))
        if built:
            base, data, _ = built[-1]
            file = SparseIndexFile(self._path(base), ENTRY_SIZE, data, self.capacity, mapped=False)
            self._activate(_TimeSegment(base, file), segments)

    def rebuild(self) -> None:
        """Delete every file and build the index again from the consume queue."""
        self.close()
        for name in self._existing_files():
            (self.directory / name).unlink()
        self.load()

    def drop_before(self, queue_offset: int) -> None:
        """Delete the files of segments that end at or before ``queue_offset`` (retention),
        never the one the put path appends to."""
        end = self.units_per_file
        gone = [s for s in self._segments if s.base + end <= queue_offset and s is not self._active]
        if gone:
            self._segments = [s for s in self._segments if s not in gone]
            for segment in gone:
                segment.file.path.unlink(missing_ok=True)

    def close(self) -> None:
        """Trim the file being written; forget everything (``load`` starts over)."""
        if self._active is not None:
            self._active.file.seal()
        self._segments = []
        self._active = None
        self._last_ts = self.next_due = self._segment_end = 0
        self.error = None

    # -- helpers ---------------------------------------------------------------------------
    def _path(self, base: int) -> Path:
        return self.directory / (segment_name(base) + FILE_SUFFIX)

    def _existing_files(self) -> set[str]:
        if not self.directory.is_dir():
            return set()
        return {n for n in os.listdir(self.directory) if n.endswith(FILE_SUFFIX)}

    def _valid_entries(
        self, stored: bytes | None, base: int, first_unit: int, end_unit: int
    ) -> list[tuple[int, int]]:
        """The stored entries (timestamp, absolute offset) that can be kept; [] to rebuild."""
        raw = stored_entries(stored, ENTRY, self.capacity)
        if raw is None:
            return []
        entries: list[tuple[int, int]] = []
        previous_ts = previous_relative = -(1 << 63)
        for ts, relative in raw:
            if ts <= previous_ts or relative <= previous_relative or relative < 0:
                return []
            previous_ts, previous_relative = ts, relative
            if base + relative < end_unit:
                entries.append((ts, base + relative))
        if not entries or entries[0][1] != first_unit:
            return []
        for ts, offset in (entries[0], entries[-1]):
            if self.store_time(offset) != ts:
                return []
        return entries

    def _complete(
        self, entries: list[tuple[int, int]], base: int, first_unit: int, end_unit: int
    ) -> None:
        """Add the entries due from the last one (or the first unit) up to ``end_unit``."""
        if not entries:
            entries.append((self.store_time(first_unit), first_unit))
        last_ts, last_offset = entries[-1]
        segment_end = base + self.units_per_file
        due = min(last_offset + self.interval, segment_end)
        while due < end_unit:
            unit, ts = self._first_later(due, end_unit, last_ts)
            if unit >= end_unit:
                return
            entries.append((ts, unit))
            last_ts = ts
            due = min(unit + self.interval, segment_end)

    def _first_later(self, start: int, end: int, after_ts: int) -> tuple[int, int]:
        """(offset, store time) of the first unit in [start, end) stored after ``after_ts``,
        found by galloping then bisecting (exact when store times do not decrease); (end, 0)
        when there is none."""
        timestamp_at = self.store_time
        ts = timestamp_at(start)
        if ts > after_ts:
            return start, ts
        lo, step = start, 1  # store time at lo <= after_ts
        while True:
            probe = lo + step
            if probe >= end:
                hi, hi_ts = end, 0
                break
            hi_ts = timestamp_at(probe)
            if hi_ts > after_ts:
                hi = probe
                break
            lo, step = probe, step * 2
        while hi - lo > 1:
            mid = (lo + hi) // 2
            ts = timestamp_at(mid)
            if ts > after_ts:
                hi, hi_ts = mid, ts
            else:
                lo = mid
        return hi, hi_ts


def _last_before(buf: IndexBuffer, count: int, timestamp_ms: int) -> int:
    """Index of the last of ``count`` entries whose timestamp is < ``timestamp_ms``; entry 0's
    is known to be."""
    lo, hi = 0, count
    unpack = _TIMESTAMP.unpack_from
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if unpack(buf, mid * ENTRY_SIZE)[0] < timestamp_ms:
            lo = mid
        else:
            hi = mid
    return lo


def _store_time(queue: ConsumeQueue, commitlog: CommitLog, queue_offset: int) -> int:
    phys, _ = queue.unit_head(queue_offset)
    located = commitlog.segment_view(phys) if phys >= commitlog.min_offset else None
    return -1 if located is None else read_store_timestamp(located[0], located[1])


def offset_for_timestamp(
    consume_queue: ConsumeQueue | None,
    commitlog: CommitLog,
    time_index: QueueTimeIndex | None,
    timestamp_ms: int,
) -> int:
    """The first queue offset stored at or after ``timestamp_ms``, clamped to the queue's
    [min offset, max offset] (max: every message is older); 0 for an unknown queue.

    ``time_index`` None searches the whole queue. See the module docstring for clock steps.
    """
    if consume_queue is None:
        return 0
    low = consume_queue.min_offset
    high = visible_max_offset(consume_queue, commitlog)
    if high <= low:
        return low
    lo, hi = (low - 1, high) if time_index is None else time_index.bracket(timestamp_ms)
    hi = min(max(hi, low), high)  # store time at hi >= timestamp_ms (high: +inf)
    lo = min(max(lo, low - 1), hi - 1)  # store time at lo < timestamp_ms (low - 1: -inf)
    # The binary search reads each probe's unit and record straight from the mapped segments,
    # keeping the last segment of each (a bracket mostly lies in one), so a probe looks no
    # segment up through its owner.
    segments, log_segments = consume_queue.segments, commitlog.segments
    min_phys = commitlog.min_offset
    unit_view = log_view = memoryview(b"")
    unit_start = unit_end = log_start = log_end = 0
    while hi - lo > 1:
        mid = (lo + hi) // 2
        position = mid * UNIT_SIZE
        if not unit_start <= position < unit_end:
            unit_segment = segments.find(position)
            assert unit_segment is not None
            unit_view, unit_start = unit_segment.view, unit_segment.start_offset
            unit_end = unit_start + unit_segment.size
        phys = _PHYS.unpack_from(unit_view, position - unit_start)[0]
        if not log_start <= phys < log_end:
            log_segment = log_segments.find(phys) if phys >= min_phys else None
            if log_segment is None:  # removed by retention: older than anything
                lo = mid
                continue
            log_view, log_start = log_segment.view, log_segment.start_offset
            log_end = log_start + log_segment.size
        if read_store_timestamp(log_view, phys - log_start) >= timestamp_ms:
            hi = mid
        else:
            lo = mid
    return hi
