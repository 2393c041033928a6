"""The key index built by a child process (``StoreOptions.index_process``), on another core.

Indexing (hashing keys, writing slots and entries) is a large share of a put in Python, and
under the GIL no thread can take it off the put path. With this option the store hands it to a
child process (:mod:`localstore.index.worker`) as RocketMQ hands it to a dispatcher thread: a
put only gathers its messages' keys (``UNIQ_KEY`` and ``KEYS``) with their commitlog offsets (a
producer's batch sends its ids as one run: head, first counter, count), and every few hundred
messages they go
to the child in one pipe write; the child hashes them and writes the index files. Records
from before the store opened that the files lack, the child reads from the commitlog itself.

What changes for callers: a query by key first sends what is gathered and waits until the child
has indexed it, so it sees what the in-process index would; ``wait_caught_up`` does the same
wait. The files are the same, byte for byte.

The child owns ``index/``: it loads the files when it starts (after a crash dropping those newer
than the checkpoint, as the in-process index does), answers queries, flushes and deletes them
for retention. It exits when the store closes or when its stdin closes (the store's process is
gone). If it dies, puts go on, queries raise :class:`~localstore.errors.IndexProcessError`, and
closing the store raises it too and leaves the abort marker, so the next open rebuilds what the
files lack from the commitlog.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import select
import subprocess
import threading
import weakref
from collections.abc import Callable, Sequence
from pathlib import Path

import orjson

from localstore.errors import IndexProcessError
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
from localstore.index.service import counter_run_of, key_columns, matches_key, sys_flags_of
from localstore.record.codec import NewMessage, StoredMessage
from localstore.runtime.pipe_frames import frame, read_frame, write_all
from localstore.runtime.worker_command import worker_command, worker_env

_START_TIMEOUT_S = 90.0  # loading; a late child of a killed store may hold the lock 60 s
_CLOSE_TIMEOUT_S = 60.0
_RETIRE_WAIT_S = 1.0  # retention runs under the put lock: it does not wait for a long query
_SEND_EVERY = 512  # messages whose keys are gathered before one write to the child
_PIPE_BYTES = 1 << 20  # room for the keys of about 15,000 messages while the child is busy

_LIVE: weakref.WeakSet[IndexProcess] = weakref.WeakSet()


def _close_pipes_after_fork() -> None:
    """A forked copy of the store's process must not keep the child's stdin open: the child
    would then never see the store's process end."""
    for index in list(_LIVE):
        index.drop_pipes_in_forked_process()


os.register_at_fork(after_in_child=_close_pipes_after_fork)


class IndexProcess:
    """A :class:`localstore.index.service.KeyIndex` whose files a child process builds."""

    def __init__(
        self,
        root: Path,
        *,
        slots: int,
        entries: int,
        segment_size: int,
        crashed: bool,
        checkpoint_timestamp: int,
        min_offset: int,
        end: int,
    ):
        # Gathered keys and pipe writes take ``_write_lock`` briefly (a put never waits for a
        # reply); a request holds ``_request_lock`` until its reply.
        self._write_lock = threading.Lock()
        self._request_lock = threading.Lock()
        self._gathered: list[bytes] = []  # one JSON array a put batch
        self._gathered_messages = 0
        self._closed = False
        self._failure = ""
        self.completed_timestamp = 0
        arguments = [
            f"--root={root}",
            f"--slots={slots}",
            f"--entries={entries}",
            f"--segment-size={segment_size}",
            f"--min-offset={min_offset}",
            f"--end={end}",
            f"--checkpoint-timestamp={checkpoint_timestamp}",
        ]
        if crashed:
            arguments.append("--crashed")
        self._child = subprocess.Popen(
            worker_command("localstore.index.worker", *arguments),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env=worker_env(),
            close_fds=True,
            start_new_session=True,
        )
        assert self._child.stdin is not None and self._child.stdout is not None
        self._to_child = self._child.stdin.fileno()
        self._from_child = self._child.stdout.fileno()
        with contextlib.suppress(OSError):  # a bigger pipe where the system allows it
            fcntl.fcntl(self._to_child, fcntl.F_SETPIPE_SZ, _PIPE_BYTES)
        _LIVE.add(self)
        ready = self._read_reply(_START_TIMEOUT_S)
        if ready is None or ready[0] != READY:
            self.abandon()
            raise IndexProcessError(
                f"the key-index process did not start (exit status {self._child.poll()}); "
                "its error output says why"
            )

    @property
    def pid(self) -> int:
        return self._child.pid

    # -- following the puts ------------------------------------------------------------------
    def on_appended(
        self,
        topic: str,
        messages: Sequence[NewMessage],
        phys_offsets: Sequence[int],
        store_timestamp: int,
        end_offset: int,
    ) -> None:
        """Gather the batch's keys (under the put lock, so batches keep commitlog order)."""
        uniq_keys, keys = key_columns(messages)
        run = counter_run_of(uniq_keys)  # sent as [head, first, count]: no id on the pipe
        batch = orjson.dumps(  # now: the caller may change its objects once the put returns
            (
                store_timestamp,
                topic,
                phys_offsets,
                uniq_keys if run is None else {"run": [run.head, run.first, run.length]},
                keys,
                sys_flags_of(messages),
            )
        )
        with self._write_lock:
            self._gathered.append(batch)
            self._gathered_messages += len(messages)
            if self._gathered_messages >= _SEND_EVERY:
                self._send_gathered()

    def _send_gathered(self) -> None:
        """Write the gathered keys to the child (under ``_write_lock``)."""
        if not self._gathered:
            return
        payload = b"[" + b",".join(self._gathered) + b"]"
        self._gathered = []
        self._gathered_messages = 0
        self._write(frame(KEYS, payload))

    def _write(self, data: bytes) -> None:
        """Write a whole frame, or mark the channel failed (under ``_write_lock``)."""
        if self._failure:
            return
        try:
            write_all(self._to_child, data)
        except BaseException as exc:  # gone, or cut short: the framing cannot be trusted
            self._fail(f"writing to it failed ({exc!r})")
            if not isinstance(exc, OSError):
                raise

    def _fail(self, why: str) -> None:
        if not self._failure:
            self._failure = (
                f"the key-index process (pid {self._child.pid}) can no longer be used: {why}; "
                "queries by key fail until the store is reopened, which rebuilds what the "
                "index lacks"
            )
            self._kill()

    def _kill(self) -> None:
        if self._child.poll() is None:
            self._child.kill()
        self._child.wait()

    def abandon(self) -> None:
        """The store failed to open: end the child at once, without waiting for it."""
        with self._write_lock:
            self._kill()
            self._release()

    def _release(self) -> None:
        """Closed for good: close the pipes (nothing is buffered in them; a broken one may
        complain) and forget the process (under ``_write_lock``)."""
        self._closed = True
        for pipe in (self._child.stdin, self._child.stdout):
            if pipe is not None:
                with contextlib.suppress(OSError):
                    pipe.close()
        _LIVE.discard(self)

    def drop_pipes_in_forked_process(self) -> None:
        for fd in (self._to_child, self._from_child):
            with contextlib.suppress(OSError):
                os.close(fd)
        self._failure = self._failure or "this is a forked copy of the store's process"

    # -- requests ----------------------------------------------------------------------------
    def _request(self, kind: bytes, payload: bytes = b"", *, wait_s: float = -1) -> bytes:
        """Send what is gathered, then a request; return the reply's payload. ``wait_s`` >= 0
        bounds the wait for another request in flight (IndexProcessError when it is up)."""
        if not self._request_lock.acquire(timeout=wait_s):
            raise IndexProcessError("the key-index process is busy with another request")
        try:
            if self._closed:
                raise IndexProcessError("the store's key index is closed")
            with self._write_lock:
                self._send_gathered()
                self._write(frame(kind, payload))
            reply = None
            if not self._failure:
                try:
                    reply = self._read_reply(None if kind != CLOSE else _CLOSE_TIMEOUT_S)
                except BaseException as exc:  # cut short: its answer would meet the next one
                    self._fail(f"a request was cut short ({exc!r})")
                    raise
                if reply is None or reply[0] not in (kind, ERROR):
                    self._fail("it ended or answered out of turn")
            if self._failure:
                raise IndexProcessError(self._failure)
        finally:
            self._request_lock.release()
        assert reply is not None
        answer_kind, answer = reply
        if answer_kind == ERROR:
            raise IndexProcessError(answer.decode())
        return answer

    def _read_reply(self, timeout_s: float | None) -> tuple[bytes, bytes] | None:
        """One frame from the child; None at end of file or when ``timeout_s`` passes first."""
        if timeout_s is not None and not select.select([self._from_child], [], [], timeout_s)[0]:
            return None
        try:
            return read_frame(self._from_child)
        except OSError:
            return None

    def wait_caught_up(self) -> None:
        self._request(SYNC)

    def query(
        self,
        topic: str,
        key: str,
        max_count: int,
        begin_ms: int,
        end_ms: int,
        load: Callable[[int], StoredMessage | None],
    ) -> list[StoredMessage]:
        """See :meth:`localstore.index.service.IndexService.query`: the child finds the
        messages, this process reads them and checks them again."""
        offsets = orjson.loads(
            self._request(QUERY, orjson.dumps([topic, key, max_count, begin_ms, end_ms]))
        )
        found = []
        for offset in offsets:
            message = load(offset)
            if message is not None and matches_key(message, topic, key):
                found.append(message)
        return found

    def delete_files_before(self, commitlog_min: int, retired: RetiredFiles) -> list[Path]:
        """Retention: the child deletes the files (it holds their only mappings). Nothing is
        deleted when the child is gone or busy: the next run deletes them."""
        try:
            answer = self._request(RETIRE, OFFSET.pack(commitlog_min), wait_s=_RETIRE_WAIT_S)
        except IndexProcessError:
            return []
        return [Path(path) for path in orjson.loads(answer)]

    def flush(self) -> None:
        """Have the child sync its newest files. Never raises and never queues behind another
        request: the flush thread must go on flushing the rest of the store (a dead child is
        left for ``close`` to report)."""
        if self._failure:
            return
        with contextlib.suppress(IndexProcessError):
            self.completed_timestamp = OFFSET.unpack(self._request(FLUSH, wait_s=0))[0]

    def close(self) -> None:
        """Let the child flush and exit; then release the pipes. Raises
        :class:`IndexProcessError` when the child could not finish (the files may then lack
        keys: the store leaves its abort marker, so the next open rebuilds them)."""
        if self._closed:
            return
        try:
            self._request(CLOSE)
        finally:
            with self._request_lock, self._write_lock:
                self._release()
                try:
                    self._child.wait(_CLOSE_TIMEOUT_S)
                except subprocess.TimeoutExpired:
                    self._kill()
