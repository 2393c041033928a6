"""Transactional messages: half messages, commit or rollback, and the check-back.

The shapes are RocketMQ's (``TransactionalMessageServiceImpl``, ``EndTransactionProcessor``), so
a RocketMQ broker could take over the store and resolve what Quiver left open::

    RMQ_SYS_TRANS_HALF_TOPIC, queue 0     half messages (each has a consume-queue unit there;
                                          nothing subscribes to a system topic)
    RMQ_SYS_TRANS_OP_HALF_TOPIC, queue 0  op messages: tag ``d``, body = the resolved half
                                          message's queue offset in decimal ("12"; RocketMQ 5
                                          may join several with commas: both are read)
    config/consumerOffset.json            progress under consumer group ``CID_RMQ_SYS_TRANS``:
                                          ``RMQ_SYS_TRANS_HALF_TOPIC@CID_RMQ_SYS_TRANS`` {0: the
                                          first half offset not known to be resolved} and
                                          ``RMQ_SYS_TRANS_OP_HALF_TOPIC@CID_RMQ_SYS_TRANS``
                                          {0: the first op message to read at start}

Half message (:func:`half_message`): the producer's message with topic
``RMQ_SYS_TRANS_HALF_TOPIC``, queue 0, the transaction type of its sys flag reset to NOT (so it
gets a consume-queue unit), and the properties ``REAL_TOPIC``, ``REAL_QID``, ``TRAN_MSG=true``,
``PGROUP`` (the producer group) and ``__transactionId__`` (= its ``UNIQ_KEY``) added.

Commit (:func:`committed_message`): a new record in ``REAL_TOPIC``/``REAL_QID`` with the half
message's body, flag, born time and host, reconsume times and properties minus ``REAL_TOPIC``,
``REAL_QID`` and ``TRAN_MSG``; transaction type COMMIT, ``prepared_transaction_offset`` = the
half record's commitlog offset. Then the op message. Rollback: the op message only (RocketMQ
writes no ROLLBACK record either).

Invariants:

* **Once.** A half message is resolved once: the service keeps, under one lock, the half queue
  offsets being ended and those resolved (every offset below the progress offset is resolved).
  A second end of a half message (a check's answer racing the producer's own, a retry) answers
  ``ALREADY_RESOLVED`` and writes nothing. Before putting a commit the service also looks the
  transaction id up in the index (``topic#UNIQ_KEY``) for a COMMIT record made from a half
  message of the same transaction: a crash between a commit record and its op message, or a
  half message stored twice by a producer's retry, never makes a second visible copy. (A store
  without an index relies on the in-memory set alone.)
* **Write order.** The commit record (durable under sync flush) before the op message; op
  messages are appended under the lock, so the op queue is in order of resolution.
* **Restart.** The resolved set is rebuilt from the op messages from the op progress offset on;
  half messages below the half progress offset are resolved. Both offsets are committed into
  the broker's offset table at every check round (and at stop) and persisted with it; a stale
  (older) progress only makes the start re-read more op messages.
* **Check-back.** Every ``check_interval_ms`` a round walks the half queue from the progress
  offset over the messages stored at least ``timeout_ms`` ago (store time: the broker's clock),
  stopping at the first younger one. Each unresolved one becomes a check request for its
  producer group (``PGROUP``), queued once: a request nobody collected yet is not queued again.
  Producers collect requests with :meth:`TransactionService.fetch_checks` (long polling; the
  broker never calls into client code) and answer through :meth:`TransactionService.end`.
* **Counting.** A request counts as a check when a producer collects it. While no producer of
  the group is connected the request waits and the count does not grow: a half message is
  never rolled back for want of a producer to ask (it waits for one of its group to come back,
  as after a producer crash). When ``max_checks`` checks were collected and the message is
  still unresolved at a later round, it is rolled back and a warning is logged.
* **Counts live in memory.** Quiver does not re-put a checked half message at the end of the
  half queue with ``TRANSACTION_CHECK_TIMES`` as RocketMQ does: each half message keeps one
  offset for its lifetime, which keeps end-transaction idempotent. After a broker restart each
  unresolved half message gets a fresh budget of ``max_checks`` checks.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import functools
import logging
import threading
from collections.abc import Awaitable, Callable

from localstore import (
    MessageStore,
    NewMessage,
    PutResult,
    PutStatus,
    StoreClosedError,
    StoredMessage,
    StoreError,
)
from localstore.commitlog.flush import DurableWait
from localstore.record.codec import (
    PROPERTY_DELAY,
    PROPERTY_REAL_QUEUE_ID,
    PROPERTY_REAL_TOPIC,
    PROPERTY_UNIQ_KEY,
    SYSFLAG_TRANSACTION_COMMIT,
    SYSFLAG_TRANSACTION_MASK,
    RecordError,
)
from offsetstore.broker_table import ConsumerOffsetTable
from sdk.broker.rounds import Rounds
from sdk.broker.transaction_records import (
    CHECK_GROUP,
    HALF_QUEUE,
    HALF_TOPIC,
    OP_QUEUE,
    OP_TOPIC,
    committed_message,
    half_message,
    op_message,
    resolved_offsets,
    transaction_id,
)
from sdk.clock import SYSTEM_CLOCK, Clock
from sdk.errors import InvalidArgumentError
from sdk.message import PROPERTY_DELIVER_AT
from sdk.transport.transaction_models import (
    ALREADY_RESOLVED,
    COMMIT,
    COMMITTED,
    LEFT_UNKNOWN,
    NOT_FOUND,
    PROPERTY_PRODUCER_GROUP,
    PROPERTY_TRANSACTION_ID,
    ROLLBACK,
    ROLLED_BACK,
    UNKNOWN,
    VERDICTS,
    EndTransactionResult,
    TransactionChecks,
)

__all__ = [
    "CHECK_GROUP",
    "HALF_TOPIC",
    "OP_TOPIC",
    "PROPERTY_PRODUCER_GROUP",
    "PROPERTY_TRANSACTION_ID",
    "TransactionService",
    "committed_message",
    "half_message",
    "transaction_id",
]

log = logging.getLogger(__name__)

DEFAULT_TIMEOUT_MS = 6_000  # RocketMQ's transactionTimeOut
DEFAULT_CHECK_INTERVAL_MS = 60_000  # RocketMQ's transactionCheckInterval
DEFAULT_MAX_CHECKS = 15  # RocketMQ's transactionCheckMax

_FETCH_MAX = 32
# Runs a read elsewhere and awaits it (a thread pool's run_in_executor).
Offload = Callable[[Callable[[], TransactionChecks]], Awaitable[TransactionChecks]]
_OP_READ_BATCH = 256


def _settle(woken: asyncio.Future[None]) -> None:
    if not woken.done():
        woken.set_result(None)


def _illegal(detail: str, topic: str = "", queue_id: int = 0) -> PutResult:
    return PutResult(PutStatus.MESSAGE_ILLEGAL, detail, topic, queue_id)


class TransactionService:
    """Half messages, their commit or rollback, and the check-back thread (see the module
    docstring). Thread-safe. :meth:`start` / :meth:`stop` run the check rounds in the
    background; :meth:`run_once` runs one round in the caller's thread.

    ``on_committed(result)`` is called with the put of a committed message once it is stored
    (the broker wakes parked pulls with it). ``clock`` says what time it is (which half
    messages are old enough to check), paces the rounds and bounds :meth:`fetch_checks`."""

    def __init__(
        self,
        store: MessageStore,
        offsets: ConsumerOffsetTable,
        *,
        timeout_ms: int = DEFAULT_TIMEOUT_MS,
        check_interval_ms: int = DEFAULT_CHECK_INTERVAL_MS,
        max_checks: int = DEFAULT_MAX_CHECKS,
        on_committed: Callable[[PutResult], None] | None = None,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        if timeout_ms < 0 or check_interval_ms <= 0 or max_checks < 0:
            raise InvalidArgumentError(
                f"need timeout_ms >= 0, check_interval_ms > 0, max_checks >= 0; got "
                f"{timeout_ms}, {check_interval_ms}, {max_checks}"
            )
        self.store = store
        self.offsets = offsets
        self.timeout_ms = timeout_ms
        self.check_interval_ms = check_interval_ms
        self.max_checks = max_checks
        self.on_committed = on_committed
        self._clock = clock
        self.committed = 0  # commits made by this service since construction
        self.rolled_back = 0  # rollbacks, including those after max_checks
        self.expired = 0  # rolled back after max_checks checks
        self._lock = threading.Lock()
        self._checks_ready = threading.Condition(self._lock)
        self._resolved: set[int] = set()  # half offsets >= progress known resolved
        self._ending: set[int] = set()  # half offsets being resolved now
        self._op_log: collections.deque[tuple[int, int]] = collections.deque()
        self._progress = 0  # every half offset below is resolved
        self._op_progress = 0  # first op message still needed at start
        self._committed_progress = (-1, -1)
        self._check_counts: dict[int, int] = {}  # half offset -> checks collected
        self._pending: dict[str, dict[int, int]] = {}  # group -> {half offset: phys offset}
        self._producers: dict[str, dict[str, int]] = {}  # group -> {client id: last fetch ms}
        self._round_lock = threading.Lock()
        self._rounds = Rounds(
            self.run_once,
            lambda: self.check_interval_ms / 1000,
            clock,
            name="quiver-transaction-check",
            what="transaction check service",
            log=log,
        )
        self._closed = False
        self._draining = False  # stop_waiting(): fetches answer at once, nothing parks
        # Event-loop fetches waiting for checks: each entry wakes one (from any thread).
        self._check_waiters: list[Callable[[], None]] = []
        self._load()

    # -- state ---------------------------------------------------------------------------------
    def _load(self) -> None:
        """Progress from the offset table; the resolved set from the op messages after it."""
        store = self.store
        self._progress = self._stored_progress(HALF_TOPIC)
        self._op_progress = self._stored_progress(OP_TOPIC)
        offset, end = self._op_progress, store.max_offset(OP_TOPIC, OP_QUEUE)
        while offset < end:
            got = store.get_messages(OP_TOPIC, OP_QUEUE, offset, max_count=_OP_READ_BATCH)
            for op in got.messages:
                halves = resolved_offsets(op)
                self._resolved.update(h for h in halves if h >= self._progress)
                self._op_log.append((op.queue_offset, max(halves, default=-1)))
            if got.next_offset <= offset:
                break
            offset = got.next_offset
        with self._lock:
            self._advance_locked()

    def _stored_progress(self, topic: str) -> int:
        low = self.store.min_offset(topic, 0)
        high = self.store.max_offset(topic, 0)
        found = self.offsets.query(CHECK_GROUP, topic, 0, zero_if_young=False)
        start = found if isinstance(found, int) else low
        return min(max(start, low), high)

    def _advance_locked(self) -> None:
        """Move the progress over resolved half offsets (and over what retention deleted)."""
        low = self.store.min_offset(HALF_TOPIC, HALF_QUEUE)
        high = self.store.max_offset(HALF_TOPIC, HALF_QUEUE)
        if self._progress < low:
            self._progress = low
            self._resolved = {h for h in self._resolved if h >= low}
            self._check_counts = {h: n for h, n in self._check_counts.items() if h >= low}
        while self._progress < high and self._progress in self._resolved:
            self._resolved.discard(self._progress)
            self._progress += 1
        while self._op_log and self._op_log[0][1] < self._progress:
            self._op_progress = self._op_log.popleft()[0] + 1

    def _commit_progress(self) -> None:
        with self._lock:
            self._advance_locked()
            progress = (self._progress, self._op_progress)
        if progress != self._committed_progress:
            self.offsets.commit(CHECK_GROUP, HALF_TOPIC, HALF_QUEUE, progress[0])
            self.offsets.commit(CHECK_GROUP, OP_TOPIC, OP_QUEUE, progress[1])
            self._committed_progress = progress

    @property
    def progress(self) -> int:
        """The first half queue offset not known to be resolved."""
        with self._lock:
            return self._progress

    def is_resolved(self, half_queue_offset: int) -> bool:
        with self._lock:
            return half_queue_offset < self._progress or half_queue_offset in self._resolved

    def check_count(self, half_queue_offset: int) -> int:
        """How many checks of that half message producers collected (since this start)."""
        with self._lock:
            return self._check_counts.get(half_queue_offset, 0)

    def pending_checks(self, group: str) -> list[int]:
        """Half queue offsets of ``group`` waiting for a producer to collect their check."""
        with self._lock:
            return sorted(self._pending.get(group, {}))

    def producers(self, group: str) -> dict[str, int]:
        """Clients of ``group`` that collected checks, with when they last asked (epoch ms)."""
        with self._lock:
            return dict(self._producers.get(group, {}))

    # -- half messages -------------------------------------------------------------------------
    def prepare(self, group: str, message: NewMessage) -> PutResult:
        """Store ``message`` as a half message of producer group ``group``."""
        topic, queue_id = message.topic, message.queue_id
        properties = message.properties
        if not group:
            return _illegal("a transactional message needs a producer group", topic, queue_id)
        if not properties.get(PROPERTY_UNIQ_KEY):
            return _illegal("a transactional message needs a UNIQ_KEY", topic, queue_id)
        if PROPERTY_DELAY in properties or PROPERTY_DELIVER_AT in properties:
            return _illegal("a transactional message cannot be delayed", topic, queue_id)
        rejection = self.store.check([message])
        if rejection is not None:
            return rejection
        config = self.store.topics.get(topic)
        if queue_id < 0 or (config is not None and queue_id >= config.write_queue_nums):
            return _illegal(f"queue {queue_id} does not exist in topic {topic}", topic, queue_id)
        return self.store.put(half_message(message, group), system=True)

    # -- end transaction -----------------------------------------------------------------------
    def end(
        self,
        group: str,
        half_phys_offset: int,
        transaction: str,
        verdict: str,
        *,
        from_check: bool = False,
    ) -> EndTransactionResult:
        """Commit or roll back the half message at commitlog offset ``half_phys_offset`` of
        producer group ``group`` and transaction ``transaction``; an UNKNOWN verdict does
        nothing. Only the first commit or rollback of a half message acts."""
        if verdict not in VERDICTS:
            return EndTransactionResult("MESSAGE_ILLEGAL", f"unknown verdict {verdict!r}")
        try:
            half = self.store.message_at(half_phys_offset)
        except RecordError as exc:
            return EndTransactionResult(NOT_FOUND, f"no half message there: {exc}")
        problem = self._mismatch(half, group, transaction)
        if problem:
            return EndTransactionResult(NOT_FOUND, problem)
        if verdict == UNKNOWN:
            log.debug(
                "transaction %s of %s left unknown (check: %s)", transaction, group, from_check
            )
            return EndTransactionResult(LEFT_UNKNOWN)
        return self._resolve(half, verdict)

    @staticmethod
    def _mismatch(half: StoredMessage, group: str, transaction: str) -> str:
        if half.topic != HALF_TOPIC:
            return f"the message at {half.phys_offset} is not a half message ({half.topic})"
        if transaction_id(half) != transaction:
            return (
                f"the half message at {half.phys_offset} is of transaction {transaction_id(half)}"
                f", not {transaction}"
            )
        owner = half.properties.get(PROPERTY_PRODUCER_GROUP, "")
        if owner != group:
            return f"the half message at {half.phys_offset} is of producer group {owner!r}"
        return ""

    def _resolve(self, half: StoredMessage, verdict: str) -> EndTransactionResult:
        offset = half.queue_offset
        with self._lock:
            if offset < self._progress or offset in self._resolved or offset in self._ending:
                return EndTransactionResult(ALREADY_RESOLVED)
            self._ending.add(offset)
        try:
            if verdict == COMMIT:
                outcome = self._commit(half)
                if not outcome.settled:
                    return outcome
            else:
                outcome = EndTransactionResult(ROLLED_BACK)
            failure = self._write_op(half)
            if failure is not None:
                return failure
            if outcome.status == ROLLED_BACK:
                with self._lock:
                    self.rolled_back += 1
            return outcome
        finally:
            with self._lock:
                self._ending.discard(offset)

    def _commit(self, half: StoredMessage) -> EndTransactionResult:
        message = committed_message(half)
        if message is None:
            return EndTransactionResult(
                "MESSAGE_ILLEGAL", f"the half message at {half.phys_offset} has no real topic"
            )
        earlier = self._earlier_commit(half, message.topic)
        if earlier is not None:
            return EndTransactionResult(
                ALREADY_RESOLVED,
                f"committed before, at {earlier.topic}/{earlier.queue_id} offset "
                f"{earlier.queue_offset}",
                earlier.topic,
                earlier.queue_id,
                earlier.queue_offset,
            )
        result = self.store.put(message)
        if not result.status.stored:
            return EndTransactionResult(
                result.status.value, result.detail, message.topic, message.queue_id
            )
        with self._lock:
            self.committed += 1
        if self.on_committed is not None:
            self.on_committed(result)
        return EndTransactionResult(
            COMMITTED, "", result.topic, result.queue_id, result.queue_offset
        )

    def _earlier_commit(self, half: StoredMessage, topic: str) -> StoredMessage | None:
        """A COMMIT record of ``half``'s transaction already in ``topic`` (by the index)."""
        transaction = transaction_id(half)
        try:
            found = self.store.query_by_key(topic, transaction)
        except StoreError:  # no index
            return None
        for message in found:
            kind = message.sys_flag & SYSFLAG_TRANSACTION_MASK
            if kind == SYSFLAG_TRANSACTION_COMMIT and transaction_id(message) == transaction:
                return message
        return None

    def _write_op(self, half: StoredMessage) -> EndTransactionResult | None:
        """Mark ``half`` resolved: the op message, appended under the lock (op queue order =
        resolution order); under sync flush, waits for it outside the lock."""
        offset = half.queue_offset
        with self._lock:
            result, waiter = self.store.append(
                [op_message(offset, self._clock.time_ms())], system=True
            )
            if not result.status.stored:
                return EndTransactionResult(
                    result.status.value, f"could not write the op message: {result.detail}"
                )
            self._resolved.add(offset)
            self._op_log.append((result.queue_offset, offset))
            self._check_counts.pop(offset, None)
            for pending in self._pending.values():
                pending.pop(offset, None)
        if isinstance(waiter, DurableWait) and not waiter.wait(
            self.store.options.sync_flush_timeout_ms / 1000
        ):
            log.warning("op message of half offset %d not flushed in time", offset)
        return None

    # -- check-back ----------------------------------------------------------------------------
    def run_once(self, now_ms: int | None = None) -> int:
        """One check round at ``now_ms`` (default: now): queue check requests for unresolved
        half messages older than the timeout, roll back those checked ``max_checks`` times.
        Answers how many half messages it queued or rolled back."""
        with self._round_lock:
            now = self._clock.time_ms() if now_ms is None else now_ms
            self._commit_progress()
            queued, expired = self._walk(now)
            if queued:
                with self._checks_ready:
                    self._notify_checks_locked()
            for half in expired:
                log.warning(
                    "rolling back transaction %s of producer group %s (%s/%s): still unresolved "
                    "after %d checks",
                    transaction_id(half),
                    half.properties.get(PROPERTY_PRODUCER_GROUP, ""),
                    half.properties.get(PROPERTY_REAL_TOPIC, ""),
                    half.properties.get(PROPERTY_REAL_QUEUE_ID, ""),
                    self.max_checks,
                )
                if self._resolve(half, ROLLBACK).status == ROLLED_BACK:
                    with self._lock:
                        self.expired += 1
            if expired:
                self._commit_progress()
            return queued + len(expired)

    def _walk(self, now: int) -> tuple[int, list[StoredMessage]]:
        store = self.store
        with self._lock:
            offset = self._progress
        high = store.max_offset(HALF_TOPIC, HALF_QUEUE)
        queued = 0
        expired: list[StoredMessage] = []
        while offset < high:
            if not self._open_at(offset):
                offset += 1
                continue
            stored_at = store.store_timestamp(HALF_TOPIC, HALF_QUEUE, offset)
            if stored_at >= 0 and now - stored_at < self.timeout_ms:
                break  # store times grow along the queue: the rest is younger
            half = self._half_at(offset) if stored_at >= 0 else None
            if half is not None:
                verdict = self._examine(half)
                queued += verdict == "queued"
                if verdict == "expired":
                    expired.append(half)
            offset += 1
        return queued, expired

    def _open_at(self, offset: int) -> bool:
        with self._lock:
            return offset not in self._resolved and offset not in self._ending

    def _half_at(self, offset: int) -> StoredMessage | None:
        got = self.store.get_messages(HALF_TOPIC, HALF_QUEUE, offset, max_count=1)
        if got.messages and got.messages[0].queue_offset == offset:
            return got.messages[0]
        return None

    def _examine(self, half: StoredMessage) -> str:
        """Queue a check of ``half`` ("queued"), or report it due for rollback ("expired"),
        or nothing to do ("")."""
        offset = half.queue_offset
        with self._lock:
            checks = self._check_counts.get(offset, 0)
            group = half.properties.get(PROPERTY_PRODUCER_GROUP, "")
            if offset in self._pending.get(group, {}):
                return ""
        if checks == 0 and self._recovered_commit(half):
            return ""
        if checks >= self.max_checks:
            return "expired"
        with self._lock:
            if offset in self._resolved or offset in self._ending:
                return ""
            pending = self._pending.setdefault(group, {})
            if offset in pending:
                return ""
            pending[offset] = half.phys_offset
        return "queued"

    def _recovered_commit(self, half: StoredMessage) -> bool:
        """Resolve ``half`` without asking when its commit is already stored (a crash came
        between the commit record and the op message)."""
        message = committed_message(half)
        if message is None or self._earlier_commit(half, message.topic) is None:
            return False
        log.info("transaction %s was committed before; marking it resolved", transaction_id(half))
        self._resolve(half, COMMIT)
        return True

    def fetch_checks(
        self, group: str, client_id: str, wait_ms: int, max_count: int = _FETCH_MAX
    ) -> TransactionChecks:
        """The half messages producer group ``group`` is asked about (up to ``max_count``),
        waiting up to ``wait_ms`` for one; each handed out counts as one check."""
        deadline = self._clock.monotonic() + max(wait_ms, 0) / 1000
        with self._checks_ready:
            self._producers.setdefault(group, {})[client_id] = self._clock.time_ms()
            while not self._pending.get(group) and not (self._closed or self._draining):
                remaining = deadline - self._clock.monotonic()
                if remaining <= 0:
                    break
                self._clock.wait(self._checks_ready, remaining)
            taken = self._take_checks_locked(group, max_count)
        return self._read_halves(taken)

    async def fetch_checks_async(
        self,
        group: str,
        client_id: str,
        wait_ms: int,
        max_count: int = _FETCH_MAX,
        offload: Offload | None = None,
    ) -> TransactionChecks:
        """:meth:`fetch_checks` for an event loop: the wait parks a future (woken by a check
        round that queues work, or by :meth:`stop`), not a thread. ``offload`` runs the read
        of the half messages (a server gives a thread pool's, so the loop never waits on the
        disk); without it, the read runs on the loop."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + max(wait_ms, 0) / 1000
        while True:
            woken: asyncio.Future[None] = loop.create_future()

            def wake(woken: asyncio.Future[None] = woken) -> None:
                # a loop closed with this fetch still parked refuses: nobody waits there now
                with contextlib.suppress(RuntimeError):
                    loop.call_soon_threadsafe(_settle, woken)

            with self._checks_ready:
                self._producers.setdefault(group, {})[client_id] = self._clock.time_ms()
                remaining = deadline - loop.time()
                if self._pending.get(group) or self._closed or self._draining or remaining <= 0:
                    taken = self._take_checks_locked(group, max_count)
                    break
                self._check_waiters.append(wake)
            try:
                await asyncio.wait_for(asyncio.shield(woken), remaining)
            except TimeoutError:
                pass
            finally:
                with self._checks_ready:
                    if wake in self._check_waiters:
                        self._check_waiters.remove(wake)
        read = functools.partial(self._read_halves, taken)
        return read() if offload is None else await offload(read)

    def _notify_checks_locked(self) -> None:
        """Wake every waiting fetch (threads and event loops); the lock is held."""
        self._checks_ready.notify_all()
        waiters, self._check_waiters = self._check_waiters, []
        for wake in waiters:
            wake()

    def _take_checks_locked(self, group: str, max_count: int) -> list[tuple[int, int]]:
        """Up to ``max_count`` pending checks of ``group`` (half offset, commitlog offset),
        each counted as one check; the lock is held."""
        taken: list[tuple[int, int]] = []
        pending = self._pending.get(group)
        while pending and len(taken) < max_count and not self._closed:
            offset, phys_offset = next(iter(pending.items()))
            del pending[offset]
            if offset < self._progress or offset in self._resolved:
                continue
            self._check_counts[offset] = self._check_counts.get(offset, 0) + 1
            taken.append((offset, phys_offset))
        return taken

    def _read_halves(self, taken: list[tuple[int, int]]) -> TransactionChecks:
        parts = []
        for offset, phys_offset in taken:
            got = self.store.get_message_bytes(HALF_TOPIC, HALF_QUEUE, offset, max_count=1)
            if got.count:
                parts.append(bytes(got.raw))
            else:
                log.warning("half message at %d (commitlog %d) is gone", offset, phys_offset)
        return TransactionChecks(b"".join(parts), len(parts))

    # -- lifecycle -----------------------------------------------------------------------------
    def start(self) -> None:
        """Start the check thread (first round at once: half messages left open while the
        broker was down are asked about right away; see :mod:`sdk.broker.rounds`)."""
        self._rounds.start()

    def stop_waiting(self) -> None:
        """Answer waiting fetches now, and let no new one wait (a server shutting down)."""
        with self._checks_ready:
            self._draining = True
            self._notify_checks_locked()

    def stop(self) -> None:
        """Answer waiting fetches, stop the thread, commit the progress to the offset table."""
        with self._checks_ready:
            self._closed = True
            self._notify_checks_locked()
        self._rounds.stop()
        with contextlib.suppress(StoreClosedError):
            self._commit_progress()
