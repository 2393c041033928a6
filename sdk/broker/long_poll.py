"""Long polling: parked pulls are woken when a message arrives on one of their queues.

RocketMQ's ``PullRequestHoldService`` parks a pull that found nothing under ``topic@queueId``
and re-runs it when the reput thread reports a new message there, or when the hold times out.
:class:`ArrivalNotifier` keeps the same contract with callbacks instead of re-running requests,
so one notifier serves blocking threads (:meth:`ArrivalNotifier.wait_keys`) and event loops
(a callback that resolves a future: at once on the loop's own thread, else with
``call_soon_threadsafe``) alike.

Invariant (no lost wake-up): a waiter registers *before* it looks for messages, so a message
that arrives between the look and the wait still fires its callback. A put that has no waiters
on its queue costs one dict lookup. :meth:`ArrivalNotifier.woken_here` counts, per thread, the
notifications that found waiters: read before and after a put, it tells whether that put
woke anyone.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable, Iterable

__all__ = ["ArrivalNotifier", "Watch"]

QueueKey = tuple[str, int]


class Watch:
    """A registration: ``callback`` runs (once) on the first arrival on any of ``keys``."""

    __slots__ = ("_callback", "_once", "fired_keys", "keys", "token")

    def __init__(self, token: int, keys: tuple[QueueKey, ...], callback: Callable[[], None]):
        self.token = token
        self.keys = keys
        self._callback = callback
        # Taken by the first fire: two putting threads may fire one watch (on two of its
        # keys) at once, and a lock's non-blocking acquire lets exactly one of them call.
        self._once = threading.Lock()
        self.fired_keys: list[QueueKey | None] = []  # what arrived (None: notify_all)

    def woken_by(self) -> frozenset[QueueKey]:
        """The keys that got messages; empty when everything was woken (look at every key)."""
        fired = self.fired_keys
        return frozenset() if None in fired else frozenset(k for k in fired if k is not None)

    def fire(self, key: QueueKey | None = None) -> None:
        self.fired_keys.append(key)
        if self._once.acquire(False):
            self._callback()


class ArrivalNotifier:
    """Wakes the waiters of a topic-queue when a message arrives there (thread-safe)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._watches: dict[QueueKey, dict[int, Watch]] = {}
        self._tokens = itertools.count(1)
        self._here = threading.local()  # .count: this thread's notifications that woke

    def watch(self, keys: Iterable[QueueKey], callback: Callable[[], None]) -> Watch:
        """Call ``callback`` on the next arrival on any of ``keys`` (from the putting thread;
        keep it short). Cancel with :meth:`cancel` when done, fired or not."""
        watch = Watch(next(self._tokens), tuple(keys), callback)
        with self._lock:
            for key in watch.keys:
                self._watches.setdefault(key, {})[watch.token] = watch
        return watch

    def cancel(self, watch: Watch) -> None:
        with self._lock:
            for key in watch.keys:
                waiting = self._watches.get(key)
                if waiting is not None:
                    waiting.pop(watch.token, None)
                    if not waiting:
                        del self._watches[key]

    def notify(self, topic: str, queue_id: int) -> None:
        """A message arrived on ``topic``/``queue_id``: fire every watch on it."""
        if (topic, queue_id) not in self._watches:  # the common case: nobody is parked there
            return
        with self._lock:
            waiting = self._watches.pop((topic, queue_id), None)
        if waiting:
            self._here.count = self.woken_here() + 1
            for watch in waiting.values():
                watch.fire((topic, queue_id))

    def woken_here(self) -> int:
        """How many of this thread's notifications found waiters (see the module
        docstring)."""
        count: int = getattr(self._here, "count", 0)
        return count

    def notify_all(self) -> None:
        """Fire every watch (shutdown: parked pulls answer at once)."""
        with self._lock:
            waiting = list(self._watches.values())
            self._watches.clear()
        for watches in waiting:
            for watch in watches.values():
                watch.fire()

    def wait_keys(
        self, keys: Iterable[QueueKey], timeout_s: float, ready: Callable[[], bool]
    ) -> frozenset[QueueKey] | None:
        """Block until ``ready()`` or an arrival on ``keys``, at most ``timeout_s`` (``ready`` is
        checked after registering, so no arrival is missed). Answers what woke it: the keys that
        got messages, an empty set when ``ready()`` held or everything was woken (look at every
        key), None on timeout."""
        # A lock held from the start and released by the watch's one call: a thread waits on
        # it for a few system calls less than on a threading.Event (a Condition in Python).
        gate = threading.Lock()
        gate.acquire()
        watch = self.watch(keys, gate.release)
        try:
            if ready():
                return frozenset()
            if not gate.acquire(timeout=timeout_s):
                return None
        finally:
            self.cancel(watch)
        return watch.woken_by()
