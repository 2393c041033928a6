"""The commitlog: every message of every topic, appended to segments ``commitlog/{20 digits}``.

Record layout: :mod:`localstore.codec`. This module owns the write position, segment rolling,
the flushed position and which bytes readers may see:

* ``max_offset``: end of the last fully written record.
* ``flushed_offset``: end of what fdatasync has made durable.
* ``confirmed_offset``: what readers may see. Under async flush every written record; under sync
  flush only flushed ones, so a reader never returns a message whose put has not been
  acknowledged as durable.

Async flush writes records into the mapping at once; the flush thread fdatasyncs periodically.
Sync flush keeps a write-behind list instead: a put only queues its bytes (no syscall, no GIL
release on the put path), and a flush pwrites everything queued, fdatasyncs, and only then moves
``flushed_offset`` (so readers, who stop there, never look at unwritten bytes).

A sync-mode flush has two halves, so that the fdatasync may run elsewhere (the flush thread, or
a sync process for an event loop, :mod:`localstore.sync_process`) while other flushes go on:

* :meth:`CommitLog.take_flush` takes the write-behind list and pwrites it, under ``_flush_lock``,
  so the takes of all flushes are ordered and each one's writes are done before the next take.
  It names the segments to sync: every segment holding bytes between ``flushed_offset`` and the
  take's target, not only those this take wrote, since an earlier flush may still be syncing.
* :meth:`CommitLog.finish_flush` is told how the sync went. A sync that began after the take
  covers every byte below the target (each was written before the take ended, and each segment
  holding one not yet durable was synced), so a successful flush may move ``flushed_offset`` to
  its target whatever other flushes are in flight. A take with nothing new to write still syncs
  the bytes other flushes wrote, so no flush waits for another. A failed one puts its bytes back
  at the head of the write-behind list, to be written again by the next flush (the same bytes at
  the same place), and bumps a failure count: a flush taken before that failure did not write
  those bytes again, so its success moves nothing (its puts hear that they are not covered), and
  it puts its own bytes back too, since its sync may have missed a failed writeback of them.
  For the same reason no flush moves ``flushed_offset`` past bytes a failure made doubtful
  before they are written again: the start of a doubtful flush still in flight, or the lowest
  bytes put back and not yet taken again.

Appends happen under the store's put lock (one writer at a time); ``_pending_lock`` guards the
hand-over of the write-behind list.
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass
from pathlib import Path

from localstore.codec import BLANK_RECORD_SIZE, INT, MAGIC_V1, MAGIC_V2, RecordError
from localstore.mapped_file import MappedFile, segment_name, warm_file
from localstore.segments import SegmentQueue

Write = tuple[MappedFile, int, bytes]  # (segment, position in it, bytes)


@dataclass(frozen=True, slots=True)
class TakenFlush:
    """A sync-mode flush between its two halves (:meth:`CommitLog.take_flush`)."""

    start: int  # the commitlog offset of its first write (``target`` when it wrote nothing)
    target: int  # the commitlog offset it makes durable
    timestamp: int  # store time of the record ending at ``target``
    writes: list[Write]  # what it wrote, kept to be written again should the sync fail
    to_sync: list[MappedFile]  # empty when the write itself was durable
    doubts_before: int  # the commitlog's doubt count when it was taken


class CommitLog:
    """Segments of records plus their write, flush and visibility positions."""

    def __init__(
        self, directory: Path, segment_size: int, *, sync_flush: bool, warm_segments: bool = False
    ):
        self.directory = directory
        self.segment_size = segment_size
        self.sync_flush = sync_flush
        self._allocator = _SegmentAllocator(directory, segment_size) if warm_segments else None
        self._prepare_next_at = _NEVER  # offset at which the next segment is prepared
        self.segments = SegmentQueue(directory, segment_size, factory=self._new_segment)
        self._pending: list[Write] = []  # sync flush write-behind
        self._pending_lock = threading.Lock()
        self._flush_lock = threading.Lock()  # orders the takes of sync-mode flushes
        # Sync-mode flushes that failed since open.
        self._doubts = 0
        # The lowest offset of bytes put back since the last take (none: _NEVER).
        self._put_back_floor = _NEVER
        self._open_takes: list[TakenFlush] = []  # taken, not yet finished
        # End of what sync-mode flushes have written through the files, and its store time.
        self._written_offset = 0
        self._written_timestamp = 0
        self.max_offset = 0
        self.flushed_offset = 0
        self.last_store_timestamp = 0  # store time of the record ending at max_offset

    # -- positions -------------------------------------------------------------------------
    @property
    def min_offset(self) -> int:
        return self.segments.min_offset

    @property
    def confirmed_offset(self) -> int:
        return self.flushed_offset if self.sync_flush else self.max_offset

    def set_end(self, offset: int) -> None:
        """After recovery: ``offset`` is the end of valid data (everything there is on disk).
        Later segments go; the remains of a torn write after ``offset`` are zeroed."""
        self.segments.truncate(offset)
        last = self.segments.find(offset)
        if last is not None:
            if last.zero_from(offset - last.start_offset):
                # Synced now: a sync-flush write later makes only its own range durable.
                last.sync()
            if self._allocator is not None:
                self._prepare_next_at = last.start_offset + self.segment_size // 2
        self.max_offset = self.flushed_offset = self._written_offset = offset

    # -- writing ---------------------------------------------------------------------------
    def write_runs(self, runs: list[bytes], end_offset: int, store_timestamp: int) -> None:
        """Write encoded runs: the first at ``max_offset``, each later one in a new segment."""
        if end_offset >= self._prepare_next_at and self._allocator is not None:
            self._prepare_next_at = _NEVER
            self._allocator.prepare(end_offset - end_offset % self.segment_size + self.segment_size)
        segments = self.segments
        last = segments.segments[-1] if segments.segments else None
        if last is not None and last.wrote_position + len(runs[0]) <= last.size:
            segment = last
        else:
            segment = segments.segment_for_append(self.max_offset)
        if not self.sync_flush:
            segment.append_publishing_last(runs[0])
            for run in runs[1:]:
                segment = segments.add_segment(segment.end_offset)
                segment.append_publishing_last(run)
            self.last_store_timestamp = store_timestamp  # before max_offset: the flush
            self.max_offset = end_offset  # thread reads them in the other order
            return
        writes = [(segment, segment.wrote_position, runs[0])]
        segment.wrote_position += len(runs[0])
        for run in runs[1:]:
            segment = segments.add_segment(segment.end_offset)
            writes.append((segment, 0, run))
            segment.wrote_position = len(run)
        with self._pending_lock:
            self._pending.extend(writes)
            self.max_offset = end_offset
            self.last_store_timestamp = store_timestamp

    def append_record(
        self, first: bytes, rest: bytes, end_offset: int, store_timestamp: int
    ) -> bool:
        """Write one record at ``max_offset``: ``first`` is its size and magic (8 bytes), ``rest``
        the remainder, handed over apart so that the size and magic can go last (see
        :meth:`MappedFile.append_split`). Only when the record fits the last segment with room
        for a blank record behind it, and no segment is due to be prepared; otherwise nothing
        is written and the answer is False (:meth:`write_runs` handles segment ends)."""
        segments = self.segments.segments
        if not segments or end_offset >= self._prepare_next_at:
            return False
        segment = segments[-1]
        if end_offset > segment.start_offset + segment.size - BLANK_RECORD_SIZE:
            return False
        if not self.sync_flush:
            segment.append_split(first, rest)
            self.last_store_timestamp = store_timestamp  # before max_offset: the flush
            self.max_offset = end_offset  # thread reads them in the other order
            return True
        position = segment.wrote_position
        segment.wrote_position = position + len(first) + len(rest)
        with self._pending_lock:
            self._pending.append((segment, position, first + rest))
            self.max_offset = end_offset
            self.last_store_timestamp = store_timestamp
        return True

    def flush(self) -> tuple[int, int]:
        """Make everything written durable; returns (flushed offset, store time of its last
        record). Runs on the flush thread (and at close); raises what the write or the sync
        raised (the bytes are kept for the next flush)."""
        if not self.sync_flush:
            target, timestamp = self.max_offset, self.last_store_timestamp
            if target > self.flushed_offset:
                self.segments.flush()
                self.flushed_offset = target
            return target, timestamp
        taken = self.take_flush(durable_if_alone=True)
        if taken is None:
            return self.flushed_offset, self.last_store_timestamp
        try:
            for segment in taken.to_sync:
                segment.sync()
        except BaseException:
            self.finish_flush(taken, ok=False)
            raise
        covered = self.finish_flush(taken, ok=True)
        # The store time is that of the target: unknown for an offset held back before it.
        return self.flushed_offset, taken.timestamp if covered else 0

    def take_flush(self, *, durable_if_alone: bool = False) -> TakenFlush | None:
        """Sync flush, first half (see the module docstring): pwrite the write-behind list and
        name the segments to sync; None when every written byte is durable. When nothing is
        left to write but another flush's bytes still wait for its sync, the take names their
        segments, so that its caller need not wait for that flush. With ``durable_if_alone``, a
        take that is one run within a page and all that is not yet durable is made durable by
        the write itself (``to_sync`` is then empty). Raises what the write raised, with the
        bytes put back."""
        with self._flush_lock:
            with self._pending_lock:
                pending, self._pending = self._pending, []
                target, timestamp = self.max_offset, self.last_store_timestamp
            self._put_back_floor = _NEVER  # whatever was put back is taken again now
            floor = self.flushed_offset
            if not pending:
                if self._written_offset <= floor:
                    return None
                target, timestamp = self._written_offset, self._written_timestamp
                to_sync = self._segments_between(floor, target)
                taken = TakenFlush(target, target, timestamp, [], to_sync, self._doubts)
                self._open_takes.append(taken)
                return taken
            first, last = pending[0], pending[-1]
            alone = (
                durable_if_alone
                and first[0].start_offset + first[1] == floor
                and last[0].start_offset + last[1] + len(last[2]) == target
            )
            start = min(segment.start_offset + position for segment, position, _ in pending)
            try:
                durable = _write_through(pending, durably=alone)
            except BaseException:
                with self._pending_lock:
                    self._pending[:0] = pending
                self._put_back_floor = start
                raise
            if target > self._written_offset:
                self._written_offset, self._written_timestamp = target, timestamp
            # Bytes written again after a failure may lie below the flushed offset: their
            # segments are synced too.
            to_sync = [] if durable else self._segments_between(min(floor, start), target)
            taken = TakenFlush(start, target, timestamp, pending, to_sync, self._doubts)
            self._open_takes.append(taken)
            return taken

    def finish_flush(self, taken: TakenFlush, *, ok: bool) -> bool:
        """Sync flush, second half: the sync of ``taken.to_sync`` succeeded (``ok``) or failed.
        True when ``flushed_offset`` now covers ``taken.target``."""
        with self._flush_lock:
            self._open_takes = [t for t in self._open_takes if t is not taken]
            discounted = ok and taken.doubts_before != self._doubts
            if discounted and self.flushed_offset >= taken.target:
                return True
            if not ok or discounted:  # see the module docstring
                if not ok:
                    self._doubts += 1
                self._put_back(taken)
                return False
            # Not past bytes a failure made doubtful until they are written again: those of a
            # flush still in flight since before the failure, and those put back but not yet
            # taken again.
            limit = min(
                (t.start for t in self._open_takes if t.doubts_before < self._doubts),
                default=self._put_back_floor,
            )
            limit = min(limit, self._put_back_floor)
            self.flushed_offset = max(self.flushed_offset, min(taken.target, limit))
            for segment in taken.to_sync:
                segment.flushed_position = max(segment.flushed_position, segment.wrote_position)
            return self.flushed_offset >= taken.target

    def _put_back(self, taken: TakenFlush) -> None:
        """A flush's writes go back to the head of the write-behind list (under
        ``_flush_lock``)."""
        if not taken.writes:
            return
        with self._pending_lock:
            self._pending[:0] = taken.writes
        self._put_back_floor = min(self._put_back_floor, taken.start)

    @property
    def flush_doubts(self) -> int:
        """How many sync-mode flushes failed since the store opened."""
        return self._doubts

    def _segments_between(self, start: int, end: int) -> list[MappedFile]:
        """The segments holding bytes in ``[start, end)`` (one, or two around a roll)."""
        found = []
        for segment in reversed(self.segments.segments):
            if segment.start_offset >= end:
                continue
            if segment.start_offset + segment.size <= start:
                break
            found.append(segment)
        return found

    # -- reading ---------------------------------------------------------------------------
    def segment_view(self, phys_offset: int) -> tuple[memoryview, int] | None:
        """The mapped bytes of the segment holding ``phys_offset`` and the position in it."""
        segment = self.segments.find(phys_offset)
        if segment is None:
            return None
        return segment.view, phys_offset - segment.start_offset

    def record_size_at(self, phys_offset: int) -> int:
        """TOTALSIZE of the record at ``phys_offset``; raises RecordError if none starts there."""
        located = self.segment_view(phys_offset)
        if located is None or phys_offset >= self.confirmed_offset:
            raise RecordError(f"no record at commitlog offset {phys_offset}")
        view, pos = located
        if pos + 8 > len(view):
            raise RecordError(f"no record starts at commitlog offset {phys_offset}")
        size, magic = INT.unpack_from(view, pos)[0], INT.unpack_from(view, pos + 4)[0]
        if magic not in (MAGIC_V1, MAGIC_V2) or size <= 0 or pos + size > len(view):
            raise RecordError(f"no record starts at commitlog offset {phys_offset}")
        return int(size)

    # -- segments --------------------------------------------------------------------------
    def _new_segment(self, start: int) -> MappedFile:
        if self._allocator is None:
            return MappedFile.create(self.directory, start, self.segment_size)
        # The next one is prepared once this one is half written (see write_runs).
        self._prepare_next_at = start + self.segment_size // 2
        return self._allocator.take(start)

    def close(self) -> None:
        if self._allocator is not None:
            self._allocator.close()
        last = self.segments.last
        # A clean shutdown leaves no empty preallocated segment behind (as RocketMQ).
        if last is not None and last.wrote_position == 0 and len(self.segments.segments) > 1:
            self.segments.segments.pop().destroy()
        self.segments.close()


_NEVER = 1 << 62


def _write_through(pending: list[Write], *, durably: bool) -> bool:
    """pwrite the write-behind list's runs through the files. With ``durably``, a single run
    within a page goes in one ``pwritev(RWF_DSYNC)``, which also makes it durable: True then."""
    runs = _coalesce(pending)
    if durably and len(runs) == 1 and runs[0][0].pwrite_durably(runs[0][1], runs[0][2]):
        runs[0][0].flushed_position = runs[0][0].wrote_position
        return True
    for segment, position, data in runs:
        segment.pwrite(position, data)
    return False


def _coalesce(writes: list[Write]) -> list[Write]:
    """Join writes that continue each other in one segment: one pwrite (one GIL hand-off) each."""
    merged: list[Write] = []
    run: list[bytes] = []
    segment, start, end = writes[0][0], writes[0][1], writes[0][1]
    for seg, position, data in writes:
        if seg is not segment or position != end:
            merged.append((segment, start, b"".join(run)))
            run = []
            segment, start, end = seg, position, position
        run.append(data)
        end += len(data)
    merged.append((segment, start, b"".join(run)))
    return merged


class _SegmentAllocator:
    """Prepares the next commitlog segment on a background thread: written with zeros and
    synced (its blocks allocated, its pages in the page cache), then mapped with every page
    populated, so the writer meets no page fault and no allocation (RocketMQ's
    AllocateMappedFileService with warm-up). pwrite, fdatasync and mmap release the GIL.
    """

    def __init__(self, directory: Path, segment_size: int):
        self._directory = directory
        self._size = segment_size
        self._lock = threading.Lock()
        self._pending: dict[int, threading.Thread] = {}
        self._ready: dict[int, MappedFile] = {}

    def prepare(self, start: int) -> None:
        with self._lock:
            if start in self._pending or start in self._ready:
                return
            thread = threading.Thread(
                target=self._make, args=(start,), daemon=True, name=f"quiver-allocate-{start}"
            )
            self._pending[start] = thread
            thread.start()

    def _make(self, start: int) -> None:
        path = self._directory / segment_name(start)
        if not path.exists():
            # Warm under a name RocketMQ's loader never sees, then move it into place whole.
            scratch = self._directory.parent / "quiver-tmp"
            scratch.mkdir(exist_ok=True)
            tmp = scratch / f"{segment_name(start)}.warming"
            tmp.unlink(missing_ok=True)
            warm_file(tmp, self._size)
            os.replace(tmp, path)
        segment = MappedFile(path, start, self._size, populate=True)
        with self._lock:
            self._ready[start] = segment

    def take(self, start: int) -> MappedFile:
        """The segment starting at ``start``, waiting for it or making it now."""
        with self._lock:
            thread = self._pending.pop(start, None)
        if thread is not None:
            thread.join()
        with self._lock:
            segment = self._ready.pop(start, None)
        if segment is None:
            self._directory.mkdir(parents=True, exist_ok=True)
            self._make(start)
            with self._lock:
                segment = self._ready.pop(start)
        return segment

    def close(self) -> None:
        """Drop what was prepared but never used."""
        with self._lock:
            pending = list(self._pending.values())
            self._pending.clear()
        for thread in pending:
            thread.join()
        with self._lock:
            unused, self._ready = list(self._ready.values()), {}
        for segment in unused:
            segment.destroy()
