"""The broker service: one store, the group offsets, group membership, delays and retries.

Every transport ends here: the in-process transport calls these methods directly, the HTTP
server (remote mode) decodes a request and calls the same method. Nothing in this module knows
how a request arrived.

What it keeps, all under the store's root::

    {root}/commitlog, consumequeue, index, ...   the store (:class:`localstore.MessageStore`)
    {root}/config/consumerOffset.json           committed offsets (RocketMQ's file)
    {root}/config/delayOffset.json              schedule progress (RocketMQ's file)

Sends: a message whose ``DELAY`` property names a level (or which carries an absolute delivery
time) is stored under ``SCHEDULE_TOPIC_XXXX`` and re-put when due (:mod:`sdk.broker.schedule`),
as RocketMQ's broker does. A batch must not hold delayed messages.

Idempotent produce: a send or half message given a :class:`ProducerStamp` is stored once while
its stamp is in the producer windows, and a copy is answered with the first answer
(:mod:`sdk.broker.idempotence`); the windows are refilled from the log's tail on open
(:mod:`sdk.broker.idempotence_rebuild`).

Send-back (RocketMQ's ``consumerSendMsgBack``): a message a consumer failed is stored again
under its group's retry topic, delayed, or in its dead-letter queue once its retries ran out
(:mod:`sdk.broker.retries`).

Group offsets: a group's committed offsets, and where it starts the queues it takes (a queue
never committed starts by the group's rule, recorded at once: :mod:`sdk.broker.group_offsets`).

Transactions: half messages wait invisibly under ``RMQ_SYS_TRANS_HALF_TOPIC`` until their
producer commits or rolls them back, or the check-back asks its group
(:mod:`sdk.broker.transactions`).

Groups: members heartbeat and take queue leases; a change that can move a member's share wakes
the group's parked pulls, and every group's membership is recorded for ``quiver group show``
(:mod:`sdk.broker.membership`).

Long polling: a pull that finds nothing new is held (:mod:`sdk.broker.parked_pulls`) on an
:class:`ArrivalNotifier`, which every stored put of the broker notifies: sends, send-backs,
delayed deliveries and transaction commits. Under sync flush a put notifies once its messages
are durable, which is when readers may see them; one that timed out on the disk notifies
again once a later flush covers it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import os
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from localstore import MessageStore, NewMessage, PutResult, StoreOptions, UniformBatch
from localstore.errors import DamagedRecordError
from localstore.record.codec import PROPERTY_DELAY
from localstore.record.uniform_batch import batch_head
from localstore.record.validation import DLQ_PREFIX, RETRY_PREFIX
from localstore.results import FLUSH_DISK_TIMEOUT, PUT_OK
from localstore.runtime.closing import CloseSteps
from offsetstore import MessageQueue
from offsetstore.broker_table import ConsumerOffsetTable
from sdk.broker import queries
from sdk.broker.administration import BrokerAdministration
from sdk.broker.group_offsets import GroupOffsets, forget_offsets_of_deleted_topics
from sdk.broker.groups import DEFAULT_MEMBER_EXPIRY_MS, GroupRegistry
from sdk.broker.idempotence import (
    DEFAULT_MAX_STAMPS,
    DEFAULT_WINDOW_PER_QUEUE,
    ProducerWindows,
    stamped,
)
from sdk.broker.idempotence_rebuild import DEFAULT_REBUILD_BYTES, rebuild_windows
from sdk.broker.leases import DEFAULT_LEASE_MS, QueueLeases
from sdk.broker.long_poll import ArrivalNotifier
from sdk.broker.membership import CloseStep, GroupMembership
from sdk.broker.parked_pulls import Offload, ParkedPulls
from sdk.broker.retries import DEFAULT_MAX_RECONSUME_TIMES, Retries
from sdk.broker.schedule import ScheduleService, delayed_message
from sdk.broker.send_answers import rejected, send_result
from sdk.broker.transactions import (
    DEFAULT_CHECK_INTERVAL_MS,
    DEFAULT_MAX_CHECKS,
    DEFAULT_TIMEOUT_MS,
    TransactionService,
)
from sdk.broker.transactions import Offload as CheckReadOffload
from sdk.clock import SYSTEM_CLOCK, Clock
from sdk.errors import CloseError
from sdk.message import PROPERTY_DELIVER_AT, PROPERTY_PRODUCER_SEQ, dlq_topic, retry_topic
from sdk.transport.admin_models import GroupInfo
from sdk.transport.models import (
    RECORD_DAMAGED,
    DamagedRecord,
    GroupView,
    ProducerStamp,
    PullBatch,
    PullBatchResult,
    QueuePull,
    QueuePullResult,
    QueueStart,
    SendResult,
    StoredRecords,
)
from sdk.transport.transaction_models import EndTransactionResult, TransactionChecks

__all__ = ["BrokerOptions", "BrokerService", "dlq_topic", "retry_topic"]


@dataclass(slots=True)
class BrokerOptions:
    """Settings of a broker service (run-time; none is recorded in the store).

    ``delay_levels``: the schedule service's delay table, a RocketMQ ``messageDelayLevel``
    string or delays in ms (sub-second tables for tests); None uses the store's.
    ``geometry``: sizes to create a new store with (see :class:`localstore.StoreGeometry`).
    ``clock``: the time the broker's leases, member expiry, schedule and transaction checks
    read (tests give a :class:`sdk.clock.ManualClock`; the store's timestamps stay real).
    ``idempotence_window_per_queue``, ``idempotence_max_stamps``: the producer windows' bounds,
    sequences kept per (producer id, topic, queue id) and in all;
    ``idempotence_rebuild_bytes``: how much of the log's tail refills them on open (see
    :mod:`sdk.broker.idempotence`).
    """

    broker_name: str = "broker-a"
    store: StoreOptions = field(default_factory=StoreOptions)
    geometry: dict[str, Any] = field(default_factory=dict)
    delay_levels: str | Sequence[int] | None = None
    schedule_poll_interval_s: float = 0.1
    member_expiry_ms: int = DEFAULT_MEMBER_EXPIRY_MS
    queue_lease_ms: int = DEFAULT_LEASE_MS
    offset_persist_interval_s: float = 5.0
    max_reconsume_times: int = DEFAULT_MAX_RECONSUME_TIMES
    # transactions (sdk.broker.transactions): RocketMQ's transactionTimeOut, ...CheckInterval,
    # ...CheckMax
    transaction_timeout_ms: int = DEFAULT_TIMEOUT_MS
    transaction_check_interval_ms: int = DEFAULT_CHECK_INTERVAL_MS
    transaction_max_checks: int = DEFAULT_MAX_CHECKS
    clock: Clock = SYSTEM_CLOCK
    idempotence_window_per_queue: int = DEFAULT_WINDOW_PER_QUEUE
    idempotence_max_stamps: int = DEFAULT_MAX_STAMPS
    idempotence_rebuild_bytes: int = DEFAULT_REBUILD_BYTES


def _any_delayed(messages: Sequence[NewMessage]) -> bool:
    """Whether a message asks for delayed delivery (one loop, no call per message: a batch's
    every message passes here on the put path)."""
    if isinstance(messages, UniformBatch):
        return messages.holds_property(PROPERTY_DELAY) or messages.holds_property(
            PROPERTY_DELIVER_AT
        )
    for message in messages:
        properties = message.properties
        if PROPERTY_DELAY in properties or PROPERTY_DELIVER_AT in properties:
            return True
    return False


def _holds_stamp(messages: Sequence[NewMessage]) -> bool:
    """Whether a message already carries the broker's stamp property (a client may not set
    it: a forged one would be taken for a stored stamp when the windows are rebuilt)."""
    if isinstance(messages, UniformBatch):
        return messages.holds_property(PROPERTY_PRODUCER_SEQ)
    return any(PROPERTY_PRODUCER_SEQ in message.properties for message in messages)


def _damaged_record(error: DamagedRecordError) -> DamagedRecord:
    """What a pull's answer says of a damaged record (the client needs no store error)."""
    return DamagedRecord(error.queue_offset, error.phys_offset, error.reason)


def _forged_stamp(topic: str, queue_id: int) -> SendResult:
    return rejected(
        "MESSAGE_ILLEGAL",
        f"property {PROPERTY_PRODUCER_SEQ} is the broker's own (give a ProducerStamp instead)",
        topic,
        queue_id,
    )


class BrokerService:
    """A broker over one store directory: sends, pulls with long polling, offsets, groups,
    delayed messages and retries. Thread-safe. Close it (or use ``with``) to flush and release
    the store."""

    def __init__(self, root: str | os.PathLike[str], options: BrokerOptions | None = None):
        self.options = options or BrokerOptions()
        self.broker_name = self.options.broker_name
        self.producer_windows = ProducerWindows(
            self.options.idempotence_window_per_queue, self.options.idempotence_max_stamps
        )
        self.store = MessageStore(root, options=self.options.store, **self.options.geometry)
        self.root = self.store.root
        self.notifier = ArrivalNotifier()
        self._clock = self.options.clock
        self.groups = GroupRegistry(self.options.member_expiry_ms, self._clock)
        self.leases = QueueLeases(self.options.queue_lease_ms, self._clock)
        self._parked = ParkedPulls(
            self.store, self.groups, self.notifier, self._read, self._not_waiting
        )
        self._draining = False  # stop_waiting() was called: parked pulls answer at once
        with contextlib.ExitStack() as undo:  # a failure part-way stops what already started
            undo.callback(self.store.close)
            rebuild_windows(
                self.store, self.producer_windows, self.options.idempotence_rebuild_bytes
            )
            self.offsets = ConsumerOffsetTable(self.root, min_offsets=self.store)
            forget_offsets_of_deleted_topics(self.store, self.offsets)
            self.offsets.start_auto_persist(self.options.offset_persist_interval_s)
            undo.callback(self.offsets.close)
            self._group_offsets = GroupOffsets(self.store, self.offsets, self.queue_count)
            self.schedule = ScheduleService(
                self.store,
                levels=self.options.delay_levels,
                poll_interval_s=self.options.schedule_poll_interval_s,
                on_delivered=self._tell_arrival,
                clock=self._clock,
            )
            self.schedule.start()
            undo.callback(self.schedule.stop)
            self._retries = Retries(
                self.store,
                self._put_system,
                delays=lambda: self.schedule.delays,
                max_reconsume_times=lambda: self.options.max_reconsume_times,
            )
            self.transactions = TransactionService(
                self.store,
                self.offsets,
                timeout_ms=self.options.transaction_timeout_ms,
                check_interval_ms=self.options.transaction_check_interval_ms,
                max_checks=self.options.transaction_max_checks,
                on_committed=self._tell_arrival,
                clock=self._clock,
            )
            self.transactions.start()
            undo.pop_all()
        self._closed = False
        self._membership = GroupMembership(
            self.groups,
            self.leases,
            self.notifier,
            self.offsets,
            self.store,
            root=self.root,
            clock=self._clock,
            running=lambda: not self._closed,
        )
        self._closing: CloseSteps | None = None  # the steps of close(), once it began
        self._close_lock = threading.RLock()

    # -- lifecycle ---------------------------------------------------------------------------
    def close(self) -> None:
        """Answer parked pulls, stop the schedule, persist offsets, close the store.

        Total: every step runs whatever an earlier one raised (a config file that cannot be
        written stops neither the threads nor the store's close, which releases the directory);
        each failure is logged at ERROR, then the first is raised as a :class:`CloseError`
        (``errors`` holds them all). A second close is a no-op once every step ran; one after
        a close interrupted part-way (``KeyboardInterrupt``) runs the steps left. A close from
        another thread while one runs (the interpreter's exit, say) waits for it."""
        with self._close_lock:  # a second closer (atexit, another thread) waits for the first
            if self._closing is None:
                self._closed = True
                self._closing = CloseSteps(f"broker {self.root}", self._close_steps())
            elif self._closing.done:
                return
            self._closing.run()
        if self._closing.errors:
            step, first = self._closing.errors[0]
            raise CloseError(
                f"closing broker {self.root}: {step}: {first} (every other step was still "
                "tried, the store directory is released)",
                list(self._closing.errors),
            ) from first

    def _close_steps(self) -> list[CloseStep]:
        return [
            ("answering parked pulls", self.notifier.notify_all),
            *self._membership.close_steps(),
            ("stopping the transaction checks", self.transactions.stop),
            ("stopping the schedule and persisting its progress", self.schedule.stop),
            ("persisting the consumer offsets", self.offsets.close),
            ("closing the store", self.store.close),
        ]

    @property
    def closed(self) -> bool:
        return self._closed

    def stop_waiting(self) -> None:
        """Answer every parked pull and transaction-check fetch now, and park no new one (a
        server shutting down: its clients hear at once, then find the broker gone)."""
        self._draining = True
        self.notifier.notify_all()
        self.transactions.stop_waiting()

    def _not_waiting(self) -> bool:
        return self._closed or self._draining

    def __enter__(self) -> BrokerService:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # -- send --------------------------------------------------------------------------------
    def send(
        self, messages: Sequence[NewMessage], *, stamp: ProducerStamp | None = None
    ) -> SendResult:
        """Store one message or a batch (one topic-queue, one append). Delayed messages go
        under ``SCHEDULE_TOPIC_XXXX`` (alone: a batch may not carry delays).

        ``stamp``: make the send idempotent. A batch whose stamp the broker stored already (on
        the same topic and queue) is not stored again: the answer is the first copy's
        (:mod:`sdk.broker.idempotence`). A message may not carry the stamp property itself."""
        if messages and _holds_stamp(messages):
            topic, queue_id, _sys_flag = batch_head(messages)
            return _forged_stamp(topic, queue_id)
        if stamp is None or not messages:
            return self._send(messages, _any_delayed(messages))
        topic, queue_id, _sys_flag = batch_head(messages)
        # asked of the batch as sent: a producer's batch is plain, the stamped copy is not
        delayed = _any_delayed(messages)
        return self.producer_windows.once(
            stamp, topic, queue_id, lambda: self._send(stamped(messages, stamp), delayed)
        )

    def _send(self, messages: Sequence[NewMessage], delayed: bool) -> SendResult:
        """Store ``messages``; ``delayed``: whether one asks for a delay (see send)."""
        if not messages:
            return rejected("MESSAGE_ILLEGAL", "the batch is empty")
        if delayed:
            first = messages[0]
            if len(messages) > 1:
                return rejected(
                    "MESSAGE_ILLEGAL", "a batch cannot hold delayed messages", first.topic
                )
            return self._send_delayed(first)
        # One message takes the store's single-put fast path (no batch encoder lists, no
        # segment-run writer), which a lone send would pay for nothing. A batch goes
        # as it came (a UniformBatch is encoded from its columns).
        if len(messages) == 1:
            result = self.store.put(messages[0])
        else:
            result = self.store.put_batch(messages)
        self._tell_arrival(result)
        return send_result(result)

    def _tell_arrival(self, result: PutResult) -> None:
        """Wake the pulls parked on the queue a put stored to: every put of the broker (sends,
        send-backs, delayed deliveries, transaction commits) comes through here. A put answered
        FLUSH_DISK_TIMEOUT is stored but not yet visible (under sync flush readers see flushed
        records only): its queue is woken again once a later flush covers it, or the parked
        pulls would see it only at the end of their wait."""
        status = result.status
        if status is not PUT_OK and status is not FLUSH_DISK_TIMEOUT:  # not stored
            return
        topic, queue_id = result.topic, result.queue_id
        self.notifier.notify(topic, queue_id)
        if status is FLUSH_DISK_TIMEOUT:
            self.store.flusher.request(
                max(result.phys_offsets) + 1,  # covered once a flush passes its last record's start
                lambda _failure: self.notifier.notify(topic, queue_id),
            )

    def _send_delayed(self, message: NewMessage) -> SendResult:
        rejection = self.store.check([message])
        if rejection is not None:
            return send_result(rejection)
        properties = dict(message.properties)
        level_text = properties.pop(PROPERTY_DELAY, None)
        deliver_at_text = properties.pop(PROPERTY_DELIVER_AT, None)
        plain = dataclasses.replace(message, properties=properties)
        try:
            if deliver_at_text is not None:
                deliver_at = int(deliver_at_text)
                now_ms = self._clock.time_ms()
                if deliver_at <= now_ms:  # already due: deliver now
                    return self._send([plain], delayed=False)
                delayed = delayed_message(
                    plain, deliver_at_ms=deliver_at, levels=self._delays, now_ms=now_ms
                )
            else:
                level = int(level_text or "0")
                if level <= 0:
                    return self._send([plain], delayed=False)
                delayed = delayed_message(plain, level=level, levels=self._delays)
        except ValueError as exc:
            return rejected("MESSAGE_ILLEGAL", f"bad delay: {exc}", message.topic)
        return self._put_system(delayed)

    @property
    def _delays(self) -> tuple[int, ...]:
        return self.schedule.delays

    def _put_system(self, message: NewMessage) -> SendResult:
        result = self.store.put(message, system=True)
        self._tell_arrival(result)
        return send_result(result)

    # -- consumer send-back (sdk.broker.retries) -----------------------------------------------
    def send_back(
        self,
        group: str,
        phys_offset: int,
        *,
        delay_level: int = 0,
        max_reconsume_times: int | None = None,
        reconsume_times: int = -1,
    ) -> SendResult:
        """Re-store the message at ``phys_offset`` for ``group`` to consume again later, or in
        its dead-letter queue once it was reconsumed ``max_reconsume_times`` times (see
        :meth:`sdk.broker.retries.Retries.send_back`)."""
        return self._retries.send_back(
            group,
            phys_offset,
            delay_level=delay_level,
            max_reconsume_times=max_reconsume_times,
            reconsume_times=reconsume_times,
        )

    # -- transactions (see sdk.broker.transactions) --------------------------------------------
    def send_half(
        self, group: str, message: NewMessage, *, stamp: ProducerStamp | None = None
    ) -> SendResult:
        """Store ``message`` as a half message of producer group ``group`` (invisible).
        ``stamp``: make it idempotent, as for :meth:`send` (keyed by the message's topic and
        queue)."""
        if PROPERTY_PRODUCER_SEQ in message.properties:
            return _forged_stamp(message.topic, message.queue_id)
        if stamp is None:
            return send_result(self.transactions.prepare(group, message))
        return self.producer_windows.once(
            stamp,
            message.topic,
            message.queue_id,
            lambda: send_result(self.transactions.prepare(group, *stamped([message], stamp))),
        )

    def end_transaction(
        self,
        group: str,
        half_phys_offset: int,
        transaction_id: str,
        verdict: str,
        *,
        from_check: bool = False,
    ) -> EndTransactionResult:
        """Commit or roll back a half message (idempotent); UNKNOWN does nothing."""
        return self.transactions.end(
            group, half_phys_offset, transaction_id, verdict, from_check=from_check
        )

    def fetch_transaction_checks(
        self, group: str, client_id: str, wait_ms: int
    ) -> TransactionChecks:
        """Half messages ``group`` is asked to decide, waiting up to ``wait_ms`` for one."""
        return self.transactions.fetch_checks(group, client_id, wait_ms)

    async def fetch_transaction_checks_async(
        self,
        group: str,
        client_id: str,
        wait_ms: int,
        offload: CheckReadOffload | None = None,
    ) -> TransactionChecks:
        """:meth:`fetch_transaction_checks` for an event loop: the wait parks a future.
        ``offload`` runs the read of the half messages off the loop."""
        return await self.transactions.fetch_checks_async(
            group, client_id, wait_ms, offload=offload
        )

    # -- pull --------------------------------------------------------------------------------
    def pull(self, batch: PullBatch) -> PullBatchResult:
        """Answer every queue of ``batch`` at once (never waits)."""
        return self._read(batch, batch.pulls)

    def _read(self, batch: PullBatch, pulls: Sequence[QueuePull]) -> PullBatchResult:
        """Read ``pulls`` (all or some of ``batch``'s) with ``batch``'s limits. Each queue is
        answered on its own: a damaged record is named in its queue's answer, and the other
        queues' answers are the same as without it."""
        store = self.store
        results = []
        for pull in pulls:
            try:
                got = store.get_message_bytes(
                    pull.topic,
                    pull.queue_id,
                    pull.queue_offset,
                    max_count=batch.max_count,
                    max_bytes=batch.max_bytes,
                    tags=pull.tags,
                    check=pull.check,
                )
            except DamagedRecordError as exc:
                results.append(self._damaged_answer(pull, exc))
                continue
            damaged = got.damaged
            results.append(
                QueuePullResult(
                    pull.topic,
                    pull.queue_id,
                    got.status.value,
                    got.next_offset,
                    got.min_offset,
                    got.max_offset,
                    got.raw,
                    got.count,
                    None if damaged is None else _damaged_record(damaged),
                )
            )
        return PullBatchResult(results, self.groups.generation(batch.group))

    def _damaged_answer(self, pull: QueuePull, error: DamagedRecordError) -> QueuePullResult:
        """A queue's answer when the first record its pull met is damaged."""
        store = self.store
        return QueuePullResult(
            pull.topic,
            pull.queue_id,
            RECORD_DAMAGED,
            error.queue_offset,
            store.min_offset(pull.topic, pull.queue_id),
            store.max_offset(pull.topic, pull.queue_id),
            damaged=_damaged_record(error),
        )

    def pull_wait(self, batch: PullBatch) -> PullBatchResult:
        """As :meth:`pull`, holding the request up to ``batch.wait_ms`` while no queue has
        anything new (long polling: :mod:`sdk.broker.parked_pulls`)."""
        return self._parked.wait(batch)

    async def pull_async(self, batch: PullBatch, offload: Offload | None = None) -> PullBatchResult:
        """:meth:`pull_wait` for an event loop: the wait parks a future, not a thread.
        ``offload`` runs the reads off the loop (see :meth:`ParkedPulls.wait_async`)."""
        return await self._parked.wait_async(batch, offload)

    # -- routes and queue bounds ---------------------------------------------------------------
    def queue_count(self, topic: str) -> int:
        """The topic's read queues (the default count for a topic not created yet: a producer
        creates it with that many on its first send)."""
        if topic.startswith((RETRY_PREFIX, DLQ_PREFIX)):
            return 1  # RocketMQ's retryQueueNums and DLQ_NUMS_PER_GROUP: queue 0 only
        config = self.store.topics.get(topic)
        if config is not None:
            return config.read_queue_nums
        return len(self.store.queue_ids(topic)) or self.options.store.default_queue_count

    def min_offset(self, topic: str, queue_id: int) -> int:
        return self.store.min_offset(topic, queue_id)

    def max_offset(self, topic: str, queue_id: int) -> int:
        return self.store.max_offset(topic, queue_id)

    def offset_for_timestamp(self, topic: str, queue_id: int, timestamp_ms: int) -> int:
        return self.store.offset_for_timestamp(topic, queue_id, timestamp_ms)

    # -- queries (sdk.broker.queries) ----------------------------------------------------------
    def query_by_key(
        self, topic: str, key: str, *, begin_ms: int, end_ms: int, max_count: int
    ) -> StoredRecords:
        """Messages of ``topic`` with ``key`` (KEYS or UNIQ_KEY) stored within
        [``begin_ms``, ``end_ms``], newest first, at most ``max_count`` (capped at 64)."""
        return queries.query_by_key(
            self.store, topic, key, begin_ms=begin_ms, end_ms=end_ms, max_count=max_count
        )

    def query_by_id(self, message_id: str) -> StoredRecords:
        """The message with offsetMsgId ``message_id``, or those whose UNIQ_KEY it is."""
        return queries.query_by_id(self.store, message_id)

    # -- committed offsets (sdk.broker.group_offsets) ------------------------------------------
    def query_offset(self, group: str, topic: str, queue_id: int) -> int | None:
        """The group's committed offset of a queue, or None when it has none."""
        return self._group_offsets.query(group, topic, queue_id)

    def start_offsets(
        self, group: str, queues: Sequence[MessageQueue], consume_from: str, timestamp_ms: int
    ) -> list[QueueStart]:
        """Where ``group`` starts each of ``queues``: the committed offset, or the
        ``consume_from`` rule's, recorded at once (see :meth:`GroupOffsets.starts`)."""
        return self._group_offsets.starts(group, queues, consume_from, timestamp_ms)

    def commit_offsets(self, group: str, offsets: Mapping[MessageQueue, int]) -> None:
        self._group_offsets.commit(group, offsets)

    # -- groups (sdk.broker.membership) --------------------------------------------------------
    def heartbeat(
        self, group: str, client_id: str, subscriptions: Mapping[str, str], message_model: str
    ) -> int:
        """Register or refresh a consumer; answers its group's generation (see
        :meth:`GroupMembership.heartbeat`)."""
        return self._membership.heartbeat(group, client_id, subscriptions, message_model)

    def unregister(self, group: str, client_id: str) -> int:
        """A member leaves: its queue leases are dropped and the others told at once."""
        return self._membership.unregister(group, client_id)

    def lock_queues(
        self, group: str, client_id: str, queues: Sequence[MessageQueue]
    ) -> set[MessageQueue]:
        """Take or renew leases on ``queues`` (see :mod:`sdk.broker.leases`); answers those
        the member now holds."""
        return self._membership.lock_queues(group, client_id, queues)

    def unlock_queues(self, group: str, client_id: str, queues: Sequence[MessageQueue]) -> None:
        """Give leases back; members waiting for those queues are woken."""
        self._membership.unlock_queues(group, client_id, queues)

    def group_view(self, group: str) -> GroupView:
        """The group's live members, their subscriptions and the queues' lease owners."""
        return self._membership.view(group)

    def rebalance_view(self, group: str, topics: Sequence[str]) -> GroupView:
        """:meth:`group_view` and the queue count of each of ``topics`` (:meth:`queue_count`),
        in one answer: what a member computes its share from."""
        counts = {topic: self.queue_count(topic) for topic in topics}
        return dataclasses.replace(self.group_view(group), queue_counts=counts)

    def group_report(self, group: str) -> GroupInfo:
        """Members, the queues each owns, committed offsets and lag, as the broker sees them
        now (``quiver group show`` prints the same from the last recorded snapshot)."""
        return self._membership.report(group)

    # -- administration (sdk.broker.administration) --------------------------------------------
    @functools.cached_property
    def admin(self) -> BrokerAdministration:
        """Topics, groups, lag and offset resets of this broker."""
        return BrokerAdministration(
            self.store,
            self.offsets,
            self.groups,
            self.group_view,
            self.group_report,
            broker_name=self.broker_name,
            root=self.root,
            on_topic_gone=self._topic_gone,
        )

    def _topic_gone(self, topic: str, queue_ids: Sequence[int]) -> None:
        """A deleted topic's parked pulls answer now (they find nothing)."""
        for queue_id in queue_ids:
            self.notifier.notify(topic, queue_id)
