"""One segment file: preallocated to its full size, memory-mapped, written at a moving position.

A segment is named by the 20-digit decimal byte offset at which it starts in its logical stream
(commitlog or one consume queue), is always exactly ``size`` bytes long (zero-filled beyond what
was written, as RocketMQ's loader requires) and holds a valid prefix of ``wrote_position`` bytes.

Writes go either into the mapping (``append``: a memcpy, fastest for small appends) or through
``os.pwrite`` on the file (``pwrite``): data that must be fsynced soon is better written with
pwrite, because after the kernel writes a mapped page back, the next store into it faults again.
Reads always go through the mapping, which on Linux shows both kinds of write at once. ``flush``
is ``os.fdatasync``, which releases the GIL (``mmap.flush`` does not) and covers pages dirtied
through the mapping too.

Read-ahead: a page fault in a file mapping reads around the faulting page (``read_ahead_kb``, 8 MiB
on these machines), and over a hole that means allocating and zeroing the whole window: a 2 ms
stall on the first store into a new consume queue, and again every few MiB of a new segment.
A segment this process creates is written before it is read, so its mapping is advised
``MADV_RANDOM`` (one page per fault) while it is the one being written; ``writing_done`` restores
normal read-ahead once the writer has moved on, for readers that come back to it after its pages
left the page cache. Segments mapped later (written earlier) keep normal read-ahead, except those
made with ``read_ahead=False`` (consume-queue files), which are advised ``MADV_RANDOM`` for life:
they are read a unit, a binary search or a get's few hundred bytes at a time, and a fault with
read-around over a sparse file zero-fills the whole window, a cost the pool would pay again
each time it maps such a file anew (opening a store of many queues maps them all).

No ``MAP_POPULATE``: on a shared mapping it maps a file's pages read-only, and over pages that
are clean (a warmed segment's, synced by :func:`warm_file`) every first store into a page then
takes a write-protect fault, which costs a batch put far more than letting its stores fault
the pages in themselves.

Open files are bounded (:class:`OpenSegments`, one per process, since ``ulimit -n`` and
``vm.max_map_count`` are the process's): a segment is *mapped* (``view``, ``_map``) or *closed*
(no fd, no mapping); its positions (``wrote_position``, ``flushed_position``, ``reserved``) are
plain attributes that survive either. Segments found at load start closed. Touching ``view``,
``_map`` or ``_fd`` of a closed segment (a :class:`_ClosedSegment`, whose ``__getattr__`` is
called only for those empty slots) maps it and enters it in the pool, and a mapped segment is a
plain :class:`MappedFile`, so the hot paths' attribute reads cost what they did;
past the pool's bound the segment mapped first is closed, segments that are not being written
(full) before those that may be, never one a put holds (:meth:`OpenSegments.hold`). A segment
kept mapped (:meth:`OpenSegments.pin`: the commitlog's last) is outside the pool. Closing for
the pool only drops references: a reader or writer that took ``view``, ``_map`` or ``_fd`` keeps
that mapping or descriptor alive until it lets go (an ``_OwnedFd`` closes itself when its last
reference goes), so nothing is closed under it.
A mapped segment holds two descriptors: ``_fd``, for writes and syncs, and the mapping's own
(CPython dups it).

Creation either completes or leaves nothing: a segment whose file this process created is
removed again when its truncate, mapping or first reservation fails (ENOSPC, EMFILE).
"""

from __future__ import annotations

import contextlib
import errno
import mmap
import os
import resource
import struct
import threading
from collections import OrderedDict
from itertools import islice
from pathlib import Path
from typing import TYPE_CHECKING, Any

from localstore.errors import SegmentUnavailableError

NAME_DIGITS = 20
_WARM_CHUNK_BYTES = 1 << 20
_PAGE = 4096
_HEAD_BYTES = 8  # a record's size and magic: published after the rest of it
_HEAD = struct.Struct(">ii")  # a record's TOTALSIZE and MAGICCODE, its first 8 bytes
_RWF_DSYNC: int | None = getattr(os, "RWF_DSYNC", None)
RESERVE_CHUNK_BYTES = 4 << 20
# Consume-queue files reserve blocks in small steps: a one-message queue takes one chunk of
# disk, not its file's size (a fallocate per 3,276 units).
CQ_RESERVE_CHUNK_BYTES = 64 << 10
_LAZY = frozenset({"view", "_map", "_fd"})


def segment_name(start_offset: int) -> str:
    """``offset2FileName``: the start offset left-padded with zeros to 20 digits."""
    return str(start_offset).zfill(NAME_DIGITS)


class _OwnedFd(int):
    """A file descriptor that closes itself when its last reference goes: a thread that read
    ``segment._fd`` keeps it open through its system call, even if the pool closes the
    segment meanwhile (a plain int could be closed and reused under the call)."""

    def __del__(self) -> None:
        with contextlib.suppress(Exception):  # EBADF, or os already gone at interpreter exit
            os.close(self)


class MappedFile:
    """A fixed-size segment file and its shared mapping (mapped on demand: see the module
    docstring)."""

    __slots__ = (
        "_closed",
        "_fd",
        "_map",
        "_mapped",
        "_random_access",
        "flushed_position",
        "held",
        "path",
        "read_ahead",
        "read_only",
        "reserve_chunk_bytes",
        "reserved",
        "size",
        "start_offset",
        "view",
        "wrote_position",
    )

    def __init__(
        self,
        path: Path,
        start_offset: int,
        size: int,
        *,
        warmed: bool = False,
        reserve_chunk_bytes: int = RESERVE_CHUNK_BYTES,
        read_ahead: bool = True,
    ):
        """Open (creating it if missing) and map the file. A file this call created is
        removed again if it cannot be sized or mapped."""
        self._init_positions(path, start_offset, size, reserve_chunk_bytes, read_ahead)
        self.reserved = size if warmed else 0  # bytes whose disk blocks are allocated
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
            created = True
        except FileExistsError:
            fd = os.open(path, os.O_RDWR)
            created = False
        try:
            length = os.fstat(fd).st_size
            if length == 0:
                os.ftruncate(fd, size)
            elif length != size:
                raise ValueError(f"{path} is {length} bytes, expected the segment size {size}")
            self._random_access = length == 0
            self._map_with(fd)
        except BaseException:
            os.close(fd)
            if created:
                path.unlink(missing_ok=True)
            raise
        self._fd = _OwnedFd(fd)
        _POOL.admit(self)

    def _init_positions(
        self, path: Path, start_offset: int, size: int, reserve_chunk_bytes: int, read_ahead: bool
    ) -> None:
        self.path = path
        self.start_offset = start_offset
        self.size = size
        self.reserve_chunk_bytes = reserve_chunk_bytes
        self.read_ahead = read_ahead
        self.read_only = False  # opened O_RDONLY and mapped ACCESS_READ (see existing())
        self.wrote_position = 0
        self.flushed_position = 0
        self.reserved = 0
        self._mapped = False
        self._closed = False
        self._random_access = False
        self.held = False  # a put writes to it: the pool does not close it (OpenSegments.hold)

    @classmethod
    def existing(
        cls,
        path: Path,
        start_offset: int,
        size: int,
        *,
        reserve_chunk_bytes: int = RESERVE_CHUNK_BYTES,
        read_ahead: bool = True,
        read_only: bool = False,
    ) -> MappedFile:
        """A segment already on disk (``size`` bytes, checked by the caller), left closed:
        no descriptor, no mapping until first touched. Positions are the caller's to set;
        ``reserved`` stays 0, so a write first reserves (a no-op over allocated blocks).
        ``read_only``: opened ``O_RDONLY`` and mapped ``ACCESS_READ`` when touched, so nothing
        can write through it (a store another process holds: :mod:`localstore.read_only`)."""
        segment: MappedFile = _ClosedSegment.__new__(_ClosedSegment)
        segment._init_positions(path, start_offset, size, reserve_chunk_bytes, read_ahead)
        segment.read_only = read_only
        return segment

    def _map_with(self, fd: int) -> None:
        """Map the file open at ``fd`` (the mapping keeps its own duplicate of it)."""
        # Never MAP_POPULATE: see the module docstring.
        access = mmap.ACCESS_READ if self.read_only else mmap.ACCESS_WRITE
        mapping = mmap.mmap(fd, self.size, access=access)
        if self._random_access or not self.read_ahead:
            mapping.madvise(mmap.MADV_RANDOM)  # see the module docstring
        self._map = mapping
        self.view = memoryview(mapping)
        self._mapped = True

    def _open_now(self, name: str) -> Any:
        """Open and map the segment (the pool's lock is held) and make it a plain
        :class:`MappedFile` again; returns the attribute asked for. Failures are
        :class:`SegmentUnavailableError`."""
        if self._closed:
            raise SegmentUnavailableError(errno.EBADF, "segment is closed", str(self.path))
        try:
            fd = os.open(self.path, os.O_RDONLY if self.read_only else os.O_RDWR)
            try:
                self._map_with(fd)
            except BaseException:
                os.close(fd)
                raise
        except OSError as exc:
            raise SegmentUnavailableError(
                exc.errno, f"cannot open or map the segment ({exc.strerror})", str(self.path)
            ) from exc
        self._fd = _OwnedFd(fd)
        self.__class__ = MappedFile
        return getattr(self, name)

    def _drop(self) -> None:
        """Close for the pool: drop the mapping and the descriptor (see the module docstring:
        whoever holds one of them keeps it until it lets go) and become a
        :class:`_ClosedSegment`. The pool's lock is held."""
        self.__class__ = _ClosedSegment  # first: a reader that then finds a slot empty maps
        if self._mapped:  # it again through __getattr__, which waits for the pool's lock
            self._mapped = False
            del self.view
            del self._map
            del self._fd

    @classmethod
    def create(
        cls,
        directory: Path,
        start_offset: int,
        size: int,
        *,
        warm: bool = False,
        reserve_chunk_bytes: int = RESERVE_CHUNK_BYTES,
        read_ahead: bool = True,
    ) -> MappedFile:
        """Create the zero-filled segment at ``start_offset`` (``warm``: write its pages first;
        ``read_ahead`` False: see :attr:`read_ahead`)."""
        path = directory / segment_name(start_offset)
        if warm:
            warm_file(path, size)
        try:
            return cls(
                path,
                start_offset,
                size,
                reserve_chunk_bytes=reserve_chunk_bytes,
                read_ahead=read_ahead,
            )
        except BaseException:
            if warm:
                path.unlink(missing_ok=True)
            raise

    def keep_mapped(self) -> None:
        """Map now and stay mapped until :meth:`close`, outside the pool: retention calls it
        before unlinking a file that readers may still be reading (it could not be mapped
        again once unlinked)."""
        _POOL.pin(self)

    def writing_done(self) -> None:
        """The writer has moved to the next segment: page faults read ahead again, for readers
        that come to this segment once its pages have left the page cache."""
        random_access, self._random_access = self._random_access, False
        if random_access and self._mapped and self.read_ahead:  # (mapped afresh: normal)
            self._map.madvise(mmap.MADV_NORMAL)

    @property
    def end_offset(self) -> int:
        """Logical offset just past the segment."""
        return self.start_offset + self.size

    @property
    def wrote_offset(self) -> int:
        """Logical offset just past the valid data."""
        return self.start_offset + self.wrote_position

    @property
    def remaining(self) -> int:
        return self.size - self.wrote_position

    @property
    def is_full(self) -> bool:
        return self.wrote_position == self.size

    def append(self, data: bytes | memoryview) -> None:
        """Write ``data`` at the wrote position and advance it. The caller checks the room."""
        position = self.wrote_position
        end = position + len(data)
        if end > self.reserved:
            self._reserve(end)
        self._map[position:end] = data
        self.wrote_position = end

    def reserve(self, end: int) -> None:
        """Allocate disk blocks for the first ``end`` bytes (if not yet): raises OSError
        (ENOSPC) now rather than at a later append."""
        if end > self.reserved:
            self._reserve(end)

    def _reserve(self, end: int) -> None:
        """Allocate disk blocks up to ``end`` (and a chunk beyond) before storing into the
        mapping: a store into a mapped hole on a full disk kills the process with SIGBUS,
        while posix_fallocate raises OSError (ENOSPC) that the caller turns into a status."""
        target = min(self.size, max(end, self.reserved + self.reserve_chunk_bytes))
        os.posix_fallocate(self._fd, self.reserved, target - self.reserved)
        self.reserved = target

    def append_publishing_last(self, data: bytes, heads: list[tuple[int, int, int]]) -> None:
        """``append`` for commitlog runs (records one after another, a blank record maybe
        last), published in log order: ``data`` is the run with every record's size and magic
        (its first 8 bytes) zeroed, and ``heads`` those 8 bytes as (position in the segment,
        size, magic), in log order, as the batch encoder gives them. The run is copied, then the
        heads are stored record by record, first to last. A process killed mid-way leaves
        whole records of a prefix of the run, then records without their magic: a torn tail,
        which recovery cuts (with the records before it when they are a put's first records:
        :mod:`localstore.record.put_mark`). Never a record whose body made it but whose
        properties did not, and never a record of the run without the ones before it
        (recovery steps over damage to the valid records after it, so a later record
        published before an earlier one would leave a "damaged" range behind a plain kill)."""
        position = self.wrote_position
        end = position + len(data)
        if end > self.reserved:
            self._reserve(end)
        mapped = self._map
        mapped[position:end] = data
        publish = _HEAD.pack_into
        for head_at, size, magic in heads:  # first to last
            publish(mapped, head_at, size, magic)
        self.wrote_position = end

    def append_split(self, first: bytes, rest: bytes | memoryview) -> None:
        """Append one record ``first + rest``, copying ``rest`` first and ``first`` (its size
        and magic, 8 bytes) last, so a kill mid-copy leaves no visible part of it (a run of
        several records goes through :meth:`append_publishing_last`). The single put hands
        its record over in these two pieces, so nothing is joined or sliced twice."""
        position = self.wrote_position
        start = position + len(first)
        end = start + len(rest)
        if end > self.reserved:
            self._reserve(end)
        mapped = self._map
        mapped[start:end] = rest
        mapped[position:start] = first
        self.wrote_position = end

    def pwrite(self, position: int, data: bytes | bytearray) -> None:
        """Write a commitlog run (see :meth:`append_publishing_last`) through the file (not the
        mapping) at ``position``; positions are the caller's. Within one page a single write is
        enough: the kernel copies a write into the page cache page by page, from the start, and
        a killed process stops only between pages, so a one-page write lands whole or not at
        all. A run across pages is written twice: first with every record's size and magic
        zeroed (no record of it is visible yet, wherever the write stops), then whole. A kill
        inside the second write leaves the pages before some page with their magics, and every
        record whose magic landed was already whole: a prefix of the run's records, never a
        later record without an earlier one. Each write hands the GIL over and waits to get it
        back, which is the sync-flush group commit's cost, so a write is never split further
        than publishing needs."""
        view = memoryview(data)
        if not _within_one_page(position, len(data)):
            self._pwrite_all(position, memoryview(_unpublished(data)))
        self._pwrite_all(position, view)

    def pwrite_durably(self, position: int, data: bytes | bytearray) -> bool:
        """Write ``data`` at ``position`` and make it durable with ``pwritev(RWF_DSYNC)`` (the
        write, then what an fdatasync of its range does). False, and nothing written, where the
        flag is missing; the caller then uses ``pwrite`` and ``sync``.

        Within one page that is one call. A run across pages first gets a plain ``pwrite`` with
        every record's size and magic zeroed, then the whole run in the durable call, in the
        order :meth:`pwrite` explains: a kill leaves a prefix of the run's records, each whole.
        Each call hands the GIL over and waits to get it back: two calls, not the three of
        ``pwrite`` and ``sync``."""
        if _RWF_DSYNC is None:
            return False
        if not _within_one_page(position, len(data)):
            self._pwrite_all(position, memoryview(_unpublished(data)))
        written = os.pwritev(self._fd, [data], position, _RWF_DSYNC)
        if written < len(data):  # not seen for a regular file; finish the ordinary way
            self._pwrite_all(position + written, memoryview(data)[written:])
            os.fdatasync(self._fd)
        return True

    def _pwrite_all(self, position: int, data: memoryview) -> None:
        written = os.pwrite(self._fd, data, position)
        while written < len(data):
            written += os.pwrite(self._fd, data[written:], position + written)

    def zero_from(self, position: int) -> int:
        """Zero the bytes from ``position`` up to the first all-zero 4 KiB page (or the end):
        the remains of a torn write past the valid end. Returns how many bytes were zeroed."""
        mapped = self._map
        end = position
        while end < self.size:
            stop = min(self.size, (end // _PAGE + 1) * _PAGE)
            if not any(mapped[end:stop]):
                break
            end = stop
        if end > position:
            mapped[position:end] = bytes(end - position)
        return end - position

    def sync(self) -> None:
        """fdatasync without touching the positions (the caller tracks what it wrote)."""
        os.fdatasync(self._fd)

    def write_at(self, position: int, data: bytes) -> None:
        """Overwrite bytes inside the segment without moving the wrote position."""
        self._map[position : position + len(data)] = data

    def flush(self) -> int:
        """Make everything written so far durable; returns the flushed position."""
        position = self.wrote_position
        if position > self.flushed_position:
            try:  # (no local for the fd: a kept traceback would keep the descriptor open)
                os.fdatasync(self._fd)
            except SegmentUnavailableError:  # raised by reading _fd, never by fdatasync
                if self._closed:  # deleted meanwhile (a failed write taken back): nothing to sync
                    return position
                raise
            self.flushed_position = position
        return position

    def close(self) -> bool:
        """Unmap and close for good (a later touch raises :class:`SegmentUnavailableError`);
        idempotent. Never fails because a reader still holds a slice of the mapping (an
        exception's traceback may keep one for long): the mapping is then left for the garbage
        collector to unmap once the last slice goes, and False is returned."""
        with _POOL.lock:
            self._closed = True
            _POOL.forget(self)
            unmapped = True
            if self._mapped:
                self.view.release()
                try:
                    self._map.close()
                except BufferError:  # exported slices: unmapped when the last one is collected
                    unmapped = False
            self._drop()
        return unmapped

    def destroy(self) -> bool:
        """Close and delete the file; whether the mapping is unmapped (see :meth:`close`)."""
        unmapped = self.close()
        self.path.unlink(missing_ok=True)
        return unmapped


class _ClosedSegment(MappedFile):
    """A segment without its mapping and descriptor: one loaded and not yet touched, or one the
    pool closed. Touching ``view``, ``_map`` or ``_fd`` maps it again (:meth:`OpenSegments.open`)
    and turns it back into a :class:`MappedFile`. A class of its own, so that a mapped segment's
    class has no ``__getattr__``: with one, CPython 3.11 does not specialize attribute reads on
    the class, and every put reads ``view`` and the positions."""

    __slots__ = ()

    if not TYPE_CHECKING:  # to mypy every other attribute stays checked

        def __getattr__(self, name: str) -> Any:
            """Only for an empty slot: ``view``/``_map``/``_fd`` of a closed segment."""
            if name not in _LAZY:
                raise AttributeError(name)
            return _POOL.open(self, name)


def _unpublished(run: bytes | bytearray) -> bytearray:
    """A copy of a commitlog run (records one after another, each led by its size and magic,
    a blank record maybe last) with every record's size and magic zeroed."""
    zeroed = bytearray(run)
    unpack, pack = _HEAD.unpack_from, _HEAD.pack_into
    start, length = 0, len(run)
    while start + _HEAD_BYTES <= length:
        size = unpack(run, start)[0]
        pack(zeroed, start, 0, 0)
        if size < _HEAD_BYTES:
            break
        start += size  # past the run's end after a blank record, which declares the segment's rest
    return zeroed


def _within_one_page(position: int, length: int) -> bool:
    return position // _PAGE == (position + length - 1) // _PAGE


def warm_file(path: Path, size: int) -> None:
    """Create ``path`` at ``size`` bytes by writing zeros and syncing them.

    On virtual machines the first touch of a page costs a host fault; writing zeros with
    ``pwrite`` pays it here (without the GIL) instead of in the writer's memcpy. Syncing once
    turns the file's blocks into written extents, so the fdatasync of a later append has no
    allocation metadata to commit, only the data.
    """
    zeros = bytes(_WARM_CHUNK_BYTES)
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
    try:
        written = 0
        while written < size:
            written += os.pwrite(fd, zeros[: min(_WARM_CHUNK_BYTES, size - written)], written)
        os.fdatasync(fd)  # blocks allocated and clean: a later fdatasync carries data only
    except BaseException:
        path.unlink(missing_ok=True)  # a failed creation leaves nothing behind
        raise
    finally:
        os.close(fd)


def default_open_segment_limit() -> int:
    """A quarter of the soft ``RLIMIT_NOFILE`` (a written segment holds two descriptors),
    at most 256 and at least 4."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return 256
    return max(4, min(256, soft // 4))


class OpenSegments:
    """The process's mapped segments, closed first-mapped-first past ``limit``.

    Only the slow paths come here (a segment's first touch after load or after the pool closed
    it, creation, pin, close): a hit on a mapped segment is a plain attribute read, so the
    order is that of mapping, not of use. Full segments (not being written) are closed before
    partly written ones, which are the write targets of the consume queues. Pinned segments
    (the commitlog's last) are outside the pool and never closed by it.
    """

    def __init__(self, limit: int):
        self.limit = limit
        self.lock = threading.RLock()
        self._full: OrderedDict[MappedFile, None] = OrderedDict()
        self._partial: OrderedDict[MappedFile, None] = OrderedDict()
        self._pinned: set[MappedFile] = set()

    def __len__(self) -> int:
        return len(self._full) + len(self._partial)

    def open(self, segment: MappedFile, name: str) -> Any:
        """Map ``segment`` (open its ``_fd`` when ``name`` is that) and enter it in the pool."""
        with self.lock:
            if segment._mapped:  # another thread mapped it while this one waited
                return getattr(segment, name)
            value = segment._open_now(name)
            self.admit(segment)
            return value

    def admit(self, segment: MappedFile) -> None:
        with self.lock:
            if segment in self._pinned:
                return
            pool = self._full if segment.wrote_position >= segment.size else self._partial
            pool[segment] = None
            if len(self) > self.limit:
                self._close_excess()

    def _close_excess(self) -> None:
        """Close the first-mapped segments past the limit, full ones first, never one a put
        holds (while every candidate is held the pool stays over its limit)."""
        excess = len(self) - self.limit
        for victims in (self._full, self._partial):
            for victim in list(islice((s for s in victims if not s.held), excess)):
                del victims[victim]
                victim._drop()
                excess -= 1
            if excess <= 0:
                return

    def hold(self, segment: MappedFile) -> None:
        """Map ``segment`` now (raises :class:`SegmentUnavailableError`, an OSError) and keep
        it mapped until ``segment.held`` is cleared: a put holds the consume-queue files its
        units go to from before its records are written until the units are, so that writing
        them cannot fail for want of a descriptor or a mapping."""
        with self.lock:
            segment.view  # noqa: B018 (maps it now, if it was closed)
            segment.held = True

    def forget(self, segment: MappedFile) -> None:
        with self.lock:
            self._full.pop(segment, None)
            self._partial.pop(segment, None)
            self._pinned.discard(segment)

    def pin(self, segment: MappedFile) -> None:
        """Keep ``segment`` mapped until :meth:`unpin`: it leaves the pool."""
        with self.lock:
            self._full.pop(segment, None)
            self._partial.pop(segment, None)
            self._pinned.add(segment)
            segment.view  # noqa: B018 (maps it now, if the pool had closed it)

    def unpin(self, segment: MappedFile) -> None:
        """Back into the pool (it may be closed once others are mapped after it)."""
        with self.lock:
            if segment in self._pinned:
                self._pinned.discard(segment)
                if segment._mapped:
                    self.admit(segment)


_POOL = OpenSegments(default_open_segment_limit())


def open_segments() -> OpenSegments:
    """The process's pool of mapped segments (its ``limit`` may be changed, e.g. by tests)."""
    return _POOL
