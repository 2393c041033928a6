"""Closing a store's many parts so that no failure stops the others.

Invariant: a close runs every step it was given, each in turn whatever the earlier ones raised;
what each raised is kept (and logged at ERROR by :class:`CloseSteps`, naming the step) and the
first is raised only once every step ran. A step interrupted by a ``BaseException``
(``KeyboardInterrupt``) stops the run there, but it and the steps after it are kept: the next
close runs them (so each step must be safe to run again), and a second close never reports
success while something is still open.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from typing import Any

from localstore.errors import StoreError

log = logging.getLogger(__name__)


def close_all(closers: Iterable[Callable[[], Any]]) -> None:
    """Call every closer; then raise the first exception one raised (the others are logged)."""
    first: Exception | None = None
    for close in closers:
        try:
            close()
        except Exception as exc:
            if first is None:
                first = exc
            else:
                log.error("closing failed as well: %r", exc)
    if first is not None:
        raise first


class CloseSteps:
    """The named steps of one close, run once each (see the module docstring).

    ``what`` names the thing closed in the messages (``store /data``)."""

    def __init__(self, what: str, steps: Iterable[tuple[str, Callable[[], Any]]]) -> None:
        self.what = what
        self._pending = list(steps)
        self.errors: list[tuple[str, Exception]] = []  # (step, what it raised), in order

    @property
    def done(self) -> bool:
        """Whether every step has run (successfully or not)."""
        return not self._pending

    def add(self, step: str, error: Exception) -> None:
        """Record a failure found outside the steps (e.g. a thread's earlier error)."""
        log.error("closing %s: %s: %s", self.what, step, error)
        self.errors.append((step, error))

    def run(self) -> None:
        """Run the steps not yet run, each once."""
        while self._pending:
            step, close = self._pending[0]
            try:
                close()
            except Exception as exc:
                self.add(f"{step} failed", exc)
            del self._pending[0]  # not after a BaseException: the next run retries the step

    def first_error(self) -> StoreError | None:
        """The first failure as a :class:`StoreError` naming the step (another exception is
        wrapped, and kept as its ``__cause__``), or None."""
        if not self.errors:
            return None
        step, error = self.errors[0]
        if isinstance(error, StoreError):
            return error
        wrapped = StoreError(f"closing {self.what}: {step}: {error!r}")
        wrapped.__cause__ = error
        return wrapped
