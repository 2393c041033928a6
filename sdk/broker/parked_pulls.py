"""Long polling: a pull that finds nothing new is held until a message arrives, its group
changes, or its wait ends (RocketMQ's ``PullRequestHoldService``).

The invariants :class:`ParkedPulls` keeps:

* **No read while caught up.** A consumer that has read everything parks without reading its
  queues: it registers its wake-up on the :class:`~sdk.broker.long_poll.ArrivalNotifier`
  first, then asks whether every queue is caught up (:meth:`MessageStore.caught_up`, from the
  offsets alone). A queue with news or with an offset to correct, a group generation past
  the one the consumer knows, or a closing broker makes it look at once.
* **Rebalance before reading.** Every read of a pull from a member that knows another
  generation of its group than the broker's answers that generation alone, no record: when
  its pull arrives, and when the generation moves while it is parked. It must rebalance
  before it reads, so nothing is read for it from queues it may be about to hand over. (When
  many members join at once, the first would otherwise fetch records of every queue and then
  drop most of them with the queues.)
* **No lost wake-up.** The wake-up is registered before that question is asked, so a message
  stored in between still fires it.
* **Look where it arrived.** After a wake-up only the queues that got messages are read; the
  answer leaves the others out (they have nothing new). A wait that ends with nothing new
  answers its last look, or reads every queue if it never looked.
* **Refusals at once.** A pull the store would refuse (a count below 1, a tag expression
  naming no tag) is read at once, so its caller hears why without waiting.

A membership or lease change wakes the group's parked pulls through the key
``(GROUP_WAKE_PREFIX + group, -1)``.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import time
from collections.abc import Awaitable, Callable, Sequence

from localstore import MessageStore
from localstore.reader import read_filter
from sdk.broker.groups import GroupRegistry
from sdk.broker.long_poll import ArrivalNotifier
from sdk.transport.models import NOTHING_NEW, PullBatch, PullBatchResult, QueuePull

__all__ = ["GROUP_WAKE_PREFIX", "ParkedPulls", "nothing_new"]

GROUP_WAKE_PREFIX = "%GROUP%"  # not a topic: woken by membership and lease changes

# Reads ``pulls`` (all or some of the batch's) with the batch's limits.
Read = Callable[[PullBatch, Sequence[QueuePull]], PullBatchResult]
# Runs a read elsewhere and awaits it (a thread pool's run_in_executor).
Offload = Callable[[Callable[[], PullBatchResult]], Awaitable[PullBatchResult]]


def nothing_new(result: PullBatchResult) -> bool:
    """No queue of the answer has anything to hand out or report."""
    return all(r.status in NOTHING_NEW for r in result.results)


class ParkedPulls:
    """Holds pulls for a broker service (see the module docstring); thread-safe."""

    def __init__(
        self,
        store: MessageStore,
        groups: GroupRegistry,
        notifier: ArrivalNotifier,
        read: Read,
        closed: Callable[[], bool],
    ):
        self._store = store
        self._groups = groups
        self._notifier = notifier
        self._read_records = read
        self._closed = closed

    def wait(self, batch: PullBatch) -> PullBatchResult:
        """Answer ``batch``, holding it up to ``batch.wait_ms`` while nothing is new."""
        generation = self._groups.generation(batch.group)
        if self._answers_unparked(batch, generation):
            return self._read(batch, batch.pulls)
        deadline = time.monotonic() + batch.wait_ms / 1000
        keys = _watched_keys(batch)
        result: PullBatchResult | None = None
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0 or self._closed():
                return self._parked_answer(batch, result, generation)
            woken_by = self._notifier.wait_keys(
                keys, remaining, lambda: self._changed_since(batch, generation)
            )
            result, done = self._look_again(batch, woken_by or frozenset(), generation)
            if done:
                return result

    async def wait_async(self, batch: PullBatch, offload: Offload | None = None) -> PullBatchResult:
        """:meth:`wait` for an event loop: the wait parks a future, not a thread. ``offload``
        runs each read of the log (a server gives a thread pool's, so the loop never waits on
        the disk) but the read of queues an arrival woke, whose records were just written and
        lie in memory; without it, every read runs on the loop."""

        async def read(pulls: Sequence[QueuePull], *, fresh: bool = False) -> PullBatchResult:
            call = functools.partial(self._read, batch, pulls)
            return call() if offload is None or fresh else await offload(call)

        generation = self._groups.generation(batch.group)
        if self._answers_unparked(batch, generation):
            return await read(batch.pulls)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + batch.wait_ms / 1000
        keys = _watched_keys(batch)
        result: PullBatchResult | None = None
        while True:
            remaining = deadline - loop.time()
            if remaining <= 0 or self._closed():
                if result is None and not self._closed():
                    result = await read(batch.pulls)
                return self._parked_answer(batch, result, generation)
            arrived: asyncio.Future[None] = loop.create_future()
            watch = self._notifier.watch(keys, functools.partial(_wake, loop, arrived))
            try:
                changed = self._changed_since(batch, generation)
                if not changed:
                    timer = loop.call_later(remaining, _arrive, arrived)  # or the wait ends
                    try:
                        await arrived
                    finally:
                        timer.cancel()
            finally:
                self._notifier.cancel(watch)
            # Changed before the wait: look at every queue (an arrival may have fired the
            # watch for one queue while another was the one not caught up).
            woken_by = frozenset() if changed else watch.woken_by()
            arrived_at = _arrived_at(batch, woken_by)
            # Queues that were caught up when the pull parked hold only what arrived since:
            # records just written, in memory, so they are read on the loop, without the hop.
            result = await read(arrived_at or batch.pulls, fresh=bool(arrived_at))
            if _answer_now(batch, woken_by, generation, result):
                return result

    def _read(self, batch: PullBatch, pulls: Sequence[QueuePull]) -> PullBatchResult:
        """Every read of a pull: ``pulls`` read for ``batch``, unless it comes from a group
        member that knows another generation of its group than the broker's now (generation
        -1, assigned queues, never does): then that generation alone, no record, so it
        rebalances before it reads."""
        generation = self._groups.generation(batch.group)
        if 0 <= batch.generation != generation:
            return PullBatchResult([], generation)
        return self._read_records(batch, pulls)

    def _answers_unparked(self, batch: PullBatch, generation: int) -> bool:
        """Whether ``batch`` is answered by one read, never parked: no wait is asked, the
        broker is closing, the group moved past what the consumer knows (it must rebalance),
        or the read would be refused (the caller hears so at once, not after the wait)."""
        return (
            batch.wait_ms <= 0
            or self._closed()
            or 0 <= batch.generation != generation
            or not _readable(batch)
        )

    def _parked_answer(
        self, batch: PullBatch, result: PullBatchResult | None, generation: int
    ) -> PullBatchResult:
        """What a parked pull answers when its wait ends with nothing new: its last look, or
        a read now if it never looked (no queue at all when the broker is closing)."""
        if result is not None:
            return result
        return PullBatchResult([], generation) if self._closed() else self._read(batch, batch.pulls)

    def _changed_since(self, batch: PullBatch, generation: int) -> bool:
        """Whether a parked pull must look: a queue is not caught up (news, or an offset to
        correct), the group's generation moved, or the broker is closing."""
        if self._closed() or self._groups.generation(batch.group) != generation:
            return True
        caught_up = self._store.caught_up
        return not all(caught_up(p.topic, p.queue_id, p.queue_offset) for p in batch.pulls)

    def _look_again(
        self, batch: PullBatch, woken_by: frozenset[tuple[str, int]], generation: int
    ) -> tuple[PullBatchResult, bool]:
        """After a wake-up: read the queues that got messages (all when unknown) and say
        whether to answer now (news, or a member or lease changed)."""
        result = self._read(batch, _arrived(batch, woken_by))
        return result, _answer_now(batch, woken_by, generation, result)


def _arrived(batch: PullBatch, woken_by: frozenset[tuple[str, int]]) -> Sequence[QueuePull]:
    """The queues to read after a wake-up: those that got messages, or all when unknown."""
    return _arrived_at(batch, woken_by) or batch.pulls


def _arrived_at(batch: PullBatch, woken_by: frozenset[tuple[str, int]]) -> list[QueuePull]:
    """The queues of ``batch`` that got messages (none when only its group's key woke it)."""
    return [p for p in batch.pulls if (p.topic, p.queue_id) in woken_by]


def _answer_now(
    batch: PullBatch,
    woken_by: frozenset[tuple[str, int]],
    generation: int,
    result: PullBatchResult,
) -> bool:
    """Whether a look after a wake-up is the answer: news, or a member or lease changed."""
    group_event = (GROUP_WAKE_PREFIX + batch.group, -1) in woken_by
    return group_event or not nothing_new(result) or result.generation != generation


def _wake(loop: asyncio.AbstractEventLoop, arrived: asyncio.Future[None]) -> None:
    """Resolve ``arrived`` from any thread: at once on the loop's own (a send appended on the
    loop: no wake-up of the loop through its self-pipe, no extra turn of it), through the loop
    from another (a loop already closed has nobody left to wake)."""
    try:
        on_loop = asyncio.get_running_loop() is loop
    except RuntimeError:  # no loop runs on this thread
        on_loop = False
    if on_loop:
        _arrive(arrived)
        return
    with contextlib.suppress(RuntimeError):
        loop.call_soon_threadsafe(_arrive, arrived)


def _arrive(arrived: asyncio.Future[None]) -> None:
    """End a parked pull's wait (an arrival, or its wait's end), once."""
    if not arrived.done():
        arrived.set_result(None)


def _readable(batch: PullBatch) -> bool:
    """Whether the store would read ``batch`` (its own check: a positive count, tag
    expressions that parse; parsed expressions are cached)."""
    try:
        for pull in batch.pulls:
            read_filter(batch.max_count, pull.tags)
    except ValueError:
        return False
    return batch.max_count > 0  # (a batch that names no queue is checked for its count here)


def _watched_keys(batch: PullBatch) -> list[tuple[str, int]]:
    """The queues a parked pull waits on, plus its group's key: a membership or lease change
    then wakes even a member that owns no queue."""
    return [(p.topic, p.queue_id) for p in batch.pulls] + [(GROUP_WAKE_PREFIX + batch.group, -1)]
