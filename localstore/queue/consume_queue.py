"""One consume queue: the index of one topic-queue into the commitlog.

Files ``consumequeue/{topic}/{queueId}/{20-digit byte offset}``, each ``entries_per_file * 20``
bytes. Queue offset ``n`` is the 20-byte unit at byte ``n * 20`` of the stream:

    off  size  field
      0     8  commitlog physical offset of the record
      8     4  record size (TOTALSIZE)
     12     8  tagsCode (Java hash of TAGS, or a delivery time under SCHEDULE_TOPIC_XXXX)

A unit is valid when its offset is >= 0 and its size > 0; zero-filled space ends the queue (an
invalid unit that is not zeros is a damaged one: :meth:`ConsumeQueue.bytes_follow_units`). A queue
that starts at a non-zero offset in its first file is padded with filler units
``(0, Integer.MAX_VALUE, 0)`` (RocketMQ's pre-blank), which are never read as messages.

Invariants: units are appended in queue-offset order with increasing physical offsets, so
``max_phys_offset`` (end of the last unit's record) tells whether a dispatch is a repeat.

The store's single put writes a unit that follows the last one in the last file, within its
reserved blocks, itself: what :meth:`ConsumeQueue.append` does in that case (the unit, the
file's ``wrote_position``, ``max_phys_offset``), without the call
(:meth:`localstore.put.single.SinglePut.put`).
"""

from __future__ import annotations

import struct
from pathlib import Path

from localstore.files.mapped_file import CQ_RESERVE_CHUNK_BYTES, MappedFile, open_segments
from localstore.files.segments import SegmentQueue

UNIT_SIZE = 20
UNIT = struct.Struct(">qiq")
FILLER_UNIT = UNIT.pack(0, 0x7FFFFFFF, 0)
_UNIT_HEAD = struct.Struct(">qi")


class ConsumeQueue:
    """Append, read and bound one topic-queue's units."""

    def __init__(self, directory: Path, topic: str, queue_id: int, entries_per_file: int):
        self.topic = topic
        self.queue_id = queue_id
        self.segments = SegmentQueue(
            directory,
            entries_per_file * UNIT_SIZE,
            factory=self._take_prepared,
            reserve_chunk_bytes=CQ_RESERVE_CHUNK_BYTES,
            read_ahead=False,  # read a few units at a time: see localstore.files.mapped_file
        )
        self.min_logic_offset = 0  # byte position of the first real unit
        self.max_phys_offset = 0  # end of the last unit's record in the commitlog
        self._prepared: MappedFile | None = None  # the next file, made by reserve()
        self._held: list[MappedFile] = []  # files reserve() keeps mapped until append
        self._tail_view: memoryview | None = None  # the last file's mapping, taken by reserve()

    # -- bounds ----------------------------------------------------------------------------
    @property
    def min_offset(self) -> int:
        """Smallest readable queue offset."""
        return self.min_logic_offset // UNIT_SIZE

    @property
    def max_offset(self) -> int:
        """Next queue offset to be written (one past the last unit)."""
        return self.segments.max_offset // UNIT_SIZE

    # -- loading ---------------------------------------------------------------------------
    def load(self) -> None:
        """Take in the files and find the end of the valid units (a valid prefix, then zeros).
        Files stay closed (no descriptor) until touched: only the last, read here to find the
        end, and the first, read for its filler prefix, are mapped, and only until the
        process's pool of open segments closes them (:mod:`localstore.files.mapped_file`)."""
        self.segments.load()
        segments = self.segments.segments
        while segments:
            last = segments[-1]
            valid = valid_prefix_units(last.view, last.size // UNIT_SIZE)
            last.wrote_position = last.flushed_position = valid * UNIT_SIZE
            if valid or len(segments) == 1:
                break
            segments.pop().destroy()  # an empty trailing file: drop it, the end is before it
        if segments:
            first = segments[0]
            blanks = filler_prefix_units(first.view, first.wrote_position // UNIT_SIZE)
            self.min_logic_offset = first.start_offset + blanks * UNIT_SIZE
            end = self.segments.max_offset
            if end > self.min_logic_offset:
                phys, size = self.unit_head(end // UNIT_SIZE - 1)
                self.max_phys_offset = phys + size

    # -- writing ---------------------------------------------------------------------------
    def reserve(self, queue_offset: int, count: int) -> None:
        """Make sure :meth:`append` of ``count`` units from ``queue_offset`` cannot fail: the
        files they go to exist and have their disk blocks. The put path calls this before it
        writes the records to the commitlog, so a full disk or a want of file descriptors
        refuses the put before anything was written, instead of leaving records without
        units. Raises OSError. A file made for units past the last one is held apart until
        :meth:`append` reaches it (registered earlier, it would move ``max_offset``).

        The files stay mapped until :meth:`append` has written the units, whatever the pool of
        open files (:class:`~localstore.files.mapped_file.OpenSegments`) does meanwhile: in the
        common case (the units fit the last file's reserved blocks) by holding a reference to
        its mapping, which the pool's closing never unmaps; otherwise by :meth:`_hold`."""
        if count == 0:  # (a prepared transaction's record has no unit)
            return
        end = (queue_offset + count) * UNIT_SIZE
        files = self.segments.segments
        if files:
            last = files[-1]
            if last.start_offset + last.reserved >= end:
                self._tail_view = last.view  # maps it now if the pool had closed it
                return
        self._tail_view = None
        size = self.segments.segment_size
        position = queue_offset * UNIT_SIZE
        while position < end:
            segment = self.segments.find(position)
            if segment is None:
                segment = self._prepare(position - position % size)
            self._hold(segment)
            segment.reserve(min(end, segment.end_offset) - segment.start_offset)
            position = segment.end_offset

    def _hold(self, segment: MappedFile) -> None:
        """Keep ``segment`` mapped until :meth:`let_go` (``append`` calls it): the pool of open
        files (:class:`~localstore.files.mapped_file.OpenSegments`) does not close it meanwhile."""
        open_segments().hold(segment)
        self._held.append(segment)

    def let_go(self) -> None:
        """The files :meth:`reserve` held may be closed by the pool again."""
        self._tail_view = None
        for segment in self._held:
            segment.held = False
        self._held.clear()

    def _prepare(self, start: int) -> MappedFile:
        """The file starting at ``start`` that the next :meth:`append` will register."""
        prepared = self._prepared
        if prepared is not None and prepared.start_offset == start:
            return prepared
        if prepared is not None:
            prepared.destroy()
            self._prepared = None
        self.segments.directory.mkdir(parents=True, exist_ok=True)
        self._prepared = self._create_file(start)
        return self._prepared

    def _take_prepared(self, start: int) -> MappedFile:
        """The segment queue's factory: the file :meth:`reserve` prepared, else a new one."""
        prepared = self._prepared
        self._prepared = None
        if prepared is not None and prepared.start_offset == start:
            return prepared
        if prepared is not None:
            prepared.destroy()
        return self._create_file(start)

    def _create_file(self, start: int) -> MappedFile:
        segments = self.segments
        return MappedFile.create(
            segments.directory,
            start,
            segments.segment_size,
            reserve_chunk_bytes=CQ_RESERVE_CHUNK_BYTES,
            read_ahead=False,  # read a few units at a time: see localstore.files.mapped_file
        )

    def append(self, queue_offset: int, units: bytes, phys_end: int) -> None:
        """Append ``units`` (whole 20-byte units) for queue offsets from ``queue_offset``.

        ``phys_end`` is the commitlog end of the last unit's record. Units may cross into the
        next file. A queue created at a non-zero offset gets filler units before it.
        """
        position = queue_offset * UNIT_SIZE
        files = self.segments.segments
        if files:  # the common case, inlined: room in the last file, its blocks allocated
            tail = files[-1]
            start = tail.wrote_position
            end = start + len(units)
            if tail.start_offset + start == position and end <= tail.reserved:
                view = self._tail_view  # the mapping reserve() took, if it ran
                if view is None:
                    view = tail.view
                else:
                    self._tail_view = None
                view[start:end] = units
                tail.wrote_position = end
                self.max_phys_offset = phys_end
                if self._held:
                    self.let_go()
                return
        segments = self.segments
        if not files:
            segment = segments.segment_for_append(position)
            padding = position - segment.start_offset
            if padding:
                segment.append(FILLER_UNIT * (padding // UNIT_SIZE))
            self.min_logic_offset = position
        elif position != segments.max_offset:
            raise ValueError(
                f"consume queue {self.topic}/{self.queue_id}: unit for queue offset "
                f"{queue_offset} does not follow the last one ({self.max_offset - 1})"
            )
        segment = segments.segment_for_append(position)
        if len(units) <= segment.remaining:
            segment.append(units)
        else:
            data = memoryview(units)
            while data:
                chunk = data[: segment.remaining]
                segment.append(chunk)
                data = data[len(chunk) :]
                if data:
                    segment = segments.segment_for_append(position)
        self.max_phys_offset = phys_end
        self.let_go()

    # -- reading ---------------------------------------------------------------------------
    def unit_head(self, queue_offset: int) -> tuple[int, int]:
        """(physical offset, size) of one unit; the caller checks the offset is in range."""
        position = queue_offset * UNIT_SIZE
        segment = self.segments.find(position)
        assert segment is not None
        phys, size = _UNIT_HEAD.unpack_from(segment.view, position - segment.start_offset)
        return phys, size

    def read_units(self, queue_offset: int, max_units: int) -> memoryview:
        """Up to ``max_units`` units from ``queue_offset``, never crossing a file boundary."""
        position = queue_offset * UNIT_SIZE
        segment = self.segments.find(position)
        if segment is None:
            return memoryview(b"")
        start = position - segment.start_offset
        end = min(segment.wrote_position, start + max_units * UNIT_SIZE)
        return segment.view[start:end] if end > start else memoryview(b"")

    def bytes_follow_units(self) -> bool:
        """Whether the two unit slots past the last unit hold non-zero bytes where a queue file
        holds zeros: then a damaged unit (offset < 0 or size <= 0) ended the valid prefix that
        :meth:`load` found, and the queue's later units lie past it, unread. Two slots, since a
        damaged byte can zero a unit that held a single non-zero byte. Reads only."""
        files = self.segments.segments
        if not files:
            return False
        last = files[-1]
        start = last.wrote_position
        return any(last.view[start : min(last.size, start + 2 * UNIT_SIZE)])

    def last_unit_within(self, phys_end: int) -> int | None:
        """The queue offset of the last unit whose record ends at or before commitlog offset
        ``phys_end`` (the last that :meth:`truncate_beyond` keeps), or None when none would be
        left. Reads only."""
        if self.max_phys_offset <= phys_end:
            last = self.max_offset - 1
            return last if last >= self.min_offset else None
        for segment in reversed(self.segments.segments):
            keep = units_ending_within(segment.view, segment.wrote_position // UNIT_SIZE, phys_end)
            if keep:
                last = segment.start_offset // UNIT_SIZE + keep - 1
                return last if last >= self.min_offset else None
        return None

    def truncate_beyond(self, phys_end: int) -> int:
        """Cut the units whose record ends past commitlog offset ``phys_end`` (recovery);
        returns how many were cut. Cut units are zeroed so no later load finds them again."""
        if self.max_phys_offset <= phys_end:
            return 0
        cut = 0
        segments = self.segments.segments
        while segments:
            last = segments[-1]
            count = last.wrote_position // UNIT_SIZE
            keep = units_ending_within(last.view, count, phys_end)
            cut += count - keep
            last.write_at(keep * UNIT_SIZE, bytes((count - keep) * UNIT_SIZE))
            last.wrote_position = keep * UNIT_SIZE
            last.flushed_position = min(last.flushed_position, last.wrote_position)
            if keep == 0 and len(segments) > 1:
                segments.pop().destroy()
                continue
            break
        self.max_phys_offset = 0
        end = self.segments.max_offset
        if end > self.min_logic_offset:
            phys, size = self.unit_head(end // UNIT_SIZE - 1)
            self.max_phys_offset = phys + size
        return cut

    def destroy(self) -> None:
        """Delete every file of this queue, those that did not load included (it is rebuilt
        from the commitlog)."""
        self.let_go()
        self._drop_prepared()
        for segment in self.segments.segments:
            segment.destroy()
        self.segments.segments.clear()
        self.min_logic_offset = self.max_phys_offset = 0
        directory = self.segments.directory
        if directory.is_dir():
            for path in directory.iterdir():
                if path.name.isdigit():
                    path.unlink()

    def flush(self) -> None:
        self.segments.flush()

    def close(self) -> None:
        self.let_go()
        self._drop_prepared()
        self.segments.close()

    def _drop_prepared(self) -> None:
        """A file prepared for units that never came holds nothing: it goes."""
        if self._prepared is not None:
            self._prepared.destroy()
            self._prepared = None


def valid_prefix_units(view: memoryview, count: int) -> int:
    """How many leading units are valid (offset >= 0 and size > 0); binary search, since a
    queue file is a valid prefix followed by zeros."""
    lo, hi = 0, count
    while lo < hi:
        mid = (lo + hi) // 2
        phys, size = _UNIT_HEAD.unpack_from(view, mid * UNIT_SIZE)
        if phys >= 0 and size > 0:
            lo = mid + 1
        else:
            hi = mid
    return lo


def units_ending_within(view: memoryview, count: int, phys_end: int) -> int:
    """How many leading units are filler or end at or before ``phys_end`` (real units are in
    commitlog order, so this is a binary search)."""
    lo, hi = 0, count
    while lo < hi:
        mid = (lo + hi) // 2
        unit = view[mid * UNIT_SIZE : (mid + 1) * UNIT_SIZE]
        phys, size = _UNIT_HEAD.unpack_from(unit, 0)
        if unit == FILLER_UNIT or phys + size <= phys_end:
            lo = mid + 1
        else:
            hi = mid
    return lo


def filler_prefix_units(view: memoryview, count: int) -> int:
    """How many leading units are pre-blank filler."""
    lo, hi = 0, count
    while lo < hi:
        mid = (lo + hi) // 2
        if view[mid * UNIT_SIZE : (mid + 1) * UNIT_SIZE] == FILLER_UNIT:
            lo = mid + 1
        else:
            hi = mid
    return lo
