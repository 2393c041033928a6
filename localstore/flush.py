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

import queue
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
    flush of consume queues and checkpoint (``flush_others``).

    Requests travel through a ``queue.SimpleQueue`` (implemented in C: a put from a producer
    thread costs far less than signalling a Python-level Condition, which matters when many
    threads contend for the GIL).
    """

    def __init__(
        self,
        commitlog: CommitLog,
        *,
        group_commit: bool,
        flush_interval_ms: int,
        others_interval_ms: int,
        on_flushed: FlushedHook,
        flush_others: Callable[[], None],
    ):
        self._commitlog = commitlog
        self._group_commit = group_commit
        self._interval_s = flush_interval_ms / 1000
        self._others_interval_s = others_interval_ms / 1000
        self._on_flushed = on_flushed
        self._flush_others = flush_others
        self._queue: queue.SimpleQueue[FlushWaiter | None] = queue.SimpleQueue()  # None: stop
        self._stopping = False
        self.error: OSError | None = None
        self.fsync_count = 0
        self._thread = threading.Thread(target=self._run, name="quiver-flush", daemon=True)
        self._thread.start()

    def request(
        self, end_offset: int, callback: Callable[[bool], None] | None = None
    ) -> FlushWaiter:
        """Register a put that ends at ``end_offset``; the flusher finishes it once durable.

        The store stops making requests before it closes the service."""
        waiter = FlushWaiter(end_offset, callback)
        if self._stopping:
            waiter.finish(False)
        else:
            self._queue.put(waiter)
        return waiter

    def _take_requests(self, carried: list[FlushWaiter]) -> tuple[list[FlushWaiter], bool]:
        """Wait for requests (at most one interval), then take every queued one."""
        requests = carried
        stop = False
        try:
            item = self._queue.get(timeout=0 if carried else self._interval_s)
            while True:
                if item is None:
                    stop = True
                else:
                    requests.append(item)
                item = self._queue.get_nowait()
        except queue.Empty:
            pass
        return requests, stop

    def _run(self) -> None:
        next_others = time.monotonic() + self._others_interval_s
        carried: list[FlushWaiter] = []
        while True:
            requests, stop = self._take_requests(carried)
            carried = []
            try:
                if requests or not self._group_commit or stop:
                    carried = self._flush_commitlog(requests)
                if stop:
                    for waiter in carried:
                        waiter.finish(False)
                    return
                if time.monotonic() >= next_others:
                    self._flush_others()
                    next_others = time.monotonic() + self._others_interval_s
            except OSError as exc:  # a failing disk: puts waiting on it fail, the error is kept
                self.error = exc
                for waiter in requests:
                    if not waiter.finished:
                        waiter.finish(False)
                carried = []

    def _flush_commitlog(self, requests: list[FlushWaiter]) -> list[FlushWaiter]:
        """Flush, finish the covered requests, return those written after the flush began."""
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
        return late

    def close(self) -> None:
        """Flush everything once more, finish every waiter, stop the thread."""
        self._stopping = True
        self._queue.put(None)
        self._thread.join()
        while True:
            try:
                waiter = self._queue.get_nowait()
            except queue.Empty:
                break
            if waiter is not None:
                waiter.finish(waiter.end_offset <= self._commitlog.flushed_offset)
