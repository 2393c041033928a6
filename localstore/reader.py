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

``raw=True`` answers with the stored records' bytes instead of decoded messages: adjacent
records are copied as one slice, so a batch of one queue's consecutive records costs one copy.
"""

from __future__ import annotations

from collections.abc import Callable

from localstore.codec import PROPERTY_TAGS, StoredMessage, decode_record, read_properties
from localstore.commitlog import CommitLog
from localstore.consume_queue import UNIT, ConsumeQueue
from localstore.results import GetResult, GetStatus
from localstore.tags import TagFilter

FILTER_SCAN_UNITS = 800  # maxFilterMessageSize (16000 bytes) / 20


def visible_max_offset(queue: ConsumeQueue, confirmed_offset: int) -> int:
    """The queue's max offset counting only units whose records readers may see."""
    end = queue.max_offset
    floor = queue.min_offset
    while end > floor:
        phys, size = queue.unit_head(end - 1)
        if phys + size <= confirmed_offset:
            break
        end -= 1
    return end


def get_messages(
    commitlog: CommitLog,
    queue: ConsumeQueue | None,
    queue_offset: int,
    max_count: int,
    max_bytes: int,
    tag_filter: TagFilter,
    raw: bool = False,
) -> GetResult:
    if queue is None:
        return GetResult(GetStatus.NO_MATCHED_LOGIC_QUEUE, 0, 0, 0)
    confirmed = commitlog.confirmed_offset
    min_offset = queue.min_offset
    max_offset = visible_max_offset(queue, confirmed)
    if max_offset == 0:
        return GetResult(GetStatus.NO_MESSAGE_IN_QUEUE, 0, min_offset, max_offset)
    if queue_offset < min_offset:
        return GetResult(GetStatus.OFFSET_TOO_SMALL, min_offset, min_offset, max_offset)
    if queue_offset == max_offset:
        return GetResult(GetStatus.OFFSET_OVERFLOW_ONE, queue_offset, min_offset, max_offset)
    if queue_offset > max_offset:
        return GetResult(GetStatus.OFFSET_OVERFLOW_BADLY, max_offset, min_offset, max_offset)

    limit = max_count if tag_filter.matches_all else max(FILTER_SCAN_UNITS, max_count)
    units = queue.read_units(queue_offset, min(limit, max_offset - queue_offset))
    scan = _Scan(commitlog, tag_filter, max_count, max_bytes, raw)
    examined = scan.run(units)
    del units
    next_offset = queue_offset + examined
    result = GetResult(GetStatus.FOUND if scan.count else GetStatus.NO_MATCHED_MESSAGE,
                       next_offset, min_offset, max_offset)
    if raw:
        result.raw = scan.raw_bytes()
    else:
        result.messages = scan.messages
    result.count = scan.count
    if not scan.count and scan.removed:
        result.status = GetStatus.MESSAGE_WAS_REMOVING
    return result


class _Scan:
    """Walks units, collecting matching records within the count and byte budgets."""

    def __init__(self, commitlog: CommitLog, tag_filter: TagFilter, max_count: int,
                 max_bytes: int, raw: bool):
        self.commitlog = commitlog
        self.filter = tag_filter
        self.max_count = max_count
        self.max_bytes = max_bytes
        self.raw = raw
        self.messages: list[StoredMessage] = []
        self.ranges: list[list[int]] = []  # [start, end) commitlog ranges of raw records
        self.count = 0
        self.bytes = 0
        self.removed = False

    def run(self, units: memoryview) -> int:
        """Returns how many units were examined."""
        tag_filter = self.filter
        check_codes = not tag_filter.matches_all
        accept: Callable[[memoryview, int, int, int], bool] = (
            self._take_raw if self.raw else self._take_decoded)
        min_phys = self.commitlog.min_offset
        examined = 0
        for phys, size, code in UNIT.iter_unpack(units):
            if check_codes and code not in tag_filter.codes:
                examined += 1
                continue
            if self.count and self.bytes + size > self.max_bytes:
                break
            examined += 1
            if phys < min_phys:
                self.removed = True
                continue
            located = self.commitlog.segment_view(phys)
            if located is None:
                self.removed = True
                continue
            view, pos = located
            if accept(view, pos, phys, size):
                self.count += 1
                self.bytes += size
                if self.count >= self.max_count:
                    break
        return examined

    def _take_decoded(self, view: memoryview, pos: int, phys: int, size: int) -> bool:
        message = decode_record(view, pos)
        if not self.filter.tag_matches(message.properties.get(PROPERTY_TAGS)):
            return False
        self.messages.append(message)
        return True

    def _take_raw(self, view: memoryview, pos: int, phys: int, size: int) -> bool:
        if not self.filter.matches_all and not self.filter.tag_matches(
                read_properties(view, pos).get(PROPERTY_TAGS)):
            return False
        ranges = self.ranges
        if ranges and ranges[-1][1] == phys:
            ranges[-1][1] = phys + size
        else:
            ranges.append([phys, phys + size])
        return True

    def raw_bytes(self) -> bytes:
        parts = [self.commitlog.read(start, end - start) for start, end in self.ranges]
        return parts[0] if len(parts) == 1 else b"".join(parts)
