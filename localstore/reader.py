"""The read path: messages of one topic-queue from a queue offset (RocketMQ's ``getMessage``).

Bounds first, with RocketMQ's statuses and next offsets (``[min, max)`` are the queue's readable
offsets, ``max`` the next to be written):

    no such queue            NO_MATCHED_LOGIC_QUEUE  next 0
    max == 0                 NO_MESSAGE_IN_QUEUE     next 0
    offset < min             OFFSET_TOO_SMALL        next min
    offset == max            OFFSET_OVERFLOW_ONE     next offset
    offset > max             OFFSET_OVERFLOW_BADLY   next max
    otherwise                FOUND or NO_MATCHED_MESSAGE, next = one past the last unit examined

The scan reads consume-queue units of one file, skips units whose tag code does not match,
re-checks the tag string of candidates, and stops at ``max_count`` messages or ``max_bytes``
(at least one message is always returned). With a tag filter it examines at most
``max(800, max_count)`` units per call, so a selective filter cannot make one get walk the
whole queue. A unit whose record readers may not see yet (sync flush: not yet durable) is
treated as not written.

Without a tag filter the units alone decide which records a get takes, so each segment's run of
them is decoded in one call (:mod:`localstore.record.run_decoder`); with one, each candidate is
decoded to re-check its tag string.

``raw=True`` answers with the stored records' bytes instead of decoded messages: adjacent
records are copied as one slice, so a batch of one queue's consecutive records costs one copy.

Damaged records: a unit whose record does not decode (or is not stored where the unit says,
or names another queue or queue offset in its header), and a unit that cannot point at a record
(a negative offset; a size that is not positive, for a raw copy; an offset past the log's end,
or below its min offset after a unit above it: units are in log order, so only a queue's
leading units can point at records retention deleted, MESSAGE_WAS_REMOVING) stops the get
before it. The records
before it are answered with ``GetResult.damaged`` naming it (a
:class:`~localstore.errors.DamagedRecordError`: topic, queue id, queue offset, commitlog offset)
and ``next_offset`` at it; a get that meets it before any record to answer raises that error.
The store never steps over it itself: :class:`~localstore.store.MessageStore` first
rebuilds the unit from the log if the unit is what is damaged
(:mod:`localstore.recovery.unit_repair`) and reads again; else the reader decides (a consumer
logs it, counts it and goes on at ``queue_offset + 1``). An unfiltered raw get copies records
without decoding them, so it sees no damage unless asked to ``check`` (or ``check_crc``): it
then decodes every record it answers, as a decoded get does. ``check_crc``
(``StoreOptions.check_crc_on_read``) also treats a record whose body fails its CRC as damaged;
off, no get reads the CRC.
"""

from __future__ import annotations

import struct
from typing import Any

from localstore.commitlog.log import CommitLog
from localstore.errors import DamagedRecordError
from localstore.index.service import KeyIndex
from localstore.queue.consume_queue import UNIT, UNIT_SIZE, ConsumeQueue
from localstore.record.codec import (
    PROPERTY_TAGS,
    RecordError,
    StoredMessage,
    body_crc,
    decode_record,
    read_properties,
)
from localstore.record.message_id import parse_offset_msg_id
from localstore.record.run_decoder import MISPLACED, RunDecodeError, decode_run, misqueued
from localstore.record.tags import TagFilter
from localstore.results import FOUND, GetResult, GetStatus
from quiver_errors import InvalidArgumentError

_NO_VIEW = memoryview(b"")  # before the first segment is located
FILTER_SCAN_UNITS = 800  # maxFilterMessageSize (16000 bytes) / 20
_MATCH_ALL = TagFilter.parse(None)
_NO_SIZE = "the unit's size is not positive: it cannot be a record's"
_SIZES_STRUCTS: dict[int, struct.Struct] = {}


def _sizes_struct(count: int) -> struct.Struct:
    """Reads the size field of ``count`` consecutive units in one call."""
    known = _SIZES_STRUCTS.get(count)
    if known is None:
        known = struct.Struct(">" + "8xi8x" * count)
        if count <= 1024:
            _SIZES_STRUCTS[count] = known
    return known


def visible_max_offset(queue: ConsumeQueue, commitlog: CommitLog) -> int:
    """The queue's max offset counting only units whose records readers may see.

    Under async flush every unit is visible (its record was written before it). Under sync
    flush units are in commitlog order, so the visible ones are a prefix: check the last unit
    (the common case), else binary-search the first unit past the flushed end."""
    end = queue.max_offset
    if not commitlog.sync_flush:
        return end
    confirmed_offset = commitlog.confirmed_offset
    floor = queue.min_offset
    if end <= floor:
        return end
    phys, size = queue.unit_head(end - 1)
    if phys + size <= confirmed_offset:
        return end
    lo, hi = floor, end - 1  # the first invisible unit is in [lo, hi]
    while lo < hi:
        mid = (lo + hi) // 2
        phys, size = queue.unit_head(mid)
        if phys + size <= confirmed_offset:
            lo = mid + 1
        else:
            hi = mid
    return lo


def message_at(commitlog: CommitLog, phys_offset: int) -> StoredMessage:
    """The message whose record starts at commitlog offset ``phys_offset``; :class:`RecordError`
    when no visible record starts there (past the confirmed end, or deleted by retention)."""
    size = commitlog.record_size_at(phys_offset)
    located = commitlog.segment_view(phys_offset)
    if phys_offset + size > commitlog.confirmed_offset or located is None:
        raise RecordError(f"no record at commitlog offset {phys_offset}")
    message = decode_record(located[0], located[1])
    if message.phys_offset != phys_offset:
        raise RecordError(f"no record starts at commitlog offset {phys_offset}")
    return message


def message_or_none(commitlog: CommitLog, phys_offset: int) -> StoredMessage | None:
    """:func:`message_at`, None where no visible record starts (a key index's resolver)."""
    if phys_offset < commitlog.min_offset:
        return None
    try:
        return message_at(commitlog, phys_offset)
    except RecordError:
        return None


def message_by_offset_msg_id(commitlog: CommitLog, message_id: str) -> StoredMessage | None:
    """The stored message whose offsetMsgId is ``message_id``, None when it is not one."""
    try:
        _, phys_offset = parse_offset_msg_id(message_id)
    except ValueError:
        return None
    message = message_or_none(commitlog, phys_offset) if phys_offset >= 0 else None
    if message is not None and message.offset_msg_id == message_id.upper():
        return message
    return None


def query_uniq_key(
    index: KeyIndex, topics: set[str], commitlog: CommitLog, uniq_key: str
) -> list[StoredMessage]:
    """The messages of any of ``topics`` whose UNIQ_KEY is ``uniq_key``, through the index."""
    found: list[StoredMessage] = []
    for topic in sorted(topics):
        found.extend(
            index.query(topic, uniq_key, 64, 0, 2**63 - 1, lambda p: message_or_none(commitlog, p))
        )
    return [m for m in found if m.msg_id == uniq_key]


def read_filter(max_count: int, tags: str | TagFilter | None) -> TagFilter:
    """The tag filter a get with these limits reads with. Raises ValueError for a get the
    store refuses: ``max_count`` below 1, a tag expression naming no tag."""
    if max_count <= 0:
        raise InvalidArgumentError(f"max_count must be positive, got {max_count}")
    if tags is None:
        return _MATCH_ALL
    return tags if isinstance(tags, TagFilter) else TagFilter.parse(tags)


def caught_up(queue: ConsumeQueue | None, commitlog: CommitLog, queue_offset: int) -> bool:
    """Whether :func:`get_messages` at ``queue_offset`` would hand out nothing and report
    nothing to act on: NO_MATCHED_LOGIC_QUEUE, NO_MESSAGE_IN_QUEUE or OFFSET_OVERFLOW_ONE (a
    reader that has read everything). Reads no unit: a parked long poll asks this of every
    queue it watches."""
    if queue is None:
        return True
    max_offset = visible_max_offset(queue, commitlog)
    return max_offset == 0 or queue.min_offset <= queue_offset == max_offset


def get_messages(
    commitlog: CommitLog,
    queue: ConsumeQueue | None,
    queue_offset: int,
    max_count: int,
    max_bytes: int,
    tag_filter: TagFilter,
    raw: bool = False,
    check: bool = False,
    check_crc: bool = False,
) -> GetResult:
    """The get (see the module docstring). ``check``: decode every record even for a raw get;
    ``check_crc``: also check each record's body CRC. Raises :class:`DamagedRecordError` for
    a damaged record met before any record to answer."""
    if queue is None:
        return GetResult(GetStatus.NO_MATCHED_LOGIC_QUEUE, 0, 0, 0)
    min_offset = queue.min_offset
    max_offset = visible_max_offset(queue, commitlog)
    if max_offset == 0:
        return GetResult(GetStatus.NO_MESSAGE_IN_QUEUE, 0, min_offset, max_offset)
    if queue_offset < min_offset:
        return GetResult(GetStatus.OFFSET_TOO_SMALL, min_offset, min_offset, max_offset)
    if queue_offset == max_offset:
        return GetResult(GetStatus.OFFSET_OVERFLOW_ONE, queue_offset, min_offset, max_offset)
    if queue_offset > max_offset:
        return GetResult(GetStatus.OFFSET_OVERFLOW_BADLY, max_offset, min_offset, max_offset)

    matches_all = tag_filter.matches_all
    limit = max_count if matches_all else max(FILTER_SCAN_UNITS, max_count)
    units = queue.read_units(queue_offset, min(limit, max_offset - queue_offset))
    copy_only = raw and not (check or check_crc)
    if copy_only and matches_all:
        run = _contiguous_bytes(commitlog, units, max_count, max_bytes)
        if run is not None:
            data, count = run
            return GetResult(FOUND, queue_offset + count, min_offset, max_offset, [], data, count)
    scan = _Scan(commitlog, queue, queue_offset, tag_filter, max_count, max_bytes)
    if copy_only:
        examined = scan.collect_ranges(units)
    else:
        examined = scan.decode(units)
        if check_crc:
            examined = scan.check_crcs(units, examined)
        if raw:
            scan.ranges_of_messages()
    del units
    if scan.damaged is not None and not scan.count:
        raise scan.damaged
    status = (
        FOUND
        if scan.count
        else (GetStatus.MESSAGE_WAS_REMOVING if scan.removed else GetStatus.NO_MATCHED_MESSAGE)
    )
    result = GetResult(
        status,
        queue_offset + examined,
        min_offset,
        max_offset,
        scan.messages,
        scan.raw_bytes() if raw else b"",
        scan.count,
        scan.damaged,
    )
    return result


def _contiguous_bytes(
    commitlog: CommitLog, units: memoryview, max_count: int, max_bytes: int
) -> tuple[bytes, int] | None:
    """The common unfiltered raw get in one step: when the first ``max_count`` units' records
    lie back to back in one segment (a queue written alone or in batches) and fit
    ``max_bytes``, they are one copy. Returns (their bytes, how many), or None when the scan
    must decide (records of other queues between, a segment end, a deleted segment, ...)."""
    count = min(len(units) // UNIT_SIZE, max_count)
    if count < 2:
        return None
    first, _, _ = UNIT.unpack_from(units, 0)
    last, last_size, _ = UNIT.unpack_from(units, (count - 1) * UNIT_SIZE)
    span = last + last_size - first
    if span > max_bytes or first < commitlog.min_offset:
        return None
    if sum(_sizes_struct(count).unpack_from(units, 0)) != span:  # others' records between
        return None
    located = commitlog.segment_view(first)
    if located is None:
        return None
    view, start = located
    if start + span > len(view):  # crosses a segment end
        return None
    return bytes(view[start : start + span]), count


class _Scan:
    """Walks units, collecting matching records within the count and byte budgets.

    The loops are written out for each case (filtered decode, unfiltered decode, raw) because
    they are the read path's hot loop: a helper call per message would cost more than the work
    it does.
    """

    def __init__(
        self,
        commitlog: CommitLog,
        queue: ConsumeQueue,
        first: int,
        tag_filter: TagFilter,
        max_count: int,
        max_bytes: int,
    ):
        self.commitlog = commitlog
        self.queue = queue
        self.first = first
        self.filter = tag_filter
        self.max_count = max_count
        self.max_bytes = max_bytes
        self.messages: list[StoredMessage] = []
        # [segment view, start, end) of raw records, positions within the segment
        self.ranges: list[list[Any]] = []
        self.count = 0
        self.removed = False
        self.damaged: DamagedRecordError | None = None  # where the scan stopped, if it did

    def decode(self, units: memoryview) -> int:
        """Decode matching records; returns how many units were examined."""
        if self.filter.matches_all:
            return self._decode_all(units)
        codes = self.filter.codes
        tag_matches = self.filter.tag_matches
        topic, queue_id, first = self.queue.topic, self.queue.queue_id, self.first
        commitlog = self.commitlog
        min_phys = commitlog.min_offset
        max_count, max_bytes = self.max_count, self.max_bytes
        messages = self.messages
        count = total = examined = 0
        view: memoryview | None = None
        seg_start = seg_end = 0
        for phys, size, code in UNIT.iter_unpack(units):
            if code not in codes:
                examined += 1
                continue
            if count and total + size > max_bytes:
                break
            examined += 1
            if not seg_start <= phys < seg_end:
                located = commitlog.segment_view(phys) if phys >= min_phys else None
                if located is None:
                    why = self._unlocated(phys, view is not None)
                    if why is not None:
                        return self._stop_at(examined - 1, phys, why, count)
                    self.removed = True
                    continue
                view = located[0]
                seg_start = phys - located[1]
                seg_end = seg_start + len(view)
            try:
                message = decode_record(view, phys - seg_start)  # type: ignore[arg-type]
            except RecordError as exc:
                return self._stop_at(examined - 1, phys, str(exc), count)
            if message.phys_offset != phys:
                return self._stop_at(examined - 1, phys, MISPLACED, count)
            if (
                message.topic != topic
                or message.queue_id != queue_id
                or message.queue_offset != first + examined - 1
            ):
                return self._stop_at(
                    examined - 1,
                    phys,
                    misqueued(message.topic, message.queue_id, message.queue_offset),
                    count,
                )
            if not tag_matches(message.properties.get(PROPERTY_TAGS)):
                continue
            messages.append(message)
            count += 1
            total += size
            if count >= max_count:
                break
        del view
        self.count = count
        return examined

    def _decode_all(self, units: memoryview) -> int:
        """:meth:`decode` without a tag filter: every unit within the budgets is taken, so the
        units alone decide which records; each segment's run of them is then decoded in one
        call (:func:`~localstore.record.run_decoder.decode_run`). Returns the units examined."""
        commitlog = self.commitlog
        min_phys = commitlog.min_offset
        max_count, max_bytes = self.max_count, self.max_bytes
        count = total = examined = 0
        view = _NO_VIEW
        seg_start = seg_end = 0
        positions: list[int] = []  # of the current run, within its segment
        run_first = 0  # the index of the run's first unit
        for phys, size, _ in UNIT.iter_unpack(units):
            if count and total + size > max_bytes:
                break
            examined += 1
            if not seg_start <= phys < seg_end:
                if positions:
                    if not self._decode_run(view, positions, seg_start, run_first):
                        return self._stopped()
                    positions = []
                located = commitlog.segment_view(phys) if phys >= min_phys else None
                if located is None:
                    why = self._unlocated(phys, count > 0)
                    if why is not None:
                        self.damaged = self._damaged(examined - 1, phys, why)
                        self.count = count
                        return examined - 1
                    self.removed = True
                    seg_start = seg_end = 0
                    continue
                view = located[0]
                seg_start = phys - located[1]
                seg_end = seg_start + len(view)
                run_first = examined - 1
            positions.append(phys - seg_start)
            count += 1
            total += size
            if count >= max_count:
                break
        if positions and not self._decode_run(view, positions, seg_start, run_first):
            return self._stopped()
        del view
        self.count = count
        return examined

    def _decode_run(
        self, view: memoryview, positions: list[int], seg_start: int, run_first: int
    ) -> bool:
        """Decode a segment's run of records into :attr:`messages`; False when one is damaged
        (the records before it are kept, it is noted in :attr:`damaged`)."""
        queue = self.queue
        run = (queue.topic, queue.queue_id, self.first + run_first)
        try:
            self.messages += decode_run(view, positions, seg_start, *run)
        except RunDecodeError as exc:
            self.messages += decode_run(view, positions[: exc.index], seg_start, *run)
            phys = seg_start + positions[exc.index]
            self.damaged = self._damaged(run_first + exc.index, phys, str(exc))
            return False
        return True

    def _stop_at(self, index: int, phys: int, why: str, count: int) -> int:
        """Note unit ``index`` (at ``phys``) as damaged, ``count`` records taken before it;
        the units examined: those before it."""
        self.damaged = self._damaged(index, phys, why)
        self.count = count
        return index

    def _stopped(self) -> int:
        """After :meth:`_decode_run` found damage: the units examined, those before it."""
        self.count = len(self.messages)
        assert self.damaged is not None
        return self.damaged.queue_offset - self.first

    def check_crcs(self, units: memoryview, examined: int) -> int:
        """``check_crc_on_read``: cut the decoded messages before the first whose body fails
        its CRC, noting it as damaged. Returns the units examined (those before it)."""
        messages = self.messages
        index = next(
            (i for i, message in enumerate(messages) if body_crc(message.body) != message.body_crc),
            None,
        )
        if index is None:
            return examined
        message = messages[index]
        phys = message.phys_offset
        unit_index = next(i for i, unit in enumerate(UNIT.iter_unpack(units)) if unit[0] == phys)
        del self.messages[index:]
        why = f"body CRC {message.body_crc:#x} stored, {body_crc(message.body):#x} computed"
        return self._stop_at(unit_index, phys, why, index)

    def ranges_of_messages(self) -> None:
        """Note the stored bytes of the decoded messages for :meth:`raw_bytes` (a checked raw
        get: each record was decoded first), in place of the messages."""
        ranges = self.ranges
        for message in self.messages:
            located = self.commitlog.segment_view(message.phys_offset)
            if located is None:  # deleted by retention since it was decoded
                self.removed = True
                break
            view, start = located
            ranges.append([view, start, start + message.store_size])
        self.messages = []
        self.count = len(ranges)

    def collect_ranges(self, units: memoryview) -> int:
        """Note the byte ranges of matching records; returns how many units were examined."""
        codes = None if self.filter.matches_all else self.filter.codes
        commitlog = self.commitlog
        min_phys = commitlog.min_offset
        max_count, max_bytes = self.max_count, self.max_bytes
        ranges = self.ranges
        count = total = examined = 0
        last_end = -1
        for phys, size, code in UNIT.iter_unpack(units):
            if codes is not None and code not in codes:
                examined += 1
                continue
            if count and total + size > max_bytes:
                break
            examined += 1
            if phys < min_phys or size <= 0:
                why = self._unlocated(phys, count > 0) if size > 0 else _NO_SIZE
                if why is not None:
                    return self._stop_at(examined - 1, phys, why, count)
                self.removed = True
                continue
            if codes is not None:
                try:
                    if not self._tag_matches(phys):
                        continue
                except RecordError as exc:
                    return self._stop_at(examined - 1, phys, str(exc), count)
            if phys == last_end:  # continues the previous record: same segment, one slice
                ranges[-1][2] += size
                last_end += size
            else:
                located = commitlog.segment_view(phys)
                if located is None:
                    why = self._unlocated(phys, count > 0)
                    if why is not None:
                        return self._stop_at(examined - 1, phys, why, count)
                    self.removed = True  # deleted by retention since min_phys was read
                    continue
                ranges.append([located[0], located[1], located[1] + size])
                last_end = phys + size
            count += 1
            total += size
            if count >= max_count:
                break
        self.count = count
        return examined

    def _unlocated(self, phys: int, after_located: bool) -> str | None:
        """A unit's record that no segment holds: None when retention deleted it (the get
        reports MESSAGE_WAS_REMOVING), else why the unit is damaged. Units are in log order, so
        a unit below the commitlog's min offset after one the scan located (``after_located``)
        is damaged, and so is one that points below 0 or past the log's end."""
        commitlog = self.commitlog
        min_phys = commitlog.min_offset  # read again: retention may have moved it meanwhile
        if phys < 0:
            return f"the unit points at commitlog offset {phys}: no record is stored there"
        if phys < min_phys:
            if not after_located:
                return None
            return (
                f"the unit points below the commitlog's min offset {min_phys}, after a unit "
                "that points above it"
            )
        return f"the unit points past the commitlog's end {commitlog.confirmed_offset}"

    def _damaged(self, index: int, phys: int, why: str) -> DamagedRecordError:
        """The error naming unit ``index`` of the scan, which points at ``phys``."""
        queue = self.queue
        return DamagedRecordError(queue.topic, queue.queue_id, self.first + index, phys, why)

    def _tag_matches(self, phys: int) -> bool:
        located = self.commitlog.segment_view(phys)
        if located is None:
            return False
        return self.filter.tag_matches(read_properties(located[0], located[1]).get(PROPERTY_TAGS))

    def raw_bytes(self) -> bytes:
        """Copy the noted ranges out of the segments' views (kept since the scan, so a segment
        retired by retention meanwhile is still readable)."""
        parts = [bytes(view[start:end]) for view, start, end in self.ranges]
        self.ranges.clear()
        return parts[0] if len(parts) == 1 else b"".join(parts)
