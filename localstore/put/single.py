"""The single put's fast path.

:class:`SinglePut` packs and writes one message of the common shape in one function. A single
put's cost is mostly per-call bookkeeping rather than bytes (the encoder's batch lists and
result tuple, the segment-run writer), so for the common shape the record is packed and written
here without them. What a put notes after the write (units, indexes, checkpoint time) is
``PutPath.note_appended`` (:mod:`localstore.put.path`), the same for both paths; under sync flush
it then asks the store's flush thread for its flush. (The single put makes those notes itself,
in line: see below.) It is given what it writes and notes to (the commitlog, the per-queue
states of :mod:`localstore.put.queue_state`, the checkpoint, the offset index, the key index
feed of :mod:`localstore.put.key_feed`), never the general path itself. The common shape:

* a user topic (not ``system``) that passed validation, to a queue already written to;
* no sys flag (no transaction, no compression), IPv4 born and store hosts;
* a body of 1 to ``max_message_size`` bytes, properties of at most ``MAX_PROPERTIES_BYTES``,
  none of them the store's own (``PROPERTY_PUT_RECORDS``);
* room for the record in the last commitlog segment, with a blank record's 8 bytes behind it,
  and no segment due to be prepared;
* room for its unit in the consume queue's last file, within the blocks already reserved (the
  general path reserves them before it writes, so a put never leaves a record without a unit).

Anything else answers None and the caller takes the general path (``MessageStore.append`` with
``encode_batch``), which owns every other rule: rejections and their texts, blank records and
segment rolls, IPv6 hosts, transactions, the schedule topic's tag codes, and a disk that refuses
blocks (``CREATE_MAPPED_FILE_FAILED``; nothing was written). Both paths write the same bytes (a
v1 record, or v2 for topics over 127 bytes: :mod:`localstore.record.layout`, the properties text
by :func:`~localstore.record.properties.encode_properties`); a test compares them.

Calls are the single put's main cost, so where the common case allows, the put writes without
them: the record into the commitlog's append window (:mod:`localstore.commitlog.log`), the unit
into the consume queue's last file (:mod:`localstore.queue.consume_queue`), the offset index's
count when no entry is due (:mod:`localstore.commitlog.offset_index`), and
``PutPath.note_appended``'s notes in line; anything these do not allow goes through the owners'
methods.

Thread safety: :meth:`SinglePut.put` holds the store's put lock from reading the write position
to noting the unit, as the general path does.
"""

from __future__ import annotations

import threading
import time
import zlib
from typing import TYPE_CHECKING

from localstore.put.queue_state import QueuePutState
from localstore.queue.consume_queue import UNIT, UNIT_SIZE
from localstore.record.codec import NewMessage
from localstore.record.layout import (
    HEADER_V4_AFTER_MAGIC,
    MAX_PROPERTIES_BYTES,
    SIZE_AND_MAGIC,
)
from localstore.record.properties import PROPERTY_PUT_RECORDS, PROPERTY_TAGS, encode_properties
from localstore.record.tags import _TAG_CODES, tag_code
from localstore.results import PutResult, stored_result

if TYPE_CHECKING:
    from localstore.commitlog.flush import DurableWait, FlushService, FlushWaiter
    from localstore.commitlog.log import CommitLog
    from localstore.commitlog.offset_index import CommitLogOffsetIndex
    from localstore.put.key_feed import KeyIndexFeed
    from localstore.recovery.checkpoint import Checkpoint


_crc32 = zlib.crc32

# The bound of the sizes in each magic's shared table of first 8 bytes (QueuePutState.firsts,
# which this path fills): at most 16,384 sizes a magic, about 1.6 MB; a size beyond the bound
# is packed each time.
_FIRSTS_LIMIT = 16_384


class SinglePut:
    """The fast path of ``MessageStore.put`` (see the module docstring)."""

    __slots__ = (
        "_checkpoint",
        "_commitlog",
        "_durability",
        "_keys",
        "_lock",
        "_max_body",
        "_offset_index",
        "_states",
        "_store_host",
        "_valid_topics",
        "refusing",
    )

    def __init__(
        self,
        *,
        states: dict[tuple[str, int], QueuePutState],
        valid_topics: set[str],
        lock: threading.Lock,
        commitlog: CommitLog,
        checkpoint: Checkpoint,
        offset_index: CommitLogOffsetIndex,
        keys: KeyIndexFeed,
        durability: FlushService | None,
        store_host: bytes,
        max_body: int,
    ):
        self._states = states
        self._valid_topics = valid_topics
        self._lock = lock
        self._commitlog = commitlog
        # What a put notes besides its queue (PutPath.note_appended's notes, made in line).
        self._checkpoint = checkpoint
        self._offset_index = offset_index
        self._keys = keys  # shared with the general path: a swap or a stop reaches both
        self._durability = durability  # under sync flush: the flush thread, for blocking puts
        self._store_host = store_host if len(store_host) == 8 else None
        self._max_body = max_body
        # Set by the store under the put lock while it refuses puts (closed, or its last
        # commitlog flush failed): every put then takes the general path, which answers why.
        self.refusing = False

    def put(self, message: NewMessage) -> tuple[PutResult, DurableWait | FlushWaiter | None] | None:
        """Store ``message`` if it has the common shape; None when the general path must."""
        topic = message.topic
        queue_id = message.queue_id
        state = self._states.get((topic, queue_id))
        body = message.body
        born_host = message.born_host
        store_host = self._store_host
        if (
            state is None
            or store_host is None
            or message.sys_flag
            or len(born_host) != 8
            or not 0 < len(body) <= self._max_body
            or topic not in self._valid_topics
        ):
            return None
        properties = message.properties
        if properties:
            props = encode_properties(properties).encode()
            if len(props) > MAX_PROPERTIES_BYTES or PROPERTY_PUT_RECORDS in properties:
                return None  # the general path refuses it, saying why
            tags = properties.get(PROPERTY_TAGS)
            code = _TAG_CODES.get(tags)
            if code is None:
                code = tag_code(tags)
        else:
            props = b""
            code = 0
        body_len = len(body)
        props_len = len(props)
        size = state.plain_size + body_len + props_len
        crc = _crc32(body) & 0x7FFFFFFF
        tail = state.tails.get(props_len)
        if tail is None:
            tail = state.tail(props_len)
        firsts = state.firsts
        first = firsts.get(size)
        if first is None:
            first = SIZE_AND_MAGIC.pack(size, state.magic)
            if len(firsts) < _FIRSTS_LIMIT:
                firsts[size] = first
        lock = self._lock
        lock.acquire()  # not ``with``: acquire and release cost half as much on this path
        try:
            if self.refusing or state.retired:  # retired: found before a topic change
                return None
            queue_offset = state.next_offset
            # The unit must follow the last one in the queue's last file, within its reserved
            # blocks (ConsumeQueue.append's common case, written below without the call), or
            # the general path takes the put: it reserves the unit's room before the record
            # is written, so that no record is left without its unit.
            queue = state.queue
            files = queue.segments.segments
            units = files[-1] if files else None
            if (
                units is None
                or units.start_offset + units.wrote_position != queue_offset * UNIT_SIZE
                or units.wrote_position + UNIT_SIZE > units.reserved
            ):
                return None
            try:  # taken now: the pool of open files may close the file, never this mapping
                unit_view = units.view
            except OSError:  # it could not be mapped again: the general path answers
                return None
            commitlog = self._commitlog
            position = commitlog.max_offset
            store_timestamp = time.time_ns() // 1_000_000
            rest = b"".join(
                (
                    # the IPv4 header but TOTALSIZE and MAGICCODE, written last
                    HEADER_V4_AFTER_MAGIC.pack(
                        crc,
                        queue_id,
                        message.flag,
                        queue_offset,
                        position,
                        0,
                        message.born_timestamp or store_timestamp,
                        born_host,
                        store_timestamp,
                        store_host,
                        message.reconsume_times,
                        message.prepared_transaction_offset,
                        body_len,
                    ),
                    body,
                    tail,
                    props,
                )
            )
            end = position + size
            segment = commitlog.window
            if end <= commitlog.window_end and segment is not None:
                # Inside the commitlog's append window: written here, in the order its module
                # docstring gives, without the two calls append_record makes.
                at = position - segment.start_offset
                view = segment.view
                view[at + 8 : at + size] = rest
                view[at : at + 8] = first
                segment.wrote_position = at + size
                commitlog.last_store_timestamp = store_timestamp
                commitlog.max_offset = end
            else:
                try:
                    if not commitlog.append_record(first, rest, end, store_timestamp):
                        return None
                except OSError:  # no disk blocks (nothing written): the general path says so
                    return None
            # PutPath.note_appended's notes for one record, made here without its call.
            at = units.wrote_position
            UNIT.pack_into(unit_view, at, position, size, code)
            units.wrote_position = at + UNIT_SIZE
            queue.max_phys_offset = end
            state.next_offset = queue_offset + 1
            self._checkpoint.logics_msg_timestamp = store_timestamp
            time_index = state.time_index
            if queue_offset >= time_index.next_due:  # most puts add no time index entry
                time_index.append(queue_offset, 1, store_timestamp)
            offsets = self._offset_index  # no entry due: append_batch's one comparison, here
            if position == offsets.noted_end and position < offsets.next_due:
                offsets.records += 1
                offsets.noted_end = end
            else:
                offsets.append_batch((position,), end)
            keys = self._keys
            index = keys.index
            if index is not None:
                try:
                    index.on_appended(topic, (message,), (position,), store_timestamp, end)
                except OSError as exc:
                    keys.stop(exc)
            durability = self._durability
            waiter = durability.request(end, None) if durability is not None else None
        finally:
            lock.release()
        return stored_result(
            topic, queue_id, queue_offset, [position], store_timestamp, store_host
        ), waiter
