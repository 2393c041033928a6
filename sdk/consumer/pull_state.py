"""The queues a lite pull consumer holds: per queue, where its next pull starts and what was
fetched but not handed out yet; which queues are paused; which are being let go.

:class:`QueueTable` is the bookkeeping half of :class:`sdk.consumer.pull_core.PullCore`: it keeps
the per-queue state, applies pull answers to it and hands messages out, but decides nothing about
membership, leases or commits. It does no I/O, reads no clock and takes no lock: its owner calls
it from one poll (or one state-only method) at a time.

Per assigned queue (:class:`QueueState`), all offsets "next to consume":

* its **fetch offset**: where the next pull of it starts; None while its start is not known (the
  committed offset, or the ``consume_from`` rule, not read yet).
* its **buffer**: the messages fetched and not handed out yet, in queue order, all before the
  fetch offset.
* its **position**: the offset of the next message a poll hands out, that is the first buffered
  message's offset, else the fetch offset. ``seek`` empties the buffer and sets the fetch offset.

Invariants:

* A queue is in at most one of *assigned* (it has a state) and *to release* (taken away by a
  rebalance: its position, with auto-commit, waits there until the front end commits it and
  gives its lease back). Every *paused* queue is assigned. A *lost* queue (another member took
  its lease) is dropped from all three at once, so nothing of it is ever committed.
* A pull answer is applied only to a queue still assigned, whose buffer is empty and whose fetch
  offset is the one the pull asked for: a queue sought, revoked or refilled while the pull was
  out ignores it, so a buffer never mixes two reads and a ``seek`` always wins. Found messages
  are re-checked against the queue's tag expression (the store filters by tag hash; a collision
  stops here); an offset out of range (``OFFSET_TOO_SMALL``, ``OFFSET_OVERFLOW_BADLY``, ...)
  moves the fetch offset to the one the broker names, with a logged warning. A damaged record
  is stepped over, logged at ERROR and counted in ``stats.damaged_skipped``; the messages
  before and after it are buffered as usual (:mod:`sdk.consumer.damaged`).
* Handing out empties the buffers of unpaused queues, each in queue order, at most
  ``max_records`` per call; the queue served first rotates from call to call, so none starves.
  A paused queue is neither pulled nor handed out: what it fetched stays buffered.
"""

from __future__ import annotations

import itertools
import logging
from collections import deque
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field

from localstore.record.tags import TagFilter
from offsetstore import MessageQueue
from sdk.consumer.damaged import ConsumerStats, read_queue_answer
from sdk.errors import InvalidArgumentError
from sdk.message import ReceivedMessage
from sdk.transport.models import (
    OFFSET_MOVED,
    PullBatch,
    PullBatchResult,
    QueuePull,
)

__all__ = ["Offsets", "QueueState", "QueueTable", "check_offset"]

# The consumer's records keep the name of the module users know, whichever module emits them.
log = logging.getLogger("sdk.consumer.pull")

Offsets = dict[MessageQueue, int]


def check_offset(what: object, offset: object) -> int:
    """``offset`` if it is an int >= 0, else ValueError naming ``what`` (its queue)."""
    if type(offset) is not int or offset < 0:
        raise InvalidArgumentError(f"an offset is an int >= 0; got {offset!r} for {what}")
    return offset


@dataclass(slots=True)
class QueueState:
    """One assigned queue: where the next pull starts (None: not known yet) and what was
    fetched but not handed out yet."""

    fetch_offset: int | None
    tags: str | None
    tag_filter: TagFilter
    buffer: deque[ReceivedMessage] = field(default_factory=deque)
    check: bool = False  # the next pull asks the broker to decode (a record did not, here)

    @property
    def position(self) -> int | None:
        return self.buffer[0].queue_offset if self.buffer else self.fetch_offset

    def seek(self, offset: int | None) -> None:
        self.buffer.clear()
        self.fetch_offset = offset
        self.check = False


class QueueTable:
    """The assigned queues' states, the paused ones and those to release, of a consumer of
    ``group`` (see the module docstring). Iterating, ``in`` and ``len`` see the assigned queues.
    The methods taking queues the application named (``assigned``, ``chosen``,
    ``checked_offsets``, ``position``, ``seek``, ``pause``, ``resume``) raise ValueError for one
    that is not assigned (or a bad offset); the others trust their caller."""

    def __init__(self, group: str) -> None:
        self._group = group
        self.stats = ConsumerStats()
        self._states: dict[MessageQueue, QueueState] = {}
        self._paused: set[MessageQueue] = set()
        self._to_release: dict[MessageQueue, int | None] = {}
        self._drain_turn = itertools.count()

    def __contains__(self, queue: object) -> bool:
        return queue in self._states

    def __iter__(self) -> Iterator[MessageQueue]:
        return iter(self._states)

    def __len__(self) -> int:
        return len(self._states)

    # -- queues the application names --------------------------------------------------------
    def assigned(self, queue: object) -> MessageQueue:
        """``queue`` if it is assigned, else ValueError."""
        if not isinstance(queue, MessageQueue) or queue not in self._states:
            raise InvalidArgumentError(f"{queue} is not assigned to this consumer of {self._group}")
        return queue

    def chosen(self, queues: tuple[MessageQueue, ...]) -> list[MessageQueue]:
        """``queues`` checked to be assigned; every assigned queue when none is given."""
        return [self.assigned(q) for q in queues] if queues else sorted(self._states)

    def checked_offsets(self, offsets: Mapping[MessageQueue, int] | None) -> Offsets:
        """What ``commit`` commits: ``offsets`` of assigned queues, or every position."""
        if offsets is None:
            return self.positions()
        return {self.assigned(q): check_offset(q, o) for q, o in offsets.items()}

    def position(self, queue: MessageQueue) -> int | None:
        return self._states[self.assigned(queue)].position

    def seek(self, queue: MessageQueue, offset: int) -> None:
        self._states[self.assigned(queue)].seek(check_offset(queue, offset))

    def pause(self, queues: Iterable[MessageQueue]) -> None:
        self._paused.update(self.assigned(q) for q in queues)

    def resume(self, queues: Iterable[MessageQueue]) -> None:
        self._paused.difference_update([self.assigned(q) for q in queues])

    def paused(self) -> list[MessageQueue]:
        return sorted(self._paused)

    # -- assignment --------------------------------------------------------------------------
    def set_assignment(
        self,
        wanted: set[MessageQueue],
        tags: Mapping[str, str | None],
        *,
        commit_released: bool,
    ) -> None:
        """Keep the queues of ``wanted``, add the new ones (start not known yet), and queue the
        others for release (at their position when ``commit_released``, then forgotten)."""
        for queue in [q for q in self._states if q not in wanted]:
            state = self._states.pop(queue)
            self._paused.discard(queue)
            self._to_release[queue] = state.position if commit_released else None
        for queue in sorted(wanted):
            expression = tags.get(queue.topic)
            state_or_none = self._states.get(queue)
            if state_or_none is None:
                self._to_release.pop(queue, None)
                self._states[queue] = QueueState(None, expression, TagFilter.parse(expression))
            elif state_or_none.tags != expression:  # a new tag expression: re-read from position
                state_or_none.seek(state_or_none.position)
                state_or_none.tags = expression
                state_or_none.tag_filter = TagFilter.parse(expression)

    def drop(self, queues: Iterable[MessageQueue]) -> None:
        """Forget assigned ``queues`` at once, committing nothing (their lease was lost)."""
        for queue in queues:
            del self._states[queue]
            self._paused.discard(queue)
            self._to_release.pop(queue, None)

    def abandon_all(self) -> set[MessageQueue]:
        """Drop every queue without committing (closing when the leases could not be renewed:
        none can be committed safely). Answers them."""
        dropped = set(self._states) | set(self._to_release)
        self._states.clear()
        self._to_release.clear()
        self._paused.clear()
        return dropped

    def take_releases(self) -> dict[MessageQueue, int | None]:
        """The queues to release (with the offset to commit, or None), forgotten here."""
        released, self._to_release = self._to_release, {}
        return released

    # -- positions ---------------------------------------------------------------------------
    def unknown_starts(self) -> list[MessageQueue]:
        return sorted(q for q, s in self._states.items() if s.fetch_offset is None)

    def apply_starts(self, starts: Offsets) -> None:
        for queue, offset in starts.items():
            state = self._states.get(queue)
            if state is not None and state.fetch_offset is None:
                state.fetch_offset = offset

    def seek_to(self, offsets: Offsets) -> None:
        """Move each queue still assigned to its offset (``seek_to_beginning``/``_end``)."""
        for queue, offset in offsets.items():
            state = self._states.get(queue)
            if state is not None:
                state.seek(offset)

    def positions(self) -> Offsets:
        return {q: s.position for q, s in self._states.items() if s.position is not None}

    def held_only(self, offsets: Offsets) -> Offsets:
        """``offsets`` of the queues still assigned (after a lease check dropped lost ones)."""
        return {q: o for q, o in offsets.items() if q in self._states}

    # -- fetching and handing out ------------------------------------------------------------
    def pulls(self) -> tuple[QueuePull, ...]:
        """One pull per unpaused queue with a known start, in queue order."""
        return tuple(
            QueuePull(q.topic, q.queue_id, s.fetch_offset, s.tags, s.check)
            for q, s in sorted(self._states.items())
            if s.fetch_offset is not None and q not in self._paused
        )

    def absorb(self, batch: PullBatch, result: PullBatchResult, broker: str) -> None:
        """Record a pull's answers from ``broker``: buffer what matches, move fetch offsets; a
        queue sought (or revoked) while the pull was out ignores its answer."""
        asked = batch.asked_offsets()
        for answer in result.results:
            queue = MessageQueue(answer.topic, broker, answer.queue_id)
            state = self._states.get(queue)
            pulled = asked.get((answer.topic, answer.queue_id))
            if state is None or state.buffer or pulled is None or state.fetch_offset != pulled:
                continue
            if answer.found or answer.damaged is not None:
                messages, state.fetch_offset, state.check = read_queue_answer(
                    queue, pulled, answer, self.stats
                )
                tag_filter = state.tag_filter
                if not tag_filter.matches_all:
                    messages = [m for m in messages if tag_filter.tag_matches(m.tags)]
                state.buffer.extend(messages)
            elif answer.status == "NO_MATCHED_MESSAGE":
                state.fetch_offset = answer.next_offset
            elif answer.status in OFFSET_MOVED:
                log.warning(
                    "%s: offset %d is out of range (%s); moving to %d",
                    queue,
                    state.fetch_offset,
                    answer.status,
                    answer.next_offset,
                )
                state.fetch_offset = answer.next_offset

    def drain(self, max_records: int) -> list[ReceivedMessage]:
        """Up to ``max_records`` fetched messages of unpaused queues, each queue's in order; the
        queue served first rotates, so none starves."""
        ready = [q for q, s in sorted(self._states.items()) if s.buffer and q not in self._paused]
        if not ready:
            return []
        turn = next(self._drain_turn) % len(ready)
        out: list[ReceivedMessage] = []
        for queue in ready[turn:] + ready[:turn]:
            buffer = self._states[queue].buffer
            while buffer and len(out) < max_records:
                out.append(buffer.popleft())
        return out
