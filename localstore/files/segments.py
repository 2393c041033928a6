"""A directory of equal-sized segments named by their start offsets (RocketMQ's MappedFileQueue).

Invariants: segment k+1 starts exactly ``size`` bytes after segment k; every file is ``size``
bytes long; only the last segment may be partly written. A logical offset ``o`` lives in the
segment whose start is ``o - o % size``. Loading refuses files of another length (RocketMQ's
loader refuses them too) except a zero-length last file, which is deleted.

The ``next_segment`` hook lets the commitlog hand in a segment prepared ahead of time.

Segments are loaded closed and mapped on first touch (:mod:`localstore.files.mapped_file`): opening
a queue of any length costs a directory listing, no descriptor. With ``keep_last_mapped`` (the
commitlog) the last segment is pinned mapped; others may be closed by the process's pool and
are mapped again when next touched.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

from localstore.errors import CorruptStoreError
from localstore.files.mapped_file import (
    NAME_DIGITS,
    RESERVE_CHUNK_BYTES,
    MappedFile,
    open_segments,
)
from localstore.runtime.closing import close_all

SegmentFactory = Callable[[int], MappedFile]


class SegmentQueue:
    """Ordered segments of one logical stream."""

    def __init__(
        self,
        directory: Path,
        segment_size: int,
        *,
        factory: SegmentFactory | None = None,
        keep_last_mapped: bool = False,
        reserve_chunk_bytes: int = RESERVE_CHUNK_BYTES,
        read_ahead: bool = True,
    ):
        self.directory = directory
        self.segment_size = segment_size
        self.segments: list[MappedFile] = []
        self._factory = factory
        self._keep_last_mapped = keep_last_mapped
        self._reserve_chunk_bytes = reserve_chunk_bytes
        self._read_ahead = read_ahead

    # -- loading ---------------------------------------------------------------------------
    def load(self) -> None:
        """Take in every segment of the directory, closed (mapped on first touch); positions
        are set by the caller's recovery."""
        if not self.directory.is_dir():
            return
        names = sorted(
            n for n in os.listdir(self.directory) if len(n) == NAME_DIGITS and n.isdigit()
        )
        for i, name in enumerate(names):
            path = self.directory / name
            length = path.stat().st_size
            if length == 0 and i == len(names) - 1:
                path.unlink()
                continue
            if length != self.segment_size:
                raise CorruptStoreError(
                    f"{path} is {length} bytes but this store's segments are "
                    f"{self.segment_size} bytes"
                )
            start = int(name)
            if self.segments and start != self.segments[-1].end_offset:
                raise CorruptStoreError(
                    f"{path} should start at {self.segments[-1].end_offset}: a segment is missing"
                )
            segment = MappedFile.existing(
                path,
                start,
                self.segment_size,
                reserve_chunk_bytes=self._reserve_chunk_bytes,
                read_ahead=self._read_ahead,
            )
            segment.wrote_position = segment.flushed_position = self.segment_size
            self.segments.append(segment)
        self._pin_last()

    def _pin_last(self) -> None:
        if self._keep_last_mapped and self.segments:
            open_segments().pin(self.segments[-1])

    # -- queries ---------------------------------------------------------------------------
    @property
    def last(self) -> MappedFile | None:
        return self.segments[-1] if self.segments else None

    @property
    def min_offset(self) -> int:
        return self.segments[0].start_offset if self.segments else 0

    @property
    def max_offset(self) -> int:
        """Offset just past the last written byte."""
        return self.segments[-1].wrote_offset if self.segments else 0

    def find(self, offset: int) -> MappedFile | None:
        """The segment holding ``offset``, or None when it is outside the queue."""
        segments = self.segments
        if not segments or offset < segments[0].start_offset:
            return None
        index = (offset - segments[0].start_offset) // self.segment_size
        return segments[index] if index < len(segments) else None

    # -- writing ---------------------------------------------------------------------------
    def segment_for_append(self, start_if_empty: int = 0) -> MappedFile:
        """The last segment if it has room, else a new one after it."""
        last = self.last
        if last is not None and not last.is_full:
            return last
        if last is None:
            start = start_if_empty - start_if_empty % self.segment_size
        else:
            start = last.end_offset
        return self.add_segment(start)

    def add_segment(self, start: int) -> MappedFile:
        self.directory.mkdir(parents=True, exist_ok=True)
        if self._factory is not None:
            segment = self._factory(start)
        else:
            segment = MappedFile.create(
                self.directory,
                start,
                self.segment_size,
                reserve_chunk_bytes=self._reserve_chunk_bytes,
                read_ahead=self._read_ahead,
            )
        if self.segments:
            previous = self.segments[-1]
            previous.writing_done()
            if self._keep_last_mapped:
                open_segments().unpin(previous)
        self.segments.append(segment)
        self._pin_last()
        return segment

    def truncate(self, offset: int) -> None:
        """Drop everything at and after ``offset``: later segments are deleted, the one holding
        ``offset`` keeps its bytes but its positions move back (later appends overwrite them)."""
        while self.segments and self.segments[-1].start_offset > offset:
            self.segments.pop().destroy()
        self._pin_last()
        last = self.last
        if last is not None and offset < last.end_offset:
            last.wrote_position = offset - last.start_offset
            last.flushed_position = min(last.flushed_position, last.wrote_position)

    def flush(self) -> None:
        """fdatasync every segment that holds unflushed bytes."""
        for segment in reversed(self.segments):
            if segment.flushed_position < segment.wrote_position:
                segment.flush()
            elif segment.wrote_position > 0:
                break

    def close(self) -> None:
        """Close every segment, whatever one of them raised (then raised)."""
        close_all(segment.close for segment in self.segments)  # each close may run again
        self.segments.clear()
