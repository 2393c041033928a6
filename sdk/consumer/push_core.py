"""The push consumer's bookkeeping, shared by the threaded and the asyncio consumer.

:class:`PushCore` owns everything a push consumer decides, and none of its concurrency:

* **assignment**: heartbeat, then the queues of every subscribed topic this member owns
  (clustering also subscribes ``%RETRY%{group}``, where its failed messages come back). A queue
  that is taken away is marked dropped (its in-flight messages may finish, but their offsets are
  no longer committed by this member), its offset is persisted, and it is forgotten.
* **pulling**: one :class:`PullBatch` over every owned queue that flow control lets through,
  from each queue's next offset; answers are decoded, re-checked against the subscription's tag
  set (the store filters by tag hash; a hash collision stops here), buffered in the queue's
  :class:`ProcessQueue` and cut into listener batches of ``consume_batch_size``.
* **damaged records**: a record that cannot be read is logged at ERROR, counted in
  ``stats.damaged_skipped`` and stepped over; the rest of its queue, and every other queue, is
  consumed as usual (:mod:`sdk.consumer.damaged`).
* **finishing**: a failed batch (RECONSUME_LATER or an exception) is sent back to the broker,
  which re-delivers it through the retry topic later or dead-letters it; a message whose
  send-back fails is retried locally instead and kept in flight. Then the finished messages
  leave the process queue and the queue's offset advances to the smallest one still in flight
  (increase-only), which the offset store persists every 5 s and on close.
* **consume timeout**: messages in a listener longer than ``consume_timeout_ms`` are sent back
  (at delay level 3, whatever their reconsume count, as RocketMQ's ``cleanExpiredMsg``) and
  released, so one stuck message does not pin the committed offset forever.

Broadcasting differs as RocketMQ's does: failures are logged and dropped (nothing is sent back),
offsets live in a local file.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Protocol, TypedDict

from localstore.record.tags import TagFilter
from offsetstore import MessageQueue, OffsetStore
from sdk.clock import SYSTEM_CLOCK, Clock
from sdk.consumer.allocate import AllocateAveragely, AllocateStrategy
from sdk.consumer.damaged import ConsumerStats, read_queue_answer
from sdk.consumer.membership import (
    ConsumeFrom,
    MessageModel,
    assigned_queues,
    check_start,
    heartbeat,
    make_offset_store,
    start_offsets,
)
from sdk.consumer.offset_steps import persist
from sdk.consumer.ownership import QueueOwnership
from sdk.consumer.process_queue import FlowControlLimits, ProcessQueue
from sdk.errors import InvalidArgumentError
from sdk.message import ConsumeResult, ReceivedMessage, retry_topic
from sdk.transport.models import (
    OFFSET_MOVED,
    PullBatch,
    PullBatchResult,
    QueuePull,
    SendResult,
)
from sdk.transport.steps import Call, Steps

__all__ = ["PushCore", "PushOptions", "PushSettings", "RebalanceListener"]

log = logging.getLogger(__name__)
# A message that outlived the consume timeout is sent back at this delay level whatever its
# reconsume count, as RocketMQ's ProcessQueue.cleanExpiredMsg does (a failed one waits longer
# each time: level 3 + its reconsume count, chosen by the broker).
CONSUME_TIMEOUT_DELAY_LEVEL = 3
# What RocketMQ does with a broadcast message whose listener failed.
BROADCAST_FAILURE_OUTCOME = "a broadcast message is not retried (as in RocketMQ)"

PROPERTY_CONSUME_START_TIME = "CONSUME_START_TIME"
_EXPIRY_CHECK_MAX_S = 60.0
THROTTLED_RECHECK_MS = 50  # RocketMQ re-pulls a flow-controlled queue after 50 ms


class RebalanceListener(Protocol):
    """Told when this member starts and stops consuming queues (Kafka's
    ``ConsumerRebalanceListener``). ``on_assigned`` runs once the queues' leases are held and
    before their first message is handed out; ``on_revoked`` after their offsets were committed
    and before their leases are given back (or at once when a lease was lost). Both run inside
    the consumer's membership sequences (on its pull or lease thread, or in ``start``/``close``;
    on the event loop for :class:`~sdk.consumer.push.AsyncPushConsumer`), which wait for them:
    keep them short. They may call ``persist_offsets()`` (blocking consumer), not ``close()``."""

    def on_assigned(self, queues: list[MessageQueue]) -> None: ...

    def on_revoked(self, queues: list[MessageQueue]) -> None: ...


ORDERLY_MAX_RECONSUME_TIMES = 16  # an orderly consumer's limit when it names none


@dataclass(slots=True)
class PushSettings:
    """A push consumer's tunables (RocketMQ's defaults unless said otherwise)."""

    message_model: MessageModel = MessageModel.CLUSTERING
    consume_from: ConsumeFrom = ConsumeFrom.LAST_OFFSET
    consume_timestamp_ms: int = 0  # for ConsumeFrom.TIMESTAMP; default: 30 minutes ago
    consume_batch_size: int = 1  # messages per listener call
    pull_batch_size: int = 32  # messages per queue per pull
    pull_wait_ms: int = 15_000  # long-polling hold
    flow_control: FlowControlLimits = field(default_factory=FlowControlLimits)
    # -1: the broker's (BrokerOptions.max_reconsume_times, 16 by default); an orderly consumer,
    # which retries in place, then gives up after ORDERLY_MAX_RECONSUME_TIMES
    max_reconsume_times: int = -1
    consume_timeout_ms: int = 15 * 60_000
    rebalance_interval_s: float = 20.0  # also renews the queue leases (30 s)
    release_timeout_s: float = 10.0  # a revoked queue's in-flight messages may finish this long
    lease_renew_interval_s: float = 10.0  # under a third of the broker's queue lease (30 s)
    orderly: bool = False  # one batch per queue at a time, in queue-offset order
    orderly_retry_pause_s: float = 1.0  # RocketMQ's suspendCurrentQueueTimeMillis
    rebalance_listener: RebalanceListener | None = None
    heartbeat_interval_s: float = 30.0
    allocate_strategy: AllocateStrategy = field(default_factory=AllocateAveragely)
    instance_name: str | None = None
    offsets_dir: str | None = None  # broadcasting: where the local offsets file lives

    def __post_init__(self) -> None:
        self.consume_timestamp_ms = check_start(
            self.message_model, self.consume_from, self.consume_timestamp_ms
        )
        for name in ("consume_batch_size", "pull_batch_size", "consume_timeout_ms"):
            value = getattr(self, name)
            if type(value) is not int or value < 1:
                raise InvalidArgumentError(f"{name} must be an int >= 1, got {value!r}")
        if type(self.pull_wait_ms) is not int or self.pull_wait_ms < 0:
            raise InvalidArgumentError(
                f"pull_wait_ms must be an int >= 0, got {self.pull_wait_ms!r}"
            )
        times = self.max_reconsume_times
        if type(times) is not int or times < -1:
            raise InvalidArgumentError(
                f"max_reconsume_times must be an int >= 0 (or -1: the broker's), got {times!r}"
            )
        for name in (
            "rebalance_interval_s",
            "release_timeout_s",
            "lease_renew_interval_s",
            "heartbeat_interval_s",
        ):
            value = getattr(self, name)
            if not isinstance(value, int | float) or not value > 0:
                raise InvalidArgumentError(f"{name} must be a number > 0, got {value!r}")


class PushOptions(TypedDict, total=False):
    """The keywords of :class:`PushSettings`, for the push consumers' ``**settings``: a call
    with a misspelt or mistyped setting fails type checking, not only at run time (the two
    must name the same fields, ``tests/sdk/test_push_settings.py`` checks)."""

    message_model: MessageModel
    consume_from: ConsumeFrom
    consume_timestamp_ms: int
    consume_batch_size: int
    pull_batch_size: int
    pull_wait_ms: int
    flow_control: FlowControlLimits
    max_reconsume_times: int
    consume_timeout_ms: int
    rebalance_interval_s: float
    release_timeout_s: float
    lease_renew_interval_s: float
    orderly: bool
    orderly_retry_pause_s: float
    rebalance_listener: RebalanceListener | None
    heartbeat_interval_s: float
    allocate_strategy: AllocateStrategy
    instance_name: str | None
    offsets_dir: str | None


@dataclass(slots=True)
class QueueState:
    """One owned queue. ``commit_lock`` makes "record an offset unless the queue was let go"
    and "let go: mark the process queue dropped" exclusive, so once a release or a lost lease
    dropped it no listener records an offset of it any more (the release then commits what was
    recorded, outside the lock: never across a step)."""

    process_queue: ProcessQueue[ReceivedMessage]
    next_offset: int
    tags: str | None
    tag_filter: TagFilter
    commit_lock: threading.Lock = field(default_factory=threading.Lock)
    check: bool = False  # the next pull asks the broker to decode (a record did not, here)


# A listener batch, with the process queue it was cut from (a queue taken back later gets a
# new one: stale batches of the old one are recognised and not consumed).
Work = tuple[MessageQueue, ProcessQueue[ReceivedMessage], list[ReceivedMessage]]


class PushCore:
    """The decisions of one push consumer (see the module docstring). It does no I/O: what
    needs the broker is a step generator (:mod:`sdk.transport.steps`) that the shell runs on
    its transport. Shells run the membership sequences (:meth:`rebalance`, :meth:`settle`,
    :meth:`renew_leases`, :meth:`persist_owned`, :meth:`expire_stuck`, :meth:`shutdown`) one at
    a time, under their control lock; :meth:`on_pulled` runs on the pull thread or task, and
    :meth:`complete` / :meth:`finish_failed` on listener threads or tasks (thread-safe where
    the threaded shell needs it: each queue's ``commit_lock``, never held across a step)."""

    def __init__(
        self,
        broker_name: str,
        group: str,
        client_id: str,
        subscription: Mapping[str, str | None],
        settings: PushSettings,
        stats: ConsumerStats | None = None,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        self.broker_name = broker_name
        self.clock = clock
        self.stats = stats or ConsumerStats()
        self.group = group
        self.client_id = client_id
        self.settings = settings
        self.clustering = settings.message_model is MessageModel.CLUSTERING
        self.subscription: dict[str, str | None] = dict(subscription)
        if self.clustering:
            self.subscription.setdefault(retry_topic(group), "*")
        self.filters = {t: TagFilter.parse(e) for t, e in self.subscription.items()}
        self.offsets: OffsetStore = make_offset_store(
            settings.message_model,
            group,
            instance_name=settings.instance_name or "DEFAULT",
            offsets_dir=settings.offsets_dir,
        )
        self.states: dict[MessageQueue, QueueState] = {}
        self.ownership = QueueOwnership(
            group,
            client_id,
            leased=self.clustering,
            release_timeout_s=settings.release_timeout_s,
            clock=clock,
        )
        self._wanted: set[MessageQueue] = set()
        self._closed = False
        self.generation = -1
        self._last_rebalance = 0.0
        self._last_heartbeat = 0.0
        self._last_expiry_check = clock.monotonic()
        self.retry_later: Callable[[Work], None] | None = None  # re-run a batch locally, later

    # -- membership ------------------------------------------------------------------------
    def _heartbeat(self) -> Steps[None]:
        self.generation = yield from heartbeat(
            self.group,
            self.client_id,
            self.subscription,
            self.settings.message_model,
        )
        self._last_heartbeat = self.clock.monotonic()

    def housekeeping_due(self, generation: int | None = None) -> bool:
        """Whether to heartbeat/rebalance now: the group changed, or an interval passed."""
        return (generation is not None and generation != self.generation) or self._due_in_s() <= 0

    def _due_in_s(self) -> float:
        """Seconds until the next rebalance, heartbeat or lease renewal is due."""
        now = self.clock.monotonic()
        settings = self.settings
        due = min(
            self._last_rebalance + settings.rebalance_interval_s,
            self._last_heartbeat + settings.heartbeat_interval_s,
        )
        return due - now

    def hold_ms(self) -> int:
        """How long the next pull may wait: at most ``pull_wait_ms``, and never past the next
        rebalance, heartbeat or stuck-message check (the lease keeper renews leases meanwhile)."""
        expiry_due_s = self._last_expiry_check + self.expiry_check_s - self.clock.monotonic()
        due_s = min(self._due_in_s(), expiry_due_s)
        return max(0, min(self.settings.pull_wait_ms, int(due_s * 1000)))

    @property
    def expiry_check_s(self) -> float:
        """How often stuck messages are looked for: twice per consume timeout, at most every
        60 s."""
        return min(_EXPIRY_CHECK_MAX_S, self.settings.consume_timeout_ms / 2000)

    def expiry_check_due(self) -> bool:
        return self.clock.monotonic() - self._last_expiry_check >= self.expiry_check_s

    def rebalance(self) -> Steps[None]:
        """Heartbeat, then take on and give up queues to match the group's allocation (a queue
        is taken only under a lease, and given up only after its offset is committed)."""
        if self._closed:
            return
        yield from self._heartbeat()
        self.generation, self._wanted = yield from assigned_queues(
            self.broker_name,
            self.settings.message_model,
            self.group,
            self.client_id,
            self.subscription,
            self.settings.allocate_strategy,
            self.generation,  # the heartbeat's
        )
        yield from self._apply(*(yield from self.ownership.update(self._wanted)))
        self._last_rebalance = self.clock.monotonic()

    def renew_leases(self) -> Steps[bool]:
        """Renew every lease held (owned and releasing queues), from the consumer's lease
        keeper every ``lease_renew_interval_s``: a pull thread busy with a long listener call
        or parked in a long poll never lets a lease lapse. False once closed."""
        if self._closed:
            return False
        ownership = self.ownership
        if ownership.leased and (ownership.owned or ownership.releasing):
            yield from self._apply(*(yield from ownership.update(self._wanted)))
        return True

    def settle(self) -> Steps[None]:
        """While queues change hands: let go of drained releasing queues, ask again for the
        leases still refused."""
        if self._closed:
            return
        drained = [queue for queue in list(self.ownership.releasing) if self._drained(queue)]
        if drained:  # no listener call runs on them, none can start now
            yield from self._release(drained)
        if self.ownership.pending:
            yield from self._apply(*(yield from self.ownership.update(self._wanted)))

    def persist_owned(self) -> Steps[None]:
        """Commit the offsets of the queues owned now (the periodic persist, every 5 s);
        forget the memory offsets of queues let go of."""
        if not self._closed:
            yield from persist(self.offsets, list(self.states), drop_others=True)

    def _apply(self, started: set[MessageQueue], lost: set[MessageQueue]) -> Steps[None]:
        for queue in lost:  # another member holds it now: commit nothing more
            log.warning("lease of %s lost; dropping the queue without committing", queue)
            state = self.states.pop(queue, None)
            if state is not None:
                with state.commit_lock:
                    state.process_queue.seal_if_idle(force=True)
                    state.process_queue.dropped = True
            self.offsets.discard(queue)
        if lost:
            self._tell("on_revoked", sorted(lost))
        # Besides the queues just granted: any owned queue with no state and not being let go.
        # That is one whose release kept its lease for a commit still due (its state is gone)
        # and that the group gave back meanwhile: it is consumed again, from that commit.
        ownership = self.ownership
        orphans = {
            q for q in ownership.owned if q not in self.states and not ownership.is_releasing(q)
        }
        started = started | orphans
        taken = yield from self._take(started)
        yield from self.ownership.released(started.difference(taken))
        if taken:
            self._tell("on_assigned", taken)

    def _tell(self, event: str, queues: list[MessageQueue]) -> None:
        listener = self.settings.rebalance_listener
        if listener is None:
            return
        try:
            getattr(listener, event)(queues)
        except Exception:
            log.exception("rebalance listener %s(%s) of %s failed", event, queues, self.group)

    def abandoned(self, queue: MessageQueue) -> bool:
        """Whether messages of ``queue`` must not be handed to the listener any more."""
        return queue not in self.states or self.ownership.is_releasing(queue)

    def try_start(
        self,
        queue: MessageQueue,
        process_queue: ProcessQueue[ReceivedMessage],
        messages: list[ReceivedMessage],
    ) -> QueueState | None:
        """The queue's state if a listener may start on ``messages`` now (recorded as started);
        None when the queue is being handed over or was taken back since they were pulled."""
        state = self.states.get(queue)
        if state is None or state.process_queue is not process_queue:
            return None
        if self.ownership.is_releasing(queue) or not process_queue.try_start(
            messages, self.clock.time_ms()
        ):
            return None
        return state

    def _take(self, queues: set[MessageQueue]) -> Steps[list[MessageQueue]]:
        """Start consuming ``queues`` from where the group is (one broker call for them all);
        answers those taken, sorted (a queue whose offset is unreadable is not)."""
        settings = self.settings
        starts = yield from start_offsets(
            self.offsets, queues, settings.consume_from, settings.consume_timestamp_ms
        )
        taken = []
        for queue in sorted(queues):
            start = starts.get(queue)
            if start is None:
                log.warning("offset of %s unreadable; will retry at the next rebalance", queue)
                continue
            expression = self.subscription.get(queue.topic)
            self.states[queue] = QueueState(
                ProcessQueue(), start, expression, self.filters[queue.topic]
            )
            taken.append(queue)
        return taken

    def _drained(self, queue: MessageQueue) -> bool:
        """Whether a releasing queue has no listener call left (sealed now), or waited too
        long for them (sealed anyway)."""
        state = self.states.get(queue)
        force = self.ownership.release_timed_out(queue)
        return state is None or state.process_queue.seal_if_idle(force=force)

    def _release(self, queues: list[MessageQueue]) -> Steps[None]:
        """Commit what finished, in one persist, forget the queues, then give their leases
        back. A queue whose commit does not reach the broker keeps its lease (the next settle
        tries again): a new owner must never start below an offset this member will commit
        later."""
        for queue in queues:
            state = self.states.pop(queue, None)
            if state is not None:
                with state.commit_lock:  # no listener commits after this: the offset is final
                    state.process_queue.dropped = True
        # (a queue without state: a commit that failed before, which the persist sends again)
        yield from persist(self.offsets, queues, drop_others=False)
        not_landed = self.offsets.pending()
        committed = []
        for queue in queues:
            self.offsets.remove_offset(queue)
            if queue in not_landed:
                log.warning("offset of %s not committed yet; keeping its lease until it is", queue)
            else:
                committed.append(queue)
        if committed:
            self._tell("on_revoked", committed)
            yield from self.ownership.released(committed)

    # -- pulling ---------------------------------------------------------------------------
    def next_pull(self, wait_ms: int | None = None) -> PullBatch:
        """A pull over every owned queue that is not being released and that flow control
        lets through. It may name no queue: it then only waits for a group change."""
        limits = self.settings.flow_control
        orderly = self.settings.orderly
        releasing = self.ownership.releasing
        pulls = tuple(
            QueuePull(q.topic, q.queue_id, s.next_offset, s.tags, s.check)
            for q, s in list(self.states.items())  # a snapshot: the lease keeper may drop one
            if not (releasing and q in releasing)  # (hashing a queue is a Python call)
            and not s.process_queue.should_throttle(limits, orderly=orderly)
        )
        hold_ms = self.settings.pull_wait_ms if wait_ms is None else wait_ms
        if len(pulls) < len(self.states) or self.ownership.settling:
            # a throttled queue is looked at again in 50 ms; a hand-over is watched as closely
            hold_ms = min(hold_ms, THROTTLED_RECHECK_MS)
        return PullBatch(
            self.group,
            pulls,
            max_count=self.settings.pull_batch_size,
            wait_ms=hold_ms,
            generation=self.generation,
        )

    def on_pulled(self, batch: PullBatch, result: PullBatchResult) -> list[Work]:
        """Record the answers to ``batch``; the listener batches to run. A queue released, or
        released and taken again from another offset, while the pull was out ignores its
        answer (the records it holds were read from where the queue no longer is)."""
        work: list[Work] = []
        size = self.settings.consume_batch_size
        broker = self.broker_name
        asked = batch.asked_offsets()
        for answer in result.results:
            queue = MessageQueue(answer.topic, broker, answer.queue_id)
            state = self.states.get(queue)
            pulled = asked.get((answer.topic, answer.queue_id))
            if state is None or pulled is None or state.next_offset != pulled:
                continue  # released (or taken again elsewhere) while the pull was out
            status = answer.status
            if answer.found or answer.damaged is not None:
                messages, next_offset, state.check = read_queue_answer(
                    queue, pulled, answer, self.stats
                )
                tag_filter = state.tag_filter
                if not tag_filter.matches_all:
                    messages = [m for m in messages if tag_filter.tag_matches(m.tags)]
                if messages:  # held before next_offset moves past them (see finish)
                    process_queue = state.process_queue
                    process_queue.put_messages(messages)
                    work.extend(
                        (queue, process_queue, messages[i : i + size])
                        for i in range(0, len(messages), size)
                    )
                    state.next_offset = next_offset
                else:
                    state.next_offset = next_offset
                    self._advance_idle(queue, state)
            elif status == "OFFSET_OVERFLOW_ONE":  # caught up: commit past filtered messages
                self._advance_idle(queue, state)
            elif status == "NO_MATCHED_MESSAGE":
                state.next_offset = answer.next_offset
                self._advance_idle(queue, state)
            elif status in OFFSET_MOVED:
                log.warning(
                    "%s: offset %d is out of range (%s); moving to %d",
                    queue,
                    state.next_offset,
                    status,
                    answer.next_offset,
                )
                state.next_offset = answer.next_offset
                self._advance_idle(queue, state)
        return work

    def _advance_idle(self, queue: MessageQueue, state: QueueState) -> None:
        """Nothing of the pulled range is for us: with nothing in flight, commit past it."""
        with state.commit_lock:
            if state.process_queue.cached_count == 0 and not state.process_queue.dropped:
                self.offsets.update_offset(queue, state.next_offset, True)

    # -- consuming -------------------------------------------------------------------------
    def complete(
        self, queue: MessageQueue, state: QueueState, messages: list[ReceivedMessage]
    ) -> None:
        """Listener batch ``messages`` (started with :meth:`try_start`) is done with: release
        them and advance the offset unless the queue was let go meanwhile. No I/O: a
        successful batch is completed on the spot."""
        process_queue = state.process_queue
        with state.commit_lock:
            pulled_up_to = state.next_offset  # read before the emptiness check: see below
            offset = process_queue.remove_messages(messages)
            if offset is None or process_queue.dropped:
                return
            if process_queue.cached_count == 0:
                # Everything pulled before ``pulled_up_to`` was either held (and is now done)
                # or filtered out: the pull thread holds messages before it moves next_offset,
                # so an empty queue here means nothing below pulled_up_to is in flight.
                offset = max(offset, pulled_up_to)
            self.offsets.update_offset(queue, offset, True)

    def finish_failed(
        self, queue: MessageQueue, state: QueueState, messages: list[ReceivedMessage]
    ) -> Steps[None]:
        """A listener batch failed (RECONSUME_LATER or raised): send its messages back, then
        :meth:`complete` those the broker took (the others are retried here, later)."""
        done = yield from self._failed(queue, state.process_queue, messages)
        self.complete(queue, state, done)

    # -- orderly consuming -----------------------------------------------------------------
    def take_orderly(self, queue: MessageQueue) -> tuple[QueueState | None, list[ReceivedMessage]]:
        """The queue's state and its next batch in offset order, marked started; (None, [])
        when the queue is gone or being handed over, (state, []) when nothing is buffered."""
        state = self.states.get(queue)
        if state is None or self.abandoned(queue):
            return None, []
        size = self.settings.consume_batch_size
        return state, state.process_queue.take_started(size, self.clock.time_ms())

    def has_buffered(self, queue: MessageQueue) -> bool:
        state = self.states.get(queue)
        return state is not None and state.process_queue.buffered_count > 0

    def finish_orderly(
        self,
        queue: MessageQueue,
        state: QueueState,
        messages: list[ReceivedMessage],
        result: ConsumeResult,
    ) -> Steps[float | None]:
        """An orderly batch is done: None when it is settled (committed, or dead-lettered after
        ``max_reconsume_times``); else the pause before the same batch is retried, in order."""
        process_queue = state.process_queue
        if result is not ConsumeResult.SUCCESS and not (yield from self._give_up(messages)):
            for message in messages:
                message.reconsume_times += 1
            process_queue.make_messages_consume_again(messages)
            return self.settings.orderly_retry_pause_s
        with state.commit_lock:
            offset = process_queue.commit()
            if offset is not None and not process_queue.dropped:
                self.offsets.update_offset(queue, offset, True)
        return None

    def _give_up(self, messages: list[ReceivedMessage]) -> Steps[bool]:
        """Whether a failed orderly batch is settled: every message was retried the maximum
        number of times and (clustering) is now in the dead-letter queue."""
        limit = self.settings.max_reconsume_times
        if limit < 0:
            limit = ORDERLY_MAX_RECONSUME_TIMES
        if any(m.reconsume_times < limit for m in messages):
            return False
        if not self.clustering:
            log.error("orderly broadcast batch failed %d times; skipping it", len(messages))
            return True
        for message in messages:
            try:
                answer: SendResult = yield Call.of(
                    "send_back",
                    self.group,
                    message.phys_offset,
                    delay_level=-1,
                    reconsume_times=message.reconsume_times,  # counted here, not stored
                )
            except Exception as exc:
                log.warning("cannot dead-letter %s (%s); retrying the batch", message.msg_id, exc)
                return False
            if not answer.stored:
                return False
        return True

    def _failed(
        self,
        queue: MessageQueue,
        process_queue: ProcessQueue[ReceivedMessage],
        messages: list[ReceivedMessage],
    ) -> Steps[list[ReceivedMessage]]:
        """Send failed messages back; answers those that may be released now."""
        if not self.clustering:
            for message in messages:
                log.warning(
                    "broadcast message %s of %s failed; dropped: %s",
                    message.msg_id,
                    message.topic,
                    BROADCAST_FAILURE_OUTCOME,
                )
            return messages
        released, kept = [], []
        for message in messages:
            if (yield from self._send_back(message)):
                released.append(message)
            else:
                message.reconsume_times += 1
                kept.append(message)
        if kept and self.retry_later is not None:
            self.retry_later((queue, process_queue, kept))
        return released

    @property
    def failure_outcome(self) -> str:
        """What becomes of the messages of a failed listener call, for its log line."""
        if self.clustering:
            return "reconsuming later (sent back to the broker, or retried here)"
        return f"its messages are dropped: {BROADCAST_FAILURE_OUTCOME}"

    def _send_back(self, message: ReceivedMessage, delay_level: int = 0) -> Steps[bool]:
        """Send ``message`` back to the broker (``delay_level`` 0: the broker picks the level
        from its reconsume count); whether it was stored."""
        try:
            answer: SendResult = yield Call.of(
                "send_back",
                self.group,
                message.phys_offset,
                delay_level=delay_level,
                max_reconsume_times=self.settings.max_reconsume_times,
            )
        except Exception as exc:  # the broker is away: retry locally
            log.warning("send-back of %s failed (%s); retrying it locally", message.msg_id, exc)
            return False
        if not answer.stored:
            log.warning(
                "send-back of %s refused (%s %s); retrying locally",
                message.msg_id,
                answer.status,
                answer.detail,
            )
        return answer.stored

    def expire_stuck(self) -> Steps[int]:
        """Send back messages stuck in a listener past the consume timeout, at delay level
        :data:`CONSUME_TIMEOUT_DELAY_LEVEL`; how many."""
        self._last_expiry_check = self.clock.monotonic()
        now = self.clock.time_ms()
        count = 0
        for queue, state in list(self.states.items()):
            stuck = state.process_queue.expired_messages(now, self.settings.consume_timeout_ms)
            for message in stuck:
                if not (yield from self._send_back(message, CONSUME_TIMEOUT_DELAY_LEVEL)):
                    continue
                count += 1
                with state.commit_lock:
                    offset = state.process_queue.remove_messages([message])
                    if offset is not None and not state.process_queue.dropped:
                        self.offsets.update_offset(queue, offset, True)
        return count

    # -- shutdown --------------------------------------------------------------------------
    def shutdown(self) -> Steps[None]:
        """Persist every owned queue's offset, leave the group (its leases go with it), stop
        the offset store; a failed persist (of the local file) is raised after the rest.
        No membership sequence runs after this."""
        self._closed = True
        queues = list(self.states)
        failure: Exception | None = None
        try:
            if self.clustering:
                yield from persist(self.offsets, queues, drop_others=True)
            else:
                self.offsets.close()  # the local file: every queue's offset, in one write
        except Exception as exc:  # no yield in a handler: a closed generator must not call
            failure = exc
        if queues:
            self._tell("on_revoked", sorted(queues))
        try:
            yield Call.of("unregister", self.group, self.client_id)
        except Exception as exc:
            log.warning("could not leave group %s: %s", self.group, exc)
        for state in self.states.values():
            state.process_queue.dropped = True
        if failure is not None:
            raise failure
