"""Benchmark output: figures as JSON lines (the shape ``peers.py --with`` reads) or a table, and
a progress display on stderr."""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass
from typing import TextIO

import orjson


@dataclass(frozen=True, slots=True)
class Figure:
    """One measured number; ``*_per_s`` higher is better, ``*_ms`` and ``*_kb`` lower."""

    name: str
    value: float
    count: int
    size: int
    batch: int

    def to_json(self) -> bytes:
        return orjson.dumps(
            {
                "figure": self.name,
                "value": round(self.value, 3),
                "count": self.count,
                "size": self.size,
                "batch": self.batch,
            }
        )

    def to_text(self) -> str:
        return f"{self.name:32s} {self.value:>16,.1f}   (count {self.count:,}, size {self.size})"


def percentile(samples: list[float], pct: float) -> float:
    """The ``pct`` percentile of ``samples`` (nearest rank)."""
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, max(0, round(pct / 100 * (len(ordered) - 1))))]


def bench_body(size: int) -> bytes:
    """A message body of ``size`` bytes, the same in every benchmark."""
    return (b"0123456789abcdefghijklmnopqrstuvwxyz" * (size // 36 + 1))[:size]


def emit(figure: Figure, as_json: bool, out: TextIO = sys.stdout) -> None:
    out.write((figure.to_json().decode() if as_json else figure.to_text()) + "\n")
    out.flush()


class Progress:
    """One self-overwriting status line on stderr (plain lines when stderr is not a terminal)."""

    def __init__(self, stream: TextIO = sys.stderr, enabled: bool = True):
        self._stream = stream
        self._enabled = enabled
        self._tty = stream.isatty()
        self._last = 0.0

    def update(self, label: str, done: int, total: int) -> None:
        now = time.monotonic()
        if not self._enabled or not self._tty or now - self._last < 0.2:
            return
        self._last = now
        percent = 100 * done // max(total, 1)
        self._stream.write(f"\r[perf] {label}: {done:,}/{total:,} ({percent}%)   ")
        self._stream.flush()

    def done(self, label: str) -> None:
        if not self._enabled:
            return
        prefix = "\r" if self._tty else ""
        self._stream.write(f"{prefix}[perf] {label}: done{' ' * 30}\n")
        self._stream.flush()
