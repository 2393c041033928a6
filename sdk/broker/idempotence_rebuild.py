"""Refill the producer windows (:mod:`sdk.broker.idempotence`) from the tail of the commitlog
when a broker opens, as Kafka rebuilds its producer state from its log.

How far back: the last ``idempotence_rebuild_bytes`` of the log (64 MiB by default;
:class:`~sdk.broker.service.BrokerOptions`), from the first record that starts there (the
commitlog's offset index gives it). A producer retries a batch within seconds of a lost answer,
and a restarted broker's tail holds every batch that was in flight when it stopped, so the tail
covers what retries ask for; the window bounds keep only the newest stamps of it anyway.

Bounded work, whatever the store's size: the tail's bytes are searched for the stamp property's
name (a C-speed search over the mapped segments); only where it occurs are the record starts
walked (sizes only), and of the records holding it only the newest ``idempotence_max_stamps``
(all the windows can keep) are decoded, without their bodies. A stamp names its
batch's size: the batch's receipt (first queue offset, each message's commitlog offset from
its consume queue, store host and time) is rebuilt as the send answered it, with status
``PUT_OK`` (it is in the log). A record whose stamp does not parse, or whose batch's units are
gone from its consume queue, is skipped. Records are put in the windows in log order, so
where a stamp appears twice the first (the original) answers.

The key of a stamp is the topic and queue its producer sent to: a delayed message is stored under
``SCHEDULE_TOPIC_XXXX`` and a half message under ``RMQ_SYS_TRANS_HALF_TOPIC``, both with the
topic and queue the producer named in ``REAL_TOPIC``/``REAL_QID``.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterator

from localstore import MessageStore
from localstore.record.codec import (
    PROPERTY_REAL_QUEUE_ID,
    PROPERTY_REAL_TOPIC,
    RecordError,
    StoredMessage,
    decode_record,
)
from localstore.record.layout import BLANK_MAGIC, SIZE_AND_MAGIC
from localstore.record.tags import SCHEDULE_TOPIC
from sdk.broker.idempotence import ProducerWindows, parse_stamp_value
from sdk.broker.transaction_records import HALF_TOPIC
from sdk.message import PROPERTY_PRODUCER_SEQ
from sdk.transport.models import SendResult

__all__ = ["DEFAULT_REBUILD_BYTES", "rebuild_windows"]

log = logging.getLogger(__name__)

DEFAULT_REBUILD_BYTES = 64 * 1024 * 1024
_STAMP_NAME = re.compile(re.escape(f"{PROPERTY_PRODUCER_SEQ}\x01".encode()))
_REDIRECTED_TOPICS = frozenset({SCHEDULE_TOPIC, HALF_TOPIC})


def rebuild_windows(store: MessageStore, windows: ProducerWindows, tail_bytes: int) -> int:
    """Put the newest stamps found in the last ``tail_bytes`` of ``store``'s log in
    ``windows`` (at most as many as they hold in all), oldest first; answers how many stamped
    records were taken. Logged at INFO."""
    starts = list(_stamped_record_starts(store, tail_bytes))
    taken: list[StoredMessage] = []
    for view, pos in reversed(starts):  # newest first: older ones would leave the windows
        if len(taken) >= windows.max_stamps:
            break
        try:
            record = decode_record(view, pos, body=False)
        except RecordError:
            log.warning("idempotence rebuild: an undecodable record, skipped")
            continue
        if PROPERTY_PRODUCER_SEQ in record.properties:
            taken.append(record)
    found = sum(_remember(store, windows, record) for record in reversed(taken))
    if found:
        log.info(
            "rebuilt the idempotent-produce windows from the last %d bytes of the log: "
            "%d stamps of %d producers",
            tail_bytes,
            windows.stamps,
            windows.producers,
        )
    return found


def _stamped_record_starts(
    store: MessageStore, tail_bytes: int
) -> Iterator[tuple[memoryview, int]]:
    """Where the records of the log's tail that hold the stamp property's name start (their
    segment's mapping and the position in it), in log order."""
    commitlog = store.commitlog
    end = commitlog.confirmed_offset
    position = store.offset_index.record_boundary_at_or_after(max(0, end - tail_bytes))
    while position < end:
        located = commitlog.segment_view(position)
        if located is None:
            return
        view, pos = located
        limit = min(len(view), pos + end - position)
        hits = [match.start() for match in _STAMP_NAME.finditer(view, pos, limit)]
        for start in _records_holding(view, pos, limit, hits):
            yield view, start
        position += len(view) - pos  # the next segment's start


def _records_holding(view: memoryview, pos: int, limit: int, hits: list[int]) -> Iterator[int]:
    """Walk the records of one segment from ``pos`` (a record start) by their sizes, and give
    the start of each one that holds a position of ``hits`` (ascending)."""
    next_hit = 0
    while pos < limit and next_hit < len(hits):
        if pos + SIZE_AND_MAGIC.size > limit:
            return
        size, magic = SIZE_AND_MAGIC.unpack_from(view, pos)
        if magic == BLANK_MAGIC or size <= 0:
            return
        end = pos + size
        if hits[next_hit] < end:
            yield pos
            while next_hit < len(hits) and hits[next_hit] < end:
                next_hit += 1
        pos = end


def _remember(store: MessageStore, windows: ProducerWindows, record: StoredMessage) -> bool:
    """Put the stamp of ``record`` (the last of its batch) in ``windows``; False when it holds
    none that can be answered."""
    properties = record.properties
    value = properties.get(PROPERTY_PRODUCER_SEQ)
    parsed = None if value is None else parse_stamp_value(value)
    if parsed is None:
        return False
    stamp, count = parsed
    topic, queue_id = record.topic, record.queue_id
    if topic in _REDIRECTED_TOPICS:
        real_queue = properties.get(PROPERTY_REAL_QUEUE_ID, "")
        topic = properties.get(PROPERTY_REAL_TOPIC, "")
        if not topic or not real_queue.isdigit():
            return False
        queue_id = int(real_queue)
    phys_offsets = _batch_phys_offsets(store, record, count)
    if phys_offsets is None:
        return False
    result = SendResult(
        "PUT_OK",
        "",
        record.topic,
        record.queue_id,
        record.queue_offset - count + 1,
        phys_offsets,
        record.store_host_raw.hex().upper(),
        record.store_timestamp,
    )
    windows.remember(stamp, topic, queue_id, result)
    return True


def _batch_phys_offsets(store: MessageStore, last: StoredMessage, count: int) -> list[int] | None:
    """The commitlog offsets of the batch of ``count`` that ends with ``last``, from its
    consume queue; None when its units are gone or do not end at ``last``."""
    if count == 1:
        return [last.phys_offset]
    queue = store.consume_queue(last.topic, last.queue_id)
    first = last.queue_offset - count + 1
    if queue is None or first < queue.min_offset or last.queue_offset >= queue.max_offset:
        return None
    offsets = [queue.unit_head(queue_offset)[0] for queue_offset in range(first, first + count)]
    return offsets if offsets[-1] == last.phys_offset else None
