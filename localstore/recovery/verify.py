"""Checking a store's files: every commitlog record and every consume-queue unit.

``verify_store`` runs on an open :class:`MessageStore` (opening recovers the tail, so a torn last
record may already be cut off). Pass 1 walks the commitlog from its min to its max offset: each
record needs a v1/v2 magic code, a TOTALSIZE that fits its segment and its fields, a
PHYSICALOFFSET equal to its position, a matching body CRC and (unless it is a prepared or
rolled-back transaction) a consume-queue unit at its queue offset pointing at it. A blank record
must declare the rest of its segment. A put of several records must be whole: the record that
opens it (:mod:`localstore.record.put_mark`) must be followed by the rest of its records
(recovery cuts a put a kill cut short, so an open store holds none). A broken frame is
reported with its file, offset and length, and the walk resynchronises on the next valid record
(:func:`localstore.recovery.log_scan.next_record_start`, as recovery does), so every damaged record
is listed, not only the first; a bad CRC or offset field is reported and stepped over. Pass 2
checks every consume-queue unit: it points inside ``[commitlog min, max)`` at a record that
starts there, with the unit's size, the queue's topic, id and queue offset, and the tagsCode
(Java hash of TAGS, or the delivery time under ``SCHEDULE_TOPIC_XXXX``); physical offsets
increase along a queue.

It reads every record and unit: run it on a quiescent store (concurrent puts look like problems).
A unit found wrong is no bound for the order of the units after it (each is judged against the
last sound one). :func:`repair_units` rebuilds the units a report lists from the log
(``quiver store verify --repair``).
``on_progress(what, done, total)``, when given, is called every few thousand records and units:
commitlog bytes walked, then consume-queue units checked.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from localstore.queue.consume_queue import UNIT, ConsumeQueue
from localstore.record import codec
from localstore.record.frame import frame_problem
from localstore.record.layout import BLANK_RECORD_SIZE, BLANK_STRUCT
from localstore.record.put_mark import announced_records
from localstore.record.tags import SCHEDULE_TOPIC, parse_delay_levels, unit_tag_code
from localstore.recovery.log_scan import next_record_start
from localstore.store import MessageStore

DEFAULT_MAX_PROBLEMS = 100
_UNITS_PER_READ = 4096
_RECORDS_PER_PROGRESS = 4096
ProgressCallback = Callable[[str, int, int], None]  # (what, done, total)
_NO_UNIT = (codec.SYSFLAG_TRANSACTION_PREPARED, codec.SYSFLAG_TRANSACTION_ROLLBACK)
_Unit = tuple[int, int, int]  # physical offset, size, tagsCode
_LOCATION = ("phys_offset", "topic", "queue_id", "queue_offset")
_COUNTS = ("records", "units", "queues", "blank_records", "segments", "problem_count")
_OFFSETS = ("min_offset", "max_offset", "valid_to", "stopped_at")


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
        located = {name: getattr(self, name) for name in _LOCATION}
        located = {name: value for name, value in located.items() if value is not None}
        return {"area": self.area, "where": self.location(), "message": self.message, **located}


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
        return (
            f"commitlog [{self.min_offset}, {self.max_offset}) in {self.segments} "
            f"segment(s): {self.records} records, {self.blank_records} blank; "
            f"{self.queues} consume queue(s): {self.units} units; {verdict}"
        )

    def to_json(self) -> dict[str, Any]:
        """The report as a JSON-ready dict."""
        counts = {name: getattr(self, name) for name in _COUNTS + _OFFSETS}
        return {"ok": self.ok, **counts, "problems": [p.to_json() for p in self.problems]}


class _MalformedError(Exception):
    """The bytes at a position are not a record frame: nothing after them can be located."""


def _record_at(view: memoryview, pos: int) -> codec.StoredMessage:
    """The record at ``pos`` of a segment's bytes; :class:`_MalformedError` says why not (the
    shared frame rules, :mod:`localstore.record.frame`, then the decode's own: UTF-8 text)."""
    problem = frame_problem(view, pos, len(view))
    if problem is not None:
        raise _MalformedError(problem)
    try:
        return codec.decode_record(view, pos)
    except codec.RecordError as exc:
        raise _MalformedError(str(exc)) from exc


def verify_store(
    store: MessageStore,
    *,
    max_problems: int = DEFAULT_MAX_PROBLEMS,
    on_progress: ProgressCallback | None = None,
) -> VerifyReport:
    """Check every commitlog record and consume-queue unit of an open store (see module doc)."""
    log = store.commitlog
    report = VerifyReport(log.min_offset, log.max_offset, len(log.segments.segments))
    report.max_problems = max_problems
    verifier = _Verifier(store, report, on_progress or _no_progress)
    verifier.walk_commitlog()
    queues = [store.queues.queues[key] for key in sorted(store.queues.queues)]
    verifier.units_total = sum(max(q.max_offset - q.min_offset, 0) for q in queues)
    for queue in queues:
        report.queues += 1
        verifier.check_queue(queue)
    return report


def repair_units(store: MessageStore, report: VerifyReport) -> list[str]:
    """Rebuild from the log each consume-queue unit ``report`` lists as wrong
    (:meth:`MessageStore.repair_unit`, searching the log without bound); answers a line per
    unit rebuilt. Verify again afterwards: what could not be rebuilt is still wrong."""
    repaired = []
    units = {
        (p.topic, p.queue_id, p.queue_offset)
        for p in report.problems
        if p.topic is not None and p.queue_id is not None and p.queue_offset is not None
    }
    for topic, queue_id, queue_offset in sorted(units):
        if store.repair_unit(topic, queue_id, queue_offset).repaired:
            repaired.append(f"consume queue {topic}/{queue_id} offset {queue_offset}: rebuilt")
    return repaired


def _no_progress(what: str, done: int, total: int) -> None:
    """The progress callback of a caller that wants none."""


class _Verifier:
    """Both passes. The commitlog walk marks each unit it found sound from the record's side
    (``claimed``); the queue pass then re-reads the records of the other units only."""

    def __init__(self, store: MessageStore, report: VerifyReport, on_progress: ProgressCallback):
        self.store = store
        self.on_progress = on_progress
        self.units_total = 0  # of every queue, set before the queue pass
        self.commitlog = store.commitlog
        self.report = report
        self.delays = parse_delay_levels(store.options.delay_levels)
        self.claimed: dict[tuple[str, int], bytearray] = {}  # a byte per unit from min offset

    def walk_commitlog(self) -> None:
        """Pass 1: every record from the commitlog's min to its max offset."""
        report, end = self.report, self.report.max_offset
        position, first_bad = report.min_offset, -1
        put = [0, 0, 0]  # the last put of several records: where it starts, its count, found
        span = end - report.min_offset
        self.on_progress("commitlog bytes", 0, span)

        def problem(message: str, stop: bool = False) -> None:
            nonlocal first_bad
            first_bad = position if first_bad < 0 else first_bad
            if stop:
                report.stopped_at = position
                message += f"; the walk stops {end - position} bytes before the max offset {end}"
            report.add(Problem("commitlog", message, phys_offset=position))

        while position < end:
            segment = self.commitlog.segments.find(position)
            if segment is None:
                problem("no segment file holds this offset", stop=True)
                break
            view, pos = segment.view, position - segment.start_offset
            room, name = segment.size - pos, segment.path.name
            head = BLANK_STRUCT.unpack_from(view, pos) if room >= BLANK_RECORD_SIZE else None
            if head is not None and head[1] == codec.BLANK_MAGIC:
                report.blank_records += 1
                if head[0] != room:
                    problem(f"the blank record does not declare the {room} bytes left in {name}")
                if end < segment.end_offset:
                    problem(f"the max offset {end} falls inside the blank record ending {name}")
                position = segment.end_offset
                continue
            try:
                record = _record_at(view, pos)
            except _MalformedError as exc:
                resume = next_record_start(self.commitlog, position + 1, check_crc=True)
                if resume is None or resume >= end:
                    problem(str(exc), stop=True)
                    break
                stop_at = min(resume, segment.end_offset)
                problem(
                    f"{exc}: damaged bytes [{position}, {stop_at}) ({stop_at - position} bytes) "
                    f"of {name}; the walk goes on at the next valid record, {resume}"
                )
                position = resume
                continue
            report.records += 1
            announced = announced_records(view, pos)
            if announced:
                put = [position, announced, 1]
            elif put[2] < put[1]:
                put[2] += 1
            if report.records % _RECORDS_PER_PROGRESS == 0:
                self.on_progress("commitlog bytes", position - report.min_offset, span)
            if position + record.store_size > end:
                problem(f"a record of {record.store_size} bytes runs past the max offset", True)
                break
            if record.phys_offset != position:
                problem(f"PHYSICALOFFSET field says {record.phys_offset}")
            if codec.body_crc(record.body) != record.body_crc:
                where = f"{record.topic}/{record.queue_id} queue offset {record.queue_offset}"
                problem(f"body CRC mismatch ({where})")
            if record.sys_flag & codec.SYSFLAG_TRANSACTION_MASK not in _NO_UNIT:
                message = self.claim(record, position)
                if message is not None:
                    problem(message)
            position += record.store_size
        report.valid_to = first_bad if first_bad >= 0 else position
        start, announced, found = put
        if found < announced and first_bad < start:
            message = (
                f"a put of {announced} records starts here, but only {found} of them lie before "
                f"the max offset {end}: an unfinished put (recovery cuts it)"
            )
            report.add(Problem("commitlog", message, phys_offset=start))

    def claim(self, record: codec.StoredMessage, position: int) -> str | None:
        """Mark the record's unit sound if it is; say why the record has no unit, or None."""
        queue = self.store.queues.get(record.topic, record.queue_id)
        offset = record.queue_offset
        what = f"record of {record.topic}/{record.queue_id} queue offset {offset}"
        if queue is None:
            return f"{what} has no consume queue"
        if offset >= queue.max_offset:
            return f"{what} has no unit: the queue ends at {queue.max_offset}"
        if offset < queue.min_offset:
            return None  # the queue's older files were deleted
        phys, size, code = UNIT.unpack(queue.read_units(offset, 1))
        if phys != position:
            return f"{what}: the unit there points at {phys}"
        if size == record.store_size and self.tags_problem(record, code) is None:
            key = (queue.topic, queue.queue_id)
            claimed = self.claimed.get(key)
            if claimed is None:
                claimed = self.claimed[key] = bytearray(queue.max_offset - queue.min_offset)
            claimed[offset - queue.min_offset] = 1
        return None  # a unit that is wrong is reported by the queue pass

    def check_queue(self, queue: ConsumeQueue) -> None:
        """Pass 2: every unit of ``queue`` from its min to its max offset."""
        previous, report = -1, self.report
        offset, low, end = queue.min_offset, queue.min_offset, queue.max_offset
        claimed = self.claimed.get((queue.topic, queue.queue_id), bytearray(end - low))
        while offset < end:
            self.on_progress("consume-queue units", report.units, self.units_total)
            chunk = bytes(queue.read_units(offset, min(_UNITS_PER_READ, end - offset)))
            if not chunk:
                self.unit_problem(queue, offset, f"units up to {end} are missing", None)
                return
            for phys, size, code in UNIT.iter_unpack(chunk):
                report.units += 1
                if phys <= previous:
                    message: str | None = f"physical offset {phys} does not increase"
                elif claimed[offset - low]:
                    message = None
                else:
                    message = self.check_unit(queue, offset, (phys, size, code))
                if message is not None:
                    self.unit_problem(queue, offset, message, phys)
                else:  # a damaged unit is no bound for the units after it
                    previous = phys
                offset += 1

    def unit_problem(self, queue: ConsumeQueue, offset: int, text: str, phys: int | None) -> None:
        """Count a problem of the unit at ``offset`` of ``queue``."""
        self.report.add(Problem("consumequeue", text, phys, queue.topic, queue.queue_id, offset))

    def check_unit(self, queue: ConsumeQueue, offset: int, unit: _Unit) -> str | None:
        """The first thing wrong with a unit the commitlog walk did not find sound."""
        phys, size, code = unit
        low, high = self.commitlog.min_offset, self.commitlog.max_offset
        if phys < 0 or size <= 0:
            return f"unit ({phys}, {size}, {code}) holds no record"
        if phys < low:
            return f"points at {phys}, below the commitlog's min offset {low}"
        if phys + size > high:
            return f"points at [{phys}, {phys + size}), past the commitlog's max offset {high}"
        located = self.commitlog.segment_view(phys)
        if located is None:
            return f"no commitlog segment holds offset {phys}"
        try:
            record = _record_at(*located)
        except _MalformedError as exc:
            return f"no record starts at commitlog offset {phys}: {exc}"
        if record.phys_offset != phys:
            return f"the record at {phys} says it is at {record.phys_offset}"
        if record.store_size != size:
            return f"unit size {size}, but the record at {phys} is {record.store_size} bytes"
        if record.topic != queue.topic or record.queue_id != queue.queue_id:
            return f"the record at {phys} belongs to {record.topic}/{record.queue_id}"
        if record.queue_offset != offset:
            return f"the record at {phys} has queue offset {record.queue_offset}"
        if record.sys_flag & codec.SYSFLAG_TRANSACTION_MASK in _NO_UNIT:
            return f"the record at {phys} is a prepared or rolled-back transaction (gets no unit)"
        return self.tags_problem(record, code)

    def tags_problem(self, record: codec.StoredMessage, code: int) -> str | None:
        """Why ``code`` is not the record's tagsCode, or None."""
        properties = record.properties
        try:
            expected = unit_tag_code(record.topic, properties, record.store_timestamp, self.delays)
        except ValueError:
            return f"the record at {record.phys_offset} has a DELAY that is not a number"
        if record.topic == SCHEDULE_TOPIC:
            what = "the delivery time"
        else:
            what = f"the hash of TAGS {properties.get('TAGS')!r}"
        return f"tagsCode {code}, but {what} is {expected}" if code != expected else None
