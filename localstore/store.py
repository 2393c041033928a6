"""``MessageStore``: the embedded store engine's facade (RocketMQ's DefaultMessageStore).

Layout under the store root (RocketMQ's, so either can open the other's files)::

    lock                         held (flock) while a store instance has the directory open
    abort                        present while open; found at open => the last run crashed
    checkpoint                   4 KiB of flush timestamps
    commitlog/{20 digits}        the records
    consumequeue/{topic}/{q}/{20 digits}   20-byte units per message
    config/topics.json           topic configs (RocketMQ's broker format), deleted topics
    config/store.json            Quiver's own: the geometry (RocketMQ never reads it)
    index/{yyyyMMddHHmmssSSS}    the key index files
    timeindex/, offsetindex/     Quiver's own sparse indexes (derived, rebuilt when missing)
    quiver-tmp/                  Quiver's own scratch: segments being warmed, index.lock (held
                                 by whoever writes index/: the store or its index process)

Thread safety: puts are serialized by one lock (the batch is appended under one acquisition with
one write per segment); gets may run concurrently with puts from other threads. Queue offsets are
assigned inside the put lock and only for messages that are stored; a rejected message consumes
no offset.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Sequence
from functools import partial
from pathlib import Path
from types import TracebackType
from typing import Any

from localstore.commitlog.flush import (
    DurableCallback,
    DurableWait,
    FlushRequests,
    FlushService,
    FlushWaiter,
)
from localstore.commitlog.log import CommitLog
from localstore.commitlog.offset_index import CommitLogOffsetIndex
from localstore.errors import DamagedRecordError, StoreClosedError, StoreError
from localstore.files.dir_lock import acquire_directory_lock
from localstore.files.retired import RetiredFiles
from localstore.files.store_directory import make_store_directory
from localstore.geometry import StoreGeometry, resolve_geometry
from localstore.index.process import IndexProcess
from localstore.index.service import IndexService, KeyIndex
from localstore.options import StoreOptions
from localstore.put.path import PutPath
from localstore.queue.consume_queue import ConsumeQueue
from localstore.queue.registry import QueueRegistry
from localstore.queue.time_index import QueueTimeIndex, offset_for_timestamp
from localstore.queue.topic_changes import delete_topic, set_topic
from localstore.queue.topics import TopicConfig, TopicTable
from localstore.reader import (
    caught_up,
    get_messages,
    message_at,
    message_by_offset_msg_id,
    message_or_none,
    query_uniq_key,
    read_filter,
    visible_max_offset,
)
from localstore.record.codec import (
    NewMessage,
    StoredMessage,
    pack_host,
    read_store_timestamp,
)
from localstore.record.message_id import parse_offset_msg_id
from localstore.record.tags import TagFilter, parse_delay_levels
from localstore.recovery.checkpoint import AbortMarker, Checkpoint
from localstore.recovery.damaged import DamagedRanges
from localstore.recovery.recover import RecoveryReport, recover
from localstore.recovery.unit_repair import MAX_SEARCH_BYTES, UnitRepair, repair_unit
from localstore.results import FLUSH_DISK_TIMEOUT, GetResult, PutResult
from localstore.retention import CleanReport, clean, correct_min_offset
from localstore.runtime.closing import CloseSteps
from localstore.runtime.periodic import PeriodicTask

DEFAULT_MAX_BYTES = 256 * 1024
_REPAIRS_PER_GET = 16  # damaged units one get rebuilds before it answers with what it has
_UNREPAIRABLE_KEPT = 1024  # units remembered as not rebuildable (then forgotten, all at once)


class MessageStore:
    """A RocketMQ-format message store in one directory, opened by one instance at a time.

    ``geometry`` holds the sizes to create the store with (ignored keys: none; a key that
    contradicts the recorded geometry raises :class:`GeometryMismatchError`).
    """

    def __init__(
        self, root: str | os.PathLike[str], *, options: StoreOptions | None = None, **geometry: Any
    ):
        self.root = Path(root)
        self.options = options or StoreOptions()
        make_store_directory(self.root)
        self._lock_file = acquire_directory_lock(self.root)
        self._index: KeyIndex | None = None
        self._closing: CloseSteps | None = None  # the steps of close(), once it began
        try:
            self._open(geometry)
        except BaseException:
            if self._index is not None:
                self._index.abandon()
            self._lock_file.release()
            raise

    def _open(self, requested: dict[str, Any]) -> None:
        """Open in the order the files depend on each other: the log and the queues as they
        lie, recovery (which makes them agree), the indexes derived from them, then the
        services that write."""
        self._load_files(requested)
        self._recover()
        self._open_derived_indexes()
        self._start_services()

    def _load_files(self, requested: dict[str, Any]) -> None:
        """Geometry, markers, commitlog segments, damaged ranges, consume queues, topics and
        (in process) the key index, as they lie on disk."""
        options = self.options
        self.geometry: StoreGeometry = resolve_geometry(self.root, requested)
        self._delay_levels = parse_delay_levels(options.delay_levels)
        host, _, port = options.store_host.rpartition(":")
        self._store_host = pack_host(host, int(port))
        self._abort = AbortMarker(self.root)
        self.crashed_last_time = self._abort.existed_at_open()
        self.checkpoint = Checkpoint(self.root / "checkpoint")
        sync = self.geometry.flush_mode == "sync"
        self.commitlog = CommitLog(
            self.root / "commitlog",
            self.geometry.commitlog_file_size,
            sync_flush=sync,
            warm_segments=options.warm_segments,
        )
        self.commitlog.segments.load()
        # Damaged commitlog ranges kept on disk (readers skip units that point into them).
        self.damaged = DamagedRanges(self.root)
        self.damaged.load(self.commitlog.segments.min_offset)
        self.queues = QueueRegistry(self.root / "consumequeue", self.geometry.cq_entries_per_file)
        self.queues.load()
        self.topics = TopicTable(self.root)
        self.topics.load(self.root / "consumequeue")
        if self.geometry.index_enabled and not options.index_process:
            self._index = IndexService(
                self.root / "index", self.geometry.index_slots, self.geometry.index_entries
            )
            self._index.load(
                crashed=self.crashed_last_time,
                checkpoint_timestamp=self.checkpoint.index_msg_timestamp,
            )

    def _recover(self) -> None:
        """Make the log, the queues and an in-process key index agree (:mod:`.recovery`)."""
        in_process_index = self._index if isinstance(self._index, IndexService) else None
        self.recovery: RecoveryReport = recover(
            self.commitlog,
            self.queues,
            self.checkpoint,
            crashed=self.crashed_last_time,
            delay_levels=self._delay_levels,
            index=in_process_index,
            damaged=self.damaged,
            deleted_topics=self.topics.deleted,
        )
        for queue in self.queues.queues.values():  # files alone cannot tell what retention cut
            correct_min_offset(queue, self.commitlog.min_offset)

    def _open_derived_indexes(self) -> None:
        """The indexes opened after recovery: a key index in its own process (it catches up
        from the recovered log), and the Kafka-style sparse indexes, repaired or rebuilt when
        missing or damaged."""
        options = self.options
        if self.geometry.index_enabled and options.index_process:
            # The child loads the files itself and catches up from the commitlog.
            self._index = IndexProcess(
                self.root,
                slots=self.geometry.index_slots,
                entries=self.geometry.index_entries,
                segment_size=self.geometry.commitlog_file_size,
                crashed=self.crashed_last_time,
                checkpoint_timestamp=self.checkpoint.index_msg_timestamp,
                min_offset=self.commitlog.min_offset,
                end=self.commitlog.max_offset,
            )
        self.time_indexes: dict[tuple[str, int], QueueTimeIndex] = {
            key: QueueTimeIndex.open(self.root, queue, self.commitlog)
            for key, queue in self.queues.queues.items()
        }
        self.offset_index = CommitLogOffsetIndex.open(self.root, self.commitlog)

    def _start_services(self) -> None:
        """The abort marker, the clean and flush threads, and the put path."""
        options = self.options
        sync = self.geometry.flush_mode == "sync"
        self._retired = RetiredFiles()
        self._put_lock = threading.Lock()
        # A get's answer for a damaged unit it could not rebuild (localstore.recovery.
        # unit_repair), and the log's visible end it holds for (None: for good, the unit is
        # right and its record damaged; else until more of the log shows)
        self._unrepairable: dict[
            tuple[str, int, int, int], tuple[DamagedRecordError, int | None]
        ] = {}
        self._abort.create()
        # RocketMQ checks every 10 s, the first time after 60 s.
        self._cleaner = PeriodicTask(
            "quiver-clean",
            self._periodic_clean,
            options.clean_interval_ms / 1000,
            options.clean_interval_ms * 6 / 1000,
        )
        self.flusher = FlushService(
            self.commitlog,
            group_commit=sync,
            flush_interval_ms=options.flush_interval_ms,
            others_interval_ms=options.cq_flush_interval_ms,
            on_flushed=self._on_flushed,
            flush_others=self._flush_others,
            on_error=self._on_flush_error,
            # Half the puts' wait: the puts a taken-over flush covers are still answered.
            steal_after_ms=max(1, options.sync_flush_timeout_ms // 2),
        )
        self._puts = PutPath(
            root=self.root,
            lock=self._put_lock,
            commitlog=self.commitlog,
            queues=self.queues,
            topics=self.topics,
            checkpoint=self.checkpoint,
            time_indexes=self.time_indexes,
            offset_index=self.offset_index,
            index=self._index,
            flusher=self.flusher,
            store_host=self._store_host,
            max_body=self.geometry.max_message_size,
            options=options,
            delay_levels=self._delay_levels,
        )

    # -- lifecycle -------------------------------------------------------------------------
    def close(self) -> None:
        """Flush everything, remove the abort marker, release the directory. Idempotent.

        Total: every closing step runs whatever an earlier one raised (see
        :mod:`localstore.runtime.closing`); the flush and clean threads stop, every file is closed
        and the directory lock released, and only then is the first failure raised, as a
        :class:`StoreError` (each one is logged at ERROR): the commitlog's final flush,
        :class:`~localstore.errors.IndexProcessError` when the index process had failed, or
        any other step's error wrapped (``__cause__`` keeps it). After any failure the abort
        marker stays, so that the next open recovers; it also stays after any commitlog flush
        of this run failed, even one retried with success (see :attr:`FlushService.failed_once`).

        A second close is a no-op once every step ran; one after a close interrupted part-way
        (``KeyboardInterrupt``) runs the steps left and reports as the first would have."""
        if self._closing is None:
            with self._put_lock:
                self._puts.close()
            self._closing = CloseSteps(f"store {self.root}", self._close_steps())
        elif self._closing.done:
            return
        steps = self._closing
        try:
            steps.run()
        finally:  # whatever failed, the directory is released
            if steps.done:
                self._lock_file.release()
        error = steps.first_error()
        if error is not None:
            raise error

    def _close_steps(self) -> list[tuple[str, Callable[[], object]]]:
        """Every step of :meth:`close`, in order (each run once, whatever the others did)."""
        return [
            ("stopping the retention thread", self._cleaner.close),
            ("stopping the flush thread", self._stop_flusher),
            ("flushing the consume queues and checkpoint", self._final_flush_others),
            *((f"closing the time index of {key[0]}/{key[1]}", index.close)
              for key, index in self.time_indexes.items()),
            ("closing the offset index", self.offset_index.close),
            ("closing the consume queues", self.queues.close),
            ("closing the key index", self._close_key_index),
            ("closing the commitlog", self.commitlog.close),
            ("closing the mappings of deleted files", self._retired.close),
            ("closing the checkpoint", self.checkpoint.close),
            ("removing the abort marker", self._remove_abort_marker),
        ]  # fmt: skip

    def _stop_flusher(self) -> None:
        self.flusher.close()
        if self.flusher.error is not None:
            raise StoreError(
                f"the commitlog's final flush in {self.root} failed ({self.flusher.error}): "
                "the abort marker stays, so the next open recovers what reached the disk"
            )

    def _final_flush_others(self) -> None:
        try:
            self._flush_others()
        except Exception as exc:
            raise StoreError(
                f"flushing the consume queues and checkpoint of {self.root} failed ({exc}): "
                "the abort marker stays, so the next open recovers them"
            ) from exc

    def _close_key_index(self) -> None:
        if self.index is not None:  # a failed index process: the next open rebuilds it
            self.index.close()

    def _remove_abort_marker(self) -> None:
        """Only after a close that failed nowhere, and a run whose flushes never failed."""
        assert self._closing is not None
        if not self._closing.errors and not self.flusher.failed_once:
            self._abort.remove()

    def __enter__(self) -> MessageStore:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    @property
    def closed(self) -> bool:
        return self._puts.closed

    @property
    def index(self) -> KeyIndex | None:
        """The key index (query by key), built in this process or by the store's index
        process; None when the store keeps none."""
        return self._index

    @index.setter
    def index(self, index: KeyIndex | None) -> None:
        """Swap the key index the puts fill (None: puts fill none); the caller owns both."""
        self._index = self._puts.keys.index = index

    def _on_flushed(self, offset: int, store_timestamp: int) -> None:
        if store_timestamp:
            self.checkpoint.physic_msg_timestamp = store_timestamp

    def _on_flush_error(self, error: Exception | None) -> None:
        """On the flush thread: a commitlog flush failed (refuse puts, so that the bytes kept for
        the retry stop growing; the general path reads ``flusher.error`` and says why) or, with
        None, one succeeded again."""
        with self._put_lock:
            self._puts.set_flush_failed(error is not None)

    def _flush_others(self) -> None:
        self.queues.flush()
        if self.index is not None:
            self.index.flush()
            self.checkpoint.index_msg_timestamp = max(
                self.checkpoint.index_msg_timestamp, self.index.completed_timestamp
            )
        self.checkpoint.flush()

    # -- put -------------------------------------------------------------------------------
    def put(self, message: NewMessage, *, system: bool = False) -> PutResult:
        """Store one message. ``system`` allows the store's own topics (schedule, retry, ...)."""
        done = None if system else self._puts.single.put(message)
        result, waiter = self.append((message,), system=system) if done is None else done
        return result if waiter is None else self._await_durable(result, waiter)

    def put_batch(self, messages: Sequence[NewMessage], *, system: bool = False) -> PutResult:
        """Store messages of one topic-queue with one append; all or none are stored.

        Under sync flush this returns once the batch is durable (FLUSH_DISK_TIMEOUT if that
        takes longer than ``sync_flush_timeout_ms``; the messages are stored all the same).
        """
        result, waiter = self.append(messages, system=system)
        return result if waiter is None else self._await_durable(result, waiter)

    def _await_durable(self, result: PutResult, waiter: DurableWait | FlushWaiter) -> PutResult:
        if isinstance(waiter, FlushWaiter):  # a put with a callback hears through it
            return result
        timeout_ms = self.options.sync_flush_timeout_ms
        if not waiter.wait(timeout_ms / 1000):
            result.status = FLUSH_DISK_TIMEOUT
            result.detail = f"stored, but {waiter.failure or f'not flushed within {timeout_ms} ms'}"
        return result

    def append(
        self,
        messages: Sequence[NewMessage],
        *,
        system: bool = False,
        on_durable: DurableCallback | None = None,
        flushed_by: FlushRequests | None = None,
    ) -> tuple[PutResult, DurableWait | FlushWaiter | None]:
        """Append without waiting for durability. Under sync flush the returned
        :class:`DurableWait` tells when the batch is on disk; with ``on_durable``, that is
        called on the flush thread instead, with None once durable or why not. With
        ``flushed_by`` as well, the request for a flush goes there instead of to the flush
        thread (an event loop's :class:`~localstore.commitlog.sync_process.ProcessSync`)."""
        results, waiter = self._puts.append_batches(
            ((messages, system),), on_durable, flushed_by, isolate_errors=False
        )
        return results[0], waiter

    def append_batches(
        self,
        batches: Sequence[tuple[Sequence[NewMessage], bool]],
        *,
        on_durable: DurableCallback | None = None,
        flushed_by: FlushRequests | None = None,
    ) -> tuple[list[PutResult], DurableWait | FlushWaiter | None]:
        """:meth:`append` for several batches, each ``(messages of one topic-queue, system)``
        and each stored all or none, in order, under one hold of the put lock. One result per
        batch; under sync flush one waiter covers every stored batch (None when none was
        stored). An event loop appends a turn's puts to several queues so (see
        :mod:`localstore.put.writer`): per-call work is paid once per turn, not once per queue.

        A batch whose append raised (a topic or queue file that could not be created, a key
        index process that died) is answered UNKNOWN_ERROR naming the exception, and logged;
        the batches before and after it keep their own results. (:meth:`append` raises it.)"""
        return self._puts.append_batches(batches, on_durable, flushed_by, isolate_errors=True)

    def check(self, messages: Sequence[NewMessage], *, system: bool = False) -> PutResult | None:
        """The rejection a put of ``messages`` would get for its topic, bodies or batch shape,
        or None. (Queue range and sizes known only after encoding are checked by the put.)"""
        return self._puts.check(messages, system=system)

    # -- retention -------------------------------------------------------------------------
    def clean(
        self, *, force: bool = False, manual: bool = True, now_ms: int | None = None
    ) -> CleanReport:
        """Delete expired commitlog segments and what only points into them (see
        :mod:`localstore.retention`). ``manual`` makes the run due now (only expired segments
        go); ``force`` deletes segments whatever their age (never the last one)."""
        self._ensure_open()
        with self._put_lock:
            report = clean(
                self.commitlog,
                self.queues,
                self.index,
                self.options.retention,
                now_ms if now_ms is not None else time.time_ns() // 1_000_000,
                force=force,
                manual=manual,
                retired=self._retired,
            )
            if report.commitlog_files:
                self.offset_index.drop_before(self.commitlog.min_offset)
                self.topics.forget_tombstones_before(self.commitlog.min_offset)
            for key, queue_min in report.queue_min_offsets.items():
                time_index = self.time_indexes.get(key)
                if time_index is not None:
                    time_index.drop_before(queue_min)
            return report

    def _periodic_clean(self) -> bool:
        """One periodic retention check (deletes only when a run is due); False once closed."""
        try:
            self.clean(manual=False)
        except StoreClosedError:
            return False
        return True

    # -- get -------------------------------------------------------------------------------
    def get_messages(
        self,
        topic: str,
        queue_id: int,
        queue_offset: int,
        *,
        max_count: int = 32,
        max_bytes: int = DEFAULT_MAX_BYTES,
        tags: str | TagFilter | None = None,
    ) -> GetResult:
        """Messages of ``topic``/``queue_id`` from ``queue_offset``, decoded.

        ``tags`` is a tag expression (``"A || B"``, ``"*"``) or a parsed :class:`TagFilter`.
        A consume-queue unit that does not point at its own record is rebuilt from the log
        when the get meets it (logged at WARNING: :mod:`localstore.recovery.unit_repair`), and
        the get reads on. A damaged record (or a unit that cannot be rebuilt) stops the get:
        the messages before it come back with ``result.damaged`` naming it; with none before
        it the get raises :class:`~localstore.errors.DamagedRecordError` (topic, queue, queue
        offset, commitlog offset). Step over it at ``queue_offset + 1``.
        """
        return self._get(topic, queue_id, queue_offset, max_count, max_bytes, tags, False, False)

    def get_message_bytes(
        self,
        topic: str,
        queue_id: int,
        queue_offset: int,
        *,
        max_count: int = 32,
        max_bytes: int = DEFAULT_MAX_BYTES,
        tags: str | TagFilter | None = None,
        check: bool = False,
    ) -> GetResult:
        """As :meth:`get_messages`, but ``result.raw`` holds the stored records' bytes.

        Without a tag filter the records are copied, not decoded, so a damaged one is not seen
        here (its reader's decode fails) unless ``check`` (or ``check_crc_on_read``) asks
        that every record be decoded first, as :meth:`get_messages` does."""
        return self._get(topic, queue_id, queue_offset, max_count, max_bytes, tags, True, check)

    def _get(
        self,
        topic: str,
        queue_id: int,
        queue_offset: int,
        max_count: int,
        max_bytes: int,
        tags: str | TagFilter | None,
        raw: bool,
        check: bool,
    ) -> GetResult:
        self._ensure_open()
        tag_filter = read_filter(max_count, tags)
        read = partial(
            get_messages,
            self.commitlog,
            max_count=max_count,
            max_bytes=max_bytes,
            tag_filter=tag_filter,
            raw=raw,
            check=check,
            check_crc=self.options.check_crc_on_read,
        )
        queue = self.queues.get(topic, queue_id)
        answered: GetResult | None = None
        try:
            result = read(queue, queue_offset)
        except DamagedRecordError as exc:
            damaged = exc
        else:
            if result.damaged is None:
                return result
            answered, damaged = result, result.damaged
        assert queue is not None  # only a queue's units name a damaged record
        return self._read_repairing(read, queue, queue_offset, answered, damaged)

    def _read_repairing(
        self,
        read: Callable[[ConsumeQueue | None, int], GetResult],
        queue: ConsumeQueue,
        queue_offset: int,
        result: GetResult | None,
        damaged: DamagedRecordError,
    ) -> GetResult:
        """A get that met ``damaged`` (with ``result``, or raising it): rebuild the unit and
        ``read(queue, queue_offset)`` again, while the units it meets can be rebuilt (at most
        :data:`_REPAIRS_PER_GET`); then the answer with what is left damaged."""
        for _ in range(_REPAIRS_PER_GET):
            reported = self._repair(queue, damaged)
            if reported is not None:
                if result is None:
                    raise reported
                result.damaged = reported
                return result
            current = self.queues.get(queue.topic, queue.queue_id)
            try:
                result = read(current, queue_offset)
            except DamagedRecordError as exc:
                result, damaged = None, exc
            else:
                if result.damaged is None:
                    return result
                damaged = result.damaged
            assert current is not None  # only a queue's units name a damaged record
            queue = current
        if result is None:
            raise damaged
        return result

    def _repair(self, queue: ConsumeQueue, error: DamagedRecordError) -> DamagedRecordError | None:
        """None when the unit ``error`` names was rebuilt from the log, or found rebuilt by
        another reader (:mod:`localstore.recovery.unit_repair`): the get reads again. Else the
        error to report, saying why the unit could not be rebuilt when it is the unit that is
        damaged. The answer is remembered, so its readers do not search again (under the put
        lock: no put or retention run moves the queue meanwhile): for good when the unit is
        right and its record damaged, else while the log's visible end stays where it was (a
        put under sync flush may show the neighbour that bounds the search)."""
        key = (queue.topic, queue.queue_id, error.queue_offset, error.phys_offset)
        known = self._unrepairable.get(key)
        if known is not None and known[1] in (None, self.commitlog.confirmed_offset):
            return known[0]
        with self._put_lock:
            self._ensure_open()
            if queue is not self.queues.get(queue.topic, queue.queue_id):
                return None  # the topic was deleted (or made again) meanwhile: read afresh
            outcome = self._repair_unit(queue, error.queue_offset, MAX_SEARCH_BYTES)
            if outcome.repaired or (
                outcome.sound and _unit_phys(queue, error.queue_offset) != error.phys_offset
            ):
                return None
            holds_until: int | None = None
            if not outcome.sound:
                why = f"{error.reason}; the unit cannot be rebuilt from the log: {outcome.why}"
                error = DamagedRecordError(
                    error.topic, error.queue_id, error.queue_offset, error.phys_offset, why
                )
                holds_until = self.commitlog.confirmed_offset
            if len(self._unrepairable) >= _UNREPAIRABLE_KEPT:
                self._unrepairable.clear()
            self._unrepairable[key] = (error, holds_until)
        return error

    def repair_unit(self, topic: str, queue_id: int, queue_offset: int) -> UnitRepair:
        """Rebuild consume-queue unit ``queue_offset`` of ``topic``/``queue_id`` from the log
        if it does not point at its own record, searching the log between its neighbours'
        records however far apart (a get searches a bounded stretch:
        :mod:`localstore.recovery.unit_repair`). What ``quiver store verify --repair`` runs
        for each unit verify lists."""
        self._ensure_open()
        with self._put_lock:
            queue = self.queues.get(topic, queue_id)
            if queue is None:
                return UnitRepair(False, False, f"no consume queue {topic}/{queue_id}")
            return self._repair_unit(queue, queue_offset, None)

    def _repair_unit(
        self, queue: ConsumeQueue, queue_offset: int, max_search_bytes: int | None
    ) -> UnitRepair:
        """:func:`~localstore.recovery.unit_repair.repair_unit` on this store's log, searching
        no further back than the queue's topic was last deleted (under the put lock)."""
        return repair_unit(
            self.commitlog,
            queue,
            queue_offset,
            self._delay_levels,
            self.damaged,
            max_search_bytes=max_search_bytes,
            topic_since=self.topics.deleted.get(queue.topic, 0),
        )

    def min_offset(self, topic: str, queue_id: int) -> int:
        """Smallest readable queue offset (0 for an unknown queue)."""
        self._ensure_open()
        queue = self.queues.get(topic, queue_id)
        return queue.min_offset if queue is not None else 0

    def max_offset(self, topic: str, queue_id: int) -> int:
        """Next queue offset to be written, counting only messages readers may see."""
        self._ensure_open()
        queue = self.queues.get(topic, queue_id)
        if queue is None:
            return 0
        return visible_max_offset(queue, self.commitlog)

    def caught_up(self, topic: str, queue_id: int, queue_offset: int) -> bool:
        """Whether a get at ``queue_offset`` would find nothing to hand out or report (see
        :func:`localstore.reader.caught_up`), without reading: what a parked pull asks."""
        self._ensure_open()
        return caught_up(self.queues.get(topic, queue_id), self.commitlog, queue_offset)

    def consume_queue(self, topic: str, queue_id: int) -> ConsumeQueue | None:
        return self.queues.get(topic, queue_id)

    def message_at(self, phys_offset: int) -> StoredMessage:
        """The message whose record starts at commitlog offset ``phys_offset``.

        Raises :class:`RecordError` when no visible record starts there.
        """
        self._ensure_open()
        return message_at(self.commitlog, phys_offset)

    def message_by_offset_msg_id(self, offset_msg_id: str) -> StoredMessage:
        """Look a message up by its server-side id (host, port and commitlog offset)."""
        _, phys_offset = parse_offset_msg_id(offset_msg_id)
        return self.message_at(phys_offset)

    def wait_indexed(self) -> None:
        """Return once every message stored so far is in the key index: at once for the
        in-process index, after the child caught up with ``StoreOptions.index_process``.
        Queries wait by themselves; a benchmark that counts indexing in its puts calls this."""
        self._ensure_open()
        if self.index is not None:
            self.index.wait_caught_up()

    def query_by_key(
        self,
        topic: str,
        key: str,
        *,
        max_count: int = 64,
        begin_ms: int = 0,
        end_ms: int = 2**63 - 1,
    ) -> list[StoredMessage]:
        """Messages of ``topic`` whose KEYS hold ``key`` or whose UNIQ_KEY is ``key``, stored
        within [begin_ms, end_ms], newest first (at most ``max_count``, capped at 64).

        Every hit is re-checked against the stored message, so a hash collision never returns
        another key's message. Raises :class:`StoreError` when the store keeps no index.
        """
        self._ensure_open()
        if self.index is None:
            raise StoreError(f"store {self.root} was created without an index (--no-index)")
        self._ensure_key_index_whole()
        return self.index.query(topic, key, max_count, begin_ms, end_ms, self._message_or_none)

    def query_by_id(self, message_id: str) -> list[StoredMessage]:
        """Look up an offsetMsgId (host, port, commitlog offset) or a UNIQ_KEY (any topic).

        A UNIQ_KEY is found through the index: without one (``index_enabled=False``) an id
        that is not a stored message's offsetMsgId raises :class:`StoreError`."""
        self._ensure_open()
        message = message_by_offset_msg_id(self.commitlog, message_id)
        if message is not None:
            return [message]
        if self.index is None:
            raise StoreError(
                f"store {self.root} was created without an index (--no-index): only an "
                f"offsetMsgId can be looked up, and {message_id} is none of its messages'"
            )
        self._ensure_key_index_whole()
        topics = set(self.topics.topics) | {t for t, _ in self.queues.queues}
        return query_uniq_key(self.index, topics, self.commitlog, message_id)

    def _ensure_key_index_whole(self) -> None:
        error = self._puts.keys.error
        if error is not None:
            raise StoreError(
                f"the key index of {self.root} stopped taking keys ({error}): reopen the store "
                "to rebuild it from the commitlog"
            )

    def _message_or_none(self, phys_offset: int) -> StoredMessage | None:
        return message_or_none(self.commitlog, phys_offset)

    def offset_for_timestamp(self, topic: str, queue_id: int, timestamp_ms: int) -> int:
        """The first queue offset whose store time is >= ``timestamp_ms`` (RocketMQ 5's
        search by time), clamped to [min offset, max offset]; 0 for an unknown queue. A binary
        search in the queue's sparse time index, then over at most one interval of units."""
        self._ensure_open()
        key = (topic, queue_id)
        return offset_for_timestamp(
            self.queues.get(topic, queue_id),
            self.commitlog,
            self.time_indexes.get(key),
            timestamp_ms,
        )

    def split_points(self, parts: int) -> list[int]:
        """Commitlog offsets that cut the whole log into ``parts`` ranges, each starting on a
        record boundary: ``[b0 = min offset, ..., b_last = end]``, range k = [b[k], b[k+1])
        (fewer ranges when the log has fewer indexed record starts). For parallel scans."""
        self._ensure_open()
        return self.offset_index.split_points(parts)

    def store_timestamp(self, topic: str, queue_id: int, queue_offset: int) -> int:
        """Store time (ms) of the message at ``queue_offset``; -1 when there is none."""
        self._ensure_open()
        queue = self.queues.get(topic, queue_id)
        if queue is None or not queue.min_offset <= queue_offset < self.max_offset(topic, queue_id):
            return -1
        phys, _ = queue.unit_head(queue_offset)
        located = self.commitlog.segment_view(phys)
        if located is None:
            return -1
        return read_store_timestamp(*located)

    def queue_ids(self, topic: str) -> list[int]:
        return sorted(q for (t, q) in self.queues.queues if t == topic)

    # -- topic administration (localstore.queue.topic_changes) -------------------------------
    def set_topic(
        self, name: str, *, read_queue_nums: int, write_queue_nums: int, perm: int
    ) -> TopicConfig:
        """Create topic ``name`` or change its queue counts and RocketMQ permission bits; the
        next put of the topic follows the new config (checks of the values are the caller's)."""
        self._ensure_open()
        with self._put_lock:
            return set_topic(
                self.topics,
                self._puts,
                name,
                read_queue_nums=read_queue_nums,
                write_queue_nums=write_queue_nums,
                perm=perm,
            )

    def delete_topic(self, name: str) -> list[int]:
        """Remove topic ``name``'s config, consume queues and time indexes (its records stay
        in the commitlog until retention); answers the queue ids it had. See
        :mod:`localstore.queue.topic_changes`."""
        self._ensure_open()
        with self._put_lock:
            return delete_topic(
                self.root,
                self.topics,
                self._puts,
                self.queues,
                self.time_indexes,
                self._retired,
                name,
                self.commitlog.max_offset,
            )

    def _ensure_open(self) -> None:
        if self._puts.closed:
            raise StoreClosedError(f"store {self.root} is closed")


def _unit_phys(queue: ConsumeQueue, queue_offset: int) -> int | None:
    """The commitlog offset unit ``queue_offset`` points at, None when the queue holds none."""
    if not queue.min_offset <= queue_offset < queue.max_offset:
        return None
    return queue.unit_head(queue_offset)[0]
