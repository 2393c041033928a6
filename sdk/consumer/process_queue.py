"""The client-side buffer of one consumed queue (RocketMQ's ``ProcessQueue``).

A :class:`ProcessQueue` holds the messages pulled from one queue and not yet finished, keyed by
``queue_offset``. All methods are thread-safe (one lock per queue; no method blocks while holding
it beyond its own bookkeeping).

Invariants:

* **Committed offset = smallest in-flight key.** :meth:`ProcessQueue.remove_messages` answers the
  offset to commit under concurrent consumption: the smallest offset still held, or
  ``max offset ever put + 1`` once nothing is held. It never passes a message still in flight, so
  a crash re-delivers unfinished messages instead of losing them (at-least-once).
* ``cached_count``/``cached_bytes`` count each held offset once (a re-pulled offset is not counted
  twice), including messages taken by an orderly consumer and not yet committed.
* Orderly mode: :meth:`ProcessQueue.take_messages` moves the smallest offsets to a *consuming*
  map; :meth:`ProcessQueue.commit` releases them and answers ``last taken + 1``;
  :meth:`ProcessQueue.make_messages_consume_again` puts them back to be taken again.

Offsets are queue offsets ("next to consume" when committed); times are milliseconds.
"""

from __future__ import annotations

import bisect
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Generic, Protocol, TypeVar

__all__ = ["FlowControlLimits", "ProcessQueue", "QueuedMessage"]

MIB = 1024 * 1024


class QueuedMessage(Protocol):
    """What a ProcessQueue needs of a message (e.g. :class:`sdk.message.ReceivedMessage`)."""

    @property
    def queue_offset(self) -> int:
        """The message's slot in its consume queue."""
        ...

    @property
    def store_size(self) -> int:
        """The message's size in bytes, for the cached-size flow control."""
        ...


M = TypeVar("M", bound=QueuedMessage)


@dataclass(frozen=True, slots=True)
class FlowControlLimits:
    """Per-queue pull flow control (RocketMQ's ``DefaultMQPushConsumer`` thresholds).

    A pull is postponed while a limit is *exceeded* (strictly greater).
    """

    max_cached_messages: int = 1000  # pullThresholdForQueue
    max_cached_bytes: int = 100 * MIB  # pullThresholdSizeForQueue (100 MiB)
    max_offset_span: int = 2000  # consumeConcurrentlyMaxSpan; not applied to orderly consumers


def _wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


class ProcessQueue(Generic[M]):
    """The in-flight messages of one queue; see the module docstring for the invariants."""

    def __init__(self, clock_ms: Callable[[], int] = _wall_clock_ms) -> None:
        """``clock_ms`` stamps ``last_pull_ms``/``last_consume_ms`` (wall clock by default)."""
        self._lock = threading.Lock()
        self._clock_ms = clock_ms
        self._messages: dict[int, M] = {}  # buffered and in-flight, by queue offset
        self._offsets: list[int] = []  # the keys of _messages, sorted
        self._consuming: dict[int, M] = {}  # orderly: taken, not yet committed
        self._consume_started_ms: dict[int, int] = {}
        self._cached_count = 0
        self._cached_bytes = 0
        self._queue_offset_max = -1
        self._dropped = False
        self._sealed = False  # no listener call may start any more (the queue is handed over)
        now = clock_ms()
        self._last_pull_ms = now
        self._last_consume_ms = now

    # -- concurrent consumption ---------------------------------------------------------------

    def put_messages(self, messages: Iterable[M]) -> int:
        """Buffer pulled messages; answers how many offsets were new (only those are counted)."""
        added = 0
        with self._lock:
            batch = messages if isinstance(messages, list) else list(messages)
            if batch and batch[0].queue_offset > self._queue_offset_max:
                offsets = [message.queue_offset for message in batch]
                if offsets == sorted(set(offsets)):  # a pull's answer: ascending, all new
                    return self._append_new(batch, offsets)
            for message in batch:
                offset = message.queue_offset
                if offset in self._messages or offset in self._consuming:
                    continue
                self._messages[offset] = message
                bisect.insort(self._offsets, offset)
                self._cached_count += 1
                self._cached_bytes += message.store_size
                self._queue_offset_max = max(self._queue_offset_max, offset)
                added += 1
        return added

    def _append_new(self, batch: list[M], offsets: list[int]) -> int:
        """Buffer messages whose offsets ascend past every held one, without a per-message
        insort (lock held)."""
        self._messages.update(zip(offsets, batch, strict=True))
        self._offsets.extend(offsets)  # all above the held keys: the list stays sorted
        self._cached_count += len(batch)
        self._cached_bytes += sum(message.store_size for message in batch)
        self._queue_offset_max = offsets[-1]
        return len(batch)

    def remove_messages(self, messages: Iterable[M]) -> int | None:
        """Forget finished messages; answers the offset to commit.

        None when nothing was held beforehand; else the smallest offset still held, or
        ``max offset ever put + 1`` when nothing is left. Unknown offsets are ignored.
        """
        with self._lock:
            self._last_consume_ms = self._clock_ms()
            if not self._messages:
                return None
            offsets = [message.queue_offset for message in messages]
            if offsets == self._offsets[: len(offsets)]:  # the oldest held, in order: common
                self._forget_oldest(offsets)
            else:
                for offset in offsets:
                    self._forget(offset)
            return self._offsets[0] if self._offsets else self._queue_offset_max + 1

    def _forget_oldest(self, offsets: list[int]) -> None:
        """Drop the first ``len(offsets)`` held offsets, which are ``offsets`` (lock held)."""
        del self._offsets[: len(offsets)]
        held, started = self._messages, self._consume_started_ms
        freed = 0
        for offset in offsets:
            freed += held.pop(offset).store_size
            started.pop(offset, None)
        self._cached_count -= len(offsets)
        self._cached_bytes -= freed

    def _forget(self, offset: int) -> None:
        """Drop one buffered offset and its accounting (lock held)."""
        message = self._messages.pop(offset, None)
        if message is None:
            return
        del self._offsets[bisect.bisect_left(self._offsets, offset)]
        self._consume_started_ms.pop(offset, None)
        self._cached_count -= 1
        self._cached_bytes -= message.store_size

    # -- orderly consumption ------------------------------------------------------------------

    def take_messages(self, n: int) -> list[M]:
        """Move up to ``n`` smallest buffered messages to the consuming map and answer them."""
        with self._lock:
            return self._take(n)

    def _take(self, n: int) -> list[M]:
        """:meth:`take_messages` with the lock held."""
        self._last_consume_ms = self._clock_ms()
        taken_offsets = self._offsets[: max(n, 0)]
        del self._offsets[: len(taken_offsets)]
        taken = [self._messages.pop(offset) for offset in taken_offsets]
        self._consuming.update(zip(taken_offsets, taken, strict=True))
        return taken

    def commit(self) -> int | None:
        """Release the taken messages; answers ``last taken offset + 1`` (None if none taken)."""
        with self._lock:
            if not self._consuming:
                return None
            last = max(self._consuming)
            for offset, message in self._consuming.items():
                self._cached_count -= 1
                self._cached_bytes -= message.store_size
                self._consume_started_ms.pop(offset, None)
            self._consuming.clear()
            return last + 1

    def make_messages_consume_again(self, messages: Iterable[M]) -> None:
        """Move taken messages back to the buffer, to be taken again (in offset order)."""
        with self._lock:
            for message in messages:
                offset = message.queue_offset
                taken = self._consuming.pop(offset, None)
                if taken is not None:
                    self._messages[offset] = taken
                    bisect.insort(self._offsets, offset)
                    self._consume_started_ms.pop(offset, None)  # not in a listener any more

    # -- expiry -------------------------------------------------------------------------------

    def try_start(self, messages: Iterable[M], now_ms: int) -> bool:
        """Record that a listener starts on these messages, unless the queue was sealed (it is
        being handed over: its next owner consumes them); answers whether it may start."""
        with self._lock:
            if self._sealed:
                return False
            self._mark_started(messages, now_ms)
            return True

    def take_started(self, n: int, now_ms: int) -> list[M]:
        """Orderly: :meth:`take_messages` and :meth:`try_start` in one step under one lock,
        so a seal cannot fall between them ([] once sealed)."""
        with self._lock:
            if self._sealed:
                return []
            taken = self._take(n)
            self._mark_started(taken, now_ms)
            return taken

    def seal_if_idle(self, *, force: bool = False) -> bool:
        """Seal the queue when no listener call is running on it (or ``force``): after this no
        call starts. Answers whether it is sealed."""
        with self._lock:
            if force or not self._consume_started_ms:
                self._sealed = True
            return self._sealed

    def mark_consume_started(self, messages: Iterable[M], now_ms: int) -> None:
        """Record when consumption of these (held) messages started (``CONSUME_START_TIME``)."""
        with self._lock:
            self._mark_started(messages, now_ms)

    def _mark_started(self, messages: Iterable[M], now_ms: int) -> None:
        """(lock held) Stamp the held ones among ``messages`` as handed to a listener."""
        for message in messages:
            offset = message.queue_offset
            if offset in self._messages or offset in self._consuming:
                self._consume_started_ms[offset] = now_ms

    def expired_messages(
        self, now_ms: int, consume_timeout_ms: int, max_count: int = 16
    ) -> list[M]:
        """Up to ``max_count`` head buffered messages whose consume started more than
        ``consume_timeout_ms`` ago, stopping at the first head message that has not
        (RocketMQ's ``cleanExpiredMsg``). They stay held: the caller sends them back, then
        removes them."""
        with self._lock:
            expired: list[M] = []
            for offset in self._offsets[:max_count]:
                started = self._consume_started_ms.get(offset)
                if started is None or now_ms - started <= consume_timeout_ms:
                    break
                expired.append(self._messages[offset])
            return expired

    # -- state and flow control ---------------------------------------------------------------

    @property
    def cached_count(self) -> int:
        """Messages held (buffered, in flight, or taken and not committed)."""
        with self._lock:
            return self._cached_count

    @property
    def buffered_count(self) -> int:
        """Messages held and not handed out (not taken by an orderly consumer)."""
        with self._lock:
            return len(self._offsets)

    @property
    def started_count(self) -> int:
        """Messages handed to a listener and not finished yet (their consume start recorded
        by :meth:`mark_consume_started`)."""
        with self._lock:
            return len(self._consume_started_ms)

    @property
    def cached_bytes(self) -> int:
        """Sum of ``store_size`` over the messages held."""
        with self._lock:
            return self._cached_bytes

    @property
    def offset_span(self) -> int:
        """Largest minus smallest buffered offset; 0 when fewer than two are buffered."""
        with self._lock:
            return self._offsets[-1] - self._offsets[0] if self._offsets else 0

    @property
    def queue_offset_max(self) -> int:
        """The largest offset ever put; -1 before the first put."""
        with self._lock:
            return self._queue_offset_max

    def should_throttle(
        self, limits: FlowControlLimits | None = None, *, orderly: bool = False
    ) -> bool:
        """Whether the next pull must wait: a limit of ``limits`` (defaults when None) is
        exceeded; the offset span counts only for concurrent consumers."""
        if not self._cached_count:  # nothing held (one read under the GIL): the common case
            return False
        limits = limits or FlowControlLimits()
        with self._lock:
            if self._cached_count > limits.max_cached_messages:
                return True
            if self._cached_bytes > limits.max_cached_bytes:
                return True
            span = self._offsets[-1] - self._offsets[0] if self._offsets else 0
            return not orderly and span > limits.max_offset_span

    @property
    def dropped(self) -> bool:
        """True once rebalancing gave the queue away: consumers must not commit its offsets."""
        return self._dropped

    @dropped.setter
    def dropped(self, value: bool) -> None:
        self._dropped = value

    @property
    def last_pull_ms(self) -> int:
        """When the last pull for this queue was made (set by the puller)."""
        return self._last_pull_ms

    @last_pull_ms.setter
    def last_pull_ms(self, value: int) -> None:
        self._last_pull_ms = value

    @property
    def last_consume_ms(self) -> int:
        """When messages were last removed or taken (set automatically; writable)."""
        return self._last_consume_ms

    @last_consume_ms.setter
    def last_consume_ms(self, value: int) -> None:
        self._last_consume_ms = value

    def is_pull_expired(self, now_ms: int, idle_ms: int = 120_000) -> bool:
        """Whether no pull happened for more than ``idle_ms`` (RocketMQ: 120 s)."""
        return now_ms - self._last_pull_ms > idle_ms
