"""Damaged commitlog ranges: bytes recovery kept on disk but that hold no readable record.

Recovery cuts only a torn tail (damage with nothing valid after it). Damage followed by valid
records is kept: its byte range ``[phys_offset, phys_offset + length)`` is recorded here, logged
at ERROR, reported by ``verify``, and never handed to a reader as a message.

Persistent: ``damaged.json`` under the store root (Quiver's own; RocketMQ never reads it),
replaced atomically (:func:`localstore.files.atomic_file.write_atomically`), so a clean open, whose
recovery walks only the log's tail, still knows the damage an earlier recovery found. Its
shape::

    {"ranges": [{"phys_offset": int, "length": int, "file": "commitlog/000..."}, ...]}

A file that cannot be read or has another shape is ignored (logged): the ranges are derived
from the log, and any recovery that walks a damaged range finds it again. Ranges below the
commitlog's min offset (deleted by retention) are dropped at load.

Readers' contract: consume-queue units for records that lie in a damaged range (their queue
offsets are known from the records around them) are written by recovery as placeholders
(:meth:`DamagedRange.placeholder_units`, used by :class:`localstore.queue.dispatch.Dispatcher` and
by recovery's rebuild of a queue), so queue offsets stay contiguous and no put reuses them. A
placeholder points one byte or more past the range's start, where no record starts (a record at
the start itself may still decode: a body that only fails its CRC), so every read of it fails
as :class:`~localstore.errors.DamagedRecordError` and readers step over it. :meth:`overlaps`
tells whether a span of the log holds damage, for callers that ask per batch.
"""

from __future__ import annotations

import json
import logging
from bisect import bisect_right
from dataclasses import dataclass
from pathlib import Path

from localstore.files.atomic_file import write_atomically
from localstore.queue.consume_queue import UNIT

log = logging.getLogger(__name__)

FILE_NAME = "damaged.json"


@dataclass(frozen=True, slots=True, order=True)
class DamagedRange:
    """``length`` damaged bytes at commitlog offset ``phys_offset``, in segment file ``file``
    (relative to the store root)."""

    phys_offset: int
    length: int
    file: str

    @property
    def end(self) -> int:
        return self.phys_offset + self.length

    def placeholder_capacity(self) -> int:
        """How many placeholder units fit (each points at a distinct byte after the first)."""
        return self.length - 1

    def placeholder_units(self, count: int) -> list[bytes]:
        """``count`` consume-queue units that point into this range at bytes 1, 2, ... (never
        at its first byte: see the module docstring), in increasing commitlog order, each
        sized to reach the range's end. ``count`` is at most :meth:`placeholder_capacity`."""
        start, end = self.phys_offset, self.end
        return [UNIT.pack(start + i, end - start - i, 0) for i in range(1, count + 1)]

    def __str__(self) -> str:
        return (
            f"{self.file} bytes [{self.phys_offset}, {self.end}) "
            f"(commitlog offset {self.phys_offset}, {self.length} bytes)"
        )


class DamagedRanges:
    """The store's damaged commitlog ranges, sorted and disjoint."""

    def __init__(self, root: Path):
        self.path = root / FILE_NAME
        self.ranges: list[DamagedRange] = []
        self._starts: list[int] = []

    def __bool__(self) -> bool:
        return bool(self.ranges)

    def __iter__(self):  # type: ignore[no-untyped-def]
        return iter(self.ranges)

    def load(self, min_offset: int) -> None:
        """Read ``damaged.json``; keep the ranges that end past ``min_offset``."""
        try:
            raw = json.loads(self.path.read_bytes())
            found = [
                DamagedRange(int(item["phys_offset"]), int(item["length"]), str(item["file"]))
                for item in raw["ranges"]
            ]
        except FileNotFoundError:
            return
        except (OSError, ValueError, TypeError, KeyError) as exc:
            log.warning(
                "ignoring %s, which cannot be read (%s): recovery finds damage again",
                self.path,
                exc,
            )
            return
        self._set([r for r in found if r.end > min_offset and r.length > 0])

    def add(self, new: list[DamagedRange]) -> list[DamagedRange]:
        """Record ``new`` ranges (saved at once); returns those not known before."""
        fresh = [r for r in new if not self.overlaps(r.phys_offset, r.end)]
        if fresh:
            self._set(self.ranges + fresh)
            self.save()
        return fresh

    def remove(self, gone: list[DamagedRange]) -> None:
        """Forget ``gone`` (saved at once)."""
        self._set([r for r in self.ranges if r not in gone])
        self.save()

    def drop_before(self, min_offset: int) -> None:
        """Forget the ranges wholly below ``min_offset`` (retention deleted them)."""
        kept = [r for r in self.ranges if r.end > min_offset]
        if len(kept) != len(self.ranges):
            self._set(kept)
            self.save()

    def drop_from(self, end_offset: int) -> None:
        """Forget the ranges at or past ``end_offset`` (a cut tail no longer holds them)."""
        kept = [r for r in self.ranges if r.phys_offset < end_offset]
        if len(kept) != len(self.ranges):
            self._set(kept)
            self.save()

    def save(self) -> None:
        data = {
            "ranges": [
                {"phys_offset": r.phys_offset, "length": r.length, "file": r.file}
                for r in self.ranges
            ]
        }
        write_atomically(self.path, json.dumps(data, indent=1).encode(), keep_backup=False)

    def containing(self, phys_offset: int) -> DamagedRange | None:
        """The range holding commitlog offset ``phys_offset``, or None."""
        i = bisect_right(self._starts, phys_offset) - 1
        if i >= 0 and phys_offset < self.ranges[i].end:
            return self.ranges[i]
        return None

    def overlaps(self, start: int, end: int) -> bool:
        """Whether any damaged byte lies in ``[start, end)``."""
        if not self.ranges:
            return False
        i = bisect_right(self._starts, end - 1) - 1
        return i >= 0 and self.ranges[i].end > start

    def between(self, start: int, end: int) -> list[DamagedRange]:
        """The ranges that overlap ``[start, end)``, in order."""
        return [r for r in self.ranges if r.phys_offset < end and r.end > start]

    def _set(self, ranges: list[DamagedRange]) -> None:
        self.ranges = sorted(set(ranges))
        self._starts = [r.phys_offset for r in self.ranges]
