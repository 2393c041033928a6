"""RocketMQ's ``RemoteBrokerOffsetStore``: a clustering consumer's offsets, kept by the brokers.

The store talks to brokers only through :class:`OffsetBackend`, a protocol defined here (the SDK's
transports implement it; :class:`TableBackend` is the in-process one over a broker's
:class:`~offsetstore.broker_table.ConsumerOffsetTable`), so offsetstore never imports sdk.

Behaviour (RocketMQ 5, with Quiver's fixes):

* Memory: ``{MessageQueue: offset}`` plus a frozen flag per entry. ``update_offset`` and
  ``read_offset(MEMORY)`` take one short lock and never wait for I/O: persisting runs outside it.
* ``read_offset(STORE)`` asks the queue's broker: not found -> :data:`NOT_FOUND`, an error
  (after retries of transient ones) -> :data:`READ_FAILED`; a found offset replaces the memory
  entry (unless frozen).
* ``persist_all(queues)`` commits the memory offsets of ``queues``, **one backend call per
  broker**, and drops memory entries of queues not in ``queues`` (RocketMQ's behaviour: those
  queues were revoked; ``drop_unlisted=False`` keeps them). ``persist(queue)`` commits one queue.
* Transient failures (an exception whose ``retriable`` attribute is true, or a
  ``ConnectionError`` / ``TimeoutError``) are retried with tenacity: exponential backoff with
  full jitter, at most :attr:`RetryPolicy.attempts` tries. A commit that still fails is **kept**
  (the pending set) and sent again at the next persist, so progress is never lost; a later
  memory value for the same queue supersedes it. Other errors are not retried but kept too.
* A daemon thread persists every 5 s (:meth:`RemoteBrokerOffsetStore.start_auto_persist`);
  :meth:`RemoteBrokerOffsetStore.close` stops it and persists everything once more.
"""

from __future__ import annotations

import logging
import random
import threading
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from functools import partial
from typing import Protocol, TypeVar

from tenacity import Retrying, retry_if_exception, stop_after_attempt

from offsetstore.base import (
    NOT_FOUND,
    READ_FAILED,
    MessageQueue,
    OffsetStatus,
    ReadOffsetType,
    ReadResult,
)
from offsetstore.broker_table import ConsumerOffsetTable
from offsetstore.memory import MemoryOffsets, PeriodicPersister

__all__ = [
    "OffsetBackend",
    "RemoteBrokerOffsetStore",
    "RetryPolicy",
    "TableBackend",
    "is_retriable",
]

log = logging.getLogger(__name__)

DEFAULT_PERSIST_INTERVAL_S = 5.0
T = TypeVar("T")


class OffsetBackend(Protocol):
    """How the store reaches the brokers' offset tables."""

    def query_offset(self, broker_name: str, group: str, topic: str, queue_id: int) -> int | None:
        """The committed offset, or None when the broker has none."""
        ...

    def commit_offsets(
        self, broker_name: str, group: str, offsets: Mapping[MessageQueue, int]
    ) -> None:
        """Commit offsets of queues of one broker in one call (overwrite)."""
        ...


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """Bounded exponential backoff with jitter: the n-th wait is random in
    ``[0, min(max_wait_s, initial_wait_s * 2**n)]``."""

    attempts: int = 3
    initial_wait_s: float = 0.1
    max_wait_s: float = 2.0

    def backoff_s(self, attempt: int) -> float:
        """The wait after failed attempt ``attempt`` (0 for the first): random in
        ``[0, min(max_wait_s, initial_wait_s * 2**attempt)]``: :meth:`call` waits it, and so
        does a caller that makes the attempts itself."""
        return random.uniform(0, min(self.max_wait_s, self.initial_wait_s * 2**attempt))

    def call(self, fn: Callable[[], T]) -> T:
        """``fn()``, retried on transient errors; the last error is raised as is."""
        retrying = Retrying(
            stop=stop_after_attempt(self.attempts),
            wait=lambda state: self.backoff_s(state.attempt_number - 1),
            retry=retry_if_exception(is_retriable),
            reraise=True,
        )
        return retrying(fn)


def is_retriable(exc: BaseException) -> bool:
    """Whether a failure may pass: ``exc.retriable`` is true, or a connection or timeout error."""
    flag = getattr(exc, "retriable", None)
    if flag is not None:
        return bool(flag)
    return isinstance(exc, (ConnectionError, TimeoutError))


class RemoteBrokerOffsetStore:
    """Offsets of one consumer group, committed to the brokers (thread-safe)."""

    def __init__(
        self,
        group: str,
        backend: OffsetBackend,
        *,
        retry: RetryPolicy | None = None,
        drop_unlisted: bool = True,
    ) -> None:
        """``drop_unlisted``: :meth:`persist_all` forgets memory entries of queues it is not
        given (RocketMQ's behaviour, the default); False keeps them."""
        self.group = group
        self.drop_unlisted = drop_unlisted
        self.backend = backend
        self.retry = retry or RetryPolicy()
        self._memory = MemoryOffsets()
        self._lock = threading.Lock()  # the pending commits; never held during I/O
        self._persist_lock = threading.Lock()  # one persist at a time
        self._pending: dict[MessageQueue, int] = {}  # commits that failed, sent again later
        self._persister: PeriodicPersister | None = None

    # -- memory -----------------------------------------------------------------------------

    def load(self) -> None:
        """Nothing to load: the brokers hold the offsets."""

    def update_offset(self, queue: MessageQueue, offset: int, increase_only: bool) -> None:
        self._memory.update(queue, offset, increase_only)

    def update_and_freeze_offset(self, queue: MessageQueue, offset: int) -> None:
        self._memory.freeze(queue, offset)

    def remove_offset(self, queue: MessageQueue) -> None:
        self._memory.remove(queue)

    def discard(self, queue: MessageQueue) -> None:
        """Forget a queue *and* any failed commit of it waiting to be retried: for a queue this
        consumer lost to another member, whose progress a late retry would overwrite."""
        self._memory.remove(queue)
        with self._lock:
            self._pending.pop(queue, None)

    def clone_offset_table(self, topic: str) -> dict[MessageQueue, int]:
        return self._memory.of_topic(topic)

    def pending(self) -> dict[MessageQueue, int]:
        """Commits that failed and wait for the next persist."""
        with self._lock:
            return dict(self._pending)

    # -- reading ----------------------------------------------------------------------------

    def read_offset(self, queue: MessageQueue, read_type: ReadOffsetType) -> ReadResult:
        if read_type is not ReadOffsetType.STORE:
            offset = self._memory.get(queue)
            if offset is not None:
                return offset
            if read_type is ReadOffsetType.MEMORY:
                return NOT_FOUND
        return self._read_from_broker(queue)

    def _read_from_broker(self, queue: MessageQueue) -> ReadResult:
        try:
            found = self.retry.call(
                lambda: self.backend.query_offset(
                    queue.broker_name, self.group, queue.topic, queue.queue_id
                )
            )
        except Exception as exc:
            return self.read_failed(queue, exc)
        return self.offset_read(queue, found)

    def read_failed(self, queue: MessageQueue, exc: BaseException) -> ReadResult:
        """A broker read of ``queue`` failed (logged): :data:`READ_FAILED`."""
        log.warning("cannot read the offset of %s for %s: %s", queue, self.group, exc)
        log.debug("offset read failure", exc_info=True)
        return READ_FAILED

    def offset_read(self, queue: MessageQueue, found: int | OffsetStatus | None) -> ReadResult:
        """The broker answered ``found`` for ``queue`` (None: it has none): the offset to use,
        our own newer commit still waiting to land counted, recorded in memory. Public for
        clients that make the broker call themselves (the SDK's asyncio consumers)."""
        with self._lock:
            waiting = self._pending.get(queue)  # our own newer commit, not landed yet
        if found is None or isinstance(found, OffsetStatus):
            if waiting is None:
                return NOT_FOUND
            found = waiting
        elif waiting is not None:
            found = max(found, waiting)
        self._memory.update(queue, found, increase_only=False)
        return found

    # -- persisting -------------------------------------------------------------------------

    def persist(self, queue: MessageQueue) -> None:
        with self._persist_lock:
            self._commit(self.commits_due((queue,)))

    def persist_all(self, queues: Iterable[MessageQueue]) -> None:
        with self._persist_lock:
            self._commit(self.commits_due(queues, drop_others=self.drop_unlisted))

    def commits_due(
        self, queues: Iterable[MessageQueue], *, drop_others: bool = False
    ) -> dict[str, dict[MessageQueue, int]]:
        """What persisting ``queues`` sends, by broker: their memory offsets plus every
        commit that failed before (taken: report a failed send with :meth:`commit_failed`).
        ``drop_others`` forgets the memory entries of other queues."""
        offsets = self._memory.of_queues(queues, drop_others=drop_others)
        with self._lock:
            merged = {**self._pending, **offsets}
            self._pending.clear()
        by_broker: dict[str, dict[MessageQueue, int]] = defaultdict(dict)
        for queue, offset in merged.items():
            by_broker[queue.broker_name][queue] = offset
        return dict(sorted(by_broker.items()))

    def commit_failed(
        self, broker_name: str, offsets: Mapping[MessageQueue, int], exc: BaseException
    ) -> None:
        """A commit of ``offsets`` to ``broker_name`` failed (logged): kept for the next
        persist, unless a newer failed commit of the same queue is kept already."""
        log.warning(
            "cannot commit %d offset(s) of %s to %s (%s); kept for the next persist",
            len(offsets),
            self.group,
            broker_name,
            exc,
        )
        log.debug("offset commit failure", exc_info=True)
        self.commit_unanswered(offsets)

    def commit_unanswered(self, offsets: Mapping[MessageQueue, int]) -> None:
        """Commits taken by :meth:`commits_due` whose sending was stopped before the broker
        answered (the persist was cancelled or interrupted): kept for the next persist as a
        failed one is, unless a newer failed commit of the same queue is kept already."""
        with self._lock:
            for queue, offset in offsets.items():
                self._pending.setdefault(queue, offset)

    def _commit(self, by_broker: dict[str, dict[MessageQueue, int]]) -> None:
        """Send ``by_broker`` (from :meth:`commits_due`), one call per broker; keep what fails.
        The persist lock is held."""
        for broker_name, batch in by_broker.items():
            try:
                commit = partial(self.backend.commit_offsets, broker_name, self.group, batch)
                self.retry.call(commit)
            except Exception as exc:
                self.commit_failed(broker_name, batch, exc)

    def start_auto_persist(
        self,
        interval_s: float = DEFAULT_PERSIST_INTERVAL_S,
        queues: Callable[[], Iterable[MessageQueue]] | None = None,
    ) -> None:
        """Persist every ``interval_s`` seconds on a daemon thread: the queues ``queues()``
        names (the consumer's assigned queues), or every queue in memory."""
        if self._persister is None:
            self._persister = PeriodicPersister(
                f"offsets-{self.group}",
                lambda: self.persist_all(queues() if queues is not None else self._memory.queues()),
                interval_s,
            )

    def close(self) -> None:
        """Stop the persist thread and persist every offset in memory. Idempotent."""
        persister, self._persister = self._persister, None
        if persister is not None:
            persister.stop()
        self.persist_all(self._memory.queues())


class TableBackend:
    """The in-process backend: one broker's :class:`ConsumerOffsetTable` (the embedded broker's
    transport). ``broker_name`` is checked when given."""

    def __init__(self, table: ConsumerOffsetTable, broker_name: str | None = None) -> None:
        self.table = table
        self.broker_name = broker_name

    def query_offset(self, broker_name: str, group: str, topic: str, queue_id: int) -> int | None:
        self._check(broker_name)
        found = self.table.query(group, topic, queue_id)
        return found if isinstance(found, int) else None

    def commit_offsets(
        self, broker_name: str, group: str, offsets: Mapping[MessageQueue, int]
    ) -> None:
        self._check(broker_name)
        for queue, offset in offsets.items():
            self.table.commit(group, queue.topic, queue.queue_id, offset)

    def _check(self, broker_name: str) -> None:
        if self.broker_name is not None and broker_name != self.broker_name:
            raise LookupError(f"this is broker {self.broker_name}, not {broker_name}")
