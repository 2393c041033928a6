"""Lite pull consumers: the application asks for messages (``poll``) instead of being called.

:class:`PullConsumer` (blocking) and :class:`AsyncPullConsumer` (asyncio) work like Kafka's
consumer (aiokafka's, for the async one): ``subscribe`` to topics as a member of a consumer group,
or ``assign`` queues by hand, then ``poll`` in a loop; ``seek`` moves a queue's position,
``commit`` records how far the group got. Both leave every decision to
:class:`sdk.consumer.pull_core.PullCore` (assignment, positions, pauses, what to pull, what to
hand out, when to auto-commit), whose docstring states the invariants: a queue's **position**
(next message ``poll`` hands out, in this consumer only) versus its **committed offset** (where
the group resumes, moved only by a commit and persisted at once), and delivery **at least once**
with auto-commit. What is here is the I/O: the transport's pulls, and the control plane
(membership through ``sdk.consumer.membership``, offsets through the offset store), written once
as steps (:mod:`sdk.transport.steps`) that the blocking consumer runs on its blocking transport
and the async one on its asyncio transport, on the event loop: it starts no thread.

One poll: when subscribed, heartbeat, the allocation of queues among the group's live members
(``membership.assigned_queues``) and their leases if due, else a renewal of the leases when due
or before committing; auto-commit if due (only queues whose lease was just confirmed); commit
(with auto-commit) and forget queues taken away, drop lost ones uncommitted, fix the start of new
ones (``membership.start_offsets``); then hand out what was fetched, or hold one long-polling
:class:`PullBatch` over every assigned, unpaused queue, which the broker answers as soon as any
queue has something.

A member must poll at least once per member expiry (120 s by default) to stay in its group, and
well within the broker's queue lease (30 s by default; renewed at most every 10 s of polling) to
keep its queues: the heartbeat and the leases ride on ``poll`` (Kafka's
``max.poll.interval.ms``). A member that polls too seldom loses its queues to the others; it
notices at its next poll or commit, drops them without committing (the new owner's progress
stands) and logs a warning. Lite pull consumers never send
messages back: there is no retry topic; a message the application cannot handle is its to deal
with (seek back, or store it elsewhere).

Neither consumer is thread-safe: use one from one thread (or one task) at a time; a second
``poll`` while one is running raises RuntimeError. Only ``close`` may come from another thread
(task): a poll parked in a pull then returns ``[]``, and an iteration over the consumer ends.
Iterating (``for message in consumer``, ``async for``) is polling one message per step, with
the same commits (see :class:`PullConsumer`).
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from abc import abstractmethod
from collections.abc import AsyncIterator, Iterable, Iterator, Mapping
from pathlib import Path
from types import TracebackType
from typing import Self, TypeVar

from offsetstore import (
    NOT_FOUND,
    MessageQueue,
    OffsetStore,
    ReadOffsetType,
)
from sdk.clock import SYSTEM_CLOCK, Clock
from sdk.consumer.allocate import AllocateStrategy
from sdk.consumer.membership import (
    ConsumeFrom,
    MessageModel,
    assigned_queues,
    heartbeat,
    make_offset_store,
    start_offsets,
    topic_queues,
)
from sdk.consumer.offset_steps import persist, read_committed
from sdk.consumer.pull_core import DEFAULT_MAX_POLL_RECORDS, Offsets, PullCore, check_topic
from sdk.errors import BrokerUnavailableError, ClientClosedError, QuiverError
from sdk.lifecycle import WarnsUnclosed
from sdk.message import ReceivedMessage
from sdk.transport.base import AsyncBrokerTransport, BrokerTransport
from sdk.transport.resolve import owns_transport, resolve, resolve_async
from sdk.transport.steps import Call, Steps, run_steps, run_steps_async

__all__ = ["AsyncPullConsumer", "PullConsumer"]

log = logging.getLogger(__name__)
T = TypeVar("T")

# Each poll of an iteration (``for message in consumer``) waits at most this long, so an
# iteration notices within it that another thread or task closed the consumer (a subscribed
# member's close wakes the parked pull at once: leaving the group wakes it).
ITERATION_WAIT_S = 1.0

_CLOSE_UNRENEWED = (
    "consumer of %s could not renew its queue leases before closing (%s): committing nothing"
    " (the group resumes at its last commit)"
)


class _PullConsumerBase(PullCore, WarnsUnclosed):
    """The I/O both consumers share, written once as steps (:mod:`sdk.transport.steps`): the
    ``*_steps`` methods make broker calls and touch the offset store, and take what they need
    of the state as arguments; :class:`PullConsumer` runs them on its blocking transport,
    :class:`AsyncPullConsumer` on its asyncio one (on the loop, no thread)."""

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
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        super().__init__(
            group,
            message_model=message_model,
            consume_from=consume_from,
            consume_timestamp_ms=consume_timestamp_ms,
            auto_commit=auto_commit,
            auto_commit_interval_s=auto_commit_interval_s,
            max_poll_records=max_poll_records,
            pull_batch_size=pull_batch_size,
            allocate_strategy=allocate_strategy,
            instance_name=instance_name,
            clock=clock,
        )
        self._broker: str | None = self._connect(broker)
        # No periodic persist. Clustering: it would send the last committed offset of a queue
        # again after this member lost its lease (an application busy between polls), over the
        # new owner's commits. Every commit here is persisted at once, after the leases were
        # confirmed; one the broker could not take is sent again with the next.
        self._offsets: OffsetStore = make_offset_store(
            message_model,
            self.group,
            instance_name=instance_name or "DEFAULT",
            offsets_dir=offsets_dir,
        )
        self._mark_opened()

    @abstractmethod
    def _connect(self, broker: object) -> str | None:
        """Reach ``broker``; the name of the broker reached (None: learnt on the first await,
        an asyncio consumer's)."""

    @property
    def _broker_name(self) -> str | None:
        return self._broker

    # -- I/O, as steps (transport and offset store only) ------------------------------------------
    def _membership_steps(
        self, subscription: Mapping[str, str | None], held: list[MessageQueue]
    ) -> Steps[tuple[int, set[MessageQueue], set[MessageQueue]]]:
        """Heartbeat; the group's generation, the queues allocated to this member, and those
        whose lease it holds now among them and ``held`` (clustering: takes or renews them;
        broadcasting: no leases, every allocated queue)."""
        joined_at = yield from heartbeat(
            self.group, self.client_id, subscription, self.message_model
        )
        generation, wanted = yield from assigned_queues(
            self._known_broker,
            self.message_model,
            self.group,
            self.client_id,
            subscription,
            self.allocate_strategy,
            joined_at,
        )
        if self.message_model is not MessageModel.CLUSTERING:
            return generation, wanted, set(wanted)
        granted = yield from self._lease_steps(sorted(wanted.union(held)))
        return generation, wanted, granted

    def _lease_steps(self, queues: list[MessageQueue]) -> Steps[set[MessageQueue]]:
        """Take or renew the leases of ``queues``; answers those this member holds now."""
        if not queues:
            return set()
        granted: set[MessageQueue] = yield Call.of(
            "lock_queues", self.group, self.client_id, queues
        )
        return granted

    def _forget(self, lost: Iterable[MessageQueue]) -> None:
        """Forget the offsets of queues whose lease was lost: never committed again."""
        for queue in lost:
            self._offsets.discard(queue)

    def _sync_up_steps(self, auto_commit: bool) -> Steps[None]:
        """The leases first (membership when due, else a renewal when due or before committing
        anything), then the auto-commit (when asked and due) of the queues whose lease was just
        confirmed, releases, and the start of queues not started yet."""
        due = self._auto_commit_due() if auto_commit else None
        subscription = self._membership_due()
        if subscription is not None:
            joined = yield from self._membership_steps(subscription, sorted(self._queues))
            self._forget(self._rebalanced(*joined))
        elif self._pending_leases or self._renewal_due(
            committing=bool(due) or bool(self._queues.unknown_starts())
        ):
            yield from self._renew_steps(with_pending=True)
        due = self._queues.held_only(due) if due else None
        if due and (yield from self._auto_commit_steps(due, sorted(self._queues))):
            self._auto_committed(due)
        released = self._queues.take_releases()
        if released:
            yield from self._release_steps(released)
        unknown = self._queues.unknown_starts()
        if unknown:
            starts = yield from self._starts_steps(unknown, sorted(self._queues))
            self._queues.apply_starts(starts)

    def _renew_steps(self, with_pending: bool) -> Steps[None]:
        held = sorted(self._queues)
        granted = yield from self._lease_steps(self._lease_asked(with_pending))
        self._forget(self._lease_renewal_answered(held, granted))

    def _release_steps(self, released: Mapping[MessageQueue, int | None]) -> Steps[None]:
        """Commit (when given) and forget queues this consumer no longer owns. A commit the
        broker did not take is forgotten too: the lease goes now, and once the next owner
        commits, a late one would move the group back."""
        for queue, offset in released.items():
            if offset is not None:
                self._offsets.update_offset(queue, offset, False)
        yield from persist(self._offsets, released, drop_others=False)  # one commit per broker
        not_landed = self._offsets.pending()
        for queue in released:
            if queue in not_landed:
                log.warning(
                    "final commit of %s for %s did not land; its next owner resumes at the "
                    "group's last commit",
                    queue,
                    self.group,
                )
            self._offsets.discard(queue)
        subscribed_cluster = (
            self._subscription is not None and self.message_model is MessageModel.CLUSTERING
        )
        if released and subscribed_cluster:  # committed: now let the lease go
            yield Call.of("unlock_queues", self.group, self.client_id, sorted(released))

    def _starts_steps(
        self, queues: list[MessageQueue], assigned: list[MessageQueue]
    ) -> Steps[Offsets]:
        """Start offsets of ``queues`` (committed, else the ``consume_from`` rule), recorded
        at once (clustering: by the broker, in the call that answers them; broadcasting: in
        the local file); a queue whose offset cannot be read is left out (tried again next
        poll)."""
        starts = yield from start_offsets(
            self._offsets, queues, self.consume_from, self.consume_timestamp_ms
        )
        for queue in queues:
            if queue not in starts:
                log.warning("offset of %s unreadable for %s; trying again later", queue, self.group)
        if starts and self.message_model is MessageModel.BROADCASTING:
            yield from persist(self._offsets, assigned, drop_others=True)
        return starts

    def _auto_commit_steps(self, positions: Offsets, assigned: list[MessageQueue]) -> Steps[bool]:
        """Commit ``positions``; a failure is logged (the next auto-commit tries again)."""
        try:
            yield from self._commit_steps(positions, assigned)
        except Exception as exc:
            log.warning("auto-commit of %s failed: %s; trying again later", self.group, exc)
            return False
        return True

    def _record(self, offsets: Offsets) -> None:
        for queue, offset in offsets.items():
            self._offsets.update_offset(queue, offset, False)

    def _commit_steps(self, offsets: Offsets, assigned: list[MessageQueue]) -> Steps[None]:
        self._record(offsets)
        yield from persist(self._offsets, sorted({*assigned, *offsets}), drop_others=True)

    def _committed_steps(self, queue: MessageQueue, assigned: bool) -> Steps[int | None]:
        found = self._offsets.read_offset(queue, ReadOffsetType.MEMORY) if assigned else NOT_FOUND
        if not isinstance(found, int):
            found = yield from read_committed(self._offsets, queue)
            if not assigned:
                self._offsets.remove_offset(queue)  # never re-committed by a later persist
        if isinstance(found, int):
            return found
        if found is NOT_FOUND:
            return None
        if self.message_model is MessageModel.CLUSTERING:
            raise BrokerUnavailableError(f"cannot read the committed offset of {queue}")
        raise QuiverError(f"cannot read the committed offset of {queue} (see the log)")

    def _bounds_steps(self, queues: list[MessageQueue], end: bool) -> Steps[Offsets]:
        method = "max_offset" if end else "min_offset"
        bounds: Offsets = {}
        for queue in queues:
            bounds[queue] = yield Call.of(method, queue.topic, queue.queue_id)
        return bounds

    def _times_steps(self, timestamps: Mapping[MessageQueue, int]) -> Steps[Offsets]:
        found: Offsets = {}
        for queue, timestamp_ms in timestamps.items():
            found[queue] = yield Call.of(
                "offset_for_timestamp", queue.topic, queue.queue_id, timestamp_ms
            )
        return found

    def _close_steps(
        self, final: Offsets | None, assigned: list[MessageQueue], leave: bool
    ) -> Steps[None]:
        """Commit ``final`` (auto-commit), write the local offsets file (broadcasting), leave
        the group; a failed commit is raised after leaving."""
        failure: Exception | None = None
        try:
            if self.message_model is not MessageModel.CLUSTERING:
                self._record(final or {})
                self._offsets.close()  # the local file: every queue's offset, in one write
            elif final:
                yield from self._commit_steps(final, assigned)
        except Exception as exc:  # no yield in a handler: a closed generator must not call
            failure = exc
        if leave:
            try:
                yield Call.of("unregister", self.group, self.client_id)
            except Exception as exc:
                log.warning("could not leave group %s: %s", self.group, exc)
        if failure is not None:
            raise failure


class PullConsumer(_PullConsumerBase):
    """A blocking lite pull consumer of ``group`` (see the module docstring).

    ``broker``: a broker URL (``"http://host:8080"``: remote mode, over a transport the consumer
    makes and closes), an :class:`sdk.EmbeddedBroker` (local mode) or a transport.
    ``message_model``:
    CLUSTERING (the group shares the queues; offsets on the broker) or BROADCASTING (every member
    reads everything; offsets in a local file under ``offsets_dir``, named by ``instance_name``).
    ``consume_from``/``consume_timestamp_ms``: where a queue the group never committed starts.
    ``auto_commit``: commit positions every ``auto_commit_interval_s`` during polls and on close.
    ``max_poll_records``: most messages one poll returns; ``pull_batch_size``: most messages
    fetched per queue per request. ``allocate_strategy``: how the group shares queues.
    ``clock``: when rebalances, lease renewals and auto-commits fall due (tests give a
    :class:`sdk.clock.ManualClock`; a poll's timeout stays a real wait).

    Use ``with``, or call :meth:`close`. Subscribing (or assigning) joins the group and fixes
    the start positions at once.

    ``for message in consumer`` yields the messages one at a time, in each queue's order,
    waiting for more as long as the consumer is open; it ends once the consumer is closed (by
    another thread, or after breaking out). Each step is a poll that hands out one message, so
    commits follow the poll rules exactly, counting a message as handed out when it is yielded:

    * with auto-commit, a yielded message is committed by an auto-commit of a later step (at
      most every ``auto_commit_interval_s``, only once the loop asked for the next message) or
      by :meth:`close`. Leaving the loop (``break``, or an exception in its body) and closing
      therefore commits the message the body was handling: to have it delivered again, call
      ``seek(queue, message.queue_offset)`` before closing;
    * :meth:`commit` inside the loop commits every message yielded so far, the current one
      included (with ``auto_commit=False``, the only way anything is committed);
    * messages fetched but not yielded yet are never committed: breaking out leaves them for
      the next iteration, poll, or the group's next reader.
    """

    _transport: BrokerTransport
    # Held by a poll's control-plane sequence and by close: a close from another thread waits
    # for the sequence in progress (never for a parked pull) and no sequence starts after it.
    _control: threading.Lock

    def _connect(self, broker: object) -> str:
        self._transport = resolve(broker)
        self._owns_transport = owns_transport(broker)
        self._control = threading.Lock()
        try:
            return self._transport.broker_name
        except BaseException:
            self._release_transport()
            raise

    def _release_transport(self) -> None:
        """Close the transport if this consumer made it from a URL (idempotent)."""
        if self._owns_transport:
            self._transport.close()

    def _run(self, steps: Steps[T]) -> T:
        """Make the broker calls ``steps`` asks for."""
        return run_steps(steps, self._transport)

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
        return self._run(topic_queues(self._known_broker, check_topic(topic)))

    def _sync_up(self, auto_commit: bool = False) -> None:
        """:meth:`_sync_up_steps` under the control lock; nothing once closed."""
        with self._control:
            if not self._closed:
                self._run(self._sync_up_steps(auto_commit))

    def _renew_leases(self, with_pending: bool = False) -> None:
        self._run(self._renew_steps(with_pending))

    def poll(self, timeout_s: float = 0.0) -> list[ReceivedMessage]:
        """The next messages (at most ``max_poll_records``), waiting up to ``timeout_s`` for
        some to arrive; ``[]`` when none did. Each queue's messages come in queue order."""
        return self._poll(timeout_s, self.max_poll_records)

    def __iter__(self) -> Iterator[ReceivedMessage]:
        """Every message, one at a time, waiting for more as long as the consumer is open;
        the iteration ends once it is closed (see the class docstring for what is committed)."""
        while not self._closed:
            try:
                yield from self._poll(ITERATION_WAIT_S, max_records=1)
            except ClientClosedError:  # closed by another thread between two polls
                return

    def _poll(self, timeout_s: float, max_records: int) -> list[ReceivedMessage]:
        deadline = self._begin_poll(timeout_s)
        try:
            self._sync_up(auto_commit=True)
            pulled = False
            rebalanced = False  # a pull was answered with the group's new generation alone
            while True:
                messages = self._drain(max_records)
                if self._poll_over(messages, pulled, deadline):
                    return messages
                wait_ms = self._wait_ms(deadline)
                batch = self._next_batch(wait_ms)
                if batch is None:
                    time.sleep(wait_ms / 1000)
                else:
                    result = self._transport.pull(batch)
                    if self._closed:
                        return []
                    if self._absorb(batch, result) and not rebalanced:
                        rebalanced = True  # its one pull read nothing: once more, rebalanced
                        self._sync_up()
                        continue
                pulled = True
                self._sync_up()
        finally:
            self._end_poll()

    def commit(self, offsets: Mapping[MessageQueue, int] | None = None) -> None:
        """Commit ``offsets`` (``{queue: next offset to consume}``, assigned queues only), or
        every queue's current position; persisted before this returns. A commit the broker
        cannot take now is logged and sent again with the next commit. A subscribed member
        renews its leases first: a queue whose lease it lost (another member took it) is not
        committed but dropped from the assignment, with a warning."""
        self._check_open()
        chosen = self._queues.checked_offsets(offsets)
        if self._renewal_due(committing=True):
            self._renew_leases()
            chosen = self._queues.held_only(chosen)
        self._run(self._commit_steps(chosen, sorted(self._queues)))
        self._note_commit(chosen, given=offsets is not None)

    def committed(self, queue: MessageQueue) -> int | None:
        """The group's committed offset of ``queue`` (next to consume), or None when it has
        none. Raises :class:`sdk.errors.BrokerUnavailableError` when it cannot be read."""
        self._check_open()
        return self._run(self._committed_steps(queue, self._is_assigned(queue)))

    def seek_to_beginning(self, *queues: MessageQueue) -> None:
        """Move ``queues`` (default: every assigned queue) to their first readable message."""
        self._check_open()
        self._queues.seek_to(self._run(self._bounds_steps(self._queues.chosen(queues), end=False)))

    def seek_to_end(self, *queues: MessageQueue) -> None:
        """Move ``queues`` (default: every assigned queue) past their last message: only
        messages sent from now on are polled."""
        self._check_open()
        self._queues.seek_to(self._run(self._bounds_steps(self._queues.chosen(queues), end=True)))

    def offsets_for_times(self, timestamps: Mapping[MessageQueue, int]) -> dict[MessageQueue, int]:
        """For each queue, the offset of its first message stored at or after the timestamp
        (ms since the epoch); the queue's end offset when every message is older. Any queue of
        this broker, assigned or not."""
        self._check_open()
        return self._run(self._times_steps(self._checked_times(timestamps)))

    def close(self) -> None:
        """Commit the positions (with auto-commit) of the queues whose lease is still this
        member's, persist offsets and leave the group. Idempotent. From another thread while
        a poll runs: waits for the poll's membership or commit step in progress (a parked
        pull returns ``[]``), so nothing rejoins the group after it was left."""
        if not self._start_close():
            return
        try:
            with self._control:
                if self._renewal_due(committing=True):
                    try:
                        self._renew_leases()
                    except Exception as exc:
                        self._forget(self._queues.abandon_all())
                        log.warning(_CLOSE_UNRENEWED, self.group, exc)
                self._run(self._close_steps(*self._closing()))
        finally:
            self._release_transport()

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
    transport's pull (a waiting poll parks a future, not a thread); membership and offsets are
    awaited on the same transport. It runs on the event loop alone and starts no thread.

    :meth:`subscribe` and :meth:`assign` only record what to consume: the group is joined and
    start positions are fixed by the next poll. Use ``async with``, or ``await close()``.

    ``async for message in consumer`` yields the messages one at a time, awaiting more as long
    as the consumer is open, and ends once it is closed (by another task, or after breaking
    out); what it commits is as for ``for message in consumer`` on :class:`PullConsumer`.
    """

    _transport: AsyncBrokerTransport
    _control: asyncio.Lock  # as PullConsumer's, between tasks

    def _connect(self, broker: object) -> None:
        # Nothing is asked here: a URL's transport opens its session, and learns the broker's
        # name, on the first await (_connected), so the constructor never blocks the loop.
        self._transport = resolve_async(broker)
        self._owns_transport = owns_transport(broker)
        self._control = asyncio.Lock()

    async def _connected(self, *, assignment: bool = True) -> None:
        """Learn the broker's name if not known yet (the first await of every I/O method);
        with ``assignment``, refuse queues assigned before it was known that are not that
        broker's (every call does, until they pass or another assign() replaces them)."""
        if self._broker is None:
            self._broker = await self._transport.connect()
        if assignment and self._unchecked_assignment:
            self._check_queues_of(self._broker, list(self._queues))
            self._unchecked_assignment = False

    async def _run(self, steps: Steps[T]) -> T:
        """Make the broker calls ``steps`` asks for, on the loop."""
        return await run_steps_async(steps, self._transport)

    async def queues_for(self, topic: str) -> list[MessageQueue]:
        """Every queue of ``topic`` (to :meth:`assign` some of them)."""
        self._check_open()
        await self._connected(assignment=False)  # to find queues to assign in their place
        return await self._run(topic_queues(self._known_broker, check_topic(topic)))

    async def _sync_up(self, auto_commit: bool = False) -> None:
        async with self._control:
            if not self._closed:
                await self._run(self._sync_up_steps(auto_commit))

    async def _renew_leases(self, with_pending: bool = False) -> None:
        await self._run(self._renew_steps(with_pending))

    async def poll(self, timeout_s: float = 0.0) -> list[ReceivedMessage]:
        """The next messages (at most ``max_poll_records``), waiting up to ``timeout_s`` for
        some to arrive; ``[]`` when none did. Each queue's messages come in queue order."""
        return await self._poll(timeout_s, self.max_poll_records)

    async def __aiter__(self) -> AsyncIterator[ReceivedMessage]:
        """Every message, one at a time, awaiting more as long as the consumer is open; the
        iteration ends once it is closed (see :class:`PullConsumer` for what is committed)."""
        while not self._closed:
            try:
                messages = await self._poll(ITERATION_WAIT_S, max_records=1)
            except ClientClosedError:  # closed by another task between two polls
                return
            for message in messages:
                yield message

    async def _poll(self, timeout_s: float, max_records: int) -> list[ReceivedMessage]:
        deadline = self._begin_poll(timeout_s)
        try:
            await self._connected()
            await self._sync_up(auto_commit=True)
            pulled = False
            rebalanced = False  # a pull was answered with the group's new generation alone
            while True:
                messages = self._drain(max_records)
                if self._poll_over(messages, pulled, deadline):
                    return messages
                wait_ms = self._wait_ms(deadline)
                batch = self._next_batch(wait_ms)
                if batch is None:
                    await asyncio.sleep(wait_ms / 1000)
                else:
                    result = await self._transport.pull(batch)
                    if self._closed:
                        return []
                    if self._absorb(batch, result) and not rebalanced:
                        rebalanced = True  # its one pull read nothing: once more, rebalanced
                        await self._sync_up()
                        continue
                pulled = True
                await self._sync_up()
        finally:
            self._end_poll()

    async def commit(self, offsets: Mapping[MessageQueue, int] | None = None) -> None:
        """Commit ``offsets`` (``{queue: next offset to consume}``, assigned queues only), or
        every queue's current position; persisted before this returns. A commit the broker
        cannot take now is logged and sent again with the next commit. A subscribed member
        renews its leases first: a queue whose lease it lost (another member took it) is not
        committed but dropped from the assignment, with a warning."""
        self._check_open()
        await self._connected()
        chosen = self._queues.checked_offsets(offsets)
        if self._renewal_due(committing=True):
            await self._renew_leases()
            chosen = self._queues.held_only(chosen)
        await self._run(self._commit_steps(chosen, sorted(self._queues)))
        self._note_commit(chosen, given=offsets is not None)

    async def committed(self, queue: MessageQueue) -> int | None:
        """The group's committed offset of ``queue`` (next to consume), or None when it has
        none. Raises :class:`sdk.errors.BrokerUnavailableError` when it cannot be read."""
        self._check_open()
        await self._connected()
        return await self._run(self._committed_steps(queue, self._is_assigned(queue)))

    async def seek_to_beginning(self, *queues: MessageQueue) -> None:
        """Move ``queues`` (default: every assigned queue) to their first readable message."""
        await self._seek_to_bound(queues, end=False)

    async def seek_to_end(self, *queues: MessageQueue) -> None:
        """Move ``queues`` (default: every assigned queue) past their last message."""
        await self._seek_to_bound(queues, end=True)

    async def _seek_to_bound(self, queues: tuple[MessageQueue, ...], end: bool) -> None:
        self._check_open()
        await self._connected()
        self._queues.seek_to(await self._run(self._bounds_steps(self._queues.chosen(queues), end)))

    async def offsets_for_times(
        self, timestamps: Mapping[MessageQueue, int]
    ) -> dict[MessageQueue, int]:
        """For each queue, the offset of its first message stored at or after the timestamp
        (ms since the epoch); the queue's end offset when every message is older."""
        self._check_open()
        await self._connected()
        return await self._run(self._times_steps(self._checked_times(timestamps)))

    async def close(self) -> None:
        """Commit the positions (with auto-commit) of the queues whose lease is still this
        member's, persist offsets and leave the group. Idempotent."""
        if not self._start_close():
            return
        try:
            async with self._control:
                if self._renewal_due(committing=True):
                    try:
                        await self._renew_leases()
                    except Exception as exc:
                        self._forget(self._queues.abandon_all())
                        log.warning(_CLOSE_UNRENEWED, self.group, exc)
                await self._run(self._close_steps(*self._closing()))
        finally:
            if self._owns_transport:
                await self._transport.close()

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
