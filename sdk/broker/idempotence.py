"""Idempotent produce: a batch sent with a :class:`~sdk.transport.models.ProducerStamp` is
stored at most once while its stamp is in the broker's window.

A producer numbers its batches per queue: a stamp is ``(producer id, sequence)`` and its key is
``(producer id, topic, queue id)``, the topic and queue the producer sent to. The window of a
key is a *set* of recent sequences (concurrent senders of one producer may deliver them out of
order), each mapped to the receipt of the batch it stored.

Invariant: while a stamp is in its key's window, or its first copy is still being stored, no
other copy of it is stored; every copy is answered with the first copy's answer. A stamp is
in-flight from the moment its first copy is let through until the store answers; a copy
arriving meanwhile waits for that answer (it does not store). Only a stored batch (``PUT_OK``
or ``FLUSH_DISK_TIMEOUT``) enters the window: a refused one may be sent again with its stamp.

Bounds (:class:`~sdk.broker.service.BrokerOptions`):

- ``idempotence_window_per_queue`` (32): sequences kept per key; past it the one stored
  longest ago leaves.
- ``idempotence_max_stamps`` (16,384): sequences kept in all; past it the key used longest
  ago leaves whole (its producer went quiet, or sends elsewhere).

A stamp that left the window is not known any more: a copy of it is stored as a new batch. A
producer resends a batch soon after a lost answer, long before 32 later batches of its own to
the same queue have been answered, so this is a bound on memory, not a hole in practice.

What the log keeps: :func:`stamped` gives the batch's last message the property
``__QUIVER_PRODUCER_SEQ = "<producer id>:<sequence>:<count>"``
(:data:`sdk.message.PROPERTY_PRODUCER_SEQ`; consumers never see it, it is Quiver's own), from
which :mod:`sdk.broker.idempotence_rebuild` refills the windows when the broker opens. A
delayed message and a half message carry it in their stored (scheduled, half) record, and the
answer is that record's receipt, as the send's was; the copies the broker makes later
(delivery when due, a commit, a retry) leave it out, so only the stored original names the
stamp. The service refuses a message that carries the property itself (a forged stamp would
be taken for a stored one by the rebuild).

Receipts are kept compact: a batch's commitlog offsets as a ``range`` where they are evenly
spaced (records of one size, as a producer's batch of equal bodies mostly is), so the windows
of a busy broker stay a few MiB at their bound. Every answer is a
fresh :class:`~sdk.transport.models.SendResult`: a caller changing its answer changes no other.
"""

from __future__ import annotations

import dataclasses
import threading
from array import array
from collections import OrderedDict
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass

from localstore import NewMessage, UniformBatch
from localstore.record.properties import PROPERTY_SEPARATOR
from sdk.errors import InvalidArgumentError
from sdk.message import PROPERTY_PRODUCER_SEQ
from sdk.transport.models import ProducerStamp, SendResult

__all__ = [
    "DEFAULT_MAX_STAMPS",
    "DEFAULT_WINDOW_PER_QUEUE",
    "ProducerWindows",
    "parse_stamp_value",
    "stamp_value",
    "stamped",
]

DEFAULT_WINDOW_PER_QUEUE = 32
DEFAULT_MAX_STAMPS = 16_384

_SEPARATOR = PROPERTY_SEPARATOR.encode()
Key = tuple[str, str, int]  # producer id, topic, queue id


@dataclass(frozen=True, slots=True)
class _Receipt:
    """A stored batch's answer, kept small (one per stamp in the window)."""

    status: str
    detail: str
    topic: str
    queue_id: int
    queue_offset: int
    phys_offsets: _Offsets
    store_host: str
    store_timestamp: int

    @classmethod
    def of(cls, result: SendResult) -> _Receipt:
        return cls(
            result.status,
            result.detail,
            result.topic,
            result.queue_id,
            result.queue_offset,
            _Offsets.of(result.phys_offsets),
            result.store_host,
            result.store_timestamp,
        )

    def answer(self) -> SendResult:
        return SendResult(
            self.status,
            self.detail,
            self.topic,
            self.queue_id,
            self.queue_offset,
            self.phys_offsets.tolist(),
            self.store_host,
            self.store_timestamp,
        )


@dataclass(frozen=True, slots=True)
class _Offsets:
    """A stored batch's commitlog offsets, compact: the ``head`` then an evenly spaced
    ``run``. A batch's records are one after the other and, for equal bodies, of one size, but
    the store's put mark makes the first record longer than the rest
    (:data:`~localstore.record.properties.PROPERTY_PUT_RECORDS`): a head of one offset and a
    ``range`` then keep 100 offsets in a few words."""

    head: array[int]
    run: range

    @classmethod
    def of(cls, phys_offsets: Sequence[int]) -> _Offsets:
        run = _evenly_spaced(phys_offsets)
        if run is not None:
            return cls(_NO_HEAD, run)
        run = _evenly_spaced(phys_offsets[1:])
        if run is not None:
            return cls(array("q", phys_offsets[:1]), run)
        return cls(array("q", phys_offsets), range(0))

    def tolist(self) -> list[int]:
        return self.head.tolist() + list(self.run)


_NO_HEAD: array[int] = array("q")  # shared, never changed


def _evenly_spaced(phys_offsets: Sequence[int]) -> range | None:
    """``phys_offsets`` as a range when they rise by one step, else None."""
    if len(phys_offsets) < 2:
        return range(phys_offsets[0], phys_offsets[0] + 1) if phys_offsets else range(0)
    first = phys_offsets[0]
    step = phys_offsets[1] - first
    if step <= 0:
        return None
    run = range(first, phys_offsets[-1] + 1, step)
    return run if len(run) == len(phys_offsets) and list(run) == list(phys_offsets) else None


class ProducerWindows:
    """The windows of every (producer id, topic, queue id): see the module docstring.
    Thread-safe: one lock guards the windows; no store call runs under it."""

    def __init__(
        self,
        window_per_queue: int = DEFAULT_WINDOW_PER_QUEUE,
        max_stamps: int = DEFAULT_MAX_STAMPS,
    ):
        if window_per_queue < 1:
            raise InvalidArgumentError(
                f"idempotence_window_per_queue must be positive, got {window_per_queue}"
            )
        if max_stamps < window_per_queue:
            raise InvalidArgumentError(
                f"idempotence_max_stamps ({max_stamps}) must be at least "
                f"idempotence_window_per_queue ({window_per_queue})"
            )
        self.window_per_queue = window_per_queue
        self.max_stamps = max_stamps
        self._lock = threading.Lock()
        # key -> (sequence -> receipt), both in order of insertion; keys moved to the end on use
        self._windows: OrderedDict[Key, OrderedDict[int, _Receipt]] = OrderedDict()
        self._stamps = 0
        self._in_flight: dict[tuple[Key, int], Future[SendResult]] = {}

    def once(
        self,
        stamp: ProducerStamp,
        topic: str,
        queue_id: int,
        store: Callable[[], SendResult],
    ) -> SendResult:
        """The answer to a send stamped ``stamp`` to ``topic``/``queue_id``: ``store()``'s,
        called only when the stamp is neither in the window nor in flight; else the first
        copy's answer (waiting for it while it is stored). An exception of ``store()`` reaches
        every copy that waited for it, and the stamp stays unknown."""
        key = (stamp.producer_id, topic, queue_id)
        sequence = stamp.sequence
        with self._lock:
            receipt = self._find(key, sequence)
            if receipt is not None:
                return receipt.answer()
            pending = self._in_flight.get((key, sequence))
            if pending is None:
                mine: Future[SendResult] = Future()
                self._in_flight[(key, sequence)] = mine
        if pending is not None:
            return _copy(pending.result())
        try:
            result = store()
            receipt = _Receipt.of(result) if result.stored else None
        except BaseException as exc:
            with self._lock:
                del self._in_flight[(key, sequence)]
            mine.set_exception(exc)
            raise
        with self._lock:
            del self._in_flight[(key, sequence)]
            if receipt is not None:
                self._add(key, sequence, receipt)
        mine.set_result(result)
        return _copy(result)

    def remember(self, stamp: ProducerStamp, topic: str, queue_id: int, result: SendResult) -> None:
        """Put a stored batch's answer in its window (the rebuild from the log); a stamp the
        window holds already keeps its answer."""
        key = (stamp.producer_id, topic, queue_id)
        with self._lock:
            if self._find(key, stamp.sequence) is None:
                self._add(key, stamp.sequence, _Receipt.of(result))

    def answer(self, stamp: ProducerStamp, topic: str, queue_id: int) -> SendResult | None:
        """The remembered answer to ``stamp`` on ``topic``/``queue_id``, or None."""
        with self._lock:
            receipt = self._find((stamp.producer_id, topic, queue_id), stamp.sequence)
        return None if receipt is None else receipt.answer()

    @property
    def stamps(self) -> int:
        """How many stamps the windows hold."""
        return self._stamps

    @property
    def producers(self) -> int:
        """How many producer ids the windows hold."""
        with self._lock:
            return len({key[0] for key in self._windows})

    def __len__(self) -> int:
        """How many keys (producer id, topic, queue id) have a window."""
        return len(self._windows)

    # -- under the lock ----------------------------------------------------------------------
    def _find(self, key: Key, sequence: int) -> _Receipt | None:
        window = self._windows.get(key)
        if window is None:
            return None
        self._windows.move_to_end(key)
        return window.get(sequence)

    def _add(self, key: Key, sequence: int, receipt: _Receipt) -> None:
        window = self._windows.get(key)
        if window is None:
            window = self._windows[key] = OrderedDict()
        self._windows.move_to_end(key)
        if sequence in window:
            return
        window[sequence] = receipt
        self._stamps += 1
        if len(window) > self.window_per_queue:
            window.popitem(last=False)
            self._stamps -= 1
        while self._stamps > self.max_stamps:  # never the key just used: it is the newest
            _oldest_key, oldest = self._windows.popitem(last=False)
            self._stamps -= len(oldest)


def _copy(result: SendResult) -> SendResult:
    """A copy of an answer that shares no list with it."""
    return SendResult(
        result.status,
        result.detail,
        result.topic,
        result.queue_id,
        result.queue_offset,
        list(result.phys_offsets),
        result.store_host,
        result.store_timestamp,
    )


# -- the stamp in the log ------------------------------------------------------------------
def stamp_value(stamp: ProducerStamp, count: int) -> str:
    """The :data:`~sdk.message.PROPERTY_PRODUCER_SEQ` value of a batch of ``count``."""
    return f"{stamp.producer_id}:{stamp.sequence}:{count}"


def parse_stamp_value(value: str) -> tuple[ProducerStamp, int] | None:
    """The stamp and batch size a :func:`stamp_value` names; None for any other text (a
    producer id may hold ``:``, the last two fields are numbers)."""
    parts = value.rsplit(":", 2)
    if len(parts) != 3 or not parts[0] or not parts[1].isdigit() or not parts[2].isdigit():
        return None
    count = int(parts[2])
    if count < 1:
        return None
    return ProducerStamp(parts[0], int(parts[1])), count


def stamped(messages: Sequence[NewMessage], stamp: ProducerStamp) -> Sequence[NewMessage]:
    """``messages`` (a non-empty batch) with the stamp on the last one: a new batch, the
    caller's messages are not changed. A :class:`UniformBatch` gets the pair appended to the
    last message's properties text (its other columns stay true: the name is none of the
    indexed ones, and the batch is no longer ``plain``; its ``other_names``, when known, gain
    the stamp's)."""
    value = stamp_value(stamp, len(messages))
    if isinstance(messages, UniformBatch):
        names = messages.other_names
        texts = list(messages.properties)
        text = texts[-1]
        if text and not text.endswith(_SEPARATOR):
            text += _SEPARATOR
        texts[-1] = text + f"{PROPERTY_PRODUCER_SEQ}\x01{value}\x02".encode()
        return UniformBatch(
            messages.topic,
            messages.queue_id,
            messages.bodies,
            texts,
            messages.uniq_keys,
            messages.keys,
            messages.tags,
            plain=False,
            flag=messages.flag,
            born_timestamp=messages.born_timestamp,
            born_host=messages.born_host,
            other_names=None if names is None else names | {PROPERTY_PRODUCER_SEQ},
            body_crcs=messages.body_crcs,
        )
    last = messages[-1]
    copy = dataclasses.replace(last, properties={**last.properties, PROPERTY_PRODUCER_SEQ: value})
    return [*messages[:-1], copy]
