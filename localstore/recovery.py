"""Finding the end of the commitlog on open, and dispatching records into consume queues.

On open the store scans the commitlog from where the consume queues end (the largest
``max_phys_offset`` of any queue: every record before it was dispatched) to the first position
that does not hold a valid record. Records found there are dispatched, so consume queues are
complete; everything after the last valid record is cut off. After a clean close the scan reads a
single position. After a crash (``abort`` present) body CRCs are checked too, so a torn or
corrupt tail record ends the log instead of being served.

Dispatch is idempotent: a record whose end is not past the queue's ``max_phys_offset``, or whose
queue offset the queue already holds, is skipped.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from localstore.codec import (
    BLANK_MAGIC,
    INT,
    MAGIC_V1,
    MAGIC_V2,
    SYSFLAG_TRANSACTION_MASK,
    SYSFLAG_TRANSACTION_PREPARED,
    SYSFLAG_TRANSACTION_ROLLBACK,
    RecordError,
    StoredMessage,
    body_crc,
    decode_record,
)
from localstore.commitlog import CommitLog
from localstore.consume_queue import UNIT, ConsumeQueue
from localstore.errors import CorruptStoreError
from localstore.index_service import IndexService
from localstore.tags import SCHEDULE_TOPIC, schedule_tag_code, tag_code


class QueueRegistry:
    """Every consume queue of the store, by (topic, queue id), created on demand."""

    def __init__(self, directory: Path, entries_per_file: int):
        self.directory = directory
        self.entries_per_file = entries_per_file
        self.queues: dict[tuple[str, int], ConsumeQueue] = {}

    def load(self) -> None:
        if not self.directory.is_dir():
            return
        for topic in sorted(os.listdir(self.directory)):
            topic_dir = self.directory / topic
            if not topic_dir.is_dir():
                continue
            for name in sorted(os.listdir(topic_dir)):
                if name.isdigit():
                    queue = self._make(topic, int(name))
                    queue.load()

    def _make(self, topic: str, queue_id: int) -> ConsumeQueue:
        queue = ConsumeQueue(
            self.directory / topic / str(queue_id), topic, queue_id, self.entries_per_file
        )
        self.queues[(topic, queue_id)] = queue
        return queue

    def get(self, topic: str, queue_id: int) -> ConsumeQueue | None:
        return self.queues.get((topic, queue_id))

    def get_or_create(self, topic: str, queue_id: int) -> ConsumeQueue:
        queue = self.queues.get((topic, queue_id))
        return queue if queue is not None else self._make(topic, queue_id)

    def dispatch_from(self) -> int:
        """Commitlog offset up to which every record was dispatched."""
        return max((q.max_phys_offset for q in self.queues.values()), default=0)

    def flush(self) -> None:
        for queue in list(self.queues.values()):
            queue.flush()

    def close(self) -> None:
        for queue in self.queues.values():
            queue.close()
        self.queues.clear()


@dataclass(slots=True)
class RecoveryReport:
    start_offset: int
    end_offset: int
    records_scanned: int
    records_dispatched: int


def iter_records(commitlog: CommitLog, start: int, check_crc: bool) -> Iterator[StoredMessage]:
    """Valid records from ``start`` until the first position that holds none."""
    position = start
    while True:
        segment = commitlog.segments.find(position)
        if segment is None:
            return
        view, pos = segment.view, position - segment.start_offset
        if pos + 8 > segment.size:
            return
        total, magic = INT.unpack_from(view, pos)[0], INT.unpack_from(view, pos + 4)[0]
        if magic == BLANK_MAGIC:
            position = segment.end_offset
            continue
        if magic not in (MAGIC_V1, MAGIC_V2) or total <= 0 or pos + total > segment.size:
            return
        try:
            message = decode_record(view, pos)
        except RecordError:
            return
        if message.phys_offset != position:
            return
        if check_crc and body_crc(message.body) != message.body_crc:
            return
        yield message
        position += total


def dispatch(queues: QueueRegistry, message: StoredMessage, delay_levels: tuple[int, ...]) -> bool:
    """Add the consume-queue unit of one record unless the queue has it. True if added."""
    if message.sys_flag & SYSFLAG_TRANSACTION_MASK in (
        SYSFLAG_TRANSACTION_PREPARED,
        SYSFLAG_TRANSACTION_ROLLBACK,
    ):
        return False
    queue = queues.get_or_create(message.topic, message.queue_id)
    end = message.phys_offset + message.store_size
    if end <= queue.max_phys_offset or message.queue_offset < queue.max_offset:
        return False
    if queue.segments.segments and message.queue_offset > queue.max_offset:
        raise CorruptStoreError(
            f"consume queue {message.topic}/{message.queue_id} ends at queue offset "
            f"{queue.max_offset} but the commitlog record at {message.phys_offset} has "
            f"{message.queue_offset}: units are missing"
        )
    if message.topic == SCHEDULE_TOPIC:
        code = schedule_tag_code(
            message.store_timestamp, message.properties.get("DELAY"), delay_levels
        )
    else:
        code = tag_code(message.properties.get("TAGS"))
    queue.append(
        message.queue_offset, UNIT.pack(message.phys_offset, message.store_size, code), end
    )
    return True


def recover(
    commitlog: CommitLog,
    queues: QueueRegistry,
    *,
    check_crc: bool,
    delay_levels: tuple[int, ...],
    index: IndexService | None = None,
) -> RecoveryReport:
    """Find the commitlog's end, dispatch the records the queues (and the index) lack, cut off
    the rest."""
    start = queues.dispatch_from()
    if index is not None:  # index files lost or dropped after a crash are rebuilt too
        start = min(start, index.end_phy_offset)
    start = max(start, commitlog.min_offset)
    files_end = commitlog.segments.last.end_offset if commitlog.segments.last else 0
    start = min(start, files_end)
    scanned = dispatched = 0
    end = start
    for message in iter_records(commitlog, start, check_crc):
        scanned += 1
        dispatched += dispatch(queues, message, delay_levels)
        if index is not None:
            index.dispatch(message)
        end = message.phys_offset + message.store_size
    if scanned == 0:
        end = _skip_blank(commitlog, start)
    commitlog.set_end(end)
    return RecoveryReport(start, end, scanned, dispatched)


def _skip_blank(commitlog: CommitLog, position: int) -> int:
    """A log whose last record ends its segment continues at the next segment's start."""
    segment = commitlog.segments.find(position)
    if segment is None:
        return position
    pos = position - segment.start_offset
    if pos + 8 <= segment.size and INT.unpack_from(segment.view, pos + 4)[0] == BLANK_MAGIC:
        return segment.end_offset
    return position
