"""The general put path: batches checked, encoded, written and noted under the put lock.

What a put keeps true (for this path and :mod:`localstore.put.single`'s fast path alike):

* A batch goes to one topic-queue and is stored all or none. A batch refused (its topic, a
  body, its queue, a record too large, a store that is closed or whose last flush failed) writes
  nothing and consumes no queue offset.
* Queue offsets are assigned under the put lock, in the order records enter the commitlog; the
  consume-queue units, time index, offset index and key index are noted under the same hold, so
  a reader that sees a unit sees its record.
* Under sync flush a put learns of its durability through one flush request for the commitlog
  offset its records end at; a call with several batches makes one request, for the end of the
  last one stored, which a flush covering it covers all of them with (records are written in
  order).

:class:`PutPath` holds the store's parts it writes to, the per-queue put states
(:class:`~localstore.put.queue_state.QueuePutState`) and the key index feed
(:class:`~localstore.put.key_feed.KeyIndexFeed`) that both paths share, and makes the fast path
(:class:`~localstore.put.single.SinglePut`) with them; the store owns their lifecycle and the
lock.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import cast

from localstore.commitlog.flush import (
    DurableCallback,
    DurableWait,
    FlushRequests,
    FlushService,
    FlushWaiter,
)
from localstore.commitlog.log import CommitLog
from localstore.commitlog.offset_index import CommitLogOffsetIndex
from localstore.index.service import KeyIndex
from localstore.options import StoreOptions
from localstore.put.checks import check_batch
from localstore.put.key_feed import KeyIndexFeed
from localstore.put.queue_state import QueuePutState
from localstore.put.single import SinglePut
from localstore.queue.registry import QueueRegistry
from localstore.queue.time_index import QueueTimeIndex
from localstore.queue.topics import PERM_WRITE, TopicTable
from localstore.record.batch_encoder import RejectedMessageError, encode_batch
from localstore.record.codec import SYSFLAG_TRANSACTION_PREPARED, NewMessage
from localstore.record.tags import SCHEDULE_TOPIC
from localstore.record.uniform_batch import batch_head
from localstore.recovery.checkpoint import Checkpoint
from localstore.results import PutResult, PutStatus, stored_result

log = logging.getLogger(__name__)

ENCODER_SLACK_BYTES = 64 * 1024  # a record may exceed max_message_size by this much (headers)


class PutPath:
    """Appends for one store (see the module docstring); :attr:`single` is the fast path of a
    single message of the common shape."""

    def __init__(
        self,
        *,
        root: Path,
        lock: threading.Lock,
        commitlog: CommitLog,
        queues: QueueRegistry,
        topics: TopicTable,
        checkpoint: Checkpoint,
        time_indexes: dict[tuple[str, int], QueueTimeIndex],
        offset_index: CommitLogOffsetIndex,
        index: KeyIndex | None,
        flusher: FlushService,
        store_host: bytes,
        max_body: int,
        options: StoreOptions,
        delay_levels: tuple[int, ...],
    ):
        self._root = root
        self._lock = lock
        self.commitlog = commitlog
        self.queues = queues
        self.topics = topics
        self.checkpoint = checkpoint
        self.time_indexes = time_indexes  # shared with the store (retention, close)
        self.offset_index = offset_index
        self.keys = KeyIndexFeed(index, root=root, commitlog=commitlog)  # shared with single
        self.flusher = flusher
        self._store_host = store_host
        self._max_body = max_body
        self._max_record_size = max_body + ENCODER_SLACK_BYTES
        self._options = options  # read when a topic is created (a caller may change its fields)
        self._delay_levels = delay_levels
        # Topic-queues known to accept puts (queue id in range), with what puts keep for them.
        self.states: dict[tuple[str, int], QueuePutState] = {}
        self.valid_topics: set[str] = set()
        self._valid_system_topics: set[str] = set()
        self.closed = False  # through close(), under the put lock
        self.single = SinglePut(
            states=self.states,
            valid_topics=self.valid_topics,
            lock=lock,
            commitlog=commitlog,
            checkpoint=checkpoint,
            offset_index=offset_index,
            keys=self.keys,
            durability=flusher if commitlog.sync_flush else None,
            store_host=store_host,
            max_body=max_body,
        )

    def close(self) -> None:
        """Under the put lock: the store closed; every later put is refused."""
        self.closed = self.single.refusing = True

    def forget_topic(self, topic: str) -> None:
        """Under the put lock: the topic's config changed or it was deleted; its next puts
        pass the config check again (a put that found a state before this takes the general
        path: the state is marked retired)."""
        for key in [key for key in self.states if key[0] == topic]:
            self.states.pop(key).retired = True

    def set_flush_failed(self, failed: bool) -> None:
        """Under the put lock: the last commitlog flush failed (puts are refused until one
        succeeds; the general path answers why) or succeeded again."""
        self.single.refusing = self.closed or failed

    def append_batches(
        self,
        batches: Sequence[tuple[Sequence[NewMessage], bool]],
        on_durable: DurableCallback | None,
        flushed_by: FlushRequests | None,
        *,
        isolate_errors: bool,
    ) -> tuple[list[PutResult], DurableWait | FlushWaiter | None]:
        """Append ``batches`` (each ``(messages of one topic-queue, system)``, each stored all
        or none) in order under one hold of the put lock; one result per batch and, under sync
        flush, one flush request covering every stored batch (None when none was stored).
        With ``isolate_errors`` a batch whose append raised is answered UNKNOWN_ERROR and
        logged, and the others keep their results; otherwise the exception propagates."""
        results: list[PutResult | None] = [self.check(m, system=s) for m, s in batches]
        end_offset = 0
        with self._lock:
            store_timestamp = time.time_ns() // 1_000_000
            for i, (messages, system) in enumerate(batches):
                if results[i] is not None:
                    continue
                try:
                    results[i], end = self._append_locked(messages, system, store_timestamp)
                except Exception as exc:
                    if not isolate_errors:
                        raise
                    log.exception("appending a batch for %s failed", _queue_name(messages[0]))
                    results[i], end = _append_failure(messages[0], exc), 0
                if end:
                    end_offset = end
            waiter = (
                self._durability_request(end_offset, on_durable, flushed_by) if end_offset else None
            )
        return cast(list[PutResult], results), waiter

    def _append_locked(
        self, messages: Sequence[NewMessage], system: bool, store_timestamp: int
    ) -> tuple[PutResult, int]:
        """One checked batch, under the put lock: encode, write, note. Returns its result and
        the commitlog offset after it (0 when nothing was stored)."""
        if self.closed:
            return PutResult(PutStatus.SERVICE_NOT_AVAILABLE, "the store is closed"), 0
        flush_error = self.flusher.error
        if flush_error is not None:
            return PutResult(
                PutStatus.SERVICE_NOT_AVAILABLE,
                f"the last commitlog flush failed ({flush_error}); puts are refused "
                "until a flush succeeds (retried every flush interval)",
            ), 0
        topic, queue_id, sys_flag = batch_head(messages)
        state = self.states.get((topic, queue_id))
        if state is None:
            try:
                rejection = self._check_queue(topic, queue_id, system)
                if rejection is not None:
                    return rejection, 0
                state = self._new_put_state(topic, queue_id)
            except OSError as exc:
                what = f"cannot create topic-queue {topic}/{queue_id}"
                return _not_written(what, exc, topic, queue_id), 0
        queue_offset = state.next_offset
        commitlog = self.commitlog
        try:
            encoded = encode_batch(
                messages,
                topic,
                queue_id,
                queue_offset,
                commitlog.max_offset,
                commitlog.segment_size,
                store_timestamp,
                self._store_host,
                self._max_record_size,
                self._delay_levels if topic == SCHEDULE_TOPIC else None,
            )
        except RejectedMessageError as rejected:
            return PutResult(PutStatus[rejected.status], rejected.detail, topic, queue_id), 0
        # Everything that can fail for want of a disk block or a file descriptor happens before
        # the records are written, or takes itself back: a put is stored whole or not at all.
        try:
            state.queue.reserve(queue_offset, encoded.next_queue_offset - queue_offset)
        except OSError as exc:
            state.queue.let_go()
            what = f"cannot grow consume queue {topic}/{queue_id}"
            return _not_written(what, exc, topic, queue_id), 0
        try:
            commitlog.write_runs(encoded.runs, encoded.heads, encoded.end_offset, store_timestamp)
        except OSError as exc:
            state.queue.let_go()
            return _not_written("cannot write the commitlog", exc, topic, queue_id), 0
        self.note_appended(
            state,
            messages,
            queue_offset,
            encoded.units,
            encoded.next_queue_offset,
            encoded.last_unit_phys_end,
            encoded.phys_offsets,
            encoded.end_offset,
            store_timestamp,
        )
        # A prepared or rolled-back transaction record holds queue offset 0, as RocketMQ reports.
        if sys_flag & SYSFLAG_TRANSACTION_PREPARED:
            queue_offset = 0
        result = stored_result(
            topic, queue_id, queue_offset, encoded.phys_offsets, store_timestamp, self._store_host
        )
        return result, encoded.end_offset

    def note_appended(
        self,
        state: QueuePutState,
        messages: Sequence[NewMessage],
        queue_offset: int,
        units: bytes,
        next_offset: int,
        last_unit_end: int,
        phys_offsets: Sequence[int],
        end_offset: int,
        store_timestamp: int,
    ) -> None:
        """Everything a put notes once its records are written, under the put lock, for both
        put paths: consume-queue units, next queue offset, logics checkpoint time, time index,
        offset index, key index. (Under sync flush the caller then asks for its flush.) The
        single put (:meth:`SinglePut.put`) makes the same notes for its one record in line; a
        note added here must be added there too (a test compares the two paths' files)."""
        if units:
            state.queue.append(queue_offset, units, last_unit_end)
            state.next_offset = next_offset
            self.checkpoint.logics_msg_timestamp = store_timestamp
            time_index = state.time_index
            if next_offset > time_index.next_due:  # most puts add no time index entry
                time_index.append(queue_offset, next_offset - queue_offset, store_timestamp)
        self.offset_index.append_batch(phys_offsets, end_offset)
        index = self.keys.index
        if index is not None:
            try:
                index.on_appended(
                    state.queue.topic, messages, phys_offsets, store_timestamp, end_offset
                )
            except OSError as exc:
                self.keys.stop(exc)

    def _durability_request(
        self,
        end_offset: int,
        on_durable: DurableCallback | None,
        flushed_by: FlushRequests | None,
    ) -> DurableWait | FlushWaiter | None:
        """Under sync flush, the flush request for puts that end at ``end_offset``."""
        if not self.commitlog.sync_flush:
            return None
        if flushed_by is not None and on_durable is not None:
            return flushed_by.request(end_offset, on_durable)
        return self.flusher.request(end_offset, on_durable)

    def _new_put_state(self, topic: str, queue_id: int) -> QueuePutState:
        """The put state of a topic-queue about to get its first put of this run."""
        key = (topic, queue_id)
        queue = self.queues.get_or_create(topic, queue_id)
        time_index = self.time_indexes.get(key)
        if time_index is None:
            time_index = self.time_indexes[key] = QueueTimeIndex.open(
                self._root, queue, self.commitlog
            )
        state = self.states[key] = QueuePutState(queue, time_index)
        return state

    def check(self, messages: Sequence[NewMessage], *, system: bool = False) -> PutResult | None:
        """The rejection a put of ``messages`` would get for its topic, bodies or batch shape,
        or None. (Queue range and sizes known only after encoding are checked by the put.)"""
        valid = self._valid_system_topics if system else self.valid_topics
        return check_batch(messages, valid, self._max_body, system=system)

    def _check_queue(self, topic: str, queue_id: int, system: bool) -> PutResult | None:
        config = self.topics.get(topic)
        if config is None:
            count = self._options.default_queue_count
            config = self.topics.create(topic, max(count, queue_id + 1) if system else count)
        if not system and not config.perm & PERM_WRITE:
            return PutResult(
                PutStatus.MESSAGE_ILLEGAL,
                f"topic {topic} is not writable (perm {config.perm})",
                topic,
                queue_id,
            )
        if 0 <= queue_id < config.write_queue_nums:
            return None
        if system and queue_id >= 0:
            config.read_queue_nums = config.write_queue_nums = queue_id + 1
            self.topics.save()
            return None
        return PutResult(
            PutStatus.MESSAGE_ILLEGAL,
            f"queue {queue_id} does not exist: topic {topic} has "
            f"{config.write_queue_nums} write queues",
            topic,
            queue_id,
        )


def _queue_name(message: NewMessage) -> str:
    return f"{message.topic}/{message.queue_id}"


def _not_written(what: str, error: OSError, topic: str, queue_id: int) -> PutResult:
    """The answer to a put refused for want of a disk block or a file descriptor (nothing was
    written; a retry may succeed once the disk has room or files were closed)."""
    return PutResult(PutStatus.CREATE_MAPPED_FILE_FAILED, f"{what}: {error}", topic, queue_id)


def _append_failure(first: NewMessage, exc: Exception) -> PutResult:
    """The answer to a batch whose append raised (see :meth:`PutPath.append_batches`)."""
    return PutResult(
        PutStatus.UNKNOWN_ERROR,
        f"appending to {_queue_name(first)} failed: {exc!r}",
        first.topic,
        first.queue_id,
    )
