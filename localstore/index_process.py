"""The key index built by a child process (``StoreOptions.index_process``), on another core.

Indexing costs about a third of a put in Python, and under the GIL no thread can take it off the
put path. With this option the store hands it to a child process (:mod:`localstore.index_worker`)
as RocketMQ hands it to a dispatcher thread: a put gathers its messages' keys (``UNIQ_KEY`` and
``KEYS``) with their commitlog offsets, a few dozen nanoseconds a message, and every few hundred
messages they go to the child in one pipe write; the child hashes them and writes the index
files. Records from before the store opened that the files lack, the child reads from the
commitlog itself.

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
import os
import subprocess
import sys
import threading
from collections.abc import Callable, Sequence
from pathlib import Path

import orjson

import localstore
from localstore.codec import PROPERTY_KEYS, PROPERTY_UNIQ_KEY, NewMessage, StoredMessage
from localstore.errors import IndexProcessError
from localstore.index_protocol import (
    CLOSE,
    ERROR,
    FLUSH,
    KEYS,
    OFFSET,
    QUERY,
    RETIRE,
    SYNC,
    frame,
    read_frame,
    write_all,
)
from localstore.retention import RetiredFiles

_CLOSE_TIMEOUT_S = 60.0
_SEND_EVERY = 512  # messages whose keys are gathered before one write to the child


class IndexProcess:
    """A :class:`localstore.index_service.KeyIndex` whose files a child process builds."""

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
        self._gathered: list[tuple[object, ...]] = []
        self._gathered_messages = 0
        self._closed = False
        self._failure = ""
        self.completed_timestamp = 0
        self._child = self._spawn(
            root, slots, entries, segment_size, crashed, checkpoint_timestamp, min_offset, end
        )

    @property
    def pid(self) -> int:
        return self._child.pid

    @staticmethod
    def _spawn(
        root: Path,
        slots: int,
        entries: int,
        segment_size: int,
        crashed: bool,
        checkpoint_timestamp: int,
        min_offset: int,
        end: int,
    ) -> subprocess.Popen[bytes]:
        command = [
            sys.executable,
            "-m",
            "localstore.index_worker",
            f"--root={root}",
            f"--slots={slots}",
            f"--entries={entries}",
            f"--segment-size={segment_size}",
            f"--min-offset={min_offset}",
            f"--end={end}",
            f"--checkpoint-timestamp={checkpoint_timestamp}",
        ]
        if crashed:
            command.append("--crashed")
        # The child imports this very package, wherever it was imported from here.
        package_parent = str(Path(localstore.__file__).resolve().parent.parent)
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(
            p for p in (package_parent, env.get("PYTHONPATH", "")) if p
        )
        return subprocess.Popen(
            command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env, close_fds=True
        )

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
        properties = [message.properties for message in messages]
        flags = [message.sys_flag for message in messages]
        with self._write_lock:
            self._gathered.append(
                (
                    store_timestamp,
                    topic,
                    phys_offsets,
                    [p.get(PROPERTY_UNIQ_KEY) for p in properties],
                    [p.get(PROPERTY_KEYS) for p in properties],
                    flags if any(flags) else None,
                )
            )
            self._gathered_messages += len(messages)
            if self._gathered_messages >= _SEND_EVERY:
                self._send_gathered()

    def _send_gathered(self) -> None:
        """Write the gathered keys to the child (under ``_write_lock``)."""
        if not self._gathered:
            return
        payload = orjson.dumps(self._gathered)
        self._gathered = []
        self._gathered_messages = 0
        self._write(frame(KEYS, payload))

    def _write(self, data: bytes) -> None:
        stdin = self._child.stdin
        if self._failure or stdin is None:
            return
        try:
            write_all(stdin.fileno(), data)
        except OSError as exc:  # the child is gone: puts go on, requests report it
            self._failure = self._exited(exc)

    def _exited(self, cause: object) -> str:
        return (
            f"the key-index process (pid {self._child.pid}) is gone ({cause}, exit status "
            f"{self._child.poll()}); queries by key fail until the store is reopened, which "
            "rebuilds what the index lacks"
        )

    # -- requests ----------------------------------------------------------------------------
    def _request(self, kind: bytes, payload: bytes = b"") -> bytes:
        """Send what is gathered, then a request; return the reply's payload."""
        with self._request_lock:
            if self._closed:
                raise IndexProcessError("the store's key index is closed")
            with self._write_lock:
                self._send_gathered()
                self._write(frame(kind, payload))
            reply = None
            stdout = self._child.stdout
            if not self._failure and stdout is not None:
                try:
                    reply = read_frame(stdout.fileno())
                except OSError as exc:
                    self._failure = self._exited(exc)
            if reply is None:
                self._failure = self._failure or self._exited("no answer")
                raise IndexProcessError(self._failure)
        answer_kind, answer = reply
        if answer_kind == ERROR:
            raise IndexProcessError(answer.decode())
        return answer

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
        """See :meth:`localstore.index_service.IndexService.query`: the child finds the
        messages, this process reads them."""
        offsets = orjson.loads(
            self._request(QUERY, orjson.dumps([topic, key, max_count, begin_ms, end_ms]))
        )
        return [message for message in map(load, offsets) if message is not None]

    def delete_files_before(self, commitlog_min: int, retired: RetiredFiles) -> list[Path]:
        """Retention: the child deletes the files (it holds their only mappings)."""
        deleted = orjson.loads(self._request(RETIRE, OFFSET.pack(commitlog_min)))
        return [Path(path) for path in deleted]

    def flush(self) -> None:
        """Have the child sync its newest files; a dead child is left for ``close`` to report
        (the flush thread must go on flushing the rest of the store)."""
        if self._failure:
            return
        with contextlib.suppress(IndexProcessError):
            self.completed_timestamp = OFFSET.unpack(self._request(FLUSH))[0]

    def close(self) -> None:
        """Let the child index what is left, flush and exit; then release the pipes. Raises
        :class:`IndexProcessError` when the child could not finish (the files may then lack
        keys: the store leaves its abort marker, so the next open rebuilds them)."""
        if self._closed:
            return
        try:
            self._request(CLOSE)
        finally:
            with self._request_lock, self._write_lock:
                self._closed = True
                child = self._child
                for pipe in (child.stdin, child.stdout):
                    if pipe is not None:
                        with contextlib.suppress(OSError):  # nothing buffered; maybe broken
                            pipe.close()
                try:
                    child.wait(_CLOSE_TIMEOUT_S)
                except subprocess.TimeoutExpired:
                    child.kill()
                    child.wait()
