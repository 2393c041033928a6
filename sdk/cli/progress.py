"""A progress line on stderr for ``quiver`` commands that can run long.

Invariant: the line is drawn only when stderr is a terminal and the command runs without
``--json`` and ``--quiet`` (:func:`progress_line`); otherwise every call is a no-op, so a pipe, a
log file or a script reading ``--json`` never sees it. The line overwrites itself (``\\r``), is
redrawn at most every :data:`REDRAW_S` seconds after the first draw, and is erased when the
command finishes, so the command's own output is left as it would be without it.
"""

from __future__ import annotations

import argparse
import sys
import time
from types import TracebackType
from typing import TextIO

REDRAW_S = 0.2
_ERASE_LINE = "\r\033[K"


class ProgressLine:
    """One self-overwriting status line: ``update`` what is done, ``finish`` to erase it.

    Use it as a context manager (``with progress_line(args) as progress:``) so that the line is
    erased however the command ends.
    """

    def __init__(self, *, enabled: bool, stream: TextIO | None = None):
        self.enabled = enabled
        self._stream = stream if stream is not None else sys.stderr
        self._started = time.monotonic()
        self._next_draw = 0.0  # the first update draws at once
        self._shown = False

    def update(self, what: str, done: int, total: int | None = None) -> None:
        """Show ``what: done/total (percent, rate/s)``; ``total`` None when unknown."""
        if not self.enabled:
            return
        now = time.monotonic()
        if now < self._next_draw:
            return
        self._next_draw = now + REDRAW_S
        elapsed_s = now - self._started
        details = [f"{100 * done // total}%"] if total else []
        if elapsed_s >= 1.0:
            details.append(f"{done / elapsed_s:,.0f}/s")
        count = f"{done:,}/{total:,}" if total else f"{done:,}"
        text = f"{what}: {count}" + (f" ({', '.join(details)})" if details else "")
        self._draw(text)

    def status(self, text: str) -> None:
        """Show a phase with no count (e.g. ``opening store DIR``), whatever the last draw."""
        if self.enabled:
            self._draw(text)

    def finish(self) -> None:
        """Erase the line if one was drawn."""
        if self._shown:
            self._stream.write(_ERASE_LINE)
            self._stream.flush()
            self._shown = False

    def _draw(self, text: str) -> None:
        self._stream.write(f"{_ERASE_LINE}quiver: {text}")
        self._stream.flush()
        self._shown = True

    def __enter__(self) -> ProgressLine:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.finish()


def progress_line(args: argparse.Namespace, *, results_on_stdout: bool = False) -> ProgressLine:
    """The progress line of a command run with ``args``: drawn when stderr is a terminal and
    neither ``--json`` nor ``--quiet`` is given. ``results_on_stdout``: the command prints its
    results as it goes (``read``), so no line is drawn when stdout is that terminal too (the
    printed results are the progress, and a line between them would garble them)."""
    quiet = getattr(args, "json", False) or getattr(args, "quiet", False)
    enabled = _is_terminal(sys.stderr) and not quiet
    if results_on_stdout and _is_terminal(sys.stdout):
        enabled = False
    return ProgressLine(enabled=enabled)


def _is_terminal(stream: TextIO | None) -> bool:
    try:
        return stream is not None and stream.isatty()
    except ValueError:  # a closed stream
        return False
