"""Delayed messages: RocketMQ's ``SCHEDULE_TOPIC_XXXX`` and its schedule service.

Layout (RocketMQ's, so a RocketMQ broker and Quiver can take over each other's store)::

    commitlog + consumequeue/SCHEDULE_TOPIC_XXXX/{level-1}/...   the delayed messages
    {root}/config/delayOffset.json      progress: {"offsetTable":{1:5,2:0,...}} keyed by LEVEL

A delayed message for topic ``T`` / queue ``q`` at delay level ``L`` (1-based, clamped to the
table's last level) is stored under ``SCHEDULE_TOPIC_XXXX``, queue ``L - 1``, with the properties
``REAL_TOPIC=T``, ``REAL_QID=q`` and ``DELAY=L`` (:func:`delayed_message`). Its consume-queue
``tagsCode`` is its delivery time (store time + the delay of level ``L`` in the *store's* table,
``StoreOptions.delay_levels``). Once due, :class:`ScheduleService` puts the original message
(same body, flag, sys flag, born time and host, reconsume times, keys, tags, ``UNIQ_KEY`` and other
properties; without ``DELAY``, ``REAL_TOPIC``, ``REAL_QID``) into ``T``/``q`` and advances the
level's offset.

Progress file: exactly RocketMQ's ``ScheduleMessageService`` persisted form, ``offsetTable`` keyed
by the delay level (queue id + 1) with the next queue offset to examine, written by fastjson with
bare integer keys, plus a ``dataVersion``. RocketMQ's own file loads (fastjson dialect or plain
JSON); unknown keys are ignored; a damaged file (unparsable, or of another shape: a level that
is not an integer in [1, 2^31 - 1], an offset that is not an integer, ...) falls back
to ``delayOffset.json.bak`` kept by :func:`offsetstore.atomic_file.write_atomically`, and when
both are damaged the service refuses to start, naming both files. Offsets outside a queue's
``[min, max]`` are corrected into it at start (as RocketMQ's ``correctDelayOffset``).

Invariants:

* Never early: a message is re-put only when ``now >= store time + delay(level)`` under the
  service's table; for an absolute time also ``now >= __QUIVER_DELIVER_AT``.
* Bounded rounds: a round serves what each level's queue held when the round began; a
  message rescheduled into a level during the round waits for the next round.
* Order: a level has one fixed delay, so its queue is in delivery-time order; the service stops
  at the first message of a level that is not yet due and delivers each level in queue order.
* Delivery time is computed as the stored message's store timestamp + the service's delay for
  the level (queue id + 1), not read from ``tagsCode``: the two agree when the service and the
  store use the same table, and this lets a service run with its own (e.g. sub-second) table.
  Queues beyond the service's table are not served.
* At-least-once: the level offset is persisted after each round that delivered something and on
  :meth:`ScheduleService.stop`. After a clean stop nothing is delivered twice; after a crash
  between a re-put and the next persist, those messages are delivered again.
* A put that fails transiently (store closed, flush failure, ...) is retried at the next round
  (the level does not advance); a message the store can never accept (``MESSAGE_ILLEGAL``,
  ``PROPERTIES_SIZE_EXCEEDED``) or one without ``REAL_TOPIC`` is logged and skipped.

Absolute delivery times (``deliver_at_ms``): RocketMQ 5 uses timer messages for these; Quiver
instead chains delay levels. The message carries ``__QUIVER_DELIVER_AT`` (epoch ms) and is put
at the largest level whose delay is <= the time remaining (level 1 if none is), with ``DELAY``
set so the store's ``tagsCode`` stays a real delivery time. When that level fires and the
absolute time has not come yet, the service re-schedules it (again the largest level fitting the
remaining time) instead of delivering it. So it is never delivered before ``deliver_at_ms``, and
at most about ``delay(level 1)`` + one poll interval late. A RocketMQ broker, which ignores the
property, would deliver such a message at its level time, i.e. possibly early.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from types import TracebackType

from localstore import (
    MessageStore,
    NewMessage,
    PutResult,
    PutStatus,
    StoredMessage,
)
from localstore.record.codec import (
    PROPERTY_DELAY,
    PROPERTY_REAL_QUEUE_ID,
    PROPERTY_REAL_TOPIC,
    SYSFLAG_BORNHOST_V6,
    pack_host,
)
from localstore.record.tags import DEFAULT_DELAY_LEVELS, SCHEDULE_TOPIC, parse_delay_levels
from offsetstore.atomic_file import read_with_backup, write_atomically
from offsetstore.fastjson import dumps, loads
from offsetstore.json_shape import (
    INT32_MAX,
    INT64_MAX,
    ShapeError,
    data_version,
    expect_int,
    expect_int_key,
    expect_object,
    json_kind,
)
from sdk.broker.rounds import Rounds
from sdk.clock import SYSTEM_CLOCK, Clock
from sdk.errors import InvalidArgumentError
from sdk.message import PROPERTY_DELIVER_AT, PROPERTY_PRODUCER_SEQ

__all__ = [
    "DELAY_OFFSET_FILE",
    "PROPERTY_DELIVER_AT",
    "ScheduleService",
    "delay_levels",
    "delayed_message",
    "original_message",
    "packed_host",
    "parse_delay_offsets",
]

log = logging.getLogger(__name__)

DELAY_OFFSET_FILE = Path("config") / "delayOffset.json"
_BATCH = 32
_SCHEDULE_PROPERTIES = (PROPERTY_DELAY, PROPERTY_REAL_TOPIC, PROPERTY_REAL_QUEUE_ID)
_PERMANENT_FAILURES = (PutStatus.MESSAGE_ILLEGAL, PutStatus.PROPERTIES_SIZE_EXCEEDED)

DelayLevels = str | Sequence[int]


def delay_levels(levels: DelayLevels) -> tuple[int, ...]:
    """The delay table in ms: a RocketMQ ``messageDelayLevel`` string (``"1s 5s 1m"``) or delays
    in ms given directly (for sub-second tables). Level n is entry n-1."""
    if isinstance(levels, str):
        return parse_delay_levels(levels)
    delays = tuple(int(d) for d in levels)
    if not delays:
        raise InvalidArgumentError("the delay level table is empty")
    if any(d <= 0 for d in delays):
        raise InvalidArgumentError(f"delays must be positive, got {delays}")
    return delays


def _level_for(remaining_ms: int, delays: tuple[int, ...]) -> int:
    """The largest level whose delay is <= ``remaining_ms`` (1 when none is)."""
    best, best_delay = 1, -1
    for index, delay in enumerate(delays):
        if best_delay < delay <= remaining_ms:
            best, best_delay = index + 1, delay
    return best


def delayed_message(
    message: NewMessage,
    level: int | None = None,
    deliver_at_ms: int | None = None,
    levels: DelayLevels = DEFAULT_DELAY_LEVELS,
    *,
    now_ms: int | None = None,
) -> NewMessage:
    """``message`` (for topic T / queue q) in the form stored under ``SCHEDULE_TOPIC_XXXX``.

    Give exactly one of ``level`` (1-based; clamped to the table's last level, as RocketMQ
    does) or ``deliver_at_ms`` (epoch ms; see the module docstring: chained levels and the
    ``__QUIVER_DELIVER_AT`` property, never delivered early). The result has topic
    ``SCHEDULE_TOPIC_XXXX``, queue id ``level - 1`` and the properties ``REAL_TOPIC=T``,
    ``REAL_QID=q``, ``DELAY=level``; every other field is the original's. Put it with
    ``store.put(..., system=True)``.
    """
    if (level is None) == (deliver_at_ms is None):
        raise InvalidArgumentError("give exactly one of level and deliver_at_ms")
    if message.topic == SCHEDULE_TOPIC:
        raise InvalidArgumentError(f"the message is already under {SCHEDULE_TOPIC}")
    delays = delay_levels(levels)
    properties = dict(message.properties)
    if deliver_at_ms is not None:
        now = SYSTEM_CLOCK.time_ms() if now_ms is None else now_ms
        level = _level_for(deliver_at_ms - now, delays)
        properties[PROPERTY_DELIVER_AT] = str(deliver_at_ms)
    else:
        assert level is not None
        if level < 1:
            raise InvalidArgumentError(f"delay level must be >= 1, got {level}")
        level = min(level, len(delays))
    properties[PROPERTY_REAL_TOPIC] = message.topic
    properties[PROPERTY_REAL_QUEUE_ID] = str(message.queue_id)
    properties[PROPERTY_DELAY] = str(level)
    return dataclasses.replace(
        message, topic=SCHEDULE_TOPIC, queue_id=level - 1, properties=properties
    )


def packed_host(host: str, sys_flag: int) -> bytes:
    """A stored message's ``"host:port"`` packed back as its record held it."""
    address, _, port = host.rpartition(":")
    packed = pack_host(address, int(port))
    if sys_flag & SYSFLAG_BORNHOST_V6 and len(packed) == 8:  # Java printed a v4-mapped address
        packed = bytes(10) + b"\xff\xff" + packed
    return packed


def original_message(stored: StoredMessage) -> NewMessage | None:
    """The message a stored delayed message stands for (None without ``REAL_TOPIC``).

    The ``__QUIVER_DELIVER_AT`` property, if any, is kept (the service drops it on delivery);
    a producer stamp (``__QUIVER_PRODUCER_SEQ``) is not: the stored delayed record alone names
    it (:mod:`sdk.broker.idempotence`).
    """
    properties = dict(stored.properties)
    topic = properties.pop(PROPERTY_REAL_TOPIC, None)
    queue = properties.pop(PROPERTY_REAL_QUEUE_ID, None)
    properties.pop(PROPERTY_DELAY, None)
    properties.pop(PROPERTY_PRODUCER_SEQ, None)
    if not topic:
        return None
    return NewMessage(
        topic=topic,
        body=stored.body,
        queue_id=int(queue) if queue else 0,
        properties=properties,
        flag=stored.flag,
        sys_flag=stored.sys_flag,
        born_timestamp=stored.born_timestamp,
        born_host=packed_host(stored.born_host, stored.sys_flag),
        reconsume_times=stored.reconsume_times,
        prepared_transaction_offset=stored.prepared_transaction_offset,
    )


def parse_delay_offsets(data: bytes) -> tuple[dict[int, int], dict[str, int]]:
    """``(level -> next queue offset, dataVersion)`` of a ``delayOffset.json`` (fastjson's
    dialect or strict JSON); ValueError (:class:`~offsetstore.json_shape.ShapeError` for
    valid JSON of another shape) when it is not such a file."""
    if not data.strip():
        raise ValueError("the file is empty")
    document = loads(data)
    if not isinstance(document, dict):
        raise ShapeError(f"not a JSON object (found {json_kind(document)})")
    raw_table = expect_object("offsetTable", document.get("offsetTable", {}))
    table = {
        # Any long: an offset outside its queue is corrected at start (correctDelayOffset).
        expect_int_key("offsetTable", level, 1, INT32_MAX): expect_int(
            f"offsetTable[{json_kind(level)}]", offset, -INT64_MAX - 1
        )
        for level, offset in raw_table.items()
    }
    version = data_version(document["dataVersion"]) if "dataVersion" in document else {}
    return table, version


class ScheduleService:
    """Re-puts delayed messages into their real topic/queue once due (a background thread).

    ``root`` is the broker's store root (default: the store's): progress lives in
    ``{root}/config/delayOffset.json``. ``levels`` is the delay table (a ``messageDelayLevel``
    string or delays in ms; default: the store's ``StoreOptions.delay_levels``); level queue
    ``L - 1`` is served with delay ``levels[L - 1]``. Use :meth:`start` / :meth:`stop` or a
    ``with`` block; :meth:`run_once` runs one round in the caller's thread. ``clock`` says
    what time it is (when a message is due) and paces the rounds.
    """

    def __init__(
        self,
        store: MessageStore,
        root: Path | str | None = None,
        levels: DelayLevels | None = None,
        poll_interval_s: float = 0.1,
        on_delivered: Callable[[PutResult], None] | None = None,
        clock: Clock = SYSTEM_CLOCK,
    ):
        self.store = store
        self._clock = clock
        self.on_delivered = on_delivered  # the put of a message that became due, once stored
        self.root = Path(root) if root is not None else store.root
        # By default the store's own table, the one its consume-queue tag codes were made with.
        self.delays = delay_levels(levels if levels is not None else store.options.delay_levels)
        self.poll_interval_s = poll_interval_s
        self.path = self.root / DELAY_OFFSET_FILE
        self.offsets: dict[int, int] = {}  # level -> next queue offset of SCHEDULE_TOPIC_XXXX
        self.delivered = 0  # messages re-put into their real topic since construction
        self.rescheduled = 0  # absolute-time messages moved to another level
        self.skipped = 0  # messages dropped as undeliverable
        self._data_version = {"counter": 0, "stateVersion": 0, "timestamp": 0}
        self._round_lock = threading.Lock()
        self._rounds = Rounds(
            self.run_once,
            lambda: self.poll_interval_s,
            clock,
            name="quiver-schedule",
            what="schedule service",
            log=log,
        )
        self._dirty = False
        self._keep_backup = True  # False after loading from .bak: the main file is damaged
        self.load()

    # -- progress ------------------------------------------------------------------------------
    def load(self) -> None:
        """Read the progress file (RocketMQ's or ours; the ``.bak`` if the file is damaged:
        unparsable or of another shape) and correct each offset into its queue's ``[min,
        max]``. Raises :class:`~offsetstore.base.OffsetFileError` naming both files when
        neither is usable (never a silent restart of every level from its queue's start)."""
        loaded = read_with_backup(self.path, parse_delay_offsets, "delay-level progress")
        table: dict[int, int] = {}
        if loaded is not None:
            table, version = loaded.value
            self._data_version.update(version)
            self._keep_backup = not loaded.from_backup
        self.offsets = table
        self._correct_offsets()

    def _correct_offsets(self) -> None:
        for level in range(1, len(self.delays) + 1):
            offset = self.offsets.get(level, 0)
            low = self.store.min_offset(SCHEDULE_TOPIC, level - 1)
            high = self.store.max_offset(SCHEDULE_TOPIC, level - 1)
            corrected = min(max(offset, low), high)
            if corrected != offset or level not in self.offsets:
                self.offsets[level] = corrected
                self._dirty = True

    def persist(self) -> None:
        """Write the progress file in RocketMQ's shape (atomically, keeping a ``.bak``)."""
        with self._round_lock:
            self._persist_locked()

    def _persist_locked(self) -> None:
        self._data_version["counter"] += 1
        self._data_version["timestamp"] = self._clock.time_ms()
        document = {
            "dataVersion": dict(self._data_version),
            "offsetTable": dict(sorted(self.offsets.items())),
        }
        self.path.parent.mkdir(parents=True, exist_ok=True)
        data = dumps(document, pretty=True).encode()
        # After loading from .bak the main file is damaged: never rotate it over .bak.
        write_atomically(self.path, data, keep_backup=self._keep_backup)
        self._keep_backup = True
        self._dirty = False

    # -- delivery ------------------------------------------------------------------------------
    def run_once(self, now_ms: int | None = None) -> int:
        """One round over every level: deliver what is due at ``now_ms`` (default: now).
        Returns how many messages left their level queue (delivered, rescheduled or skipped).
        Persists the progress when it changed."""
        with self._round_lock:
            moved = 0
            for level in range(1, len(self.delays) + 1):
                now = self._clock.time_ms() if now_ms is None else now_ms
                moved += self._serve_level(level, now)
            if moved or self._dirty:
                self._persist_locked()
            return moved

    def _serve_level(self, level: int, now: int) -> int:
        queue_id = level - 1
        delay = self.delays[queue_id]
        offset = self.offsets.get(level, 0)
        end = self.store.max_offset(SCHEDULE_TOPIC, queue_id)  # what this round serves
        moved = 0
        while offset < end:
            stored_at = self.store.store_timestamp(SCHEDULE_TOPIC, queue_id, offset)
            if stored_at < 0:  # nothing there: the end, or removed by retention
                low = self.store.min_offset(SCHEDULE_TOPIC, queue_id)
                if offset < low:
                    offset = low
                    self.offsets[level] = offset
                    self._dirty = True
                    continue
                break
            if stored_at + delay > now:
                break
            result = self.store.get_messages(SCHEDULE_TOPIC, queue_id, offset, max_count=_BATCH)
            if not result.messages:
                if result.next_offset <= offset:
                    break
                offset = result.next_offset
                self.offsets[level] = offset
                self._dirty = True
                continue
            for stored in result.messages:
                if stored.queue_offset >= end or stored.store_timestamp + delay > now:
                    return moved
                if not self._deliver(stored, now):
                    return moved
                offset = stored.queue_offset + 1
                self.offsets[level] = offset
                self._dirty = True
                moved += 1
        return moved

    def _deliver(self, stored: StoredMessage, now: int) -> bool:
        """Re-put one due message; False when the put should be retried later."""
        message = original_message(stored)
        if message is None:
            log.error(
                "skipping %s message at queue offset %d of queue %d: no %s",
                SCHEDULE_TOPIC,
                stored.queue_offset,
                stored.queue_id,
                PROPERTY_REAL_TOPIC,
            )
            self.skipped += 1
            return True
        deliver_at = message.properties.pop(PROPERTY_DELIVER_AT, None)
        rescheduling = deliver_at is not None and int(deliver_at) > now
        if rescheduling:
            assert deliver_at is not None
            message = delayed_message(
                message, deliver_at_ms=int(deliver_at), levels=self.delays, now_ms=now
            )
        result = self.store.put(message, system=True)
        if result.status.stored:
            if rescheduling:
                self.rescheduled += 1
            else:
                self.delivered += 1
                if self.on_delivered is not None:
                    self.on_delivered(result)
            return True
        if result.status in _PERMANENT_FAILURES:
            log.error(
                "dropping delayed message at queue offset %d of %s queue %d: %s %s",
                stored.queue_offset,
                SCHEDULE_TOPIC,
                stored.queue_id,
                result.status.value,
                result.detail,
            )
            self.skipped += 1
            return True
        log.warning("delayed message put failed (%s %s); retrying", result.status, result.detail)
        return False

    # -- lifecycle -----------------------------------------------------------------------------
    def start(self) -> None:
        """Start the background thread (first round at once: messages due during a downtime
        are delivered right away; see :mod:`sdk.broker.rounds`)."""
        self._rounds.start()

    def stop(self) -> None:
        """Stop the thread (after its current round) and persist the progress."""
        self._rounds.stop()
        self.persist()

    @property
    def running(self) -> bool:
        return self._rounds.running

    def __enter__(self) -> ScheduleService:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
