"""Putting from asyncio code without blocking the event loop.

Appends run on one dedicated writer thread (one writer keeps the log's order for free); under sync
flush a put's future resolves when group commit has made it durable (or reports FLUSH_DISK_TIMEOUT
when that flush failed), without any thread blocking per put.

Batches are the unit of speed, so hand-offs are batched both ways: the writer drains every put
queued since it last woke and appends the puts aimed at one topic-queue as one batch (each put is
validated on its own first, so one bad put never fails its neighbours), and results reach the
event loop in one ``call_soon_threadsafe`` per round, not one per put. Puts to one queue keep
their arrival order.
"""

from __future__ import annotations

import asyncio
import queue
import threading
from collections import deque
from collections.abc import Sequence

from localstore.codec import SYSFLAG_TRANSACTION_PREPARED, NewMessage
from localstore.results import PutResult, PutStatus
from localstore.store import MessageStore

Future = asyncio.Future[PutResult]
_Put = tuple[Sequence[NewMessage], bool, Future]
_Done = tuple[Future, PutResult]


class AsyncStoreWriter:
    """Awaitable puts into a :class:`MessageStore` from one event loop."""

    def __init__(self, store: MessageStore, loop: asyncio.AbstractEventLoop | None = None):
        self._store = store
        self._loop = loop or asyncio.get_running_loop()
        self._queue: queue.SimpleQueue[_Put | None] = queue.SimpleQueue()  # None: stop
        self._done: deque[_Done] = deque()
        self._done_scheduled = False
        self._done_lock = threading.Lock()
        self._closed = False
        self._thread = threading.Thread(target=self._run, name="quiver-writer", daemon=True)
        self._thread.start()

    async def put(self, message: NewMessage, *, system: bool = False) -> PutResult:
        return await self.put_batch((message,), system=system)

    async def put_batch(self, messages: Sequence[NewMessage], *, system: bool = False) -> PutResult:
        """Store ``messages`` (one topic-queue); resolves once stored, and under sync flush
        once durable."""
        if self._closed:
            return PutResult(PutStatus.SERVICE_NOT_AVAILABLE, "the writer is closed")
        future: Future = self._loop.create_future()
        self._queue.put((messages, system, future))
        return await future

    def close(self) -> None:
        """Stop the writer thread after the queued puts (their futures still resolve)."""
        if not self._closed:
            self._closed = True
            self._queue.put(None)
            self._thread.join()

    # -- writer thread ---------------------------------------------------------------------
    def _run(self) -> None:
        while True:
            puts, stop = self._drain()
            ready: list[_Done] = []
            for group in _group_by_queue(puts).values():
                self._append_group(group, ready)
            if ready:
                self._loop.call_soon_threadsafe(_resolve_all, ready)
            if stop:
                return

    def _drain(self) -> tuple[list[_Put], bool]:
        puts: list[_Put] = []
        item = self._queue.get()
        try:
            while True:
                if item is None:
                    return puts, True
                puts.append(item)
                item = self._queue.get_nowait()
        except queue.Empty:
            return puts, False

    def _append_group(self, group: list[_Put], ready: list[_Done]) -> None:
        """Append one topic-queue's puts as one batch; rejected puts answer on their own."""
        store = self._store
        accepted: list[_Put] = []
        for put in group:
            rejection = store.check(put[0], system=put[1])
            if rejection is not None:
                ready.append((put[2], rejection))
            elif any(m.sys_flag & SYSFLAG_TRANSACTION_PREPARED for m in put[0]):
                self._append_each([put], ready)  # transaction records skip queue offsets
            else:
                accepted.append(put)
        if len(accepted) == 1:
            self._append_each(accepted, ready)
        elif accepted:
            merged = [message for put in accepted for message in put[0]]
            callback = _DurableCallback(self)
            try:
                result, waiter = store.append(merged, system=accepted[0][1], on_durable=callback)
            except Exception as exc:  # never leave an awaiting producer hanging
                result, waiter = PutResult(PutStatus.UNKNOWN_ERROR, repr(exc)), None
            parts = _split(result, accepted)
            if waiter is None:
                ready.extend(parts)
            else:
                callback.set_results(parts)

    def _append_each(self, puts: list[_Put], ready: list[_Done]) -> None:
        for messages, system, future in puts:
            callback = _DurableCallback(self)
            try:
                result, waiter = self._store.append(messages, system=system, on_durable=callback)
            except Exception as exc:
                result, waiter = PutResult(PutStatus.UNKNOWN_ERROR, repr(exc)), None
            if waiter is None:
                ready.append((future, result))
            else:
                callback.set_results([(future, result)])

    # -- flush thread ----------------------------------------------------------------------
    def _finish(self, done: list[_Done]) -> None:
        """Queue results for the loop; wake it once per round."""
        self._done.extend(done)
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


def _group_by_queue(puts: list[_Put]) -> dict[tuple[str, int, bool], list[_Put]]:
    groups: dict[tuple[str, int, bool], list[_Put]] = {}
    for put in puts:
        first = put[0][0] if put[0] else None
        key = (first.topic, first.queue_id, put[1]) if first is not None else ("", -1, put[1])
        groups.setdefault(key, []).append(put)
    return groups


def _split(result: PutResult, puts: list[_Put]) -> list[_Done]:
    """One merged batch's result, cut back into one result per put."""
    if not result.phys_offsets:
        return [
            (future, PutResult(result.status, result.detail, result.topic, result.queue_id))
            for _, _, future in puts
        ]
    parts: list[_Done] = []
    start = 0
    for messages, _, future in puts:
        end = start + len(messages)
        parts.append(
            (
                future,
                PutResult(
                    result.status,
                    result.detail,
                    result.topic,
                    result.queue_id,
                    result.queue_offset + start,
                    result.phys_offsets[start:end],
                    result.store_timestamp,
                    result.store_host_raw,
                ),
            )
        )
        start = end
    return parts


class _DurableCallback:
    """Completes puts once both their results (writer thread) and the flush outcome (flush
    thread) are known; whichever arrives second completes them."""

    __slots__ = ("_lock", "outcome", "results", "writer")

    def __init__(self, writer: AsyncStoreWriter):
        self.writer = writer
        self.results: list[_Done] | None = None
        self.outcome: bool | None = None
        self._lock = threading.Lock()

    def __call__(self, ok: bool) -> None:
        with self._lock:
            self.outcome = ok
            results = self.results
        if results is not None:
            self._complete(ok, results)

    def set_results(self, results: list[_Done]) -> None:
        with self._lock:
            self.results = results
            outcome = self.outcome
        if outcome is not None:
            self._complete(outcome, results)

    def _complete(self, ok: bool, results: list[_Done]) -> None:
        if not ok:
            for _, result in results:
                result.status = PutStatus.FLUSH_DISK_TIMEOUT
                result.detail = "the flush that should cover this put failed"
        self.writer._finish(results)


def _resolve_all(ready: list[_Done]) -> None:
    for future, result in ready:
        if not future.done():
            future.set_result(result)
