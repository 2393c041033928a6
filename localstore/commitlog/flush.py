"""Making appends durable: the periodic flusher (async mode) and group commit (sync mode).

Async flush: a thread fdatasyncs the commitlog every ``flush_interval_ms`` and the consume
queues and checkpoint every ``cq_flush_interval_ms``; a put returns once its bytes are in the page
cache, so a process crash loses nothing but a machine crash loses at most the last interval.

Sync flush (group commit): a put returns only after an fdatasync that covers its bytes. A put
registers its end offset in the flusher's request queue; the flusher thread takes every queued
request, syncs once up to the current write position (which covers every request taken and any
put written before it took them), and so many concurrent puts share one fdatasync.

How the flusher wakes the puts it covered, the invariant the code keeps:

* Blocking puts wait on a :class:`_Gate`, one per flush: a lock the flusher holds until that
  flush is done. A put reads the current gate *before* queueing its request, and the flusher
  swaps in a new gate *after* taking the queue and *before* reading the write position. So a put
  that holds the old gate wrote its bytes before the flush read its target, and is covered; a put
  that holds the new gate has its request in the queue, which makes the next flush happen.
* The flusher releases a gate once, and each woken put releases it again for the next: the
  flusher makes one wake-up call per flush instead of one per put, and is back at the disk
  sooner. (Each wake-up is a system call made holding the GIL, which the waking thread then
  waits to get back: waking every put from the flusher would spend the flusher's time on
  wake-ups instead of the disk.)
* Only a round that flushes swaps gates: an idle round keeps the gate, which a put may hold
  with its request not yet queued.
* Callers that cannot block (asyncio) register a callback, called on the flush thread.
* An event loop may run its own flushes, whose fdatasync a sync process makes
  (:mod:`localstore.commitlog.sync_process`); :meth:`FlushService.finish_elsewhere` books them
  as this thread books its own. One flush runs at a time (:mod:`localstore.commitlog.log`'s flush
  token).

A flush that fails (with any exception) answers its puts with the failure and leaves its bytes
for the next one (:meth:`CommitLog.flush` puts them back); while the error stands the flusher
retries every interval, with or without requests, and the store refuses puts (``on_error``).
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable, Iterable
from typing import Protocol

from localstore.commitlog.log import CommitLog, TakenFlush

FlushedHook = Callable[[int, int], None]  # (flushed offset, store time of its last record)
# Called on the flush thread once a put's fate is known: None once durable, else why not.
DurableCallback = Callable[[str | None], None]
ErrorHook = Callable[[Exception | None], None]  # the commitlog flush failed (an error) or recovered

log = logging.getLogger(__name__)


class FlushRequests(Protocol):
    """What takes a put's request for durability: the flush thread (:class:`FlushService`) or
    an event loop's sync process (:class:`localstore.commitlog.sync_process.ProcessSync`)."""

    def request(self, end_offset: int, callback: DurableCallback) -> DurableWait | FlushWaiter:
        """Register a put that ends at ``end_offset``; ``callback`` hears None once it is
        durable, or why not."""
        ...


class _Gate:
    """The wake-up of every blocking put one flush covers: locked until the flush is done."""

    __slots__ = ("failure", "lock")

    def __init__(self) -> None:
        self.failure: str | None = None  # why the flush did not make its puts durable
        self.lock = threading.Lock()
        self.lock.acquire()

    def open(self, failure: str | None = None) -> None:
        self.failure = failure
        self.lock.release()


_CLOSED = "the store closed before a flush covered it"
NOT_COVERED = "the flush it waited for did not cover it"


class DurableWait:
    """A blocking put waiting for its bytes to be durable."""

    __slots__ = ("_commitlog", "_end_offset", "_gate", "failure")

    def __init__(self, commitlog: CommitLog, gate: _Gate, end_offset: int):
        self._commitlog = commitlog
        self._gate = gate
        self._end_offset = end_offset
        # After ``wait`` answered False: why (None when it timed out).
        self.failure: str | None = None

    @property
    def end_offset(self) -> int:
        """The commitlog offset the put's bytes end at: durable once flushed that far."""
        return self._end_offset

    def wait(self, timeout_s: float) -> bool:
        """True once flushed; False on timeout, a failed flush, or when the store closed first."""
        gate = self._gate
        if not gate.lock.acquire(timeout=timeout_s):
            return False
        gate.lock.release()  # wake the next put waiting on this flush
        if gate.failure is None and self._commitlog.flushed_offset < self._end_offset:
            self.failure = NOT_COVERED  # not seen: see the module docstring
        else:
            self.failure = gate.failure
        return self.failure is None


class FlushWaiter:
    """A put waiting for durability through a callback (for callers that cannot block)."""

    __slots__ = ("callback", "end_offset")

    def __init__(self, end_offset: int, callback: DurableCallback):
        self.end_offset = end_offset
        self.callback = callback


_STOP = -1  # the queue item that stops the flusher


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
        on_error: ErrorHook,
        steal_after_ms: int = 5000,
    ):
        self._commitlog = commitlog
        self._group_commit = group_commit
        self._interval_s = flush_interval_ms / 1000
        self._others_interval_s = others_interval_ms / 1000
        self._on_flushed = on_flushed
        self._flush_others = flush_others
        self._on_error = on_error
        # How long a flush waits for one begun elsewhere before taking it over.
        self._steal_after_s = steal_after_ms / 1000
        commitlog.flush_hook = self._book
        # Items: the end offset of a blocking put, a FlushWaiter, or _STOP.
        self._queue: queue.SimpleQueue[int | FlushWaiter] = queue.SimpleQueue()
        self._gate = _Gate()
        self._stopping = False
        self._stop_lock = threading.Lock()
        # Why the last commitlog flush failed; None once one succeeds. While set, the flusher
        # retries every interval, whether or not puts wait.
        self.error: Exception | None = None
        # Any commitlog flush failed since open: under async flush a later fdatasync that
        # succeeds does not prove the earlier pages reached the disk (Linux reports a writeback
        # error once), so the store keeps its abort marker and the next open recovers.
        self.failed_once = False
        self.fsync_count = 0
        # Time the flush thread spent in commitlog flushes (their fsyncs), and how many: a
        # server's metrics read them.
        self.flush_seconds_total = 0.0
        self.flush_rounds = 0
        self._thread = threading.Thread(target=self._run, name="quiver-flush", daemon=True)
        self._thread.start()

    def request(
        self, end_offset: int, callback: DurableCallback | None = None
    ) -> DurableWait | FlushWaiter:
        """Register a put that ends at ``end_offset``. Without ``callback``, the returned
        :class:`DurableWait` blocks until a flush covers it; with one, the callback is called on
        the flush thread instead (with None once durable, or why not).

        The store stops making requests before it closes the service."""
        if callback is None:
            gate = self._gate  # read before queueing: see the module docstring
            if self._stopping:
                gate = _Gate()
                gate.open(_CLOSED)
            else:
                self._queue.put(end_offset)
            return DurableWait(self._commitlog, gate, end_offset)
        waiter = FlushWaiter(end_offset, callback)
        with self._stop_lock:  # not lost between close's last look at the queue and its end
            stopping = self._stopping
            if not stopping:
                self._queue.put(waiter)
        if stopping:
            answer_waiter(waiter, _CLOSED)
        return waiter

    def _take_requests(self) -> tuple[list[FlushWaiter], int, bool]:
        """Wait for requests (at most one interval), then take every queued one. Returns the
        callback waiters, the furthest end offset of the blocking puts, and whether to stop."""
        waiters: list[FlushWaiter] = []
        end = 0
        stop = False
        get = self._queue.get
        try:
            item = get(timeout=self._interval_s)
            while True:
                if isinstance(item, FlushWaiter):
                    waiters.append(item)
                elif item == _STOP:
                    stop = True
                elif item > end:
                    end = item
                item = get(block=False)
        except queue.Empty:
            pass
        return waiters, end, stop

    def _run(self) -> None:
        next_others = time.monotonic() + self._others_interval_s
        while True:
            waiters, end, stop = self._take_requests()
            if waiters or end or stop or not self._group_commit or self.error is not None:
                # Only a round that flushes swaps gates, after taking the queue (see the module
                # docstring); an idle round keeps it: a put may hold it, its request not yet queued.
                gate, self._gate = self._gate, _Gate()
                self._flush_commitlog(waiters, gate)
                if stop:
                    self._gate.open(_CLOSED)  # no put holds it: requests stopped before
                    return
            if time.monotonic() >= next_others:
                try:
                    self._flush_others()
                except Exception:  # consume queues and checkpoint are rebuilt by recovery
                    log.exception("flushing consume queues and checkpoint failed; retrying")
                next_others = time.monotonic() + self._others_interval_s

    def _flush_commitlog(self, waiters: list[FlushWaiter], gate: _Gate) -> None:
        """Flush (the commitlog books it, through :meth:`_book`), then answer the puts the
        flush was for: the gate's and the callbacks'."""
        failure = None
        started = time.perf_counter()
        try:
            self._commitlog.flush(steal_after_s=self._steal_after_s)
        except Exception as exc:  # a failing disk (or a bug): its puts fail, the error is kept
            failure = failure_text(exc)
        finally:
            self.flush_seconds_total += time.perf_counter() - started
            self.flush_rounds += 1
            gate.open(failure)
            answer_waiters(waiters, self._commitlog.flushed_offset, failure)

    def _book(self, error: BaseException | None, taken: TakenFlush | None) -> None:
        """The commitlog's flush hook: a flush ended. Flushes are booked one at a time, in the
        order they end, whoever ran them (under sync flush under the commitlog's flush token)."""
        if error is not None:
            if isinstance(error, Exception):  # an interrupt is no disk failure
                self._note_error(error)
            return
        self._note_error(None)
        if taken is not None:
            self._flushed(taken.target, taken.timestamp)

    def finish_elsewhere(self, taken: TakenFlush, error: Exception | None) -> str | None:
        """A flush begun with :meth:`CommitLog.begin_flush` and synced outside this thread
        ended (``error`` None: the sync succeeded). Ends it (the commitlog books it); returns
        why the puts it covers may not be durable, or None (see :func:`answer_waiters`)."""
        covered = self._commitlog.end_flush(taken, error)
        if covered is None:  # its token was taken: the flush that took it answers for the bytes
            return NOT_COVERED
        return None if error is None else failure_text(error)

    def _flushed(self, offset: int, timestamp: int) -> None:
        self.fsync_count += 1
        self._on_flushed(offset, timestamp)

    def _note_error(self, error: Exception | None) -> None:
        """Keep the commitlog flush's error (None: it succeeded) and tell the store of a change.
        Flushes are booked one at a time (see :meth:`_book`), so the store hears the changes in
        order."""
        if error is not None:
            self.failed_once = True
        if (error is None) == (self.error is None):
            self.error = error
            return
        previous, self.error = self.error, error
        if error is not None:
            log.error(
                "commitlog flush failed, puts are refused until one succeeds: %s",
                error,
                exc_info=not isinstance(error, OSError),
            )
        else:
            log.warning("commitlog flush succeeded again after: %s", previous)
        try:
            self._on_error(error)
        except Exception:
            log.exception("the store's flush-error hook failed")

    def close(self) -> None:
        """Flush everything once more, finish every waiter, stop the thread."""
        with self._stop_lock:
            self._stopping = True
            self._queue.put(_STOP)
        self._thread.join()
        late: list[FlushWaiter] = []
        while True:
            try:
                item = self._queue.get_nowait()
            except queue.Empty:
                break
            if isinstance(item, FlushWaiter):
                late.append(item)
        answer_waiters(late, self._commitlog.flushed_offset, _CLOSED)


def answer_waiter(waiter: FlushWaiter, failure: str | None) -> None:
    """Call a waiter's callback; one that raises is logged and stops neither the other answers
    nor the flush thread."""
    try:
        waiter.callback(failure)
    except Exception:
        log.exception("a flush callback failed")


def answer_waiters(
    waiters: Iterable[FlushWaiter], flushed_offset: int, failure: str | None
) -> None:
    """Answer the puts a flush was for: durable where ``flushed_offset`` covers them (it moves
    only over synced bytes, whichever flush synced them); otherwise ``failure``, or, when that
    flush succeeded without covering them, :data:`NOT_COVERED`."""
    for waiter in waiters:
        answer_waiter(
            waiter, None if waiter.end_offset <= flushed_offset else failure or NOT_COVERED
        )


def failure_text(exc: BaseException) -> str:
    """What a put covered by a failed flush hears."""
    unexpected = not isinstance(exc, OSError)
    return f"the flush that should cover it failed: {repr(exc) if unexpected else exc}"
