"""Group commit for an event loop: the loop writes, a child process runs the fdatasync.

Why: an event loop's puts under sync flush all wait for one flush at a time, so the flush's
latency is the loop's idle time. Through the flush thread that latency holds more than the
fdatasync: the thread must get the GIL from the busy loop to start a flush, and the loop must
get it back from the thread to hear the answer. A child process needs no GIL: the loop writes
the bytes itself (``pwrite`` releases the GIL only for the system call) and asks the child to
sync them with one pipe write; the answer arrives on a pipe the loop's selector watches. And
with no GIL to wait for, the next group's flush starts the moment the last one's answer is read,
and the disk works while the loop serves the puts that answer woke.

A loop's flush, step by step (the invariants are :mod:`localstore.commitlog.log`'s):

1. Each put appended during a turn of the loop asks this object, not the flush thread, for its
   durability (:meth:`ProcessSync.request`); the requests are gathered.
2. After the turn's appends the writer calls :meth:`ProcessSync.flush`. One commitlog flush
   runs at a time: while this loop's last flush is in flight the gathered puts wait for the
   next; while the flush thread holds (or waits for) the token, they go to it. Otherwise
   :meth:`CommitLog.begin_flush` writes the write-behind list through the files, and one
   ``SYNC`` request naming the segments to sync goes to the child
   (:mod:`localstore.commitlog.sync_worker` holds the protocol).
3. When the child answers, the loop ends the flush (:meth:`FlushService.finish_elsewhere`,
   which moves the flushed offset), begins the next one for the puts gathered meanwhile, and
   then answers the puts of the one that ended.

Failures: a failed write or sync answers its puts with the failure, keeps the bytes for the next
flush, and makes the store refuse puts until the flush thread's retry succeeds, as for the flush
thread's own flushes. When the child cannot be started, dies or stops answering properly, its
flush in flight fails so, the failure is logged, and later puts wait for the flush thread. A
flush that never ends (the loop stopped, the child hangs) is taken over by the next flush of the
flush thread after half ``sync_flush_timeout_ms``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import select
import subprocess
import time
import weakref
from typing import TYPE_CHECKING, NamedTuple

from localstore.commitlog.flush import (
    DurableCallback,
    DurableWait,
    FlushWaiter,
    answer_waiters,
    failure_text,
)
from localstore.commitlog.log import FlushBusyError, TakenFlush
from localstore.commitlog.sync_worker import CLOSE, ERROR, SEQUENCE, SYNC
from localstore.runtime.pipe_frames import frame, split_frames, write_all
from localstore.runtime.worker_command import worker_command, worker_env

if TYPE_CHECKING:
    from localstore.store import MessageStore

log = logging.getLogger(__name__)

_CLOSE_TIMEOUT_S = 10.0
_REAP_WAIT_S = 0.2
_READ_BYTES = 1 << 16


class ProcessSync:
    """The durability of one event loop's puts, made by a sync process. Used on the loop's
    thread only (the writer's appends, :meth:`flush` and the selector's callback)."""

    def __init__(self, store: MessageStore, loop: asyncio.AbstractEventLoop):
        self._commitlog = store.commitlog
        self._flusher = store.flusher
        self._loop = loop
        self._gathered: list[FlushWaiter] = []  # requests not yet in a flush
        self._in_flight: _InFlight | None = None  # one flush at a time
        self._sequence = 0  # requests sent to the child
        # A sync unanswered this long means a hung child (the store's takeover delay).
        self._overdue_s = max(0.001, store.options.sync_flush_timeout_ms / 2000)
        # One watchdog timer, not one per flush (a timer scheduled and cancelled per flush is
        # work on the loop's hot cycle): armed when a flush is sent and none is armed,
        # it gives the child up when the flush in flight is overdue, else re-arms for it.
        self._watchdog: asyncio.TimerHandle | None = None
        self._replies = bytearray()
        self._closed_by_child = False
        # Why the child can no longer be used (then the flush thread takes every request).
        self.failure: str | None = None
        self._child: subprocess.Popen[bytes] | None = None
        try:
            self._child = subprocess.Popen(
                worker_command("localstore.commitlog.sync_worker"),
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                env=worker_env(),
                close_fds=True,
                start_new_session=True,
            )
        except OSError as exc:
            self._give_up(f"it could not be started ({exc})")
            return
        assert self._child.stdin is not None and self._child.stdout is not None
        self._to_child = self._child.stdin.fileno()
        self._from_child = self._child.stdout.fileno()
        os.set_blocking(self._from_child, False)
        loop.add_reader(self._from_child, self._read_replies)
        # A writer dropped without close: end the child (a flush it left unended is taken over
        # by the flush thread, see the module docstring).
        weakref.finalize(self, _end_child, self._child)

    @property
    def idle(self) -> bool:
        """No flush of this loop is waiting for the child."""
        return self._in_flight is None

    @property
    def pid(self) -> int | None:
        """The child's process id; None once it is closed or given up."""
        return self._child.pid if self._child is not None else None

    @property
    def syncs_requested(self) -> int:
        """How many flushes this loop has asked the child to sync."""
        return self._sequence

    def request(self, end_offset: int, callback: DurableCallback) -> DurableWait | FlushWaiter:
        """Gather a put that ends at ``end_offset``; ``callback`` hears once its flush ended
        (None: durable; else why not). The flush thread takes it once the child is unusable."""
        if self.failure is not None:
            return self._flusher.request(end_offset, callback)
        waiter = FlushWaiter(end_offset, callback)
        self._gathered.append(waiter)
        return waiter

    def flush(self) -> None:
        """Begin a flush for the gathered puts, unless one is in flight (they wait for the
        next: this loop's own begins as soon as its answer is read; the flush thread's takes
        them along when it runs another round)."""
        if not self._gathered:
            return
        if self.failure is not None:
            self._hand_to_flush_thread()
            return
        if self._in_flight is not None:  # this loop's last flush is not answered yet
            return
        try:
            taken = self._commitlog.begin_flush(wait_s=0)
        except FlushBusyError:  # the flush thread holds or waits for the token: it takes these
            self._hand_to_flush_thread()
            return
        except Exception as exc:  # nothing was written durably; the bytes are kept
            waiters, self._gathered = self._gathered, []
            answer_waiters(waiters, self._commitlog.flushed_offset, failure_text(exc))
            return
        waiters, self._gathered = self._gathered, []
        if taken is None:  # nothing left to write, and no flush in flight: all is durable
            answer_waiters(waiters, self._commitlog.flushed_offset, None)
            return
        self._sequence += 1
        loop = self._loop
        self._in_flight = _InFlight(self._sequence, taken, waiters, loop.time())
        try:
            if self._watchdog is None:
                self._watchdog = loop.call_later(self._overdue_s, self._watch)
            paths = b"\0".join(os.fsencode(segment.path) for segment in taken.to_sync)
            write_all(self._to_child, frame(SYNC, SEQUENCE.pack(self._sequence) + paths))
        except (OSError, RuntimeError) as exc:  # the child is gone, or the loop is closed
            self._give_up(f"a sync could not be asked for ({exc})")

    def _hand_to_flush_thread(self) -> None:
        waiters, self._gathered = self._gathered, []
        for waiter in waiters:
            self._flusher.request(waiter.end_offset, waiter.callback)

    def _read_replies(self) -> None:
        """The selector's callback: the child answered (or ended)."""
        try:
            chunk = os.read(self._from_child, _READ_BYTES)
        except BlockingIOError:
            return
        except OSError as exc:
            self._give_up(f"reading from it failed ({exc})")
            return
        self._take_replies(chunk)

    def _take_replies(self, chunk: bytes) -> None:
        if not chunk:
            self._give_up("it ended")
            return
        self._replies += chunk
        for kind, payload in split_frames(self._replies):
            if kind == CLOSE:
                self._closed_by_child = True
            else:
                self._answered(kind, payload)

    def _answered(self, kind: bytes, payload: bytes) -> None:
        sequence = SEQUENCE.unpack_from(payload)[0] if len(payload) >= SEQUENCE.size else -1
        in_flight = self._in_flight
        if kind not in (SYNC, ERROR) or in_flight is None or in_flight.sequence != sequence:
            self._give_up(f"it answered out of turn ({kind!r}, request {sequence})")
            return
        self._in_flight = None
        error = None if kind == SYNC else OSError(payload[SEQUENCE.size :].decode(errors="replace"))
        failure = self._flusher.finish_elsewhere(in_flight.taken, error)
        self.flush()  # the next group's flush starts before this one's puts are answered
        answer_waiters(in_flight.waiters, self._commitlog.flushed_offset, failure)

    def _watch(self) -> None:
        """The watchdog: a flush unanswered for half the sync flush timeout means a hung child."""
        self._watchdog = None
        in_flight = self._in_flight
        if in_flight is None or self.failure is not None:
            return  # re-armed by the next flush sent
        waited = self._loop.time() - in_flight.sent_at
        if waited >= self._overdue_s:
            self._give_up(f"it did not answer a sync within {self._overdue_s:.1f} s")
        else:
            self._watchdog = self._loop.call_later(self._overdue_s - waited, self._watch)

    def _give_up(self, why: str) -> None:
        """Stop using the child: its flush in flight fails (its bytes are kept for the flush
        thread's retry), the puts gathered and later ones go to the flush thread."""
        if self.failure is not None:
            return
        pid = self._child.pid if self._child is not None else "-"
        self.failure = f"the sync process (pid {pid}) can no longer be used: {why}"
        log.error("%s; the flush thread makes puts durable from now on", self.failure)
        in_flight = self._in_flight
        self._in_flight = None
        try:
            if in_flight is not None:
                failure = self._flusher.finish_elsewhere(in_flight.taken, OSError(self.failure))
                answer_waiters(in_flight.waiters, self._commitlog.flushed_offset, failure)
            self._hand_to_flush_thread()
        finally:
            self._stop_child()

    def _stop_child(self) -> None:
        child = self._child
        if child is None:
            return
        self._child = None
        if self._watchdog is not None:
            self._watchdog.cancel()
            self._watchdog = None
        with contextlib.suppress(Exception):  # a closed loop has nothing to remove
            self._loop.remove_reader(self._from_child)
        _end_child(child)

    def close(self) -> None:
        """Flush what is gathered and wait for the answers (at most 10 s), then let the child
        exit. Puts whose answer did not come fail (their bytes are kept)."""
        self.flush()
        if self._child is None:
            return
        deadline = time.monotonic() + _CLOSE_TIMEOUT_S
        try:
            while self._in_flight is not None and self.failure is None:
                if not self._read_blocking(deadline):
                    self._give_up("it did not answer before the writer closed")
                    return
            self._hand_to_flush_thread()  # the flush thread held the token: it takes these
            write_all(self._to_child, frame(CLOSE))
            while not self._closed_by_child and self.failure is None:
                if not self._read_blocking(deadline):
                    self._give_up("it did not close in time")
                    return
        except OSError as exc:
            self._give_up(f"it failed while closing ({exc})")
            return
        self._stop_child()

    def _read_blocking(self, deadline: float) -> bool:
        """Wait for the child's next replies and take them; False when the deadline passed."""
        left = deadline - time.monotonic()
        if left <= 0 or not select.select([self._from_child], [], [], left)[0]:
            return False
        try:
            chunk = os.read(self._from_child, _READ_BYTES)
        except BlockingIOError:
            return True
        self._take_replies(chunk)
        return True


class _InFlight(NamedTuple):
    sequence: int  # the child's answer names it
    taken: TakenFlush
    waiters: list[FlushWaiter]
    sent_at: float  # the loop's time


def _end_child(child: subprocess.Popen[bytes]) -> None:
    """Kill the child if it still runs, reap it (not waiting long: a child stuck in the kernel
    on a hung disk dies only once the disk answers) and close its pipes."""
    if child.poll() is None:
        child.kill()
    try:
        child.wait(_REAP_WAIT_S)
    except subprocess.TimeoutExpired:
        log.warning("the sync process (pid %d) has not ended yet after SIGKILL", child.pid)
    for pipe in (child.stdin, child.stdout):
        if pipe is not None:
            with contextlib.suppress(OSError):
                pipe.close()
