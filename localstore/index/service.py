"""Query by key: the index files of a store, built as messages are stored.

Keys indexed per message (RocketMQ's IndexService): ``topic#UNIQ_KEY`` and ``topic#key`` for each
space-separated token of ``KEYS``; nothing for ROLLBACK transaction records. Files fill in order;
when the newest is full a new one starts with its header preset to the old one's end, and the old
one's end time becomes the checkpoint's ``indexMsgTimestamp`` once it is flushed.

Invariant for idempotent re-dispatch: a message whose commitlog offset is at or below the newest
file's ``end_phy_offset`` (the last indexed message) is already indexed. (RocketMQ re-indexes that
last message after a crash; queries drop such duplicates in stores it wrote.)

Queries walk files newest to oldest and re-check every candidate against the stored message
(topic, then the key among its KEYS or its UNIQ_KEY), so a hash collision never returns another
key's message.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from itertools import repeat
from pathlib import Path
from typing import Protocol, cast

import filelock

from localstore.errors import StoreError
from localstore.files.retired import RetiredFiles
from localstore.index.index_file import ENTRY_SIZE, HEADER_SIZE, SLOT_SIZE, IndexFile
from localstore.record.codec import (
    PROPERTY_KEYS,
    PROPERTY_UNIQ_KEY,
    SYSFLAG_TRANSACTION_MASK,
    SYSFLAG_TRANSACTION_ROLLBACK,
    NewMessage,
    StoredMessage,
    split_keys,
)
from localstore.record.javahash import _HIGH, _LOW, java_hash, java_hash_concat
from localstore.record.message_id import UniqKeyRun
from localstore.record.uniform_batch import UniformBatch
from localstore.runtime.closing import close_all

MAX_QUERY_RESULTS = 64  # RocketMQ's maxMsgsNumBatch
WRITER_LOCK_TIMEOUT_S = 60.0  # for the index process of a killed store to finish
_ROLLBACK = SYSFLAG_TRANSACTION_ROLLBACK
_TIME_DIFF_RESOLUTION_MS = 1000  # index times are whole seconds after the file's begin time


def _key_hash(prefix_hash: int, key: str) -> int:
    h = java_hash_concat(prefix_hash, key)
    return 0 if h == -0x80000000 else abs(h)


_UNIQ_LENGTH = 32  # an IPv4 client's UNIQ_KEY
_UNIQ_PREFIX = 28  # client address, pid, random, ms since the month began; then the counter
_UNIQ_COUNTER = _UNIQ_LENGTH - _UNIQ_PREFIX
_POW31_4 = 31**_UNIQ_COUNTER
_POW31_28 = pow(31, _UNIQ_PREFIX, 1 << 32)
_SHORT_KEY = 256  # keys shorter than this (ASCII) are hashed inline
_POW31_BY_LENGTH = [pow(31, length, 1 << 32) for length in range(_SHORT_KEY)]
_COUNTER_VALUES = 1 << 16  # a UNIQ_KEY's counter: 4 hex digits


@dataclass(frozen=True, slots=True)
class CounterRun:
    """A batch's UNIQ_KEYs given by their shape (a :class:`UniqKeyRun`'s): the i-th of the
    ``length`` is ``head`` + the 4 upper-case hex digits of ``(first + i) & 0xFFFF``."""

    head: str
    first: int
    length: int

    def keys(self) -> list[str]:
        """The UNIQ_KEYs themselves."""
        head, first = self.head, self.first
        return [f"{head}{(first + i) & 0xFFFF:04X}" for i in range(self.length)]


def counter_run_of(uniq_keys: Sequence[str | None]) -> CounterRun | None:
    """The run a :class:`UniqKeyRun` column is, or None for any other column."""
    if type(uniq_keys) is UniqKeyRun and uniq_keys:
        return CounterRun(uniq_keys.head, uniq_keys.first, len(uniq_keys))
    return None


_counter_hashes: list[int] = []


def _counter_table() -> list[int]:
    """Java hash of each 4-hex-digit counter string (made on first use: 65,536 values)."""
    if not _counter_hashes:
        hex_hash = [java_hash(f"{value:02X}") for value in range(256)]
        high = [value * 961 for value in hex_hash]  # shifted past two characters: 31**2
        _counter_hashes.extend(hi + lo for hi in high for lo in hex_hash)
    return _counter_hashes


def _abs_hashes(hashes: list[int]) -> list[int]:
    """Unsigned 32-bit hashes as the index keeps them: abs() of the signed int, MIN_VALUE 0."""
    return [h if h < 0x80000000 else (0x100000000 - h) & 0x7FFFFFFF for h in hashes]


def _run_hashes(prefix_hash: int, run: CounterRun) -> list[int]:
    """Index hashes of ``topic#UNIQ_KEY`` for a run: ``h(topic#head) * 31**4 + h(counter)``,
    the counters' hashes read from a table: no per-key string work."""
    base = (java_hash_concat(prefix_hash, run.head) * _POW31_4) & 0xFFFFFFFF
    table = _counter_table()
    first, count = run.first, run.length
    if first + count <= _COUNTER_VALUES:
        counters = table[first : first + count]
    else:  # the counter wraps within the batch
        counters = [table[(first + i) & 0xFFFF] for i in range(count)]
    return _abs_hashes([(base + value) & 0xFFFFFFFF for value in counters])


def _single_key_hashes(prefix_hash: int, keys: Sequence[str | None]) -> list[int] | None:
    """Index hashes of ``topic#key`` when every message has exactly one short ASCII key (no
    space, not empty), checked for the whole batch at once; None otherwise."""
    if not keys or None in keys or "" in keys:
        return None
    present = cast(Sequence[str], keys)  # no None: ruled out above
    joined = "".join(present)
    if " " in joined or not joined.isascii() or max(map(len, present)) >= _SHORT_KEY:
        return None
    powers, high, low = _POW31_BY_LENGTH, _HIGH, _LOW
    return _abs_hashes(
        [
            (
                prefix_hash * powers[len(raw)]
                + 31 * int(raw.translate(high), 31)
                + int(raw.translate(low), 31)
            )
            & 0xFFFFFFFF
            for raw in map(str.encode, present)
        ]
    )


class KeyedMessage(Protocol):
    """What indexing reads of a message: its properties (KEYS, UNIQ_KEY) and SYSFLAG."""

    @property
    def properties(self) -> dict[str, str]: ...

    @property
    def sys_flag(self) -> int: ...


class KeyIndex(Protocol):
    """What the store asks of its key index, built in its process (:class:`IndexService`) or
    in a child process (:class:`localstore.index.process.IndexProcess`)."""

    completed_timestamp: int  # end time of the newest full, flushed file (the checkpoint's)

    def on_appended(
        self,
        topic: str,
        messages: Sequence[NewMessage],
        phys_offsets: Sequence[int],
        store_timestamp: int,
        end_offset: int,
    ) -> None:
        """A put wrote ``messages`` (one topic, one store time); the commitlog ends at
        ``end_offset``. Called under the put lock."""

    def wait_caught_up(self) -> None:
        """Return once every message appended so far is in the index."""

    def query(
        self,
        topic: str,
        key: str,
        max_count: int,
        begin_ms: int,
        end_ms: int,
        load: Callable[[int], StoredMessage | None],
    ) -> list[StoredMessage]:
        """See :meth:`IndexService.query`."""

    def delete_files_before(self, commitlog_min: int, retired: RetiredFiles) -> list[Path]:
        """Retention: leading files (never the last) whose last message is below
        ``commitlog_min``; returns their paths."""

    def flush(self) -> None: ...

    def close(self) -> None: ...

    def abandon(self) -> None:
        """The store failed to open: let go of the files (and any process) at once."""


def sys_flags_of(messages: Sequence[KeyedMessage]) -> list[int] | None:
    """The messages' SYSFLAGs as :meth:`IndexService.build_keys` takes them: None when all are
    0 (plain messages, the common case; no transaction record to skip)."""
    if isinstance(messages, UniformBatch):
        return None  # no transaction record by construction
    flags = [message.sys_flag for message in messages]
    return flags if any(flags) else None


def key_columns(
    messages: Sequence[KeyedMessage],
) -> tuple[Sequence[str | None], Sequence[str | None]]:
    """Each message's ``UNIQ_KEY`` and ``KEYS`` values (None where absent), as
    :meth:`IndexService.build_keys` takes them; a :class:`UniformBatch` has them already."""
    if isinstance(messages, UniformBatch):
        return messages.uniq_keys, messages.keys
    all_properties = [message.properties or {} for message in messages]
    return (
        [properties.get(PROPERTY_UNIQ_KEY) for properties in all_properties],
        [properties.get(PROPERTY_KEYS) for properties in all_properties],
    )


class IndexService:
    """The ordered index files of one store, built in the put path (a :class:`KeyIndex`)."""

    def __init__(self, directory: Path, slots: int, entries: int):
        self.directory = directory
        self.slots = slots
        self.entries = entries
        self.files: list[IndexFile] = []
        self.file_size = HEADER_SIZE + slots * SLOT_SIZE + entries * ENTRY_SIZE
        self._prefix_hashes: dict[str, int] = {}
        self.completed_timestamp = 0  # end time of the newest full, flushed file
        self._indexed_any = False  # whether end_phy_offset names an indexed message
        self._reindex_last = False  # files were dropped: index the message at end once more
        self._writer_lock: filelock.BaseFileLock | None = None

    def load(self, *, crashed: bool, checkpoint_timestamp: int) -> None:
        """Take the writer's lock (see :func:`index_writer_lock`; released by ``close``), then map
        the files. After a crash drop those newer than the checkpoint; always drop a file with a
        damaged header or length, and every file after it. Recovery's re-dispatch rebuilds what
        was dropped."""
        lock = index_writer_lock(self.directory.parent, timeout_s=WRITER_LOCK_TIMEOUT_S)
        try:
            lock.acquire()
        except filelock.Timeout as exc:
            raise StoreError(
                f"{self.directory} is still being written by another process after "
                f"{WRITER_LOCK_TIMEOUT_S:.0f} s (the index process of a store that was killed?)"
            ) from exc
        self._writer_lock = lock
        if not self.directory.is_dir():
            return
        dropping = False
        for name in sorted(os.listdir(self.directory)):
            if not name.isdigit():
                continue
            path = self.directory / name
            if path.stat().st_size != self.file_size:
                dropping = True
                path.unlink()
                continue
            index = IndexFile(path, self.slots, self.entries)
            dropping = dropping or not index.is_sound
            if dropping or (crashed and index.end_timestamp > checkpoint_timestamp):
                index.destroy()
                # The last kept file's last message may have had keys in a dropped file.
                self._reindex_last = True
                continue
            self.files.append(index)
        self._indexed_any = any(f.index_count > 1 for f in self.files)

    @property
    def end_phy_offset(self) -> int:
        return self.files[-1].end_phy_offset if self.files else 0

    def _current(self, now_ms: int) -> IndexFile:
        if self.files and not self.files[-1].is_full:
            return self.files[-1]
        previous = self.files[-1] if self.files else None
        index = IndexFile.create(
            self.directory,
            self.slots,
            self.entries,
            now_ms=now_ms,
            previous_end_phy_offset=previous.end_phy_offset if previous else 0,
            previous_end_timestamp=previous.end_timestamp if previous else 0,
        )
        if previous is not None:
            previous.sync()
            self.completed_timestamp = previous.end_timestamp
        self.files.append(index)
        return index

    def _prefix_hash(self, topic: str) -> int:
        known = self._prefix_hashes.get(topic)
        if known is None:
            known = self._prefix_hashes[topic] = java_hash(topic + "#") & 0xFFFFFFFF
        return known

    # -- building --------------------------------------------------------------------------
    def on_appended(
        self,
        topic: str,
        messages: Sequence[NewMessage],
        phys_offsets: Sequence[int],
        store_timestamp: int,
        end_offset: int,
    ) -> None:
        self.build_batch(topic, messages, phys_offsets, store_timestamp)

    def wait_caught_up(self) -> None:
        pass  # built in the put path: always caught up

    def build_batch(
        self,
        topic: str,
        messages: Sequence[KeyedMessage],
        phys_offsets: Sequence[int],
        store_timestamp: int,
    ) -> None:
        """Index a batch just appended (one topic, one store time) in the put path."""
        uniq_keys, keys = key_columns(messages)
        self.build_keys(
            topic,
            counter_run_of(uniq_keys) or uniq_keys,
            keys,
            sys_flags_of(messages),
            phys_offsets,
            store_timestamp,
        )

    def build_keys(
        self,
        topic: str,
        uniq_keys: Sequence[str | None] | CounterRun,
        keys: Sequence[str | None],
        sys_flags: Sequence[int] | None,
        phys_offsets: Sequence[int],
        store_timestamp: int,
    ) -> None:
        """Index a batch given as each message's ``UNIQ_KEY`` (or their :class:`CounterRun`)
        and ``KEYS`` values (None where absent) and SYSFLAG (``sys_flags`` None: all 0), with
        its commitlog offsets; what the index process receives."""
        hashes, offsets = self._key_hashes(topic, uniq_keys, keys, sys_flags, phys_offsets)
        position = 0
        index = self._current(store_timestamp)
        while True:
            position = index.put_keys(hashes, offsets, position, store_timestamp)
            if position >= len(hashes):
                break
            index = self._current(store_timestamp)  # full: the next file
        index.write_header()
        self._indexed_any = self._indexed_any or bool(hashes)

    def _key_hashes(
        self,
        topic: str,
        uniq_keys: Sequence[str | None] | CounterRun,
        all_keys: Sequence[str | None],
        sys_flags: Sequence[int] | None,
        phys_offsets: Sequence[int],
    ) -> tuple[list[int], list[int]]:
        """Index hashes of ``topic#UNIQ_KEY`` and ``topic#key`` per message, with its offset.

        The Java hash of an ASCII key is computed inline (see :mod:`localstore.record.javahash`)
        from the cached hash of ``topic#``: this loop is the put path's indexing cost. UNIQ_KEYs of
        one producer batch share their first 28 characters (client, process, millisecond) and
        differ in the 4-character counter, so the hash of ``topic#`` + that prefix is kept and
        only the counter is hashed, from its ASCII bytes: ``h(p + s) = h(p) * 31**4 + h(s)``.

        A producer's batch (its UNIQ_KEYs a :class:`CounterRun`, no KEYS or one plain key a
        message, no transaction record) takes no loop at all: the run is hashed from a table,
        the keys by a comprehension, interleaved message by message as the loop would add
        them."""
        if isinstance(uniq_keys, CounterRun):
            run: CounterRun | None = uniq_keys
            uniq_column: Sequence[str | None] = ()
            count = uniq_keys.length
        else:
            run, uniq_column, count = None, uniq_keys, len(uniq_keys)
        _check_columns(count, all_keys, phys_offsets, sys_flags)
        prefix = self._prefix_hash(topic)
        if run is not None:
            if sys_flags is None and not any(all_keys):  # no KEYS: the run's hashes alone
                return _run_hashes(prefix, run), list(phys_offsets)
            single = None if sys_flags is not None else _single_key_hashes(prefix, all_keys)
            if single is not None:
                hashes = [0] * (2 * count)
                hashes[::2] = _run_hashes(prefix, run)
                hashes[1::2] = single
                offsets = [0] * (2 * count)
                offsets[::2] = offsets[1::2] = phys_offsets
                return hashes, offsets
            uniq_column = run.keys()
        return _hashes_one_by_one(prefix, uniq_column, all_keys, phys_offsets, sys_flags, count)

    def needs(self, phys_offset: int) -> bool:
        """Whether the message at ``phys_offset`` still has to be indexed (re-dispatch)."""
        end = self.end_phy_offset
        if self._indexed_any and (
            phys_offset < end or (phys_offset == end and not self._reindex_last)
        ):
            return False
        self._reindex_last = False
        return True

    # -- querying --------------------------------------------------------------------------
    def query(
        self,
        topic: str,
        key: str,
        max_count: int,
        begin_ms: int,
        end_ms: int,
        load: Callable[[int], StoredMessage | None],
    ) -> list[StoredMessage]:
        """Messages of ``topic`` with ``key`` (a KEYS token or the UNIQ_KEY) stored within
        [begin_ms, end_ms], newest first, at most ``max_count`` (capped at 64)."""
        max_count = min(max_count, MAX_QUERY_RESULTS)
        if max_count <= 0:
            return []
        key_hash = _key_hash(self._prefix_hash(topic), key)
        # Index times are truncated to whole seconds: look a second wider, then filter exactly.
        index_begin = begin_ms - _TIME_DIFF_RESOLUTION_MS
        found: list[StoredMessage] = []
        seen: set[int] = set()
        for index in reversed(self.files):
            if index.begin_timestamp > end_ms:
                continue
            if index.end_timestamp < index_begin:
                break
            for phys in index.lookup(key_hash, MAX_QUERY_RESULTS * 4, index_begin, end_ms):
                if phys in seen:
                    continue
                seen.add(phys)
                message = load(phys)
                if message is None or not matches_key(message, topic, key):
                    continue
                if begin_ms <= message.store_timestamp <= end_ms:
                    found.append(message)
                    if len(found) >= max_count:
                        return found
        return found

    def delete_files_before(self, commitlog_min: int, retired: RetiredFiles) -> list[Path]:
        """Retention: leading files (never the last) whose last message is below
        ``commitlog_min``; returns their paths."""
        files = self.files
        count = 0
        for index_file in files[:-1]:
            if index_file.end_phy_offset >= commitlog_min:
                break
            count += 1
        self.files = files[count:]  # rebound, never mutated: queries iterate the old list
        for index_file in files[:count]:
            retired.retire(index_file.path, index_file.destroy)
        return [f.path for f in files[:count]]

    def flush(self) -> None:
        for index in self.files[-2:]:
            index.sync()

    def close(self) -> None:
        """Close every file and release the writer lock, whatever one of them raised."""
        try:
            close_all(index.close for index in self.files)
        finally:
            self.files.clear()
            if self._writer_lock is not None:
                self._writer_lock.release()
                self._writer_lock = None

    def abandon(self) -> None:
        self.close()


def index_writer_lock(root: Path, *, timeout_s: float) -> filelock.BaseFileLock:
    """``{root}/quiver-tmp/index.lock``, held by the :class:`IndexService` that writes
    ``index/`` (in the store's process or in its index process), so that the index process of
    a killed store, still finishing, and the next store's index never write the files at once.
    Not yet acquired."""
    scratch = root / "quiver-tmp"
    scratch.mkdir(exist_ok=True)
    return filelock.FileLock(
        scratch / "index.lock", timeout=timeout_s, thread_local=False, is_singleton=False
    )


def matches_key(message: StoredMessage, topic: str, key: str) -> bool:
    """Whether ``message`` is of ``topic`` and holds ``key`` (a KEYS token or its UNIQ_KEY)."""
    if message.topic != topic:
        return False
    if message.properties.get(PROPERTY_UNIQ_KEY) == key:
        return True
    keys = message.properties.get(PROPERTY_KEYS)
    return keys is not None and key in split_keys(keys)


def _check_columns(
    count: int,
    all_keys: Sequence[str | None],
    phys_offsets: Sequence[int],
    sys_flags: Sequence[int] | None,
) -> None:
    """The per-message columns of an index batch must be of one length."""
    if (
        len(all_keys) != count
        or len(phys_offsets) != count
        or (sys_flags is not None and len(sys_flags) != count)
    ):
        given = "" if sys_flags is None else f" and {len(sys_flags)} SYSFLAGs"
        raise ValueError(
            f"{count} messages' UNIQ_KEYs do not match {len(all_keys)} KEYS, "
            f"{len(phys_offsets)} offsets{given}"
        )


def _hashes_one_by_one(
    prefix: int,
    uniq_column: Sequence[str | None],
    all_keys: Sequence[str | None],
    phys_offsets: Sequence[int],
    sys_flags: Sequence[int] | None,
    count: int,
) -> tuple[list[int], list[int]]:
    """:meth:`IndexService._key_hashes` message by message: any mix of UNIQ_KEYs, KEYS and
    transaction records. ``prefix`` is the Java hash of ``topic#``."""
    powers = _POW31_BY_LENGTH
    high, low = _HIGH, _LOW
    hashes = []
    offsets = []
    uniq_prefix: str | None = None  # the ASCII start a batch's UNIQ_KEYs share, once seen
    uniq_base = 0  # the hash of topic#uniq_prefix, times 31**4
    shared = count > 1  # a single message has no batch-mate to share a prefix with
    flags: Iterable[int] = repeat(0) if sys_flags is None else sys_flags  # lengths checked
    for given_uniq, keys, phys, flag in zip(
        uniq_column, all_keys, phys_offsets, flags, strict=False
    ):
        if flag & SYSFLAG_TRANSACTION_MASK == _ROLLBACK:
            continue
        uniq = given_uniq  # None once hashed
        if uniq:
            counter = uniq[_UNIQ_PREFIX:].encode()
            if (
                uniq_prefix is not None
                and len(counter) == _UNIQ_COUNTER
                and len(uniq) == _UNIQ_LENGTH
                and uniq.startswith(uniq_prefix)
            ):
                h = (
                    uniq_base + ((counter[0] * 31 + counter[1]) * 31 + counter[2]) * 31 + counter[3]
                ) & 0xFFFFFFFF
                if h & 0x80000000:  # abs() of the signed int; MIN_VALUE becomes 0
                    h = (0x100000000 - h) & 0x7FFFFFFF
                hashes.append(h)
                offsets.append(phys)
                uniq = None  # hashed
            elif shared and len(uniq) == _UNIQ_LENGTH and uniq.isascii():
                uniq_prefix = uniq[:_UNIQ_PREFIX]  # for the batch-mates that follow
                raw = uniq_prefix.encode()
                uniq_base = (
                    (
                        prefix * _POW31_28
                        + 31 * int(raw.translate(high), 31)
                        + int(raw.translate(low), 31)
                    )
                    * _POW31_4
                ) & 0xFFFFFFFF
        if keys:
            chosen: Sequence[str] = keys.split(" ") if " " in keys else (keys,)
            if uniq:
                chosen = (uniq, *chosen)
        elif uniq:
            chosen = (uniq,)
        else:
            continue
        for key in chosen:
            if key.isascii() and 0 < len(key) < _SHORT_KEY:
                raw = key.encode()
                h = (
                    prefix * powers[len(raw)]
                    + 31 * int(raw.translate(high), 31)
                    + int(raw.translate(low), 31)
                ) & 0xFFFFFFFF
            elif key:
                h = java_hash_concat(prefix, key) & 0xFFFFFFFF
            else:
                continue  # two spaces in a row
            if h & 0x80000000:  # abs() of the signed int; MIN_VALUE becomes 0
                h = (0x100000000 - h) & 0x7FFFFFFF
            hashes.append(h)
            offsets.append(phys)
    return hashes, offsets
