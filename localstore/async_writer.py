"""Putting from asyncio code without blocking the event loop.

Puts go to one :class:`localstore.writer.CoalescingWriter` thread, which appends each queue's
waiting puts as one batch; under sync flush a put's future resolves when group commit has made it
durable (FLUSH_DISK_TIMEOUT when that flush failed), without any thread blocking per put. Answers
reach the event loop in one ``call_soon_threadsafe`` per delivery, not one per put.
"""

from __future__ import annotations

import asyncio
import threading
from collections import deque
from collections.abc import Sequence

from localstore.codec import NewMessage
from localstore.results import PutResult, PutStatus
from localstore.store import MessageStore
from localstore.writer import Answer, CoalescingWriter

Future = asyncio.Future[PutResult]


class AsyncStoreWriter:
    """Awaitable puts into a :class:`MessageStore` from one event loop."""

    def __init__(self, store: MessageStore, loop: asyncio.AbstractEventLoop | None = None):
        self._loop = loop or asyncio.get_running_loop()
        self._done: deque[Answer] = deque()
        self._done_scheduled = False
        self._done_lock = threading.Lock()
        self._writer = CoalescingWriter(store, self._deliver)

    async def put(self, message: NewMessage, *, system: bool = False) -> PutResult:
        return await self.put_batch((message,), system=system)

    async def put_batch(self, messages: Sequence[NewMessage], *, system: bool = False) -> PutResult:
        """Store ``messages`` (one topic-queue); resolves once stored, and under sync flush
        once durable."""
        future: Future = self._loop.create_future()
        if not self._writer.submit(messages, system, future):
            return PutResult(PutStatus.SERVICE_NOT_AVAILABLE, "the writer is closed")
        return await future

    def close(self) -> None:
        """Stop the writer thread after the queued puts (their futures still resolve)."""
        self._writer.close()

    def _deliver(self, answers: list[Answer]) -> None:
        """On the writer or flush thread: queue answers, wake the loop once."""
        self._done.extend(answers)
        with self._done_lock:
            if self._done_scheduled:
                return
            self._done_scheduled = True
        self._loop.call_soon_threadsafe(self._drain_done)

    def _drain_done(self) -> None:
        with self._done_lock:
            self._done_scheduled = False
        done = self._done
        while done:
            future, result = done.popleft()
            if not future.done():
                future.set_result(result)
