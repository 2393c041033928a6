"""Turning many concurrent puts into few appends: one append per topic-queue.

Batches are the unit of speed, so puts gathered over a short while (one turn of an event loop,
see :mod:`localstore.put.async_writer`) are grouped by topic-queue and each group is appended as
one batch, checked once by the store; the batches of all queues go to the store in one call
(:meth:`MessageStore.append_batches`: one hold of the put lock, one flush request). A merged
batch the store refuses for something one message holds (an empty body, properties over 32,767
bytes, ...) wrote nothing and is retried put by put, so one bad put never fails its neighbours.
Puts to one queue keep their arrival order. A merged batch's result is cut back into one result
per put. Under sync flush, once group commit has made the stored batches durable, all their
puts are answered at once.

Answers go through a ``deliver`` callable with (token, result) pairs: at once for rejections
and under async flush, or once durable from the flush thread, or from whatever took the flush
requests instead (``flushed_by``: an event loop's sync process): one call for the batches of
one :func:`append_all`, and one per put retried on its own.

Blocking puts from many threads do not go through a writer thread: group commit already
shares their flushes, and a hand-off to another thread costs more than the append it carries
(copying into the page cache), so :meth:`MessageStore.put` appends on the caller's thread under
the store's lock, and an event loop appends on its own thread.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from localstore.commitlog.flush import FlushRequests
from localstore.record.codec import SYSFLAG_TRANSACTION_PREPARED, NewMessage
from localstore.results import FLUSH_DISK_TIMEOUT, PUT_OK, PutResult, PutStatus, stored_result

if TYPE_CHECKING:
    from localstore.store import MessageStore

Answer = tuple[Any, PutResult]  # (the submitter's token, its result)
Deliver = Callable[[list[Answer]], None]
Put = tuple[Sequence[NewMessage], bool, Any]  # (messages, system, the submitter's token)


def append_all(
    store: MessageStore,
    puts: list[Put],
    deliver: Deliver,
    flushed_by: FlushRequests | None = None,
) -> list[Answer]:
    """Append ``puts`` one batch per topic-queue, all batches in one store call
    (:meth:`MessageStore.append_batches`). Returns the answers known now (rejections, and
    every answer under async flush); the others reach ``deliver`` once durable, in one call.
    Flush requests go to ``flushed_by`` when given (see :meth:`MessageStore.append`)."""
    batches: list[tuple[Sequence[NewMessage], bool]] = []
    owners: list[list[Put]] = []  # the puts of each batch, to cut its result back
    for group in _group_by_queue(puts).values():
        _plan_group(group, batches, owners)
    callback = _DurableCallback(deliver)
    try:
        results, waiter = store.append_batches(batches, on_durable=callback, flushed_by=flushed_by)
    except Exception as exc:  # never leave a submitter without an answer
        results, waiter = [PutResult(PutStatus.UNKNOWN_ERROR, repr(exc)) for _ in batches], None
    ready: list[Answer] = []
    durable: list[Answer] = []  # stored, to be answered once the waiter's flush ended
    for owner, result in zip(owners, results, strict=True):
        if len(owner) > 1 and result.status in _ONE_MESSAGE_REJECTIONS:
            for put in owner:
                _append_alone(store, put, ready, deliver, flushed_by)
        elif waiter is not None and result.status is PUT_OK:
            durable += _split(result, owner)
        else:
            ready += _split(result, owner)
    if waiter is not None:
        callback.set_answers(durable)
    return ready


def _plan_group(
    group: list[Put], batches: list[tuple[Sequence[NewMessage], bool]], owners: list[list[Put]]
) -> None:
    """One topic-queue's puts as one batch (the store checks it once; a batch it refuses for
    one message is retried put by put). Transaction records get no queue offsets, so a result
    cannot be cut per put around them: a group holding one becomes a batch per put."""
    if len(group) == 1:
        batches.append((group[0][0], group[0][1]))
        owners.append(group)
        return
    merged: list[NewMessage] = []
    for put in group:
        merged += put[0]
    for message in merged:
        if message.sys_flag & SYSFLAG_TRANSACTION_PREPARED:
            for put in group:
                batches.append((put[0], put[1]))
                owners.append([put])
            return
    batches.append((merged, group[0][1]))
    owners.append(group)


# Rejections for something one message holds (topic, body, properties, record size): a merged
# batch refused with one wrote nothing and is retried put by put, so only the puts at fault
# are refused.
_ONE_MESSAGE_REJECTIONS = frozenset({PutStatus.MESSAGE_ILLEGAL, PutStatus.PROPERTIES_SIZE_EXCEEDED})


def _append_alone(
    store: MessageStore,
    put: Put,
    ready: list[Answer],
    deliver: Deliver,
    flushed_by: FlushRequests | None,
) -> None:
    """Append one put of a merged batch the store refused for one message's fault."""
    messages, system, token = put
    callback = _DurableCallback(deliver)
    try:
        result, waiter = store.append(
            messages, system=system, on_durable=callback, flushed_by=flushed_by
        )
    except Exception as exc:  # never leave a submitter without an answer
        result, waiter = PutResult(PutStatus.UNKNOWN_ERROR, repr(exc)), None
    if waiter is None:
        ready.append((token, result))
    else:
        callback.set_answers([(token, result)])


def _group_by_queue(puts: list[Put]) -> dict[tuple[str, int, bool], list[Put]]:
    groups: dict[tuple[str, int, bool], list[Put]] = {}
    for put in puts:
        messages = put[0]
        if messages:
            first = messages[0]
            key = (first.topic, first.queue_id, put[1])
        else:
            key = ("", -1, put[1])
        group = groups.get(key)
        if group is None:
            groups[key] = [put]
        else:
            group.append(put)
    return groups


def _split(result: PutResult, puts: list[Put]) -> list[Answer]:
    """One merged batch's result, cut back into one result per put."""
    if len(puts) == 1:
        return [(puts[0][2], result)]
    if not result.phys_offsets:  # refused or failed: every put hears why
        return [
            (token, PutResult(result.status, result.detail, result.topic, result.queue_id))
            for _, _, token in puts
        ]
    # Stored (only a PUT_OK result has offsets; FLUSH_DISK_TIMEOUT is set on the cut results).
    topic, queue_id, first, phys, stamp, host = (
        result.topic,
        result.queue_id,
        result.queue_offset,
        result.phys_offsets,
        result.store_timestamp,
        result.store_host_raw,
    )
    if len(phys) == len(puts):  # one message a put, the common case
        return [
            (token, stored_result(topic, queue_id, first + i, [offset], stamp, host))
            for i, ((_, _, token), offset) in enumerate(zip(puts, phys, strict=True))
        ]
    answers: list[Answer] = []
    start = 0
    for messages, _, token in puts:
        end = start + len(messages)
        answers.append(
            (token, stored_result(topic, queue_id, first + start, phys[start:end], stamp, host))
        )
        start = end
    return answers


class _DurableCallback:
    """Answers a merged batch once both its results (the appending thread) and the flush
    outcome (the flush thread) are known; whichever arrives second delivers them."""

    __slots__ = ("_deliver", "_lock", "answers", "failure", "flushed")

    def __init__(self, deliver: Deliver):
        self._deliver = deliver
        self.answers: list[Answer] | None = None
        self.flushed = False  # the flush outcome is known
        self.failure: str | None = None  # why the batch is not durable, once flushed
        self._lock = threading.Lock()

    def __call__(self, failure: str | None) -> None:
        with self._lock:
            self.flushed = True
            self.failure = failure
            answers = self.answers
        if answers is not None:
            self._complete(failure, answers)

    def set_answers(self, answers: list[Answer]) -> None:
        with self._lock:
            self.answers = answers
            flushed, failure = self.flushed, self.failure
        if flushed:
            self._complete(failure, answers)

    def _complete(self, failure: str | None, answers: list[Answer]) -> None:
        if failure is not None:
            for _, result in answers:
                result.status = FLUSH_DISK_TIMEOUT
                result.detail = f"stored, but {failure}"
        self._deliver(answers)
