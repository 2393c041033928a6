"""Recovery's check of the consume queues against the commitlog, made on open without changing
anything: which queues disagree with the log and must be rebuilt from it.

Cheap by design: a queue's first and last units must each point at a whole record of the
unit's size that says it is that unit's (topic, queue id, queue offset); a queue must not miss
its first files (when the log still starts at offset 0) nor its last units (when its last file is
full, or its time index names a later file, or bytes follow its last unit where zeros should, a
damaged unit having ended its load, the log after its last record is searched, in one walk for
every such queue, for a later record of it).

A damaged header. No CRC covers a record's header, so a record can be stored where its unit
says, of the unit's size, and name another topic, queue id or queue offset. Then either the
header was damaged or the unit points at the wrong record. The record decides first: if the
queue its header names holds a unit for it at the offset it names, the record is genuine and
the unit is wrong (the queue is rebuilt). Otherwise the unit's neighbours decide: units are
written in log order, so a unit that points at the wrong record breaks that order with a
neighbour, and a unit whose neighbours are sound and on either side of it is right. Its record's
header is then what was damaged: the queue is kept, an ERROR names the record, and reads report
it as a damaged record (:mod:`localstore.reader`).
"""

from __future__ import annotations

import logging
from enum import Enum

from localstore.commitlog.log import CommitLog
from localstore.queue.consume_queue import ConsumeQueue
from localstore.queue.registry import QueueRegistry
from localstore.record.codec import RecordError, StoredMessage, body_crc, decode_record
from localstore.recovery.damaged import DamagedRanges
from localstore.recovery.log_scan import iter_records

log = logging.getLogger(__name__)


class Verdict(Enum):
    """What a unit's record says about the unit (:meth:`QueueCheck.verdict`)."""

    SOUND = "sound"
    HEADER_DAMAGED = "header damaged"  # right place and size; another topic, queue or offset
    UNSOUND = "unsound"


class QueueCheck:
    """The consume queues of ``queues`` checked against ``commitlog`` (module docstring)."""

    def __init__(self, commitlog: CommitLog, queues: QueueRegistry, damaged: DamagedRanges):
        self.commitlog = commitlog
        self.queues = queues
        self.damaged = damaged
        self._reported: set[int] = set()  # the damaged headers logged, by commitlog offset

    def unsound_queues(self, end: int) -> list[str]:
        """The names (``topic/queue id``) of the queues that disagree with the log once it
        ends at ``end``, each logged at WARNING with why (a unit past ``end`` is about to be
        cut, not a sign of damage)."""
        problems: dict[str, str] = {}
        suspects: list[ConsumeQueue] = []
        for queue in self.queues.queues.values():
            why = self.queue_problem(queue, end)
            if why is not None:
                problems[queue_name(queue)] = why
            elif queue.last_unit_within(end) == queue.max_offset - 1 and self._tail_may_be_lost(
                queue
            ):
                suspects.append(queue)
        for queue, later in self._later_records(suspects, end):
            hidden = ", a damaged unit having hidden its later units"
            problems[queue_name(queue)] = (
                f"the commitlog holds its queue offset {later} past its end {queue.max_offset}"
                + (hidden if queue.bytes_follow_units() else "")
            )
        for name, why in problems.items():
            log.warning(
                "consume queue %s disagrees with the commitlog (%s): rebuilding it from the "
                "commitlog",
                name,
                why,
            )
        return list(problems)

    def queue_problem(self, queue: ConsumeQueue, end: int) -> str | None:
        """Why ``queue`` must be rebuilt, or None (its tail is checked apart)."""
        last = queue.last_unit_within(end)
        if last is None:
            return None
        first = queue.min_offset
        for which, offset in (("last", last), ("first", first)):
            if not self.unit_sound(queue, offset, last, check_crc=False):
                return f"its {which} unit, queue offset {offset}, does not point at its record"
        if (
            first > 0
            and self.commitlog.min_offset == 0
            and queue.min_logic_offset == (queue.segments.segments[0].start_offset)
        ):
            return f"it starts at queue offset {first} without filler, but the log starts at 0"
        return None

    def last_unit_sound(self, queue: ConsumeQueue, *, check_crc: bool) -> bool:
        """The queue's last unit is sound (for the log's newest record, ``check_crc`` also
        asks for an intact body: a clean close leaves no torn tail)."""
        last = queue.max_offset - 1
        return last < queue.min_offset or self.unit_sound(queue, last, last, check_crc=check_crc)

    def unit_sound(self, queue: ConsumeQueue, offset: int, last: int, *, check_crc: bool) -> bool:
        """Unit ``offset`` of ``queue`` (whose units end at ``last``) is right: its record is
        its own, or only its record's header was damaged (logged at ERROR)."""
        verdict = self.verdict(queue, offset, check_crc=check_crc)
        if verdict is Verdict.HEADER_DAMAGED and self._neighbours_vouch(queue, offset, last):
            phys = queue.unit_head(offset)[0]
            if phys not in self._reported:
                self._reported.add(phys)
                log.error(
                    "the commitlog record at %d (consume queue %s offset %d) names another "
                    "topic, queue or queue offset in its header: its header is damaged; reads "
                    "report it as a damaged record and verify lists it",
                    phys,
                    queue_name(queue),
                    offset,
                )
            return True
        return verdict is Verdict.SOUND

    def verdict(self, queue: ConsumeQueue, offset: int, *, check_crc: bool) -> Verdict:
        """Whether unit ``offset`` of ``queue`` points at a whole record of this queue, of the
        unit's size, or into a damaged range recovery recorded (a placeholder:
        :mod:`localstore.recovery.damaged`); HEADER_DAMAGED when the record names another
        topic, queue id or queue offset whose queue does not claim it (module docstring)."""
        phys, size = queue.unit_head(offset)
        if phys < 0:
            return Verdict.UNSOUND  # no record is stored there: the unit is damaged
        if phys < self.commitlog.min_offset:
            return Verdict.SOUND  # its record was deleted by retention: nothing to check against
        damage = self.damaged.containing(phys) if self.damaged else None
        if damage is not None:  # a placeholder, as recovery left it, is sound: nothing else is
            placeholder = damage.phys_offset < phys and phys + size == damage.end
            return Verdict.SOUND if placeholder else Verdict.UNSOUND
        located = self.commitlog.segment_view(phys)
        if located is None:
            return Verdict.UNSOUND
        try:
            message = decode_record(*located)
        except RecordError:
            return Verdict.UNSOUND
        if not (
            message.phys_offset == phys
            and message.store_size == size
            and (not check_crc or body_crc(message.body) == message.body_crc)
        ):
            return Verdict.UNSOUND
        if (message.topic, message.queue_id, message.queue_offset) == (
            queue.topic,
            queue.queue_id,
            offset,
        ):
            return Verdict.SOUND
        return Verdict.UNSOUND if self._claimed(message) else Verdict.HEADER_DAMAGED

    def _claimed(self, message: StoredMessage) -> bool:
        """Whether the queue ``message``'s header names holds a unit for it at the queue offset
        it names: then the record is genuine."""
        named = self.queues.get(message.topic, message.queue_id)
        if named is None or not named.min_offset <= message.queue_offset < named.max_offset:
            return False
        return named.unit_head(message.queue_offset)[0] == message.phys_offset

    def _neighbours_vouch(self, queue: ConsumeQueue, offset: int, last: int) -> bool:
        """Whether every neighbour of unit ``offset`` (the units before and after it, up to
        ``last``) is sound and lies on its side of it in the log. A queue's only unit has no
        neighbour to say otherwise."""
        phys = queue.unit_head(offset)[0]
        for neighbour in (offset - 1, offset + 1):
            if not queue.min_offset <= neighbour <= last:
                continue
            other = queue.unit_head(neighbour)[0]
            in_order = other < phys if neighbour < offset else other > phys
            if not in_order or self.verdict(queue, neighbour, check_crc=False) is not Verdict.SOUND:
                return False
        return True

    def _tail_may_be_lost(self, queue: ConsumeQueue) -> bool:
        """Whether the queue's end may be missing units: its last file is full (a deleted next
        file leaves it so), bytes follow its last unit (a damaged unit ended its load), or its
        time index names a later file."""
        last_file = queue.segments.segments[-1]
        if last_file.wrote_position >= last_file.size or queue.bytes_follow_units():
            return True
        root = self.commitlog.directory.parent
        timeindex = root / "timeindex" / queue.topic / str(queue.queue_id)
        base = last_file.start_offset // 20
        try:
            names = [p.name.split(".")[0] for p in timeindex.iterdir()]
        except OSError:
            return False
        return any(n.isdigit() and int(n) > base for n in names)

    def _later_records(
        self, suspects: list[ConsumeQueue], end: int
    ) -> list[tuple[ConsumeQueue, int]]:
        """The suspects of which the log holds a record past their last unit, with that
        record's queue offset: one walk from the earliest suspect's last record to ``end``."""
        if not suspects:
            return []
        waiting = {(q.topic, q.queue_id): q for q in suspects}
        found: list[tuple[ConsumeQueue, int]] = []
        commitlog = self.commitlog
        start = max(min(q.max_phys_offset for q in suspects), commitlog.min_offset)
        for message in iter_records(commitlog.segment_view, start, end, body=False):
            queue = waiting.get((message.topic, message.queue_id))
            if queue is not None and message.queue_offset >= queue.max_offset:
                found.append((queue, message.queue_offset))
                del waiting[(message.topic, message.queue_id)]
                if not waiting:
                    break
        return found


def queue_name(queue: ConsumeQueue) -> str:
    """``topic/queue id``: how recovery names a queue in its logs and reports."""
    return f"{queue.topic}/{queue.queue_id}"
