"""One hash index file (``index/{yyyyMMddHHmmssSSS}``): message keys -> commitlog offsets.

Layout (RocketMQ's IndexFile), big-endian, ``40 + 4 * slots + 20 * entries`` bytes::

    header (40 bytes)
      0  8  beginTimestamp   store time of the first entry
      8  8  endTimestamp     store time of the last entry
     16  8  beginPhyOffset   commitlog offset of the first entry's message
     24  8  endPhyOffset     commitlog offset of the last entry's message
     32  4  hashSlotCount    slots in use
     36  4  indexCount       next entry number; starts at 1 (entry 0 is never used)
    slots: ``slots`` ints at ``40 + slot * 4``, each the newest entry number of its bucket (0: none)
    entry i at ``40 + slots * 4 + i * 20``:
      0  4  keyHash          abs(Java hashCode(key)), MIN_VALUE -> 0
      4  8  phyOffset
     12  4  timeDiff         seconds since beginTimestamp (0 while beginTimestamp <= 0)
     16  4  prevIndex        previous entry of the same bucket (0: end of chain)

A file holds ``entries - 1`` keys. Only hashes are stored: a lookup can return another key's
message (a collision), so callers re-check the key against the message itself.

Access to slots and entries is by hash and by chain, never sequential, so the mapping is advised
``MADV_RANDOM``: otherwise each fault in a new file reads around it, zero-filling a whole
window of holes for one 4-byte slot, several times over a new file's slot table.
"""

from __future__ import annotations

import mmap
import os
import struct
import time
from itertools import chain, repeat
from pathlib import Path

HEADER_SIZE = 40
SLOT_SIZE = 4
ENTRY_SIZE = 20
HEADER = struct.Struct(">qqqqii")
ENTRY = struct.Struct(">iqii")
SLOT = struct.Struct(">i")
_INT_MAX = 0x7FFFFFFF
_ENTRIES_PER_PACK = 128  # entries written by one pack_into; bounds the compiled layouts
_ENTRIES_STRUCTS: dict[int, struct.Struct] = {}
_RESERVE_CHUNK_BYTES = 1 << 20


def _entries_struct(count: int) -> struct.Struct:
    """The layout of ``count`` consecutive entries (compiled once per count)."""
    entries = _ENTRIES_STRUCTS.get(count)
    if entries is None:
        entries = _ENTRIES_STRUCTS[count] = struct.Struct(">" + "iqii" * count)
    return entries


def index_file_name(timestamp_ms: int) -> str:
    """Local-time ``yyyyMMddHHmmssSSS`` of ``timestamp_ms`` (RocketMQ's timeMillisToHumanString)."""
    local = time.localtime(timestamp_ms / 1000)
    return time.strftime("%Y%m%d%H%M%S", local) + f"{timestamp_ms % 1000:03d}"


class IndexFile:
    """A mapped index file with its header kept in attributes and written back on ``sync``."""

    def __init__(self, path: Path, slots: int, entries: int, *, read_only: bool = False):
        """Map ``path`` (created when missing). ``read_only``: opened ``O_RDONLY`` and mapped
        ``ACCESS_READ``, never created nor sized (a file of another length raises ValueError):
        for looking up keys in a store another process holds (:mod:`localstore.read_only`)."""
        self.path = path
        self.slots = slots
        self.entries = entries
        self.size = HEADER_SIZE + slots * SLOT_SIZE + entries * ENTRY_SIZE
        self.read_only = read_only
        flags = os.O_RDONLY if read_only else os.O_RDWR | os.O_CREAT
        fd = os.open(path, flags, 0o644)
        try:
            length = os.fstat(fd).st_size
            if length == 0 and not read_only:
                os.ftruncate(fd, self.size)
                # The header and slots are written at random: their blocks are allocated now.
                os.posix_fallocate(fd, 0, HEADER_SIZE + slots * SLOT_SIZE)
            elif length != self.size:
                raise ValueError(
                    f"{path} is {length} bytes, expected {self.size} for an index "
                    f"file of {slots} slots and {entries} entries"
                )
            access = mmap.ACCESS_READ if read_only else mmap.ACCESS_WRITE
            self._map = mmap.mmap(fd, self.size, access=access)
            self._map.madvise(mmap.MADV_RANDOM)  # see the module docstring
        finally:
            os.close(fd)
        self.begin_timestamp: int
        self.end_timestamp: int
        self.begin_phy_offset: int
        self.end_phy_offset: int
        self.hash_slot_count: int
        self.index_count: int
        (
            self.begin_timestamp,
            self.end_timestamp,
            self.begin_phy_offset,
            self.end_phy_offset,
            self.hash_slot_count,
            self.index_count,
        ) = HEADER.unpack_from(self._map, 0)
        self.index_count = max(self.index_count, 1)  # 0 on disk until the first key
        self._entries_at = HEADER_SIZE + slots * SLOT_SIZE
        # Bytes from the start whose blocks are known allocated: entries are reserved ahead of
        # their writes (_reserve), since a store into a hole of a full disk kills the process
        # with SIGBUS. A file from an earlier run may have holes anywhere: its first write
        # reserves the whole written part again (posix_fallocate skips what is allocated).
        self._reserved = self._entries_at if length == 0 else 0

    @classmethod
    def create(
        cls,
        directory: Path,
        slots: int,
        entries: int,
        *,
        now_ms: int,
        previous_end_phy_offset: int = 0,
        previous_end_timestamp: int = 0,
    ) -> IndexFile:
        """A new file named by ``now_ms``, its header preset to the previous file's end."""
        directory.mkdir(parents=True, exist_ok=True)
        name_ms = now_ms
        while (directory / index_file_name(name_ms)).exists():
            name_ms += 1  # two files in one millisecond (tiny test geometries)
        path = directory / index_file_name(name_ms)
        try:
            index = cls(path, slots, entries)
        except BaseException:
            path.unlink(missing_ok=True)  # a file that could not be made leaves no trace
            raise
        if previous_end_phy_offset or previous_end_timestamp:
            index.begin_phy_offset = index.end_phy_offset = previous_end_phy_offset
            index.begin_timestamp = index.end_timestamp = previous_end_timestamp
        index.write_header()
        return index

    @property
    def is_full(self) -> bool:
        return self.index_count >= self.entries

    def put_keys(
        self, hashes: list[int], offsets: list[int], start: int, store_timestamp: int
    ) -> int:
        """Add keys ``hashes[start:]`` (their messages at ``offsets``, all stored at
        ``store_timestamp``) until the file is full; returns the index of the first key not
        added. The header is written back by ``write_header``.

        Each key's slot is read and rewritten in turn (keys of one batch may share a bucket);
        the entries, which are consecutive, are written together by one ``pack_into``."""
        count = self.index_count
        stop = min(len(hashes), start + max(self.entries - count, 0))
        if stop <= start:
            return start
        end = self._entries_at + (count + stop - start) * ENTRY_SIZE
        if end > self._reserved:
            self._reserve(end)
        begin = self.begin_timestamp
        # The diff of the file's first entry is taken before its begin time is set (RocketMQ).
        diff = 0 if begin <= 0 else min(max((store_timestamp - begin) // 1000, 0), _INT_MAX)
        if count <= 1:
            self.begin_phy_offset = offsets[start]
            self.begin_timestamp = store_timestamp
            self._put_entries(hashes, offsets, start, start + 1, diff)
            diff = 0  # later entries are measured from the begin time just set
            start += 1
        if start < stop:
            self._put_entries(hashes, offsets, start, stop, diff)
        self.end_phy_offset = offsets[stop - 1]
        self.end_timestamp = store_timestamp
        return stop

    def _reserve(self, end: int) -> None:
        """Allocate the blocks of the first ``end`` bytes and a chunk beyond; raises OSError
        (ENOSPC, EMFILE) before anything is written."""
        target = min(self.size, max(end, self._reserved + _RESERVE_CHUNK_BYTES))
        fd = os.open(self.path, os.O_RDWR)
        try:
            os.posix_fallocate(fd, 0, target)
        finally:
            os.close(fd)
        self._reserved = target

    def _put_entries(
        self, hashes: list[int], offsets: list[int], start: int, stop: int, diff: int
    ) -> None:
        """Entries ``index_count ...`` for keys ``hashes[start:stop]``, all with time ``diff``."""
        mapped = self._map
        slots = self.slots
        read_slot = SLOT.unpack_from
        write_slot = SLOT.pack_into
        first = number = self.index_count
        chosen = hashes[start:stop]
        heads: list[int] = []
        used_slots = 0
        for key_hash in chosen:
            slot_at = HEADER_SIZE + key_hash % slots * SLOT_SIZE
            head = read_slot(mapped, slot_at)[0]
            if head <= 0 or head > number:
                head = 0
                used_slots += 1
            heads.append(head)
            write_slot(mapped, slot_at, number)
            number += 1
        fields = list(chain.from_iterable(zip(chosen, offsets[start:stop], repeat(diff), heads)))
        at = self._entries_at + first * ENTRY_SIZE
        for begin in range(0, len(fields), _ENTRIES_PER_PACK * 4):
            run = fields[begin : begin + _ENTRIES_PER_PACK * 4]
            _entries_struct(len(run) // 4).pack_into(mapped, at, *run)
            at += len(run) * (ENTRY_SIZE // 4)
        self.hash_slot_count += used_slots
        self.index_count = number

    def lookup(self, key_hash: int, max_count: int, begin_ms: int, end_ms: int) -> list[int]:
        """Commitlog offsets of entries with ``key_hash`` stored within [begin_ms, end_ms],
        newest first (the bucket chain's order)."""
        mapped = self._map
        found: list[int] = []
        count = self.index_count
        current = SLOT.unpack_from(mapped, HEADER_SIZE + (key_hash % self.slots) * SLOT_SIZE)[0]
        if current <= 0 or current >= count:
            return found
        begin = self.begin_timestamp
        while len(found) < max_count:
            stored_hash, phy, diff, prev = ENTRY.unpack_from(
                mapped, self._entries_at + current * ENTRY_SIZE
            )
            # Entry 1's time diff was taken against the preset begin of a new file; the header's
            # begin is entry 1's own store time.
            stored_at = begin if current == 1 else begin + diff * 1000
            if stored_at < begin_ms:
                break
            if stored_hash == key_hash and stored_at <= end_ms:
                found.append(phy)
            if prev <= 0 or prev >= current:  # chains only point back: no cycle, even if damaged
                break
            current = prev
        return found

    @property
    def is_sound(self) -> bool:
        """The header is self-consistent (a damaged file is dropped and rebuilt)."""
        return (
            1 <= self.index_count <= self.entries
            and 0 <= self.hash_slot_count <= self.slots
            and 0 <= self.begin_phy_offset <= self.end_phy_offset
            and 0 <= self.begin_timestamp <= self.end_timestamp
        )

    def write_header(self) -> None:
        HEADER.pack_into(
            self._map,
            0,
            self.begin_timestamp,
            self.end_timestamp,
            self.begin_phy_offset,
            self.end_phy_offset,
            self.hash_slot_count,
            self.index_count,
        )

    def sync(self) -> None:
        """Write the header and make the file durable."""
        self.write_header()
        self._map.flush()

    def close(self) -> None:
        if not self.read_only:
            self.write_header()
        self._map.close()

    def destroy(self) -> None:
        self._map.close()
        self.path.unlink(missing_ok=True)
