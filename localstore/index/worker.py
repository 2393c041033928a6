"""The key-index process: follows a store's commitlog and builds its index files on another core.

Run as ``python -m localstore.index.worker`` by :class:`localstore.index.process.IndexProcess`,
which talks to it over stdin/stdout (:mod:`localstore.index.protocol`). The process owns the
store's ``index/`` directory while it runs: it loads the files (dropping, after a crash, those
newer than the checkpoint, as the in-process index does), builds them, answers queries, flushes
and deletes them. It reads the commitlog through read-only mappings of its own and never writes
it.

What it indexes: first the records before ``--end`` (the commitlog's valid end when the store
opened) that the files lack (those after the newest file's last message; see
:mod:`localstore.index.service`), read from the commitlog and decoded as recovery decodes them,
in runs of one topic and store time; then, batch by batch, the keys the store sends of every
later put. Either way the files come out byte for byte as the in-process index writes them.

A failure while indexing (a record that does not decode) stops indexing and is reported as the
answer to every later request; the store's queries then raise it. End of input (the store's
process is gone) stops a catch-up where it is, flushes, closes and exits: the store died, so
its next open recovers as after a crash and rebuilds what the files lack. The process holds
``quiver-tmp/index.lock`` while it works, so that such a late child and the next store's child
never write the files at once.
"""

from __future__ import annotations

import argparse
import mmap
import os
import signal
import sys
import traceback
from collections import deque
from itertools import islice
from pathlib import Path

import orjson

from localstore.files.mapped_file import segment_name
from localstore.files.retired import RetiredFiles
from localstore.index.protocol import (
    CLOSE,
    ERROR,
    FLUSH,
    KEYS,
    OFFSET,
    QUERY,
    READY,
    RETIRE,
    SYNC,
)
from localstore.index.service import CounterRun, IndexService
from localstore.record.codec import RecordError, StoredMessage, decode_record
from localstore.recovery.log_scan import iter_records
from localstore.runtime.pipe_frames import frame, split_frames, write_all

_READ_CHUNK = 1 << 16
_HOLD_LIMIT = 64 << 20  # bytes of frames held while catching up
_CATCH_UP_STEP = 4096  # records indexed between two looks at the pipe while catching up


class CommitLogReader:
    """Read-only mappings of commitlog segments, opened as they are needed."""

    def __init__(self, directory: Path, segment_size: int):
        self.directory = directory
        self.segment_size = segment_size
        self._maps: dict[int, tuple[mmap.mmap, memoryview]] = {}

    def segment_view(self, offset: int) -> tuple[memoryview, int] | None:
        """The mapped segment holding ``offset`` and the position in it; None if it is gone
        (a :data:`localstore.recovery.log_scan.SegmentView`)."""
        start = offset - offset % self.segment_size
        mapped = self._maps.get(start)
        if mapped is None:
            try:
                fd = os.open(self.directory / segment_name(start), os.O_RDONLY)
            except FileNotFoundError:
                return None
            try:
                mapping = mmap.mmap(fd, self.segment_size, access=mmap.ACCESS_READ)
            finally:
                os.close(fd)
            mapped = self._maps[start] = (mapping, memoryview(mapping))
        return mapped[1], offset - start

    def release_before(self, offset: int) -> None:
        """Unmap segments that end at or before ``offset``."""
        self._release([s for s in self._maps if s + self.segment_size <= offset])

    def release_all_but(self, offset: int) -> None:
        """Unmap every segment except the one holding ``offset`` (-1: every one)."""
        keep = offset - offset % self.segment_size if offset >= 0 else -1
        self._release([s for s in self._maps if s != keep])

    def _release(self, starts: list[int]) -> None:
        for start in starts:
            mapping, view = self._maps.pop(start)
            view.release()
            mapping.close()

    def close(self) -> None:
        self.release_all_but(-1)


class IndexFollower:
    """Indexes the commitlog's records: first those before the open-time end that the files
    lack (read from the commitlog), then each batch the store sends the keys of."""

    def __init__(self, index: IndexService, reader: CommitLogReader, min_offset: int, end: int):
        self.index = index
        self.reader = reader
        self.end = end
        self.position = self._start(min_offset, end)
        self.failure = ""
        self._missing_at: int | None = None  # where the walk found no segment
        self._walk = iter_records(self._segment_view, self.position, end, body=False)

    @property
    def catching_up(self) -> bool:
        return self.position < self.end and not self.failure

    def _start(self, min_offset: int, end: int) -> int:
        """Where to walk from: the newest file's last message when a record starts there, the
        end when the files reach it, else the commitlog's start (``IndexService.needs`` skips
        what is indexed either way)."""
        last = self.index.end_phy_offset
        if last >= end:
            return end  # everything before the end is indexed (or the files are ahead of it)
        if last > min_offset and self._record_at(last) is not None:
            return last
        return min_offset

    def _record_at(self, offset: int) -> StoredMessage | None:
        located = self.reader.segment_view(offset)
        if located is None:
            return None
        try:
            message = decode_record(*located, body=False)
        except RecordError:
            return None
        return message if message.phys_offset == offset else None

    def _fail(self, what: str, exc: Exception) -> None:
        traceback.print_exc(file=sys.stderr)
        self.failure = (
            f"the key index stopped {what}: {exc}; queries by key fail until the store is reopened"
        )

    # -- catching up from the commitlog ----------------------------------------------------
    def catch_up_step(self) -> None:
        """Index the next records (up to ``_CATCH_UP_STEP``) before the open-time end."""
        try:
            self._index_next_records()
        except (RecordError, OSError, ValueError) as exc:
            self._fail(f"at commitlog offset {self.position}", exc)

    def _index_next_records(self) -> None:
        """Records decoded as recovery decodes them
        (:func:`localstore.recovery.log_scan.iter_records`),
        indexed in runs of one topic and store time, as the put path's batches come."""
        needs = self.index.needs
        run: list[StoredMessage] = []
        walked = 0
        for message in islice(self._walk, _CATCH_UP_STEP):
            walked += 1
            self.position = message.phys_offset + message.store_size
            if not needs(message.phys_offset):
                continue
            if run and (
                message.topic != run[0].topic or message.store_timestamp != run[0].store_timestamp
            ):
                self._build(run)
                run = []
            run.append(message)
        if run:
            self._build(run)
        size = self.reader.segment_size
        if walked < _CATCH_UP_STEP:  # the walk is over
            missing, self._missing_at = self._missing_at, None
            if missing is None:
                self.position = self.end
            else:  # at a segment retention deleted meanwhile: nothing there needs an index
                self.position = missing - missing % size + size
                self._walk = iter_records(self._segment_view, self.position, self.end, body=False)
        self.reader.release_before(self.position - self.position % size)

    def _segment_view(self, offset: int) -> tuple[memoryview, int] | None:
        located = self.reader.segment_view(offset)
        if located is None:
            self._missing_at = offset
        return located

    def _build(self, run: list[StoredMessage]) -> None:
        self.index.build_batch(
            run[0].topic, run, [m.phys_offset for m in run], run[0].store_timestamp
        )

    # -- following the store's puts --------------------------------------------------------
    def add_keys(self, payload: bytes) -> None:
        """Index the batches of a KEYS frame (see :mod:`localstore.index.protocol`)."""
        if self.failure:
            return
        try:
            for store_time, topic, offsets, uniq, keys, flags in orjson.loads(payload):
                uniq_keys = CounterRun(*uniq["run"]) if type(uniq) is dict else uniq
                self.index.build_keys(topic, uniq_keys, keys, flags, offsets, store_time)
        except (OSError, ValueError, TypeError) as exc:
            self._fail("on the keys the store sent", exc)

    def query(self, topic: str, key: str, max_count: int, begin: int, end: int) -> list[int]:
        """Offsets of the matching messages this process can read (a record not yet in the
        file, under sync flush, is left to the store, which would not show it either)."""
        try:
            found = self.index.query(topic, key, max_count, begin, end, self._record_at)
        finally:
            self.reader.release_all_but(self.position if self.catching_up else -1)
        return [message.phys_offset for message in found]


class _FrameReader:
    """Frames from the store, read as they come (blocking) or as far as they have come."""

    def __init__(self, fd: int):
        self._fd = fd
        self._buffer = bytearray()
        self._frames: deque[tuple[bytes, bytes]] = deque()
        self._held = 0  # payload bytes of the frames held
        self.ended = False

    def drain(self) -> None:
        """Take in what the pipe holds now, without waiting, up to ``_HOLD_LIMIT`` bytes of
        frames (beyond it the pipe fills and the store's puts wait: back-pressure)."""
        os.set_blocking(self._fd, False)
        try:
            while not self.ended and self._held < _HOLD_LIMIT:
                try:
                    chunk = os.read(self._fd, _READ_CHUNK)
                except BlockingIOError:
                    break
                self._take(chunk)
        finally:
            os.set_blocking(self._fd, True)

    def next(self) -> tuple[bytes, bytes] | None:
        """The next frame, waiting for it; None once the store's end of the pipe is closed."""
        while not self._frames and not self.ended:
            self._take(os.read(self._fd, _READ_CHUNK))
        if not self._frames:
            return None
        kind, payload = self._frames.popleft()
        self._held -= len(payload)
        return kind, payload

    def take_request(self) -> tuple[bytes, bytes] | None:
        """Remove and return the request held among the frames, if any (the store has at
        most one in flight); the KEYS frames stay in order."""
        for position, (kind, payload) in enumerate(self._frames):
            if kind != KEYS:
                del self._frames[position]
                self._held -= len(payload)
                return kind, payload
        return None

    def put_back(self, request: tuple[bytes, bytes]) -> None:
        """Hold ``request`` again, after the KEYS frames that came before it."""
        self._frames.append(request)
        self._held += len(request[1])

    def _take(self, chunk: bytes) -> None:
        if not chunk:
            self.ended = True
            return
        self._buffer += chunk
        for kind, payload in split_frames(self._buffer):
            self._frames.append((kind, payload))
            self._held += len(payload)


def serve(follower: IndexFollower, requests: int, replies: int) -> None:
    """Catch up, then handle frames in order until CLOSE or the end of input.

    While catching up, FLUSH and RETIRE are answered at once (they do not depend on the keys
    still to come, and the store's flush thread and retention wait for them), CLOSE stops the
    catch-up where it is (the next open goes on from the files' end), and SYNC and QUERY wait
    for the catch-up. End of input drops whatever is held: the store is gone, and its next
    open recovers as after a crash."""
    frames = _FrameReader(requests)
    while follower.catching_up:
        follower.catch_up_step()
        frames.drain()
        if frames.ended:
            _finish(follower)
            return
        request = frames.take_request()
        if request is None:
            continue
        if request[0] in (SYNC, QUERY):
            frames.put_back(request)
        elif not _reply(follower, replies, *request) or request[0] == CLOSE:
            return
    while True:
        received = frames.next()
        if received is None:
            _finish(follower)
            return
        kind, payload = received
        if kind == KEYS:
            follower.add_keys(payload)
        elif not _reply(follower, replies, kind, payload) or kind == CLOSE:
            return


def _reply(follower: IndexFollower, replies: int, kind: bytes, payload: bytes) -> bool:
    """Answer one request; False when the store can no longer be answered (its process is
    gone: the files are flushed and closed, and this process should end)."""
    if follower.failure and kind != CLOSE:
        answer = frame(ERROR, follower.failure.encode())
    else:
        try:
            answer = frame(kind, _answer(follower, kind, payload))
        except Exception as exc:  # the request failed; the process goes on
            traceback.print_exc(file=sys.stderr)
            answer = frame(ERROR, f"{type(exc).__name__}: {exc}".encode())
    try:
        write_all(replies, answer)
    except OSError:
        if kind != CLOSE:
            _finish(follower)
        return False
    return True


def _answer(follower: IndexFollower, kind: bytes, payload: bytes) -> bytes:
    index = follower.index
    if kind == SYNC:
        return b""
    if kind == FLUSH:
        index.flush()
        return OFFSET.pack(index.completed_timestamp)
    if kind == QUERY:
        topic, key, max_count, begin, end = orjson.loads(payload)
        return orjson.dumps(follower.query(topic, key, max_count, begin, end))
    if kind == RETIRE:
        commitlog_min = OFFSET.unpack(payload)[0]
        deleted = index.delete_files_before(commitlog_min, RetiredFiles(grace_s=0))
        follower.reader.release_before(commitlog_min)  # those segments are gone
        return orjson.dumps([str(path) for path in deleted])
    if kind == CLOSE:
        _finish(follower)
        return b""
    raise ValueError(f"unknown request {kind!r}")


def _finish(follower: IndexFollower) -> None:
    follower.index.flush()
    follower.index.close()
    follower.reader.close()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m localstore.index.worker")
    parser.add_argument("--root", type=Path, required=True, help="the store directory")
    parser.add_argument("--slots", type=int, required=True)
    parser.add_argument("--entries", type=int, required=True)
    parser.add_argument("--segment-size", type=int, required=True)
    parser.add_argument("--min-offset", type=int, required=True, help="commitlog start")
    parser.add_argument("--end", type=int, required=True, help="commitlog end at open")
    parser.add_argument("--crashed", action="store_true", help="the last run did not close")
    parser.add_argument("--checkpoint-timestamp", type=int, default=0)
    args = parser.parse_args(argv)
    # The store decides when this process ends: a CLOSE request or the end of its input.
    for number in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(number, signal.SIG_IGN)
    # Replies go to the store on the original stdout; anything printed goes to stderr.
    replies = os.dup(sys.stdout.fileno())
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())
    index = IndexService(args.root / "index", args.slots, args.entries)
    index.load(crashed=args.crashed, checkpoint_timestamp=args.checkpoint_timestamp)
    reader = CommitLogReader(args.root / "commitlog", args.segment_size)
    follower = IndexFollower(index, reader, args.min_offset, args.end)
    write_all(replies, frame(READY))
    serve(follower, sys.stdin.fileno(), replies)  # ends with index.close(): the lock goes


if __name__ == "__main__":
    main()
