"""Making appends durable: the periodic flusher (async mode) and group commit (sync mode).

Async flush: a thread fdatasyncs the commitlog every ``flush_interval_ms`` and the consume
queues and checkpoint every ``cq_flush_interval_ms``; a put returns once its bytes are in the page
cache, so a process crash loses nothing but a machine crash loses at most the last interval.

Sync flush (group commit): a put returns only after an fdatasync that covers its bytes. Each
waiting put registers a :class:`FlushWaiter` holding its end offset; the flusher thread takes all
waiting requests, syncs once up to the current write position (which covers every request taken
and any written since), and wakes each covered waiter through its own lock, so many concurrent
puts share one fdatasync. Waiters may also carry a callback (for asyncio callers) instead of
blocking.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from localstore.commitlog import CommitLog

FlushedHook = Callable[[int, int], None]  # (flushed offset, store time of its last record)


class FlushWaiter:
    """One put waiting for its bytes to be durable."""

    __slots__ = ("_done", "callback", "end_offset", "finished", "ok")

    def __init__(self, end_offset: int, callback: Callable[[bool], None] | None = None):
        self.end_offset = end_offset
        self.callback = callback
        self.ok = False
        self.finished = False
        self._done = threading.Lock()
        self._done.acquire()

    def wait(self, timeout_s: float) -> bool:
        """True once flushed; False on timeout or when the store closed first."""
        if self._done.acquire(timeout=timeout_s):
            return self.ok
        return False

    def finish(self, ok: bool) -> None:
        self.ok = ok
        self.finished = True
        if self.callback is not None:
            self.callback(ok)
        self._done.release()


class FlushService:
    """The store's one flush thread: commitlog flushes (periodic or on request) and the periodic
    flush of consume queues and checkpoint (``flush_others``)."""

    def __init__(self, commitlog: CommitLog, *, group_commit: bool, flush_interval_ms: int,
                 others_interval_ms: int, on_flushed: FlushedHook,
                 flush_others: Callable[[], None]):
        self._commitlog = commitlog
        self._group_commit = group_commit
        self._interval_s = flush_interval_ms / 1000
        self._others_interval_s = others_interval_ms / 1000
        self._on_flushed = on_flushed
        self._flush_others = flush_others
        self._requests: list[FlushWaiter] = []
        self._lock = threading.Lock()
        self._wakeup = threading.Event()
        self._stopping = False
        self.error: OSError | None = None
        self.fsync_count = 0
        self.flushed_requests = 0
        self._thread = threading.Thread(target=self._run, name="quiver-flush", daemon=True)
        self._thread.start()

    def request(self, end_offset: int,
                callback: Callable[[bool], None] | None = None) -> FlushWaiter:
        """Register a put that ends at ``end_offset``; the flusher finishes it once durable."""
        waiter = FlushWaiter(end_offset, callback)
        with self._lock:
            if self._stopping:
                waiter.finish(False)
                return waiter
            self._requests.append(waiter)
        self._wakeup.set()
        return waiter

    def _run(self) -> None:
        next_others = time.monotonic() + self._others_interval_s
        while True:
            self._wakeup.wait(self._interval_s)
            self._wakeup.clear()
            with self._lock:
                stopping = self._stopping
                requests, self._requests = self._requests, []
            try:
                if requests or not self._group_commit or stopping:
                    self._flush_commitlog(requests)
                if stopping:
                    return
                if time.monotonic() >= next_others:
                    self._flush_others()
                    next_others = time.monotonic() + self._others_interval_s
            except OSError as exc:  # a failing disk: puts waiting on it fail, the error is kept
                self.error = exc
                for waiter in requests:
                    if not waiter.finished:
                        waiter.finish(False)

    def _flush_commitlog(self, requests: list[FlushWaiter]) -> None:
        before = self._commitlog.flushed_offset
        flushed, timestamp = self._commitlog.flush()
        if flushed > before:
            self.fsync_count += 1
            self._on_flushed(flushed, timestamp)
        late = []
        for waiter in requests:
            if waiter.end_offset <= flushed:
                waiter.finish(True)
            else:
                late.append(waiter)
        self.flushed_requests += len(requests) - len(late)
        if late:  # written after we read the position: next round
            with self._lock:
                self._requests[:0] = late
            self._wakeup.set()

    def close(self) -> None:
        """Flush everything once more, finish every waiter, stop the thread."""
        with self._lock:
            self._stopping = True
        self._wakeup.set()
        self._thread.join()
        with self._lock:
            leftover, self._requests = self._requests, []
        for waiter in leftover:
            waiter.finish(waiter.end_offset <= self._commitlog.flushed_offset)
