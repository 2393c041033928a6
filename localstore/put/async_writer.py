"""Putting from asyncio code.

Puts made during one turn of the event loop are appended together at the end of that turn (one
``call_soon``), one batch per topic-queue and all of them in one store call
(:func:`localstore.put.writer.append_all`), on the loop's own thread. An append copies bytes into
the page cache, or under sync flush into the write-behind buffer: microseconds per message,
less than handing the puts to another thread would cost. Under sync flush a put's future
resolves when group commit has made it durable (FLUSH_DISK_TIMEOUT when that flush failed). The
writer makes its own flushes then: after each turn's appends it writes the turn's bytes and a
sync process of its own runs the fdatasync (:mod:`localstore.commitlog.sync_process`), so the loop
never waits for the GIL of a flush thread; the answers arrive on a pipe the loop watches. With
``sync_process=False`` (or once that process is gone) the store's flush thread makes them
durable instead, and its answers reach the loop in one ``call_soon_threadsafe`` per delivery,
not one per put.

The loop does wait on the store's put lock (held by other threads for microseconds) and, should
the writer outrun the background preparation of the next commitlog segment, on that segment.
"""

from __future__ import annotations

import asyncio
import threading
from collections import deque
from collections.abc import Awaitable, Sequence

from localstore.commitlog.sync_process import ProcessSync
from localstore.put.writer import Answer, Put, append_all
from localstore.record.codec import NewMessage
from localstore.results import PutResult, PutStatus
from localstore.store import MessageStore

Future = asyncio.Future[PutResult]

# Under sync flush with a sync process: once this many puts of a turn wait and the disk is idle
# (no flush in flight), they are appended and flushed at once, not at the end of the turn, so the
# disk works while the loop serves the rest (64 producers settle into two groups that alternate).
EARLY_FLUSH_PUTS = 16


class AsyncStoreWriter:
    """Awaitable puts into a :class:`MessageStore` from one event loop."""

    def __init__(
        self,
        store: MessageStore,
        loop: asyncio.AbstractEventLoop | None = None,
        *,
        sync_process: bool = True,
    ):
        """``loop``: the running loop by default. ``sync_process``: under sync flush, make
        the puts durable through a sync process of this writer's own (see the module
        docstring); False leaves them to the store's flush thread."""
        self._store = store
        self._loop = loop or asyncio.get_running_loop()
        self._syncer = (
            ProcessSync(store, self._loop)
            if sync_process and store.commitlog.sync_flush and not store.closed
            else None
        )
        self._pending: list[Put] = []  # puts of this turn of the loop, in arrival order
        self._closed = False
        self._done: deque[Answer] = deque()  # durable answers from the flush thread
        self._done_scheduled = False
        self._done_lock = threading.Lock()
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        # The loop's thread, when known: answers made there need no wake-up.
        self._loop_thread = threading.get_ident() if running is self._loop else None

    @property
    def sync_process(self) -> ProcessSync | None:
        """What makes this writer's puts durable under sync flush, when not the flush thread."""
        return self._syncer

    # put and put_batch hand back the future itself rather than being coroutines: awaiting
    # them is the same, and a put costs one frame less.
    def put(self, message: NewMessage, *, system: bool = False) -> Awaitable[PutResult]:
        """Store one message; the awaitable resolves once stored, and under sync flush once
        durable."""
        return self._submit((message,), system)

    def put_batch(
        self, messages: Sequence[NewMessage], *, system: bool = False
    ) -> Awaitable[PutResult]:
        """Store ``messages`` (one topic-queue); the awaitable resolves once stored, and under
        sync flush once durable."""
        return self._submit(messages, system)

    def _submit(self, messages: Sequence[NewMessage], system: bool) -> Future:
        future: Future = self._loop.create_future()
        if self._closed:
            future.set_result(PutResult(PutStatus.SERVICE_NOT_AVAILABLE, "the writer is closed"))
        else:
            if not self._pending:
                self._loop.call_soon(self._append_pending)
            self._pending.append((messages, system, future))
            syncer = self._syncer
            if syncer is not None and len(self._pending) >= EARLY_FLUSH_PUTS and syncer.idle:
                self._append_pending()
        return future

    def close(self) -> None:
        """Refuse new puts; the puts already made are appended now (their futures resolve;
        under sync flush this waits for their flush)."""
        self._closed = True
        self._append_pending()
        if self._syncer is not None:
            self._syncer.close()

    def _append_pending(self) -> None:
        puts, self._pending = self._pending, []
        if puts:
            _resolve(append_all(self._store, puts, self._deliver, self._syncer))
            if self._syncer is not None:
                self._syncer.flush()

    def _deliver(self, answers: list[Answer]) -> None:
        """Durable answers: from the sync process's reply, on the loop's thread (resolved at
        once); from the flush thread (queued, and the loop woken once)."""
        if self._loop_thread == threading.get_ident():
            _resolve(answers)
            return
        self._done.extend(answers)
        with self._done_lock:
            if self._done_scheduled:
                return
            self._done_scheduled = True
        try:
            self._loop.call_soon_threadsafe(self._drain_done)
        except RuntimeError:  # the loop was closed: nobody awaits these any more
            self._done.clear()

    def _drain_done(self) -> None:
        with self._done_lock:
            self._done_scheduled = False
        done = self._done
        answers = []
        while done:
            answers.append(done.popleft())
        _resolve(answers)


def _resolve(answers: list[Answer]) -> None:
    for future, result in answers:
        if not future.done():
            future.set_result(result)
