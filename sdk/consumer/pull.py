"""Lite pull consumers: the application asks for messages (``poll``) instead of being called.

:class:`PullConsumer` (blocking) and :class:`AsyncPullConsumer` (asyncio) work like Kafka's
consumer (aiokafka's, for the async one): ``subscribe`` to topics as a member of a consumer group,
or ``assign`` queues by hand, then ``poll`` in a loop; ``seek`` moves a queue's position,
``commit`` records how far the group got.

Two numbers per queue, both "next to consume":

* its **position**: the offset of the next message ``poll`` hands out. It advances as polls
  return messages, and past messages the tag expression or the broker skipped; ``seek`` moves it.
  It lives in this consumer only.
* its **committed offset**: where the group resumes after a restart or a rebalance. It moves only
  on a commit (``commit``, auto-commit, ``close`` with auto-commit), and is persisted at once:
  the broker's offset table (clustering) or a local file in ``offsets_dir`` (broadcasting). A
  queue the group never committed is recorded at its start position (the ``consume_from`` rule)
  when first assigned, as RocketMQ does, so a restart does not skip what arrived meanwhile.

Delivery is **at least once** with auto-commit: a poll commits the positions reached by the polls
before it (at most every ``auto_commit_interval_s``), and ``close`` commits the current ones. A
message is therefore committed only once the application came back for more (or closed), having
handled it; a crash before that hands it out again. Committing by hand after handling a batch
gives the same guarantee; committing before handling it gives at most once.

Pipeline of one poll: (1) auto-commit if due; (2) membership, when subscribed: heartbeat and the
allocation of queues among the group's live members (``membership.assigned_queues``), again
when a pull answer's generation changes or every 20 s; a queue taken away is committed (with
auto-commit) and forgotten, a new one starts where ``membership.start_offset`` says; (3)
messages already fetched are returned at once; otherwise one long-polling :class:`PullBatch`
over every assigned, unpaused queue, which the broker answers as soon as any queue has
something; (4) answers are decoded, re-checked against the tag expression, buffered per queue
and handed out, at most ``max_poll_records``. A queue whose offset is out of range
(``OFFSET_TOO_SMALL``, ``OFFSET_OVERFLOW_BADLY``, ...) moves to the offset the broker names, with
a logged warning. Fetched messages of a paused queue stay buffered until it is resumed; ``seek``
drops them.

A member must poll at least once per member expiry (120 s by default) to stay in its group: the
heartbeat rides on ``poll`` (Kafka's ``max.poll.interval.ms``). Lite pull consumers never send
messages back: there is no retry topic; a message the application cannot handle is its to deal
with (seek back, or store it elsewhere).

Neither consumer is thread-safe: use one from one thread (or one task) at a time; a second
``poll`` while one is running raises RuntimeError.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import math
import threading
import time
from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Self

from localstore.codec import StoredMessage
from localstore.tags import TagFilter
from localstore.validation import topic_error
from offsetstore import NOT_FOUND, MessageQueue, OffsetStore, ReadOffsetType
from sdk.consumer.allocate import AllocateAveragely, AllocateStrategy
from sdk.consumer.membership import (
    ConsumeFrom,
    MessageModel,
    assigned_queues,
    check_group,
    make_offset_store,
    new_client_id,
    start_offset,
    topic_queues,
)
from sdk.errors import BrokerUnavailableError, ClientClosedError, QuiverError
from sdk.message import ReceivedMessage
from sdk.transport.base import AsyncBrokerTransport, BrokerTransport
from sdk.transport.models import PullBatch, PullBatchResult, QueuePull, decode_records
from sdk.transport.resolve import resolve, resolve_async

__all__ = ["AsyncPullConsumer", "PullConsumer"]

log = logging.getLogger(__name__)

REBALANCE_INTERVAL_S = 20.0
DEFAULT_MAX_POLL_RECORDS = 500
_OFFSET_MOVED = frozenset(
    {"OFFSET_TOO_SMALL", "OFFSET_OVERFLOW_BADLY", "OFFSET_FOUND_NULL", "MESSAGE_WAS_REMOVING"}
)
Offsets = dict[MessageQueue, int]


@dataclass(slots=True)
class _QueueState:
    """One assigned queue: where the next pull starts (None: not known yet) and what was
    fetched but not handed out yet."""

    fetch_offset: int | None
    tags: str | None
    tag_filter: TagFilter
    buffer: deque[StoredMessage] = field(default_factory=deque)

    @property
    def position(self) -> int | None:
        return self.buffer[0].queue_offset if self.buffer else self.fetch_offset

    def seek(self, offset: int | None) -> None:
        self.buffer.clear()
        self.fetch_offset = offset


def _check_offset(what: object, offset: object) -> int:
    if type(offset) is not int or offset < 0:
        raise ValueError(f"an offset is an int >= 0; got {offset!r} for {what}")
    return offset


def _topics(topics: Mapping[str, str | None] | Iterable[str]) -> dict[str, str | None]:
    if isinstance(topics, str | bytes):
        raise ValueError(f"give topics as a list or a mapping, not the bare string {topics!r}")
    chosen = dict(topics) if isinstance(topics, Mapping) else dict.fromkeys(topics)
    if not chosen:
        raise ValueError("subscribe to at least one topic")
    for topic, expression in chosen.items():
        problem = topic_error(topic, system=True) if isinstance(topic, str) else "not a str"
        if problem is not None:
            raise ValueError(f"cannot subscribe to topic {topic!r}: {problem}")
        TagFilter.parse(expression)  # a bad tag expression fails here, not at the first poll
    return chosen


def _one_topic(topic: str) -> str:
    if not isinstance(topic, str) or (problem := topic_error(topic, system=True)):
        raise ValueError(f"no queues of topic {topic!r}: {problem or 'not a str'}")
    return topic


class _PullConsumerBase:
    """State and decisions shared by both consumers; no I/O happens here except in the
    ``*_io`` methods, which only touch the transport and the offset store (both thread-safe)
    and take what they need of the state as arguments (the async consumer runs them in
    worker threads)."""

    def __init__(
        self,
        broker: object,
        group: str,
        *,
        message_model: MessageModel = MessageModel.CLUSTERING,
        consume_from: ConsumeFrom = ConsumeFrom.LAST_OFFSET,
        consume_timestamp_ms: int = 0,
        auto_commit: bool = True,
        auto_commit_interval_s: float = 5.0,
        max_poll_records: int = DEFAULT_MAX_POLL_RECORDS,
        pull_batch_size: int = 32,
        allocate_strategy: AllocateStrategy | None = None,
        instance_name: str | None = None,
        offsets_dir: str | Path | None = None,
    ) -> None:
        self.group = check_group(group)
        for name, value in (
            ("max_poll_records", max_poll_records),
            ("pull_batch_size", pull_batch_size),
        ):
            if type(value) is not int or value < 1:
                raise ValueError(f"{name} must be an int >= 1, got {value!r}")
        if not auto_commit_interval_s > 0:
            raise ValueError(f"auto_commit_interval_s must be > 0, got {auto_commit_interval_s!r}")
        if not isinstance(message_model, MessageModel):
            raise ValueError(f"message_model must be a MessageModel, got {message_model!r}")
        if not isinstance(consume_from, ConsumeFrom):
            raise ValueError(f"consume_from must be a ConsumeFrom, got {consume_from!r}")
        if consume_timestamp_ms < 0:
            raise ValueError(f"consume_timestamp_ms must be >= 0, got {consume_timestamp_ms}")
        if consume_from is ConsumeFrom.TIMESTAMP and not consume_timestamp_ms:
            consume_timestamp_ms = time.time_ns() // 1_000_000 - 30 * 60_000  # RocketMQ's default
        self.message_model = message_model
        self.consume_from = consume_from
        self.consume_timestamp_ms = consume_timestamp_ms
        self.auto_commit = auto_commit
        self.auto_commit_interval_s = auto_commit_interval_s
        self.max_poll_records = max_poll_records
        self.pull_batch_size = pull_batch_size
        self.allocate_strategy = allocate_strategy or AllocateAveragely()
        self.client_id = new_client_id(instance_name)
        self._control = self._connect(broker)
        self._offsets: OffsetStore = make_offset_store(
            message_model,
            self.group,
            self._control,
            instance_name=instance_name or "DEFAULT",
            offsets_dir=offsets_dir,
        )
        self._queues: dict[MessageQueue, _QueueState] = {}
        self._paused: set[MessageQueue] = set()
        self._subscription: dict[str, str | None] | None = None  # None: not subscribed
        self._manual = False
        self._to_release: dict[MessageQueue, int | None] = {}
        self._generation = -1
        self._rejoin = False
        self._last_rebalance = 0.0
        self._last_commit = time.monotonic()
        self._last_auto_commit: Offsets = {}
        self._drain_turn = itertools.count()
        self._poll_lock = threading.Lock()
        self._closed = False

    def _connect(self, broker: object) -> BrokerTransport:
        """The blocking transport of the control plane (membership, offsets, bounds)."""
        raise NotImplementedError

    # -- checks ------------------------------------------------------------------------------
    def _check_open(self) -> None:
        if self._closed:
            raise ClientClosedError(f"pull consumer of {self.group} is closed")

    def _assigned(self, queue: object) -> MessageQueue:
        if not isinstance(queue, MessageQueue) or queue not in self._queues:
            raise ValueError(f"{queue} is not assigned to this consumer of {self.group}")
        return queue

    def _chosen(self, queues: tuple[MessageQueue, ...]) -> list[MessageQueue]:
        """``queues`` checked to be assigned; every assigned queue when none is given."""
        return [self._assigned(q) for q in queues] if queues else sorted(self._queues)

    # -- what the application sees -----------------------------------------------------------
    @property
    def closed(self) -> bool:
        """Whether :meth:`close` was called."""
        return self._closed

    def subscribe(self, topics: Mapping[str, str | None] | Iterable[str]) -> None:
        """Consume ``topics`` as a member of the group: ``{topic: tag expression or None}``, or
        topic names (every tag). The group's queues of those topics are shared among its live
        members (broadcasting: every member consumes every queue). Calling it again replaces the
        subscription. Not together with :meth:`assign`."""
        self._check_open()
        if self._manual:
            raise RuntimeError(
                f"this consumer of {self.group} assigned queues: it cannot subscribe"
            )
        self._subscription = _topics(topics)
        self._rejoin = True

    def assign(self, queues: Iterable[MessageQueue]) -> None:
        """Consume exactly ``queues`` (no group membership: nothing is rebalanced), with the
        group's committed offsets. Replaces the previous assignment; an empty one stops
        consuming. Not together with :meth:`subscribe`."""
        self._check_open()
        if self._subscription is not None:
            raise RuntimeError(f"this consumer of {self.group} subscribed: it cannot assign queues")
        wanted = list(queues)
        broker = self._control.broker_name
        for queue in wanted:
            if not isinstance(queue, MessageQueue):
                raise ValueError(f"assign takes MessageQueue objects, got {queue!r}")
            if queue.broker_name != broker:
                raise ValueError(f"{queue} is not a queue of broker {broker!r}, which this reaches")
            if problem := topic_error(queue.topic, system=True):
                raise ValueError(f"cannot assign {queue}: {problem}")
        self._manual = True
        self._set_assignment(set(wanted), {})

    def assignment(self) -> list[MessageQueue]:
        """The queues this consumer consumes now, sorted."""
        self._check_open()
        return sorted(self._queues)

    def subscription(self) -> dict[str, str | None]:
        """The subscribed topics and their tag expressions (empty when assigning by hand)."""
        self._check_open()
        return dict(self._subscription or {})

    def position(self, queue: MessageQueue) -> int | None:
        """The offset of the next message :meth:`poll` hands out from ``queue``; None while
        its start is not known (before the first poll of an :class:`AsyncPullConsumer`, or when
        the committed offset could not be read)."""
        self._check_open()
        return self._queues[self._assigned(queue)].position

    def seek(self, queue: MessageQueue, offset: int) -> None:
        """Move ``queue``'s position to ``offset``: the next poll reads from there (messages
        fetched but not handed out yet are dropped). An offset out of the queue's range is moved
        to its nearest end by the next pull (logged)."""
        self._check_open()
        self._queues[self._assigned(queue)].seek(_check_offset(queue, offset))

    def pause(self, *queues: MessageQueue) -> None:
        """Stop fetching and handing out messages of ``queues`` until :meth:`resume`."""
        self._check_open()
        self._paused.update(self._assigned(q) for q in queues)

    def resume(self, *queues: MessageQueue) -> None:
        """Fetch and hand out ``queues`` again."""
        self._check_open()
        self._paused.difference_update([self._assigned(q) for q in queues])

    def paused(self) -> list[MessageQueue]:
        """The paused queues, sorted."""
        self._check_open()
        return sorted(self._paused)

    # -- assignment (state only) ---------------------------------------------------------------
    def _set_assignment(self, wanted: set[MessageQueue], tags: Mapping[str, str | None]) -> None:
        """Keep the queues of ``wanted``, add the new ones (start not known yet), and queue the
        others for release (committed with auto-commit, then forgotten)."""
        for queue in [q for q in self._queues if q not in wanted]:
            state = self._queues.pop(queue)
            self._paused.discard(queue)
            self._to_release[queue] = state.position if self.auto_commit else None
        for queue in sorted(wanted):
            expression = tags.get(queue.topic)
            state_or_none = self._queues.get(queue)
            if state_or_none is None:
                self._to_release.pop(queue, None)
                self._queues[queue] = _QueueState(None, expression, TagFilter.parse(expression))
            elif state_or_none.tags != expression:  # a new tag expression: re-read from position
                state_or_none.seek(state_or_none.position)
                state_or_none.tags = expression
                state_or_none.tag_filter = TagFilter.parse(expression)

    def _membership_due(self) -> bool:
        return self._subscription is not None and (
            self._rejoin or time.monotonic() - self._last_rebalance >= REBALANCE_INTERVAL_S
        )

    def _rebalanced(self, generation: int, wanted: set[MessageQueue]) -> None:
        self._generation = generation
        self._rejoin = False
        self._last_rebalance = time.monotonic()
        self._set_assignment(wanted, self._subscription or {})

    def _take_releases(self) -> dict[MessageQueue, int | None]:
        released, self._to_release = self._to_release, {}
        return released

    def _unknown_starts(self) -> list[MessageQueue]:
        return sorted(q for q, s in self._queues.items() if s.fetch_offset is None)

    def _apply_starts(self, starts: Offsets) -> None:
        for queue, offset in starts.items():
            state = self._queues.get(queue)
            if state is not None and state.fetch_offset is None:
                state.fetch_offset = offset

    # -- fetching and handing out (state only) ---------------------------------------------------
    def _begin_poll(self, timeout_s: float) -> float:
        """Checks; the poll's deadline (monotonic). Takes the poll lock (see ``_end_poll``)."""
        self._check_open()
        if not isinstance(timeout_s, int | float) or not math.isfinite(timeout_s) or timeout_s < 0:
            raise ValueError(f"timeout_s must be a finite number >= 0, got {timeout_s!r}")
        if self._subscription is None and not self._manual:
            raise RuntimeError(f"subscribe() or assign() before polling (group {self.group})")
        if not self._poll_lock.acquire(blocking=False):
            raise RuntimeError(f"consumer of {self.group} is already polling: one caller at a time")
        return time.monotonic() + timeout_s

    def _end_poll(self) -> None:
        self._poll_lock.release()

    def _wait_ms(self, deadline: float) -> int:
        """How long the next pull may wait: until the deadline, and no later than the next
        rebalance is due."""
        remaining = deadline - time.monotonic()
        if self._subscription is not None:
            due = self._last_rebalance + REBALANCE_INTERVAL_S - time.monotonic()
            remaining = min(remaining, due)
        return max(0, int(remaining * 1000))

    def _next_batch(self, wait_ms: int) -> PullBatch | None:
        """A pull over every unpaused queue with a known start; None when there is none and
        no group to watch (a subscribed member still pulls, to learn the group's generation)."""
        pulls = tuple(
            QueuePull(q.topic, q.queue_id, s.fetch_offset, s.tags)
            for q, s in sorted(self._queues.items())
            if s.fetch_offset is not None and q not in self._paused
        )
        if not pulls and self._subscription is None:
            return None
        return PullBatch(self.group, pulls, max_count=self.pull_batch_size, wait_ms=wait_ms)

    def _absorb(self, batch: PullBatch, result: PullBatchResult) -> None:
        """Record a pull's answers: buffer what matches, move fetch offsets; a queue sought
        (or revoked) while the pull was out ignores its answer."""
        asked = {(p.topic, p.queue_id): p.queue_offset for p in batch.pulls}
        broker = self._control.broker_name
        for answer in result.results:
            queue = MessageQueue(answer.topic, broker, answer.queue_id)
            state = self._queues.get(queue)
            if (
                state is None
                or state.buffer
                or state.fetch_offset != asked.get((answer.topic, answer.queue_id))
            ):
                continue
            if answer.found:
                messages = decode_records(answer.raw)
                tag_filter = state.tag_filter
                if not tag_filter.matches_all:
                    messages = [m for m in messages if tag_filter.tag_matches(m.tags)]
                state.buffer.extend(messages)
                state.fetch_offset = answer.next_offset
            elif answer.status == "NO_MATCHED_MESSAGE":
                state.fetch_offset = answer.next_offset
            elif answer.status in _OFFSET_MOVED:
                log.warning(
                    "%s: offset %d is out of range (%s); moving to %d",
                    queue,
                    state.fetch_offset,
                    answer.status,
                    answer.next_offset,
                )
                state.fetch_offset = answer.next_offset
        if self._subscription is not None and result.generation != self._generation:
            self._rejoin = True

    def _drain(self) -> list[ReceivedMessage]:
        """Up to ``max_poll_records`` fetched messages of unpaused queues, each queue's in
        order; the queue served first rotates, so none starves."""
        ready = [q for q, s in sorted(self._queues.items()) if s.buffer and q not in self._paused]
        if not ready:
            return []
        turn = next(self._drain_turn) % len(ready)
        out: list[ReceivedMessage] = []
        for queue in ready[turn:] + ready[:turn]:
            buffer = self._queues[queue].buffer
            while buffer and len(out) < self.max_poll_records:
                out.append(buffer.popleft())
        return out

    # -- committing (state only) -----------------------------------------------------------------
    def _positions(self) -> Offsets:
        return {q: s.position for q, s in self._queues.items() if s.position is not None}

    def _checked_offsets(self, offsets: Mapping[MessageQueue, int] | None) -> Offsets:
        if offsets is None:
            return self._positions()
        return {self._assigned(q): _check_offset(q, o) for q, o in offsets.items()}

    def _auto_commit_due(self) -> Offsets | None:
        """The positions to auto-commit now, or None (off, not due, or nothing moved since the
        last commit of positions)."""
        now = time.monotonic()
        if not self.auto_commit or now - self._last_commit < self.auto_commit_interval_s:
            return None
        self._last_commit = now
        positions = self._positions()
        return None if positions == self._last_auto_commit else positions

    def _auto_commit_io(self, positions: Offsets, assigned: list[MessageQueue]) -> bool:
        """Commit ``positions``; a failure is logged (the next auto-commit tries again)."""
        try:
            self._commit_io(positions, assigned)
        except Exception as exc:
            log.warning("auto-commit of %s failed: %s; trying again later", self.group, exc)
            return False
        return True

    def _note_commit(self, offsets: Offsets, given: bool) -> None:
        """After a commit: positions committed as they are need no auto-commit until they move;
        offsets given by hand must not be mistaken for them."""
        self._last_auto_commit = {} if given else offsets

    # -- I/O (thread-safe: transport and offset store only) ----------------------------------------
    def _membership_io(
        self, subscription: Mapping[str, str | None]
    ) -> tuple[int, set[MessageQueue]]:
        """Heartbeat; the group's generation and the queues this member owns."""
        expressions = {t: (e or "*") for t, e in subscription.items()}
        generation = self._control.heartbeat(
            self.group, self.client_id, expressions, self.message_model.value
        )
        wanted = assigned_queues(
            self._control,
            self.message_model,
            self.group,
            self.client_id,
            subscription,
            self.allocate_strategy,
        )
        return generation, wanted

    def _release_io(self, released: Mapping[MessageQueue, int | None]) -> None:
        """Commit (when given) and forget queues this consumer no longer owns."""
        for queue, offset in released.items():
            if offset is not None:
                self._offsets.update_offset(queue, offset, False)
            self._offsets.persist(queue)
            self._offsets.remove_offset(queue)

    def _starts_io(self, queues: list[MessageQueue], assigned: list[MessageQueue]) -> Offsets:
        """Start offsets of ``queues`` (committed, else the ``consume_from`` rule), recorded
        at once; a queue whose offset cannot be read is left out (tried again next poll)."""
        starts: Offsets = {}
        for queue in queues:
            start = start_offset(
                self._offsets, self._control, queue, self.consume_from, self.consume_timestamp_ms
            )
            if start is None:
                log.warning("offset of %s unreadable for %s; trying again later", queue, self.group)
            else:
                starts[queue] = start
        if starts:
            self._offsets.persist_all(assigned)
        return starts

    def _commit_io(self, offsets: Offsets, assigned: list[MessageQueue]) -> None:
        for queue, offset in offsets.items():
            self._offsets.update_offset(queue, offset, False)
        self._offsets.persist_all(sorted({*assigned, *offsets}))

    def _committed_io(self, queue: MessageQueue, assigned: bool) -> int | None:
        read = ReadOffsetType.MEMORY_FIRST_THEN_STORE if assigned else ReadOffsetType.STORE
        found = self._offsets.read_offset(queue, read)
        if not assigned:
            self._offsets.remove_offset(queue)  # never re-committed by the periodic persist
        if isinstance(found, int):
            return found
        if found is NOT_FOUND:
            return None
        if self.message_model is MessageModel.CLUSTERING:
            raise BrokerUnavailableError(f"cannot read the committed offset of {queue}")
        raise QuiverError(f"cannot read the committed offset of {queue} (see the log)")

    def _bounds_io(self, queues: list[MessageQueue], end: bool) -> Offsets:
        bound = self._control.max_offset if end else self._control.min_offset
        return {q: bound(q.topic, q.queue_id) for q in queues}

    def _times_io(self, timestamps: Mapping[MessageQueue, int]) -> Offsets:
        lookup = self._control.offset_for_timestamp
        return {q: lookup(q.topic, q.queue_id, ts) for q, ts in timestamps.items()}

    def _close_io(self, final: Offsets | None, assigned: list[MessageQueue], leave: bool) -> None:
        """Commit ``final`` (auto-commit), persist everything, stop the offset store, leave."""
        try:
            if final:
                self._commit_io(final, assigned)
        finally:
            try:
                closer = getattr(self._offsets, "close", None)
                if callable(closer):
                    closer()
            finally:
                if leave:
                    try:
                        self._control.unregister(self.group, self.client_id)
                    except Exception as exc:
                        log.warning("could not leave group %s: %s", self.group, exc)

    def _checked_times(self, timestamps: Mapping[MessageQueue, int]) -> dict[MessageQueue, int]:
        broker = self._control.broker_name
        for queue, ts in timestamps.items():
            if not isinstance(queue, MessageQueue) or queue.broker_name != broker:
                raise ValueError(f"{queue!r} is not a queue of broker {broker!r}")
            if type(ts) is not int or ts < 0:
                raise ValueError(f"a timestamp is an int of ms >= 0; got {ts!r} for {queue}")
        return dict(timestamps)

    def _start_close(self) -> tuple[Offsets | None, list[MessageQueue], bool] | None:
        if self._closed:
            return None
        self._closed = True
        final = self._positions() if self.auto_commit else None
        return final, sorted(self._queues), self._subscription is not None


class PullConsumer(_PullConsumerBase):
    """A blocking lite pull consumer of ``group`` (see the module docstring).

    ``broker``: an :class:`sdk.EmbeddedBroker` (local mode) or a transport. ``message_model``:
    CLUSTERING (the group shares the queues; offsets on the broker) or BROADCASTING (every member
    reads everything; offsets in a local file under ``offsets_dir``, named by ``instance_name``).
    ``consume_from``/``consume_timestamp_ms``: where a queue the group never committed starts.
    ``auto_commit``: commit positions every ``auto_commit_interval_s`` during polls and on close.
    ``max_poll_records``: most messages one poll returns; ``pull_batch_size``: most messages
    fetched per queue per request. ``allocate_strategy``: how the group shares queues.

    Use ``with``, or call :meth:`close`. Subscribing (or assigning) joins the group and fixes
    the start positions at once.
    """

    _transport: BrokerTransport

    def _connect(self, broker: object) -> BrokerTransport:
        self._transport = resolve(broker)
        return self._transport

    def subscribe(self, topics: Mapping[str, str | None] | Iterable[str]) -> None:
        """Consume ``topics`` as a member of the group: ``{topic: tag expression or None}``, or
        topic names (every tag); the group's queues of those topics are shared among its live
        members (broadcasting: every member consumes every queue). Joins the group and takes
        this member's queues at once. Calling it again replaces the subscription. Not together
        with :meth:`assign`."""
        super().subscribe(topics)
        self._sync_up()

    def assign(self, queues: Iterable[MessageQueue]) -> None:
        """Consume exactly ``queues`` (no group membership: nothing is rebalanced), starting at
        the group's committed offsets, fixed at once. Replaces the previous assignment; an empty
        one stops consuming. Not together with :meth:`subscribe`."""
        super().assign(queues)
        self._sync_up()

    def queues_for(self, topic: str) -> list[MessageQueue]:
        """Every queue of ``topic`` (to :meth:`assign` some of them)."""
        self._check_open()
        return topic_queues(self._control, _one_topic(topic))

    def _sync_up(self) -> None:
        """Membership when due, releases, and the start of queues not started yet."""
        if self._membership_due():
            assert self._subscription is not None
            self._rebalanced(*self._membership_io(self._subscription))
        released = self._take_releases()
        if released:
            self._release_io(released)
        unknown = self._unknown_starts()
        if unknown:
            self._apply_starts(self._starts_io(unknown, sorted(self._queues)))

    def poll(self, timeout_s: float = 0.0) -> list[ReceivedMessage]:
        """The next messages (at most ``max_poll_records``), waiting up to ``timeout_s`` for
        some to arrive; ``[]`` when none did. Each queue's messages come in queue order."""
        deadline = self._begin_poll(timeout_s)
        try:
            due = self._auto_commit_due()
            if due and self._auto_commit_io(due, sorted(self._queues)):
                self._last_auto_commit = due
            self._sync_up()
            pulled = False
            while True:
                messages = self._drain()
                if messages or self._closed or (pulled and time.monotonic() >= deadline):
                    return messages
                wait_ms = self._wait_ms(deadline)
                batch = self._next_batch(wait_ms)
                if batch is None:
                    time.sleep(wait_ms / 1000)
                else:
                    result = self._transport.pull(batch)
                    if self._closed:
                        return []
                    self._absorb(batch, result)
                pulled = True
                self._sync_up()
        finally:
            self._end_poll()

    def commit(self, offsets: Mapping[MessageQueue, int] | None = None) -> None:
        """Commit ``offsets`` (``{queue: next offset to consume}``, assigned queues only), or
        every queue's current position; persisted before this returns. A commit the broker
        cannot take now is logged and sent again with the next commit."""
        self._check_open()
        chosen = self._checked_offsets(offsets)
        self._commit_io(chosen, sorted(self._queues))
        self._note_commit(chosen, given=offsets is not None)

    def committed(self, queue: MessageQueue) -> int | None:
        """The group's committed offset of ``queue`` (next to consume), or None when it has
        none. Raises :class:`sdk.errors.BrokerUnavailableError` when it cannot be read."""
        self._check_open()
        if not isinstance(queue, MessageQueue):
            raise ValueError(f"committed takes a MessageQueue, got {queue!r}")
        return self._committed_io(queue, queue in self._queues)

    def seek_to_beginning(self, *queues: MessageQueue) -> None:
        """Move ``queues`` (default: every assigned queue) to their first readable message."""
        self._check_open()
        for queue, offset in self._bounds_io(self._chosen(queues), end=False).items():
            self._queues[queue].seek(offset)

    def seek_to_end(self, *queues: MessageQueue) -> None:
        """Move ``queues`` (default: every assigned queue) past their last message: only
        messages sent from now on are polled."""
        self._check_open()
        for queue, offset in self._bounds_io(self._chosen(queues), end=True).items():
            self._queues[queue].seek(offset)

    def offsets_for_times(self, timestamps: Mapping[MessageQueue, int]) -> dict[MessageQueue, int]:
        """For each queue, the offset of its first message stored at or after the timestamp
        (ms since the epoch); the queue's end offset when every message is older. Any queue of
        this broker, assigned or not."""
        self._check_open()
        return self._times_io(self._checked_times(timestamps))

    def close(self) -> None:
        """Commit the positions (with auto-commit), persist offsets and leave the group.
        Idempotent."""
        closing = self._start_close()
        if closing is not None:
            self._close_io(*closing)

    def __enter__(self) -> Self:
        self._check_open()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


class AsyncPullConsumer(_PullConsumerBase):
    """The asyncio twin of :class:`PullConsumer`, with the same arguments: ``poll``,
    ``commit``, ``committed``, ``close``, ``offsets_for_times``, ``seek_to_beginning``,
    ``seek_to_end`` and ``queues_for`` are coroutines. Messages come through the async
    transport's pull (a waiting poll parks a future, not a thread); membership and offsets go
    through the blocking control plane in worker threads.

    :meth:`subscribe` and :meth:`assign` only record what to consume: the group is joined and
    start positions are fixed by the next poll. Use ``async with``, or ``await close()``.
    """

    _transport: AsyncBrokerTransport

    def _connect(self, broker: object) -> BrokerTransport:
        self._transport = resolve_async(broker)
        return self._transport.sync

    async def queues_for(self, topic: str) -> list[MessageQueue]:
        """Every queue of ``topic`` (to :meth:`assign` some of them)."""
        self._check_open()
        return await asyncio.to_thread(topic_queues, self._control, _one_topic(topic))

    async def _sync_up(self) -> None:
        if self._membership_due():
            assert self._subscription is not None
            joined = await asyncio.to_thread(self._membership_io, dict(self._subscription))
            self._rebalanced(*joined)
        released = self._take_releases()
        if released:
            await asyncio.to_thread(self._release_io, released)
        unknown = self._unknown_starts()
        if unknown:
            starts = await asyncio.to_thread(self._starts_io, unknown, sorted(self._queues))
            self._apply_starts(starts)

    async def poll(self, timeout_s: float = 0.0) -> list[ReceivedMessage]:
        """The next messages (at most ``max_poll_records``), waiting up to ``timeout_s`` for
        some to arrive; ``[]`` when none did. Each queue's messages come in queue order."""
        deadline = self._begin_poll(timeout_s)
        try:
            due = self._auto_commit_due()
            if due:
                done = await asyncio.to_thread(self._auto_commit_io, due, sorted(self._queues))
                if done:
                    self._last_auto_commit = due
            await self._sync_up()
            pulled = False
            while True:
                messages = self._drain()
                if messages or self._closed or (pulled and time.monotonic() >= deadline):
                    return messages
                wait_ms = self._wait_ms(deadline)
                batch = self._next_batch(wait_ms)
                if batch is None:
                    await asyncio.sleep(wait_ms / 1000)
                else:
                    result = await self._transport.pull(batch)
                    if self._closed:
                        return []
                    self._absorb(batch, result)
                pulled = True
                await self._sync_up()
        finally:
            self._end_poll()

    async def commit(self, offsets: Mapping[MessageQueue, int] | None = None) -> None:
        """Commit ``offsets`` (``{queue: next offset to consume}``, assigned queues only), or
        every queue's current position; persisted before this returns. A commit the broker
        cannot take now is logged and sent again with the next commit."""
        self._check_open()
        chosen = self._checked_offsets(offsets)
        await asyncio.to_thread(self._commit_io, chosen, sorted(self._queues))
        self._note_commit(chosen, given=offsets is not None)

    async def committed(self, queue: MessageQueue) -> int | None:
        """The group's committed offset of ``queue`` (next to consume), or None when it has
        none. Raises :class:`sdk.errors.BrokerUnavailableError` when it cannot be read."""
        self._check_open()
        if not isinstance(queue, MessageQueue):
            raise ValueError(f"committed takes a MessageQueue, got {queue!r}")
        return await asyncio.to_thread(self._committed_io, queue, queue in self._queues)

    async def seek_to_beginning(self, *queues: MessageQueue) -> None:
        """Move ``queues`` (default: every assigned queue) to their first readable message."""
        await self._seek_to_bound(queues, end=False)

    async def seek_to_end(self, *queues: MessageQueue) -> None:
        """Move ``queues`` (default: every assigned queue) past their last message."""
        await self._seek_to_bound(queues, end=True)

    async def _seek_to_bound(self, queues: tuple[MessageQueue, ...], end: bool) -> None:
        self._check_open()
        bounds = await asyncio.to_thread(self._bounds_io, self._chosen(queues), end)
        for queue, offset in bounds.items():
            state = self._queues.get(queue)
            if state is not None:
                state.seek(offset)

    async def offsets_for_times(
        self, timestamps: Mapping[MessageQueue, int]
    ) -> dict[MessageQueue, int]:
        """For each queue, the offset of its first message stored at or after the timestamp
        (ms since the epoch); the queue's end offset when every message is older."""
        self._check_open()
        return await asyncio.to_thread(self._times_io, self._checked_times(timestamps))

    async def close(self) -> None:
        """Commit the positions (with auto-commit), persist offsets and leave the group.
        Idempotent."""
        closing = self._start_close()
        if closing is not None:
            await asyncio.to_thread(self._close_io, *closing)

    async def __aenter__(self) -> Self:
        self._check_open()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()
