"""Checking a store's files: every commitlog record and every consume-queue unit.

``verify_store`` runs on an open :class:`MessageStore` (opening recovers the tail, so a torn last
record is already cut off; everything before it is checked here). It makes two passes:

1. The commitlog, record by record from its min offset to its max offset. A record must have a
   v1/v2 magic code, a TOTALSIZE that fits its segment and matches its fields, a PHYSICALOFFSET
   equal to its position and a body CRC that matches. A blank record must declare exactly the
   rest of its segment; the walk resumes at the next segment. A record whose frame is intact (bad
   CRC, wrong offset field) is reported and stepped over; a broken frame stops the walk, and a
   stop before the max offset is a problem. Each record that gets a consume-queue unit (all but
   prepared and rolled-back transactions) must have one at its queue offset, pointing at it.
2. Every consume queue, unit by unit from its min to its max offset. A unit must point inside
   ``[commitlog min, max)`` at a record that starts there, with the unit's size, the queue's topic
   and queue id, the unit's queue offset, and the expected tagsCode (Java hash of TAGS, or the
   delivery time under ``SCHEDULE_TOPIC_XXXX``); physical offsets must increase along the queue.

Verification reads a quiescent store: puts running meanwhile make it report spurious problems.
"""

from __future__ import annotations

import os
import struct
import zlib
from dataclasses import dataclass, field
from typing import Any

from localstore.codec import (
    BLANK_MAGIC,
    HEADER_STRUCTS,
    INT,
    MAGIC_V1,
    MAGIC_V2,
    OFFSET_SYSFLAG,
    SHORT,
    SYSFLAG_TRANSACTION_MASK,
    SYSFLAG_TRANSACTION_PREPARED,
    SYSFLAG_TRANSACTION_ROLLBACK,
    decode_properties,
)
from localstore.consume_queue import UNIT, ConsumeQueue
from localstore.store import MessageStore
from localstore.tags import SCHEDULE_TOPIC, parse_delay_levels, schedule_tag_code, tag_code

DEFAULT_MAX_PROBLEMS = 100
_UNITS_PER_READ = 4096
_NO_UNIT = (SYSFLAG_TRANSACTION_PREPARED, SYSFLAG_TRANSACTION_ROLLBACK)
_HEAD = struct.Struct(">ii")
_MIN_RECORD = HEADER_STRUCTS[0].size + 1 + 2  # header, v1 topic length, properties length


@dataclass(frozen=True, slots=True)
class Problem:
    """One thing wrong, located in the commitlog or in a consume queue."""

    area: str  # "commitlog" or "consumequeue"
    message: str
    phys_offset: int | None = None
    topic: str | None = None
    queue_id: int | None = None
    queue_offset: int | None = None

    def location(self) -> str:
        """Where the problem is, for people."""
        if self.area == "commitlog":
            return f"commitlog offset {self.phys_offset}"
        return f"consume queue {self.topic}/{self.queue_id} offset {self.queue_offset}"

    def __str__(self) -> str:
        return f"{self.location()}: {self.message}"

    def to_json(self) -> dict[str, Any]:
        """The problem as a JSON-ready dict (fields that do not apply are left out)."""
        data: dict[str, Any] = {"area": self.area, "where": self.location(),
                                "message": self.message}
        for name in ("phys_offset", "topic", "queue_id", "queue_offset"):
            value = getattr(self, name)
            if value is not None:
                data[name] = value
        return data


@dataclass(slots=True)
class VerifyReport:
    """What :func:`verify_store` checked and found."""

    min_offset: int
    max_offset: int
    segments: int
    records: int = 0
    blank_records: int = 0
    queues: int = 0
    units: int = 0
    valid_to: int = 0  # end of the prefix of the commitlog in which every record is sound
    stopped_at: int | None = None  # where the commitlog walk stopped early, if it did
    problem_count: int = 0
    problems: list[Problem] = field(default_factory=list)
    max_problems: int = DEFAULT_MAX_PROBLEMS

    @property
    def ok(self) -> bool:
        """True when nothing is wrong."""
        return self.problem_count == 0

    def add(self, problem: Problem) -> None:
        """Count a problem; keep it if fewer than ``max_problems`` are kept already."""
        self.problem_count += 1
        if len(self.problems) < self.max_problems:
            self.problems.append(problem)

    def summary(self) -> str:
        """One line: what was checked and the verdict."""
        verdict = "OK" if self.ok else f"{self.problem_count} problem(s)"
        return (f"commitlog [{self.min_offset}, {self.max_offset}) in {self.segments} "
                f"segment(s): {self.records} records, {self.blank_records} blank; "
                f"{self.queues} consume queue(s): {self.units} units; {verdict}")

    def to_json(self) -> dict[str, Any]:
        """The report as a JSON-ready dict."""
        return {
            "ok": self.ok, "records": self.records, "units": self.units, "queues": self.queues,
            "blank_records": self.blank_records, "segments": self.segments,
            "min_offset": self.min_offset, "max_offset": self.max_offset,
            "valid_to": self.valid_to, "stopped_at": self.stopped_at,
            "problem_count": self.problem_count,
            "problems": [problem.to_json() for problem in self.problems],
        }


class _MalformedError(Exception):
    """The bytes at a position are not a record frame: nothing after them can be located."""


@dataclass(slots=True)
class _Record:
    size: int
    queue_id: int
    queue_offset: int
    phys_offset: int
    sys_flag: int
    store_timestamp: int
    topic: str
    properties: bytes
    crc_ok: bool


def _parse(view: memoryview, pos: int, room: int, check_crc: bool) -> _Record:
    """The record frame at ``pos``; ``room`` is how many bytes its segment has from ``pos``."""
    total, magic = _HEAD.unpack_from(view, pos)
    if magic not in (MAGIC_V1, MAGIC_V2):
        if total == 0 and magic == 0:
            raise _MalformedError("zero bytes where a record should start")
        raise _MalformedError(f"bad magic code {magic & 0xFFFFFFFF:#010x}")
    if total > room:
        raise _MalformedError(f"record size {total} runs past the end of its segment "
                              f"({room} bytes left)")
    if total < _MIN_RECORD:
        raise _MalformedError(f"record size {total} is smaller than a record header")
    header = HEADER_STRUCTS[(INT.unpack_from(view, pos + OFFSET_SYSFLAG)[0] >> 4) & 3]
    (_, _, crc, queue_id, _, queue_offset, phys, sys_flag, _, _, store_ts, _, _, _,
     body_len) = header.unpack_from(view, pos)
    end = pos + total
    topic_at = pos + header.size + body_len
    if body_len < 0 or topic_at + 3 > end:
        raise _MalformedError(f"body length {body_len} overruns the record's {total} bytes")
    if magic == MAGIC_V1:
        topic_start = topic_at + 1
        topic_end = topic_start + view[topic_at]
    else:
        topic_start = topic_at + 2
        topic_end = topic_start + SHORT.unpack_from(view, topic_at)[0]
    if topic_end < topic_start or topic_end + 2 > end:
        raise _MalformedError(f"topic length overruns the record's {total} bytes")
    props_len = SHORT.unpack_from(view, topic_end)[0]
    if props_len < 0 or topic_end + 2 + props_len != end:
        raise _MalformedError(f"the fields take {topic_end + 2 + max(props_len, 0) - pos} "
                              f"bytes but TOTALSIZE says {total}")
    crc_ok = not check_crc or zlib.crc32(view[topic_at - body_len : topic_at]) & 0x7FFFFFFF == crc
    topic = str(view[topic_start:topic_end], "utf-8", "replace")
    return _Record(total, queue_id, queue_offset, phys, sys_flag, store_ts, topic,
                   bytes(view[topic_end + 2 : end]), crc_ok)


def verify_store(store: MessageStore, *, max_problems: int = DEFAULT_MAX_PROBLEMS
                 ) -> VerifyReport:
    """Check every commitlog record and consume-queue unit of an open store (see module doc)."""
    commitlog = store.commitlog
    report = VerifyReport(commitlog.min_offset, commitlog.max_offset,
                          len(commitlog.segments.segments), max_problems=max_problems)
    _walk_commitlog(store, report)
    delays = parse_delay_levels(store.options.delay_levels)
    for key in sorted(store.queues.queues):
        report.queues += 1
        _check_queue(store, store.queues.queues[key], report, delays)
    return report


def verify_path(root: str | os.PathLike[str], *, max_problems: int = DEFAULT_MAX_PROBLEMS,
                **geometry: Any) -> VerifyReport:
    """Open the store at ``root`` (taking its lock, recovering its tail) and verify it."""
    with MessageStore(root, **geometry) as store:
        return verify_store(store, max_problems=max_problems)


def _walk_commitlog(store: MessageStore, report: VerifyReport) -> None:
    commitlog = store.commitlog
    end = report.max_offset
    position = report.min_offset
    first_bad: int | None = None

    def problem(message: str, at: int) -> None:
        nonlocal first_bad
        if first_bad is None:
            first_bad = at
        report.add(Problem("commitlog", message, phys_offset=at))

    while position < end:
        segment = commitlog.segments.find(position)
        room = segment.size - (position - segment.start_offset) if segment else 0
        if segment is None or room < 8:
            why = ("no segment file holds this offset" if segment is None else
                   f"only {room} bytes are left in segment {segment.path.name}")
            report.stopped_at = position
            problem(f"{why}; the log should go on to {end}", position)
            break
        view, pos = segment.view, position - segment.start_offset
        total, magic = _HEAD.unpack_from(view, pos)
        if magic == BLANK_MAGIC:
            report.blank_records += 1
            if total != room:
                problem(f"blank record declares {total} bytes but {room} are left in segment "
                        f"{segment.path.name}", position)
            if end < segment.end_offset:
                problem(f"the log's max offset {end} falls inside the blank record that ends "
                        f"segment {segment.path.name}", position)
            position = segment.end_offset
            continue
        try:
            record = _parse(view, pos, room, check_crc=True)
        except _MalformedError as exc:
            report.stopped_at = position
            problem(f"{exc}; the walk stops {end - position} bytes before the log's max offset "
                    f"{end}", position)
            break
        report.records += 1
        if position + record.size > end:
            report.stopped_at = position
            problem(f"record of {record.size} bytes runs past the log's max offset {end}",
                    position)
            break
        if record.phys_offset != position:
            problem(f"PHYSICALOFFSET field says {record.phys_offset}", position)
        if not record.crc_ok:
            problem(f"body CRC mismatch ({record.topic}/{record.queue_id} queue offset "
                    f"{record.queue_offset})", position)
        if record.sys_flag & SYSFLAG_TRANSACTION_MASK not in _NO_UNIT:
            message = _unit_problem(store, record, position)
            if message is not None:
                problem(message, position)
        position += record.size
    report.valid_to = first_bad if first_bad is not None else position


def _unit_problem(store: MessageStore, record: _Record, position: int) -> str | None:
    """Why the record at ``position`` lacks its consume-queue unit, or None if it has it."""
    queue = store.queues.get(record.topic, record.queue_id)
    name = f"{record.topic}/{record.queue_id}"
    if queue is None:
        return f"record of {name} queue offset {record.queue_offset} has no consume queue"
    if record.queue_offset >= queue.max_offset:
        return (f"record of {name} queue offset {record.queue_offset} has no unit: the queue "
                f"ends at {queue.max_offset}")
    if record.queue_offset < queue.min_offset:
        return None  # the queue's older files were deleted
    phys, _ = queue.unit_head(record.queue_offset)
    if phys != position:
        return (f"record of {name} queue offset {record.queue_offset}: the unit there points "
                f"at {phys}")
    return None


def _check_queue(store: MessageStore, queue: ConsumeQueue, report: VerifyReport,
                 delays: tuple[int, ...]) -> None:
    offset, end = queue.min_offset, queue.max_offset
    previous = -1
    while offset < end:
        chunk = bytes(queue.read_units(offset, min(_UNITS_PER_READ, end - offset)))
        if not chunk:
            report.add(Problem("consumequeue", f"units up to {end} are missing",
                               topic=queue.topic, queue_id=queue.queue_id, queue_offset=offset))
            return
        for phys, size, code in UNIT.iter_unpack(chunk):
            report.units += 1
            message = _unit_check(store, queue, offset, phys, size, code, previous, delays)
            if message is not None:
                report.add(Problem("consumequeue", message, phys_offset=phys,
                                   topic=queue.topic, queue_id=queue.queue_id,
                                   queue_offset=offset))
            previous = max(previous, phys)
            offset += 1


def _unit_check(store: MessageStore, queue: ConsumeQueue, queue_offset: int, phys: int,
                size: int, code: int, previous: int, delays: tuple[int, ...]) -> str | None:
    """The first thing wrong with one unit, or None."""
    commitlog = store.commitlog
    if phys < 0 or size <= 0:
        return f"unit ({phys}, {size}, {code}) holds no record"
    if phys <= previous:
        return f"physical offset {phys} does not increase (an earlier unit has {previous})"
    if phys < commitlog.min_offset:
        return f"points at {phys}, below the commitlog's min offset {commitlog.min_offset}"
    if phys + size > commitlog.max_offset:
        return (f"points at [{phys}, {phys + size}), past the commitlog's max offset "
                f"{commitlog.max_offset}")
    located = commitlog.segment_view(phys)
    if located is None:
        return f"no commitlog segment holds offset {phys}"
    view, pos = located
    room = len(view) - pos
    try:
        if room < 8:
            raise _MalformedError(f"only {room} bytes are left in the segment")
        record = _parse(view, pos, room, check_crc=False)
    except _MalformedError as exc:
        return f"no record starts at commitlog offset {phys}: {exc}"
    if record.phys_offset != phys:
        return f"the record at {phys} says it is at {record.phys_offset}"
    if record.size != size:
        return f"unit size {size}, but the record at {phys} is {record.size} bytes"
    if record.topic != queue.topic or record.queue_id != queue.queue_id:
        return f"the record at {phys} belongs to {record.topic}/{record.queue_id}"
    if record.queue_offset != queue_offset:
        return f"the record at {phys} has queue offset {record.queue_offset}"
    if record.sys_flag & SYSFLAG_TRANSACTION_MASK in _NO_UNIT:
        return f"the record at {phys} is a prepared or rolled-back transaction (gets no unit)"
    properties = decode_properties(str(record.properties, "utf-8", "replace"))
    if queue.topic == SCHEDULE_TOPIC:
        try:
            expected = schedule_tag_code(record.store_timestamp, properties.get("DELAY"), delays)
        except ValueError:
            return f"the record at {phys} has a DELAY that is not a number"
        what = "the delivery time"
    else:
        expected = tag_code(properties.get("TAGS"))
        what = f"the hash of TAGS {properties.get('TAGS')!r}"
    if code != expected:
        return f"tagsCode {code}, but {what} is {expected}"
    return None
