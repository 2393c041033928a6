"""The lite pull consumers' state and decisions, shared by the blocking and the asyncio consumer.

:class:`PullCore` owns what a lite pull consumer knows and decides (assignment, positions, paused
queues, tag filters, auto-commit bookkeeping) and does no I/O: the front ends in
:mod:`sdk.consumer.pull` talk to the broker and the offset store, and hand the answers back. Its
per-queue bookkeeping (positions, fetched messages, paused queues, queues to release) is a
:class:`sdk.consumer.pull_state.QueueTable`; the decisions (membership, leases, timing,
commits) are made here.

Two numbers per queue, both "next to consume":

* its **position**: the offset of the next message ``poll`` hands out. It advances as polls
  return messages, and past messages the tag expression or the broker skipped; ``seek`` moves it.
  It lives in this consumer only (see :mod:`sdk.consumer.pull_state`; None while the start is
  not known).
* its **committed offset**: where the group resumes after a restart or a rebalance. It moves only
  on a commit (``commit``, auto-commit, ``close`` with auto-commit), and is persisted at once:
  the broker's offset table (clustering) or a local file in ``offsets_dir`` (broadcasting). A
  queue the group never committed is recorded at its start position (the ``consume_from`` rule)
  when first assigned, as RocketMQ does, so a restart does not skip what arrived meanwhile.

Delivery is **at least once** with auto-commit: a poll commits the positions reached by the polls
before it (at most every ``auto_commit_interval_s``), and ``close`` commits the current ones. A
message is therefore committed only once the application came back for more (or closed), having
handled it; a crash before that hands it out again. Committing by hand after handling a batch
gives the same guarantee; committing before handling it gives at most once. A queue taken away
by a rebalance is committed at its position (with auto-commit) before it is forgotten.

**Queue leases** (subscribed clustering members, see :mod:`sdk.broker.leases`): a member consumes
a queue only while the broker's lease on it is its own. Every membership round asks for the
leases of the queues allocated to it and of those it still holds; between rounds the held ones
are renewed at least every ``LEASE_RENEW_INTERVAL_S`` of polling and right before any commit
(auto-commit, ``commit``, a release, ``close``), so only queues whose lease was just confirmed are
ever committed. A refused queue is either *lost* (held until now: its lease ran out and another
member took it) and dropped at once, committing nothing (a warning says so), or *pending*
(allocated, not held yet: its previous owner is still letting go), asked for again with a lease
request after every pull (each pull then waits at most ``PENDING_LEASE_WAIT_S``). Leases are
renewed only while the application polls (or commits): one that takes longer than the broker's
lease (30 s by default) between polls loses its queues, and is warned about it.

Decisions of one poll: (1) membership when due (subscribing, a pull answer's generation changes,
every ``REBALANCE_INTERVAL_S``): the new allocation keeps known queues, drops lost ones, queues
the others for release (committed, then the lease given back) and adds new ones whose start is
not known yet; else a lease renewal when due, before committing, or while a lease is pending
(it asks for the pending queues too: one lease request, not a membership round); (2) auto-commit
if due, of the queues whose lease was just confirmed; (3) messages already fetched are handed out
at once; otherwise one long-polling :class:`PullBatch` over every assigned, unpaused queue with a
known start, waiting no longer than the poll's deadline, the next rebalance or lease renewal (or
``PENDING_LEASE_WAIT_S`` while a lease is pending); (4) the answers are applied by the queue
table (re-checked against the tag expression, buffered per queue; an answer for a queue sought or
revoked while the pull was out is ignored; an offset out of range moves to the one the broker
names, logged) and handed out, at most ``max_poll_records``, the queue served first rotating so
none starves. Fetched messages of a paused queue stay buffered until it is resumed; ``seek`` drops
them.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Iterable, Mapping

from localstore.record.validation import topic_error
from offsetstore import MessageQueue
from sdk.clock import SYSTEM_CLOCK, Clock
from sdk.consumer.allocate import AllocateAveragely, AllocateStrategy
from sdk.consumer.damaged import ConsumerStats
from sdk.consumer.membership import (
    ConsumeFrom,
    MessageModel,
    check_group,
    check_start,
    check_subscription,
    new_client_id,
)
from sdk.consumer.pull_state import Offsets, QueueTable
from sdk.errors import ClientClosedError, IllegalStateError, InvalidArgumentError
from sdk.message import ReceivedMessage
from sdk.transport.models import PullBatch, PullBatchResult

__all__ = [
    "DEFAULT_MAX_POLL_RECORDS",
    "LEASE_RENEW_INTERVAL_S",
    "PENDING_LEASE_WAIT_S",
    "QUEUE_LEASE_S",
    "REBALANCE_INTERVAL_S",
    "Offsets",
    "PullCore",
    "check_topic",
]

# The consumer's records keep the name of the module users know, whichever half emits them.
log = logging.getLogger("sdk.consumer.pull")

REBALANCE_INTERVAL_S = 20.0
# The broker's queue lease by default (sdk.broker.leases.DEFAULT_LEASE_MS; the client is not told
# the actual one): polls further apart than this lose their queues to other members.
QUEUE_LEASE_S = 30.0
LEASE_RENEW_INTERVAL_S = 10.0  # a third of the lease: two renewals may fail before it runs out
PENDING_LEASE_WAIT_S = 0.05  # how long a pull waits while a wanted queue's lease is pending
DEFAULT_MAX_POLL_RECORDS = 500
Closing = tuple[Offsets | None, list[MessageQueue], bool]


_POLL_MORE_OFTEN = (
    "Leases are renewed only while polling or committing: poll at least every"
    f" {LEASE_RENEW_INTERVAL_S:.0f} s (fewer messages per poll with max_poll_records, or"
    " handle them on another thread)"
)


def check_topic(topic: str) -> str:
    """``topic`` if queues of it can be listed, else ValueError."""
    if not isinstance(topic, str) or (problem := topic_error(topic, system=True)):
        raise InvalidArgumentError(f"no queues of topic {topic!r}: {problem or 'not a str'}")
    return topic


class PullCore(ABC):
    """State and decisions of one lite pull consumer (see the module docstring). The front
    end supplies :attr:`_broker_name` (the broker it reaches) and does all I/O; the state-only
    public methods (``subscribe``, ``assign``, ``position``, ``seek``, ``pause``, ...) live
    here, shared by both consumers."""

    def __init__(
        self,
        group: str,
        *,
        message_model: MessageModel,
        consume_from: ConsumeFrom,
        consume_timestamp_ms: int,
        auto_commit: bool,
        auto_commit_interval_s: float,
        max_poll_records: int,
        pull_batch_size: int,
        allocate_strategy: AllocateStrategy | None,
        instance_name: str | None,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        self.group = check_group(group)
        for name, value in (
            ("max_poll_records", max_poll_records),
            ("pull_batch_size", pull_batch_size),
        ):
            if type(value) is not int or value < 1:
                raise InvalidArgumentError(f"{name} must be an int >= 1, got {value!r}")
        if not auto_commit_interval_s > 0:
            raise InvalidArgumentError(
                f"auto_commit_interval_s must be > 0, got {auto_commit_interval_s!r}"
            )
        consume_timestamp_ms = check_start(message_model, consume_from, consume_timestamp_ms)
        self.message_model = message_model
        self.consume_from = consume_from
        self.consume_timestamp_ms = consume_timestamp_ms
        self.auto_commit = auto_commit
        self.auto_commit_interval_s = auto_commit_interval_s
        self.max_poll_records = max_poll_records
        self.pull_batch_size = pull_batch_size
        self.allocate_strategy = allocate_strategy or AllocateAveragely()
        self.client_id = new_client_id(instance_name)
        # When a rebalance, a lease renewal or an auto-commit falls due; a poll's own timeout
        # is a real wait for messages and reads the real clock.
        self._clock = clock
        # The assigned queues (positions, fetched messages), the paused ones, those to release.
        self._queues = QueueTable(self.group)
        self._subscription: dict[str, str | None] | None = None  # None: not subscribed
        self._manual = False
        self._unchecked_assignment = False  # assigned before the broker's name was known
        self._generation = -1
        self._rejoin = False
        # Wanted queues whose lease another member still holds (it is releasing them): asked
        # for again at every pull until granted.
        self._pending_leases: set[MessageQueue] = set()
        self._last_rebalance: float | None = None  # None: never rebalanced
        self._last_renewal: float | None = None  # when the broker last confirmed our leases
        self._last_commit = clock.monotonic()
        self._last_auto_commit: Offsets = {}
        self._poll_lock = threading.Lock()
        self._closed = False

    @property
    @abstractmethod
    def _broker_name(self) -> str | None:
        """The name of the broker the front end reaches (its queues are the ones to consume);
        None until an asyncio front end's first await has learnt it."""

    @property
    def _known_broker(self) -> str:
        """:attr:`_broker_name` where it must be known: the front ends learn it before any
        I/O."""
        broker = self._broker_name
        if broker is None:  # pragma: no cover - a front end that skipped learning it
            raise IllegalStateError("the broker's name is not known yet")
        return broker

    # -- checks ------------------------------------------------------------------------------
    def _check_open(self) -> None:
        if self._closed:
            raise ClientClosedError(f"pull consumer of {self.group} is closed")

    def _is_assigned(self, queue: object) -> bool:
        """Whether ``queue`` (any queue, for ``committed``) is assigned to this consumer."""
        if not isinstance(queue, MessageQueue):
            raise InvalidArgumentError(f"committed takes a MessageQueue, got {queue!r}")
        return queue in self._queues

    def _checked_times(self, timestamps: Mapping[MessageQueue, int]) -> dict[MessageQueue, int]:
        broker = self._known_broker
        for queue, ts in timestamps.items():
            if not isinstance(queue, MessageQueue) or queue.broker_name != broker:
                raise InvalidArgumentError(f"{queue!r} is not a queue of broker {broker!r}")
            if type(ts) is not int or ts < 0:
                raise InvalidArgumentError(
                    f"a timestamp is an int of ms >= 0; got {ts!r} for {queue}"
                )
        return dict(timestamps)

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
            raise IllegalStateError(
                f"this consumer of {self.group} assigned queues: it cannot subscribe"
            )
        self._subscription = check_subscription(topics)
        self._rejoin = True

    def assign(self, queues: Iterable[MessageQueue]) -> None:
        """Consume exactly ``queues`` (no group membership: nothing is rebalanced), with the
        group's committed offsets. Replaces the previous assignment; an empty one stops
        consuming. Not together with :meth:`subscribe`."""
        self._check_open()
        if self._subscription is not None:
            raise IllegalStateError(
                f"this consumer of {self.group} subscribed: it cannot assign queues"
            )
        wanted = list(queues)
        for queue in wanted:
            if not isinstance(queue, MessageQueue):
                raise InvalidArgumentError(f"assign takes MessageQueue objects, got {queue!r}")
            if problem := topic_error(queue.topic, system=True):
                raise InvalidArgumentError(f"cannot assign {queue}: {problem}")
        broker = self._broker_name
        if broker is not None:
            self._check_queues_of(broker, wanted)
        # else an asyncio front end checks them once it has learnt the name, and refuses every
        # call that uses them until they pass or another assign() replaces them
        self._unchecked_assignment = broker is None
        self._manual = True
        self._queues.set_assignment(set(wanted), {}, commit_released=self.auto_commit)

    @staticmethod
    def _check_queues_of(broker: str, queues: Iterable[MessageQueue]) -> None:
        """Refuse a queue of another broker than ``broker`` (the one this consumer reaches)."""
        for queue in queues:
            if queue.broker_name != broker:
                raise InvalidArgumentError(
                    f"{queue} is not a queue of broker {broker!r}, which this reaches"
                )

    @property
    def stats(self) -> ConsumerStats:
        """What the consumer counts: ``stats.damaged_skipped`` is the number of damaged records
        it stepped over (each logged at ERROR with topic, queue, queue offset and commitlog
        offset; the messages before and after it are handed out as usual)."""
        return self._queues.stats

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
        return self._queues.position(queue)

    def seek(self, queue: MessageQueue, offset: int) -> None:
        """Move ``queue``'s position to ``offset``: the next poll reads from there (messages
        fetched but not handed out yet are dropped). An offset out of the queue's range is moved
        to its nearest end by the next pull (logged)."""
        self._check_open()
        self._queues.seek(queue, offset)

    def pause(self, *queues: MessageQueue) -> None:
        """Stop fetching and handing out messages of ``queues`` until :meth:`resume`."""
        self._check_open()
        self._queues.pause(queues)

    def resume(self, *queues: MessageQueue) -> None:
        """Fetch and hand out ``queues`` again."""
        self._check_open()
        self._queues.resume(queues)

    def paused(self) -> list[MessageQueue]:
        """The paused queues, sorted."""
        self._check_open()
        return self._queues.paused()

    # -- membership and leases ---------------------------------------------------------------
    def _membership_due(self) -> dict[str, str | None] | None:
        """The subscription to heartbeat and rebalance with, when that is due; else None."""
        if self._subscription is None:
            return None
        last = self._last_rebalance
        if self._rejoin or last is None or self._clock.monotonic() - last >= REBALANCE_INTERVAL_S:
            return dict(self._subscription)
        return None

    @property
    def _leased(self) -> bool:
        """Whether queues are consumed under the broker's leases (subscribed clustering)."""
        return self._subscription is not None and self.message_model is MessageModel.CLUSTERING

    def _rebalanced(
        self, generation: int, wanted: set[MessageQueue], granted: set[MessageQueue]
    ) -> set[MessageQueue]:
        """A membership round's answer: the queues allocated to this member (``wanted``) and,
        when leased, those whose lease it holds now among ``wanted`` and the queues it held
        (``granted``). Lost queues are dropped uncommitted (answered: the front end forgets
        their offsets), refused wanted ones stay pending, held ones no longer wanted are
        queued for release (their lease was just confirmed: committing them is safe)."""
        self._generation = generation
        self._rejoin = False
        self._last_rebalance = self._clock.monotonic()
        lost: set[MessageQueue] = set()
        if self._leased:
            lost = self._leases_renewed(set(self._queues) | wanted, granted)
            self._pending_leases = wanted - granted
            wanted = wanted & granted
        else:
            self._pending_leases = set()
        self._queues.set_assignment(
            wanted, self._subscription or {}, commit_released=self.auto_commit
        )
        return lost

    def _renewal_due(self, committing: bool) -> bool:
        """Whether the held queues' leases must be renewed now: a leased member holding queues,
        about to commit (only queues whose lease was just confirmed are committed) or whose
        last renewal is ``LEASE_RENEW_INTERVAL_S`` old."""
        if not self._leased or not self._queues:
            return False
        last = self._last_renewal
        return (
            committing or last is None or self._clock.monotonic() - last >= LEASE_RENEW_INTERVAL_S
        )

    def _leases_renewed(
        self, asked: Iterable[MessageQueue], granted: set[MessageQueue]
    ) -> set[MessageQueue]:
        """The broker answered a lease request over ``asked`` with ``granted``: held queues it
        refused were lost (their lease ran out and another member took it). They are dropped
        at once, without committing (the new owner's commits must stand), and asked for again
        (pending) while allocated to this member. Answers the lost queues."""
        now = self._clock.monotonic()
        since = None if self._last_renewal is None else now - self._last_renewal
        held = bool(self._queues)
        lost = {q for q in asked if q in self._queues and q not in granted}
        self._last_renewal = now
        if held and since is not None and since > QUEUE_LEASE_S:
            log.warning(
                "consumer of %s renewed its queue leases %.1f s after the previous renewal, longer"
                " than the broker's queue lease (%.0f s by default): other members may have"
                " taken its queues meanwhile. %s",
                self.group,
                since,
                QUEUE_LEASE_S,
                _POLL_MORE_OFTEN,
            )
        if lost:
            log.warning(
                "consumer of %s lost the lease of %s (%s since it was last renewed; another member"
                " took it): dropped without committing, its messages fetched but not handed out"
                " are discarded. %s",
                self.group,
                ", ".join(map(str, sorted(lost))),
                "never" if since is None else f"{since:.1f} s",
                _POLL_MORE_OFTEN,
            )
        self._queues.drop(lost)
        self._pending_leases |= lost
        return lost

    def _lease_asked(self, with_pending: bool) -> list[MessageQueue]:
        """The queues a lease renewal asks for: the held ones, and (between membership rounds,
        not when about to commit) the allocated ones still pending."""
        asked = set(self._queues)
        if with_pending:
            asked |= self._pending_leases
        return sorted(asked)

    def _lease_renewal_answered(
        self, held: list[MessageQueue], granted: set[MessageQueue]
    ) -> set[MessageQueue]:
        """A renewal's answer: held queues refused are lost (see :meth:`_leases_renewed`),
        pending ones granted are consumed from now on. Answers the lost queues."""
        taken = self._pending_leases & granted
        lost = self._leases_renewed(held, granted)
        if taken:
            self._pending_leases -= taken
            self._queues.set_assignment(
                set(self._queues) | taken,
                self._subscription or {},
                commit_released=self.auto_commit,
            )
        return lost

    # -- fetching and handing out ------------------------------------------------------------
    def _begin_poll(self, timeout_s: float) -> float:
        """Checks; the poll's deadline (monotonic). Takes the poll lock (see ``_end_poll``)."""
        self._check_open()
        if not isinstance(timeout_s, int | float) or not math.isfinite(timeout_s) or timeout_s < 0:
            raise InvalidArgumentError(f"timeout_s must be a finite number >= 0, got {timeout_s!r}")
        if self._subscription is None and not self._manual:
            raise IllegalStateError(f"subscribe() or assign() before polling (group {self.group})")
        if not self._poll_lock.acquire(blocking=False):
            raise IllegalStateError(
                f"consumer of {self.group} is already polling: one caller at a time"
            )
        return time.monotonic() + timeout_s

    def _end_poll(self) -> None:
        self._poll_lock.release()

    def _poll_over(self, messages: list[ReceivedMessage], pulled: bool, deadline: float) -> bool:
        """Whether a poll returns ``messages`` now: it has some, the consumer closed, or it
        pulled at least once and its deadline passed."""
        return bool(messages) or self._closed or (pulled and time.monotonic() >= deadline)

    def _wait_ms(self, deadline: float) -> int:
        """How long the next pull may wait: until the deadline, no later than the next
        rebalance or lease renewal is due, and at most ``PENDING_LEASE_WAIT_S`` while a
        wanted queue's lease is pending (so it is asked for again promptly once freed)."""
        remaining = deadline - time.monotonic()
        now = self._clock.monotonic()
        if self._subscription is not None:
            last_rebalance = self._last_rebalance if self._last_rebalance is not None else -math.inf
            remaining = min(remaining, last_rebalance + REBALANCE_INTERVAL_S - now)
        if self._leased and self._queues and self._last_renewal is not None:
            remaining = min(remaining, self._last_renewal + LEASE_RENEW_INTERVAL_S - now)
        if self._pending_leases:
            remaining = min(remaining, PENDING_LEASE_WAIT_S)
        return max(0, int(remaining * 1000))

    def _next_batch(self, wait_ms: int) -> PullBatch | None:
        """A pull over every unpaused queue with a known start; None when there is none and
        no group to watch (a subscribed member still pulls, to learn the group's generation)."""
        pulls = self._queues.pulls()
        if not pulls and self._subscription is None:
            return None
        return PullBatch(
            self.group,
            pulls,
            max_count=self.pull_batch_size,
            wait_ms=wait_ms,
            generation=self._generation if self._subscription is not None else -1,
        )

    def _absorb(self, batch: PullBatch, result: PullBatchResult) -> bool:
        """Record a pull's answers: buffer what matches, move fetch offsets; a queue sought
        (or revoked) while the pull was out ignores its answer. Answers whether the answer
        only asked for a rebalance: the group moved past this member's generation, and the
        broker read nothing for it (:mod:`sdk.broker.parked_pulls`)."""
        self._queues.absorb(batch, result, self._known_broker)
        if self._subscription is None or result.generation == self._generation:
            return False
        self._rejoin = True
        return not result.results

    def _drain(self, max_records: int) -> list[ReceivedMessage]:
        """Up to ``max_records`` fetched messages of unpaused queues, each queue's in order;
        the queue served first rotates, so none starves."""
        return self._queues.drain(max_records)

    # -- committing --------------------------------------------------------------------------
    def _auto_commit_due(self) -> Offsets | None:
        """The positions to auto-commit now, or None (off, not due, or nothing moved since the
        last commit of positions)."""
        now = self._clock.monotonic()
        if not self.auto_commit or now - self._last_commit < self.auto_commit_interval_s:
            return None
        self._last_commit = now
        positions = self._queues.positions()
        return None if positions == self._last_auto_commit else positions

    def _auto_committed(self, positions: Offsets) -> None:
        """``positions`` were auto-committed: no need to again until they move."""
        self._last_auto_commit = positions

    def _note_commit(self, offsets: Offsets, given: bool) -> None:
        """After a commit: positions committed as they are need no auto-commit until they move;
        offsets given by hand must not be mistaken for them."""
        self._last_auto_commit = {} if given else offsets

    def _start_close(self) -> bool:
        """Mark closed (a poll parked in a pull returns ``[]``); False when already closed.
        The front end then renews the leases (``_renewal_due``) and asks :meth:`_closing`."""
        if self._closed:
            return False
        self._closed = True
        return True

    def _closing(self) -> Closing:
        """What closing has to do: the positions to commit (with auto-commit), the assigned
        queues, whether to leave the group."""
        final = self._queues.positions() if self.auto_commit else None
        return final, sorted(self._queues), self._subscription is not None
