"""What every offset store keeps in memory, and the thread that persists it periodically.

:class:`MemoryOffsets` is RocketMQ's table of ``ControllableOffset``: queue -> next offset to
consume. Rules: an absent queue takes any offset; ``increase_only`` keeps the larger of the two;
a frozen entry (:meth:`MemoryOffsets.freeze`) ignores every update until it is removed. One lock
guards the table; no I/O ever happens under it.

:class:`PeriodicPersister` calls a persist function every interval on a daemon thread until
stopped (or, if asked, until the function returns False); a failing call is logged and tried
again at the next tick.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from offsetstore.base import MessageQueue
from quiver_errors import InvalidArgumentError

MAX_OFFSET = 2**63 - 1
log = logging.getLogger(__name__)


@dataclass(slots=True)
class _Entry:
    offset: int
    frozen: bool = False


def check_offset(offset: int) -> None:
    """Offsets are ints in [0, 2**63 - 1] (a Java long); anything else is a caller's bug."""
    if type(offset) is not int or not 0 <= offset <= MAX_OFFSET:
        raise InvalidArgumentError(f"an offset is an int in [0, 2**63 - 1], got {offset!r}")


class MemoryOffsets:
    """The in-memory offsets of one consumer (thread-safe)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._table: dict[MessageQueue, _Entry] = {}

    def update(self, queue: MessageQueue, offset: int, increase_only: bool) -> None:
        check_offset(offset)
        with self._lock:
            entry = self._table.get(queue)
            if entry is None:
                self._table[queue] = _Entry(offset)
            elif not entry.frozen and (not increase_only or offset > entry.offset):
                entry.offset = offset

    def update_all(self, offsets: dict[MessageQueue, int]) -> None:
        """Overwrite (not increase-only) from a persisted copy; frozen entries are kept."""
        for queue, offset in offsets.items():
            self.update(queue, offset, increase_only=False)

    def freeze(self, queue: MessageQueue, offset: int) -> None:
        check_offset(offset)
        with self._lock:
            self._table[queue] = _Entry(offset, frozen=True)

    def remove(self, queue: MessageQueue) -> None:
        with self._lock:
            self._table.pop(queue, None)

    def get(self, queue: MessageQueue) -> int | None:
        with self._lock:
            entry = self._table.get(queue)
            return None if entry is None else entry.offset

    def of_topic(self, topic: str) -> dict[MessageQueue, int]:
        with self._lock:
            return {q: e.offset for q, e in self._table.items() if q.topic == topic}

    def of_queues(
        self, queues: Iterable[MessageQueue], *, drop_others: bool = False
    ) -> dict[MessageQueue, int]:
        """The offsets of ``queues`` that are in memory; ``drop_others`` forgets every other
        queue (RocketMQ's remote store does so on persistAll)."""
        wanted = set(queues)
        with self._lock:
            if drop_others:
                self._table = {q: e for q, e in self._table.items() if q in wanted}
            return {q: e.offset for q, e in self._table.items() if q in wanted}

    def queues(self) -> list[MessageQueue]:
        with self._lock:
            return list(self._table)


class PeriodicPersister:
    """Runs ``persist`` every ``interval_s`` on a daemon thread until :meth:`stop`. A call that
    raises is logged as ``what`` failing and made again at the next tick. With
    ``until_false``, the call returning False ends the thread (a client's lease renewal, once
    its consumer closed); otherwise what it returns is ignored."""

    def __init__(
        self,
        name: str,
        persist: Callable[[], object],
        interval_s: float,
        *,
        what: str = "periodic persist",
        until_false: bool = False,
    ) -> None:
        if interval_s <= 0:
            raise InvalidArgumentError(f"interval_s must be positive, got {interval_s}")
        self._persist = persist
        self._interval_s = interval_s
        self._what = what
        self._until_false = until_false
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self._interval_s):
            if self._run_once() is False and self._until_false:
                return

    def _run_once(self) -> object:
        try:
            return self._persist()
        except Exception:  # a full disk or an unreachable broker: try again next tick
            log.exception("%s (%s) failed", self._what, self._thread.name)
            return None

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()
