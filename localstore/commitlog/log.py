"""The commitlog: every message of every topic, appended to segments ``commitlog/{20 digits}``.

Record layout: :mod:`localstore.record.codec`. This module owns the write position, segment rolling,
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

One sync-mode flush runs at a time (group commit: the next group gathers meanwhile), whoever
runs it: the flush thread, or an event loop whose fdatasync a sync process makes
(:mod:`localstore.commitlog.sync_process`). A flush is :meth:`CommitLog.begin_flush` (take the flush
token, take the write-behind list and pwrite it), the sync, then :meth:`CommitLog.end_flush`
(move ``flushed_offset`` to the flush's target, or put the bytes back at the head of the
write-behind list to be written again by the next flush, the same bytes at the same place; then
give the token back). With one flush at a time, a flush's sync covers everything below its
target, and a failed flush's bytes are all written again before any later flush can end.

A flush that waits for the token goes before one that does not (an event loop's, which then
hands its puts to the flush thread), so a busy loop cannot starve the flush thread. A holder
that has not ended its flush ``steal_after_s`` after its write (the store passes half its
``sync_flush_timeout_ms``: an event loop that stopped, a sync process that hangs) loses the
token to the flush that waits for it: that flush puts the holder's bytes back, writes them again
with its own, and syncs them; the holder's late end moves nothing.

Appends happen under the store's put lock (one writer at a time); ``_pending_lock`` guards the
hand-over of the write-behind list, ``_token_lock`` who holds the flush token.

The append window (async flush only): after each :meth:`CommitLog.append_record`, ``window``
names the last segment and ``window_end`` the furthest commitlog offset a record may end at in
it without this class's checks: inside the segment with room for a blank record behind it,
below the offset at which the next segment is prepared, and within the segment's reserved
(allocated) blocks. The single put (:mod:`localstore.put.single`) writes a record there itself,
under the put lock, in this order: the record but its first 8 bytes, those 8 bytes (its size
and magic), then ``window.wrote_position``, ``last_store_timestamp`` and ``max_offset``; a
record that would end past ``window_end`` goes through :meth:`append_record`, which moves the
window on. Anything else that writes or cuts the log (:meth:`write_runs`, :meth:`set_end`,
:meth:`close`) closes the window (``window_end`` -1) first. A window can only be smaller than
the truth: segments grow their reservations and are only replaced through those methods.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

from localstore.files.atomic_file import fsync_directory
from localstore.files.mapped_file import MappedFile, segment_name, warm_file
from localstore.files.segments import SegmentQueue
from localstore.record.batch_encoder import Head, publish
from localstore.record.codec import RecordError
from localstore.record.frame import head_problem
from localstore.record.layout import BLANK_RECORD_SIZE, SIZE_AND_MAGIC
from localstore.runtime.closing import close_all

log = logging.getLogger(__name__)

Write = tuple[MappedFile, int, bytes | bytearray]  # (segment, position in it, bytes)


class TakenFlush(NamedTuple):
    """A sync-mode flush between its two halves (:meth:`CommitLog.begin_flush`)."""

    target: int  # the commitlog offset it makes durable
    timestamp: int  # store time of the record ending at ``target``
    writes: list[Write]  # what it wrote, kept to be written again should the sync fail
    to_sync: list[MappedFile]  # empty when the write itself was durable


@dataclass(slots=True)
class _Holder:
    """Who holds the flush token: its flush once written (None before), since when (the end
    of its write), and whether it is ending (then it is not taken over)."""

    taken: TakenFlush | None = None
    since: float = 0.0  # time.monotonic() when its write ended
    ending: bool = False


# Told how each flush ended, one at a time in the order they end (under sync flush under the
# flush token): the error (None: it succeeded) and the flush (None: it wrote nothing, or it
# raised before it had one).
FlushHook = Callable[[BaseException | None, "TakenFlush | None"], None]


class FlushBusyError(Exception):
    """Another flush holds the commitlog's flush token."""


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
        self.segments = SegmentQueue(
            directory, segment_size, factory=self._new_segment, keep_last_mapped=True
        )
        self._pending: list[Write] = []  # sync flush write-behind
        self._pending_lock = threading.Lock()
        # One sync-mode flush at a time: held from begin_flush to end_flush.
        self._flush_token = threading.Lock()
        self._token_lock = threading.Lock()  # guards _holder and _token_wanted
        self._holder: _Holder | None = None
        self._token_wanted = 0  # blocking takers waiting: a non-waiting taker lets them first
        self.flush_hook: FlushHook | None = None  # the store's flush service sets it
        self.max_offset = 0
        self.flushed_offset = 0
        self.last_store_timestamp = 0  # store time of the record ending at max_offset
        # The append window (see the module docstring): closed until the first append_record.
        self.window: MappedFile | None = None
        self.window_end = -1

    # -- positions -------------------------------------------------------------------------
    @property
    def min_offset(self) -> int:
        return self.segments.min_offset

    @property
    def confirmed_offset(self) -> int:
        return self.flushed_offset if self.sync_flush else self.max_offset

    def set_end(self, offset: int, *, cut_records_to: int | None = None) -> None:
        """After recovery: ``offset`` is the end of valid data (everything there is on disk).
        Later segments go; the remains of a torn write after ``offset`` are zeroed.
        ``cut_records_to``: whole records lie from ``offset`` to there (an unfinished put that
        recovery cuts), zeroed exactly, whatever all-zero pages they hold, so that none of them
        is found again."""
        self._close_window()
        self.segments.truncate(offset)
        last = self.segments.find(offset)
        if last is not None:
            zeroed = 0
            if cut_records_to is not None and cut_records_to > offset:
                stop = min(cut_records_to, last.end_offset) - last.start_offset
                zeroed = stop - (offset - last.start_offset)
                last.write_at(offset - last.start_offset, bytes(zeroed))
            if last.zero_from(offset - last.start_offset + zeroed) or zeroed:
                # Synced now: a sync-flush write later makes only its own range durable.
                last.sync()
            if self._allocator is not None:
                self._prepare_next_at = last.start_offset + self.segment_size // 2
        self.max_offset = self.flushed_offset = offset

    # -- writing ---------------------------------------------------------------------------
    def write_runs(
        self, runs: list[bytes], heads: list[list[Head]], end_offset: int, store_timestamp: int
    ) -> None:
        """Write encoded runs: the first at ``max_offset``, each later one in a new segment.
        The runs are unpublished (every record's size and magic zeroed), ``heads`` gives those
        per run (see :mod:`localstore.record.batch_encoder`): under async flush they are stored
        after the run, first to last; under sync flush the write-behind list gets the runs
        published (:meth:`MappedFile.pwrite` orders them on the way to the file).

        All or nothing: when a segment cannot be created or given disk blocks (ENOSPC, EMFILE),
        what this call wrote is taken back (:meth:`_take_back`) and the OSError raised; the log
        is as it was, and no segment this call created is left behind."""
        self._close_window()
        start, count = self.max_offset, len(self.segments.segments)
        prepare_next_at = self._prepare_next_at
        try:
            self._write_runs(runs, heads, end_offset, store_timestamp)
        except BaseException:
            self._take_back(start, count)
            self._prepare_next_at = prepare_next_at  # the segment it was set for is gone
            raise

    def _write_runs(
        self, runs: list[bytes], heads: list[list[Head]], end_offset: int, store_timestamp: int
    ) -> None:
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
            segment.append_publishing_last(runs[0], heads[0])
            for run, run_heads in zip(runs[1:], heads[1:], strict=True):
                segment = segments.add_segment(segment.end_offset)
                segment.append_publishing_last(run, run_heads)
            self.last_store_timestamp = store_timestamp  # before max_offset: the flush
            self.max_offset = end_offset  # thread reads them in the other order
            return
        first = publish(runs[0], heads[0])
        writes: list[Write] = [(segment, segment.wrote_position, first)]
        segment.wrote_position += len(first)
        for run, run_heads in zip(runs[1:], heads[1:], strict=True):
            segment = segments.add_segment(segment.end_offset)
            writes.append((segment, 0, publish(run, run_heads)))
            segment.wrote_position = len(run)
        with self._pending_lock:
            self._pending.extend(writes)
            self.max_offset = end_offset
            self.last_store_timestamp = store_timestamp

    def _take_back(self, end: int, segment_count: int) -> None:
        """Undo a write that failed part-way, under the put lock: segments it added are deleted,
        the last one's position goes back to ``end`` and, under async flush, every byte it
        copied past ``end`` is zeroed (exactly those: a run may hold whole pages of zeros, so
        no "up to the first zero page" rule), so that neither a later put nor a recovery, which
        keeps valid records found after damage, sees a record whose put failed. Those bytes
        had their blocks reserved before the copy, so zeroing them cannot meet a full disk.
        (Under sync flush nothing was copied, and nothing reached the write-behind list.)"""
        segments = self.segments.segments
        while len(segments) > segment_count:
            segments.pop().destroy()
        last = self.segments.last
        if last is not None and last.start_offset <= end <= last.end_offset:
            position = end - last.start_offset
            copied = last.wrote_position
            last.wrote_position = position
            last.flushed_position = min(last.flushed_position, position)
            if not self.sync_flush and copied > position:
                last.write_at(position, bytes(copied - position))
        self.max_offset = end

    def append_record(
        self, first: bytes, rest: bytes, end_offset: int, store_timestamp: int
    ) -> bool:
        """Write one record at ``max_offset``: ``first`` is its size and magic (8 bytes), ``rest``
        the remainder, handed over apart so that the size and magic can go last (see
        :meth:`MappedFile.append_split`). Only when the record fits the last segment with room
        for a blank record behind it, and no segment is due to be prepared; otherwise nothing
        is written and the answer is False (:meth:`write_runs` handles segment ends). Under
        async flush a record written moves the append window on (see the module docstring)."""
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
            self.window = segment
            self.window_end = min(
                segment.start_offset + segment.size - BLANK_RECORD_SIZE,
                self._prepare_next_at - 1,
                segment.start_offset + segment.reserved,
            )
            return True
        position = segment.wrote_position
        segment.wrote_position = position + len(first) + len(rest)
        with self._pending_lock:
            self._pending.append((segment, position, first + rest))
            self.max_offset = end_offset
            self.last_store_timestamp = store_timestamp
        return True

    def flush(self, *, steal_after_s: float = 5.0) -> None:
        """Make everything written durable, and book it (``flush_hook``). Runs on the flush
        thread (and at close); raises what the write or the sync raised (under sync flush the
        bytes are kept for the next flush)."""
        if not self.sync_flush:
            target, timestamp = self.max_offset, self.last_store_timestamp
            if target <= self.flushed_offset:
                self._book(None, None)
                return
            try:
                self.segments.flush()
            except BaseException as exc:
                self._book(exc, None)
                raise
            self.flushed_offset = target
            self._book(None, TakenFlush(target, timestamp, [], []))
            return
        taken = self.begin_flush(wait_s=steal_after_s, durable_if_alone=True)
        if taken is None:
            return
        try:
            for segment in taken.to_sync:
                segment.sync()
        except BaseException as exc:
            self.end_flush(taken, exc)
            raise
        self.end_flush(taken, None)

    def begin_flush(self, *, wait_s: float, durable_if_alone: bool = False) -> TakenFlush | None:
        """Sync flush, first half (see the module docstring): take the flush token, then pwrite
        the write-behind list. ``wait_s`` 0: raise :class:`FlushBusyError` at once when the
        token is held (or a blocking taker waits for it); otherwise wait for it, and take it
        over from a holder that has held it ``wait_s`` since its write. Returns the flush,
        which holds the token until :meth:`end_flush`; None when nothing waits to be written.
        Raises what the write raised, with the bytes put back. With ``durable_if_alone``, a
        flush that is one run is made durable by its writes themselves (``to_sync`` is then
        empty)."""
        holder = self._take_token(wait_s)
        try:
            taken = self._write_pending(durable_if_alone=durable_if_alone)
        except BaseException as exc:
            try:
                self._book(exc, None)
            finally:
                self._release_token(holder)
            raise
        if taken is None:
            self._book(None, None)
            self._release_token(holder)
            return None
        holder.since = time.monotonic()  # before ``taken``: a waiting taker reads them
        holder.taken = taken  # the other way round, without the lock
        return taken

    def _write_pending(self, *, durable_if_alone: bool) -> TakenFlush | None:
        """Under the token: take the write-behind list and pwrite it; None when it is empty.
        A failed write puts the bytes back and raises."""
        pending: list[Write] = []
        try:
            with self._pending_lock:
                pending, self._pending = self._pending, []
                target, timestamp = self.max_offset, self.last_store_timestamp
            if not pending:
                return None
            first, last = pending[0], pending[-1]
            alone = (
                durable_if_alone
                and first[0].start_offset + first[1] == self.flushed_offset
                and last[0].start_offset + last[1] + len(last[2]) == target
            )
            if _write_through(pending, durably=alone):
                return TakenFlush(target, timestamp, pending, [])
            # Bytes written again after a failure may lie below the flushed offset.
            low = min(segment.start_offset + position for segment, position, _ in pending)
            to_sync = self._segments_between(min(low, self.flushed_offset), target)
            return TakenFlush(target, timestamp, pending, to_sync)
        except BaseException:
            self._put_back(pending)
            raise

    def _put_back(self, writes: list[Write]) -> None:
        """Writes to be written again by the next flush go back to the write-behind list's head
        (the same bytes at the same place)."""
        with self._pending_lock:
            self._pending[:0] = writes

    def end_flush(self, taken: TakenFlush, error: BaseException | None) -> bool | None:
        """Sync flush, second half: the sync of ``taken.to_sync`` succeeded (``error`` None) or
        raised ``error``. Books it (``flush_hook``) and gives the token back. True when
        ``flushed_offset`` now covers ``taken.target``; None when the token was taken from this
        flush (the flush that took it answers for its bytes, and this end moves nothing)."""
        with self._token_lock:
            holder = self._holder
            if holder is None or holder.taken is not taken:
                return None
            holder.ending = True  # from here on it is not taken over
        try:
            if error is None:
                self.flushed_offset = max(self.flushed_offset, taken.target)
                for segment in taken.to_sync:
                    segment.flushed_position = max(segment.flushed_position, segment.wrote_position)
            else:
                self._put_back(taken.writes)
            self._book(error, taken)
        finally:
            self._release_token(holder)
        return error is None

    def _book(self, error: BaseException | None, taken: TakenFlush | None) -> None:
        """Tell the flush hook how a flush ended (under sync flush under the token; a hook that
        raises is logged: the token is given back all the same)."""
        if self.flush_hook is None:
            return
        try:
            self.flush_hook(error, taken)
        except Exception:
            log.exception("the commitlog's flush hook failed")

    def _take_token(self, wait_s: float) -> _Holder:
        """Take the flush token (see :meth:`begin_flush` for ``wait_s``)."""
        if wait_s <= 0:
            with self._token_lock:
                if self._token_wanted or not self._flush_token.acquire(blocking=False):
                    raise FlushBusyError()
                return self._hold()
        if self._flush_token.acquire(blocking=False):  # the common case: nobody holds it
            return self._hold()
        with self._token_lock:
            self._token_wanted += 1
        try:
            while not self._flush_token.acquire(timeout=min(wait_s, _TOKEN_POLL_S)):
                with self._token_lock:
                    stalled = self._holder
                    if (
                        stalled is None
                        or stalled.taken is None  # still writing
                        or stalled.ending
                        or time.monotonic() - stalled.since < wait_s
                    ):
                        continue
                    # The token (still acquired) is the caller's now.
                    self._put_back(stalled.taken.writes)
                    holder = self._hold()
                log.error(
                    "a commitlog flush did not end within %.1f s (an event loop that stopped, "
                    "or a sync process that hangs?): the next flush writes its bytes again",
                    wait_s,
                )
                return holder
            with self._token_lock:
                return self._hold()
        finally:
            with self._token_lock:
                self._token_wanted -= 1

    def _hold(self) -> _Holder:
        """The caller has just acquired the token: it is the holder now."""
        holder = self._holder = _Holder()
        return holder

    def _release_token(self, holder: _Holder) -> None:
        """Give the token back, unless it was taken over. (A holder that is still writing or
        is ending is never taken over, so no lock is needed to see that it still holds it.)"""
        if self._holder is holder:
            self._holder = None
            self._flush_token.release()

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
        if pos + BLANK_RECORD_SIZE > len(view):
            raise RecordError(f"no record starts at commitlog offset {phys_offset}")
        size, magic = SIZE_AND_MAGIC.unpack_from(view, pos)
        problem = head_problem(size, magic, len(view) - pos)
        if problem is not None:
            raise RecordError(f"no record starts at commitlog offset {phys_offset}: {problem}")
        return int(size)

    # -- segments --------------------------------------------------------------------------
    def _new_segment(self, start: int) -> MappedFile:
        if self._allocator is None:
            segment = MappedFile.create(self.directory, start, self.segment_size)
            fsync_directory(self.directory)  # the new file's name survives a power loss too
            return segment
        # The next one is prepared once this one is half written (see write_runs).
        self._prepare_next_at = start + self.segment_size // 2
        return self._allocator.take(start)

    def _close_window(self) -> None:
        """The single put may no longer write on its own (see the module docstring)."""
        self.window = None
        self.window_end = -1

    def close(self) -> None:
        """Stop the allocator, drop an empty last segment, close every segment: each step
        whatever an earlier one raised (the first error is raised after)."""
        self._close_window()
        allocator = self._allocator
        close_all(
            (
                allocator.close if allocator is not None else _nothing,
                self._drop_empty_last_segment,
                self.segments.close,
            )
        )

    def _drop_empty_last_segment(self) -> None:
        """A clean shutdown leaves no empty preallocated segment behind (as RocketMQ)."""
        last = self.segments.last
        if last is not None and last.wrote_position == 0 and len(self.segments.segments) > 1:
            self.segments.segments.pop().destroy()


def _nothing() -> None:
    pass


_NEVER = 1 << 62
_TOKEN_POLL_S = 0.05  # how often a waiting taker looks at the holder's age


def _write_through(pending: list[Write], *, durably: bool) -> bool:
    """pwrite the write-behind list's runs through the files. With ``durably``, a single run
    is written with ``RWF_DSYNC`` (:meth:`MappedFile.pwrite_durably`), which also makes it
    durable: True then."""
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
    run: list[bytes | bytearray] = []
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
    synced (its blocks allocated, its pages in the page cache), then mapped, so the writer
    meets no allocation and only the cheap faults that map cached pages (RocketMQ's
    AllocateMappedFileService with warm-up; why not ``MAP_POPULATE``: see
    :mod:`localstore.files.mapped_file`). pwrite, fdatasync and mmap release the GIL.
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
                target=self._make_ahead, args=(start,), daemon=True, name=f"quiver-allocate-{start}"
            )
            self._pending[start] = thread
            thread.start()

    def _make_ahead(self, start: int) -> None:
        """The background thread's :meth:`_make`: a failure (a full disk, no descriptors) is
        logged, and the put that needs the segment makes it itself and answers for it."""
        try:
            self._make(start)
        except Exception as exc:
            log.warning("preparing commitlog segment %s failed: %s", segment_name(start), exc)

    def _make(self, start: int) -> None:
        """Warm, place and map the segment at ``start``; one that fails leaves no file."""
        path = self._directory / segment_name(start)
        created = not path.exists()
        try:
            if created:
                # Warm under a name RocketMQ's loader never sees, then move it into place whole.
                scratch = self._directory.parent / "quiver-tmp"
                scratch.mkdir(exist_ok=True)
                tmp = scratch / f"{segment_name(start)}.warming"
                tmp.unlink(missing_ok=True)
                warm_file(tmp, self._size)
                os.replace(tmp, path)
                fsync_directory(self._directory)  # the new name survives a power loss too
            segment = MappedFile(path, start, self._size, warmed=True)
        except BaseException:
            if created:
                path.unlink(missing_ok=True)
            raise
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
