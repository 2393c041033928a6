"""Putting from asyncio code.

Puts made during one turn of the event loop are appended together at the end of that turn
(one ``call_soon``), one append per topic-queue (:func:`localstore.writer.append_all`), on the
loop's own thread. An append copies bytes into the page cache, or under sync flush into the
write-behind buffer the flush thread writes: microseconds per message, less than handing the
puts to another thread would cost. Under sync flush a put's future resolves when group commit
has made it durable (FLUSH_DISK_TIMEOUT when that flush failed); the flush thread's answers
reach the loop in one ``call_soon_threadsafe`` per delivery, not one per put.

The loop does wait on the store's put lock (held by other threads for microseconds) and, should
the writer outrun the background preparation of the next commitlog segment, on that segment.
"""

from __future__ import annotations

import asyncio
import threading
from collections import deque
from collections.abc import Awaitable, Sequence

from localstore.codec import NewMessage
from localstore.results import PutResult, PutStatus
from localstore.store import MessageStore
from localstore.writer import Answer, Put, append_all

Future = asyncio.Future[PutResult]


class AsyncStoreWriter:
    """Awaitable puts into a :class:`MessageStore` from one event loop."""

    def __init__(self, store: MessageStore, loop: asyncio.AbstractEventLoop | None = None):
        self._store = store
        self._loop = loop or asyncio.get_running_loop()
        self._pending: list[Put] = []  # puts of this turn of the loop, in arrival order
        self._closed = False
        self._done: deque[Answer] = deque()  # durable answers from the flush thread
        self._done_scheduled = False
        self._done_lock = threading.Lock()

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
        return future

    def close(self) -> None:
        """Refuse new puts; the puts already made are appended now (their futures resolve)."""
        self._closed = True
        self._append_pending()

    def _append_pending(self) -> None:
        puts, self._pending = self._pending, []
        if puts:
            _resolve(append_all(self._store, puts, self._deliver))

    def _deliver(self, answers: list[Answer]) -> None:
        """On the flush thread: queue durable answers, wake the loop once."""
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
