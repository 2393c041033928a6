"""Walking one long commitlog segment with several processes (recovery's CRC scan).

The walk from ``pos`` to the segment's end is cut at hinted record starts (the sparse offset
index's entries) into one piece per CPU. This process walks the first piece while worker
processes walk the others, each mapping the segment file read-only. The pieces are joined in
order, and piece k+1's result counts only if the walk of piece k stopped exactly where piece k+1
began. An invalid record ends the walk there, whatever later pieces found. A piece that passed
its end without landing on it (a hint that was no record start) makes this process walk the
rest itself. So the answer is always the sequential walk's; hints decide only how fast it comes.

Each worker is a fresh interpreter running :mod:`localstore.recovery.scan_worker` (answering
``POSITION RECORDS STATUS LAST_PUT`` on stdout): no fork of a process whose threads may hold
locks, and no re-import of the application's main module as multiprocessing's ``spawn`` would
do. Starting one costs tens of milliseconds, so a walk is split only when the hinted record
starts reach :data:`MIN_SPLIT_BYTES` past its start. If a worker cannot be started or fails,
this process walks the rest itself, in order, and logs a warning; workers still running when
the answer is known are killed.
"""

from __future__ import annotations

import logging
import os
import subprocess
from bisect import bisect_left
from collections.abc import Sequence
from itertools import pairwise
from pathlib import Path

from localstore.record.walk import WALK_LIMIT, Buffer, walk_marking
from localstore.runtime.worker_command import worker_command, worker_env

log = logging.getLogger(__name__)

MIN_SPLIT_BYTES = 64 << 20  # below this a walk takes well under a second: not worth the workers

# (position after the last valid record, records, WALK_*, last record opening a put or -1)
Walk = tuple[int, int, int, int]


def cpu_count() -> int:
    """CPUs this process may run on."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def worth_splitting(pos: int, hints: Sequence[int]) -> bool:
    """Whether a walk from ``pos`` should use worker processes: when the hinted record starts
    reach at least :data:`MIN_SPLIT_BYTES` past it (a preallocated segment's size says nothing
    of how much of it is written) and there is more than one CPU."""
    return bool(hints) and max(hints) - pos >= MIN_SPLIT_BYTES and cpu_count() > 1


def walk_split(
    path: Path,
    view: Buffer,
    base: int,
    size: int,
    pos: int,
    hints: Sequence[int],
    check_crc: bool,
    pieces: int | None = None,
) -> Walk:
    """:func:`localstore.record.walk.walk_marking` from ``pos`` to the end of the segment
    mapped as ``view`` (file ``path``), cut at ``hints`` into ``pieces`` (default: one per CPU)."""
    inside = [hint for hint in hints if hint < size]  # a damaged index may name any number
    bounds = [pos, *choose_cuts(pos, inside, pieces or cpu_count()), size]
    workers: list[_Worker] = []
    try:
        for start, limit in pairwise(bounds[1:]):
            workers.append(_Worker.start(path, base, size, start, limit, check_crc))
    except OSError as exc:
        log.warning("walking the commitlog in one process: cannot start a worker (%s)", exc)
        _stop(workers)
        return walk_marking(view, base, size, pos, size, check_crc)
    try:
        first = walk_marking(view, base, size, pos, bounds[1], check_crc)
        return _join(view, base, size, bounds, first, workers, check_crc)
    finally:
        _stop(workers)


def choose_cuts(pos: int, hints: Sequence[int], pieces: int) -> list[int]:
    """Up to ``pieces - 1`` hinted positions after ``pos`` that cut [pos, last hint] most
    evenly, strictly increasing."""
    ordered = sorted(h for h in hints if h > pos)
    if pieces < 2 or not ordered:
        return []
    span = ordered[-1] - pos
    cuts: list[int] = []
    for k in range(1, pieces):
        target = pos + span * k // pieces
        i = min(bisect_left(ordered, target), len(ordered) - 1)
        if i > 0 and target - ordered[i - 1] <= ordered[i] - target:
            i -= 1
        if ordered[i] > (cuts[-1] if cuts else pos):
            cuts.append(ordered[i])
    return cuts


def _join(
    view: Buffer,
    base: int,
    size: int,
    bounds: list[int],
    first: Walk,
    workers: list[_Worker],
    check_crc: bool,
) -> Walk:
    """The pieces' walks joined in order (see the module docstring); waits only for the
    pieces it needs."""
    records, last_put = 0, -1
    position, count, status, piece_put = first
    for k in range(len(workers) + 1):
        if k:
            if position != bounds[k]:  # the walk before did not land on this piece's start
                break
            answer = workers[k - 1].result()
            if answer is None:
                break
            position, count, status, piece_put = answer
        records += count
        last_put = max(last_put, piece_put)
        if status != WALK_LIMIT:
            return position, records, status, last_put
    position, count, status, piece_put = walk_marking(view, base, size, position, size, check_crc)
    return position, records + count, status, max(last_put, piece_put)


_WORKER_MODULE = "localstore.recovery.scan_worker"


class _Worker:
    """One piece's walk in a fresh interpreter (:mod:`localstore.recovery.scan_worker`): it imports
    the record walk and the codec, never the application's main module, and shares nothing."""

    def __init__(self, process: subprocess.Popen[str]):
        self.process = process

    @classmethod
    def start(
        cls, path: Path, base: int, size: int, pos: int, limit: int, check_crc: bool
    ) -> _Worker:
        arguments = [str(path), str(base), str(size), str(pos), str(limit), str(int(check_crc))]
        return cls(
            subprocess.Popen(
                worker_command(_WORKER_MODULE, *arguments),
                env=worker_env(),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
        )

    def result(self) -> Walk | None:
        """The piece's walk, or None (logged) when the worker failed."""
        out, err = self.process.communicate()
        fields = out.split()
        try:
            if self.process.returncode != 0 or len(fields) != 4:
                raise ValueError(f"exit {self.process.returncode}, answer {out.strip()[:80]!r}")
            position, records, status, last_put = map(int, fields)
        except ValueError as exc:
            log.warning(
                "walking the commitlog in one process: a worker failed (%s): %s",
                exc,
                err.strip()[-500:],
            )
            return None
        return position, records, status, last_put


def _stop(workers: list[_Worker]) -> None:
    for worker in workers:
        if worker.process.poll() is None:
            worker.process.kill()
        worker.process.communicate()
