"""One writer thread that turns many concurrent puts into few appends.

Appends run on one dedicated thread (one writer keeps the log's order for free). Batches are the
unit of speed, so the writer drains every put queued since it last woke and appends the puts aimed
at one topic-queue as one batch; each put is validated on its own first, so one bad put never
fails its neighbours, and puts to one queue keep their arrival order. Under sync flush a merged
batch registers one flush request; when group commit has made it durable, every put in it is
answered at once.

Answers go through a ``deliver`` callable with (token, result) pairs, called on the writer thread
(async flush, rejections) or on the flush thread (durable puts), once per round or per merged
batch, never per put: :class:`localstore.async_writer.AsyncStoreWriter` resolves its futures in
one event-loop callback per delivery.

(Routing blocking puts from many threads through this writer was measured too: with 16 threads
under sync flush it was no faster than each thread appending under the store's lock, and a lone
thread's put took an extra hand-off, so :meth:`MessageStore.put` appends directly.)
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from localstore.codec import SYSFLAG_TRANSACTION_PREPARED, NewMessage
from localstore.results import PutResult, PutStatus

if TYPE_CHECKING:
    from localstore.store import MessageStore

Answer = tuple[Any, PutResult]  # (the submitter's token, its result)
Deliver = Callable[[list[Answer]], None]
_Put = tuple[Sequence[NewMessage], bool, Any]


class CoalescingWriter:
    """The writer thread; ``submit`` puts, answers arrive through ``deliver``."""

    def __init__(self, store: MessageStore, deliver: Deliver, name: str = "quiver-writer"):
        self._store = store
        self._deliver = deliver
        self._queue: queue.SimpleQueue[_Put | None] = queue.SimpleQueue()  # None: stop
        self._closed = False
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    @property
    def closed(self) -> bool:
        return self._closed

    def submit(self, messages: Sequence[NewMessage], system: bool, token: Any) -> bool:
        """Queue a put; False when the writer is closed (nothing will answer)."""
        if self._closed:
            return False
        self._queue.put((messages, system, token))
        return True

    def close(self) -> None:
        """Stop after the queued puts (they are still answered)."""
        if not self._closed:
            self._closed = True
            self._queue.put(None)
            self._thread.join()

    def _run(self) -> None:
        while True:
            puts, stop = self._drain()
            ready: list[Answer] = []
            for group in _group_by_queue(puts).values():
                self._append_group(group, ready)
            if ready:
                self._deliver(ready)
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

    def _append_group(self, group: list[_Put], ready: list[Answer]) -> None:
        """Append one topic-queue's puts as one batch; rejected puts answer on their own."""
        store = self._store
        accepted: list[_Put] = []
        for put in group:
            rejection = store.check(put[0], system=put[1])
            if rejection is not None:
                ready.append((put[2], rejection))
            elif any(m.sys_flag & SYSFLAG_TRANSACTION_PREPARED for m in put[0]):
                self._append([put], put[0], ready)  # transaction records skip queue offsets
            else:
                accepted.append(put)
        if accepted:
            merged = (
                [m for put in accepted for m in put[0]] if len(accepted) > 1 else accepted[0][0]
            )
            self._append(accepted, merged, ready)

    def _append(
        self, puts: list[_Put], messages: Sequence[NewMessage], ready: list[Answer]
    ) -> None:
        callback = _DurableCallback(self._deliver)
        try:
            result, waiter = self._store.append(
                messages, system=puts[0][1], on_durable=callback, prechecked=True
            )
        except Exception as exc:  # never leave a submitter without an answer
            result, waiter = PutResult(PutStatus.UNKNOWN_ERROR, repr(exc)), None
        answers = _split(result, puts)
        if waiter is None:
            ready.extend(answers)
        else:
            callback.set_answers(answers)


def _group_by_queue(puts: list[_Put]) -> dict[tuple[str, int, bool], list[_Put]]:
    groups: dict[tuple[str, int, bool], list[_Put]] = {}
    for put in puts:
        first = put[0][0] if put[0] else None
        key = (first.topic, first.queue_id, put[1]) if first is not None else ("", -1, put[1])
        groups.setdefault(key, []).append(put)
    return groups


def _split(result: PutResult, puts: list[_Put]) -> list[Answer]:
    """One merged batch's result, cut back into one result per put."""
    if len(puts) == 1:
        return [(puts[0][2], result)]
    if not result.phys_offsets:
        return [
            (token, PutResult(result.status, result.detail, result.topic, result.queue_id))
            for _, _, token in puts
        ]
    answers: list[Answer] = []
    start = 0
    for messages, _, token in puts:
        end = start + len(messages)
        answers.append((token, PutResult(
            result.status, result.detail, result.topic, result.queue_id,
            result.queue_offset + start, result.phys_offsets[start:end],
            result.store_timestamp, result.store_host_raw,
        )))  # fmt: skip
        start = end
    return answers


class _DurableCallback:
    """Answers a merged batch once both its results (writer thread) and the flush outcome
    (flush thread) are known; whichever arrives second delivers them."""

    __slots__ = ("_deliver", "_lock", "answers", "outcome")

    def __init__(self, deliver: Deliver):
        self._deliver = deliver
        self.answers: list[Answer] | None = None
        self.outcome: bool | None = None
        self._lock = threading.Lock()

    def __call__(self, ok: bool) -> None:
        with self._lock:
            self.outcome = ok
            answers = self.answers
        if answers is not None:
            self._complete(ok, answers)

    def set_answers(self, answers: list[Answer]) -> None:
        with self._lock:
            self.answers = answers
            outcome = self.outcome
        if outcome is not None:
            self._complete(outcome, answers)

    def _complete(self, ok: bool, answers: list[Answer]) -> None:
        if not ok:
            for _, result in answers:
                result.status = PutStatus.FLUSH_DISK_TIMEOUT
                result.detail = "the flush that should cover this put failed"
        self._deliver(answers)
