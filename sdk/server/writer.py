"""The broker server's one writer: every append runs through it, one at a time, in the order
the requests came.

A writer thread keeps the event loop off the disk: an append that waits for its flush (a
store under sync flush), writes config files or stores a large batch runs there. Handing a
call to a thread and its answer back costs two thread wake-ups and the GIL changing hands
twice, more than a small append itself under async flush, where an append only copies bytes
into the mapped commitlog and waits for nothing. So such an append runs on the loop at once
when the writer thread has nothing queued (:meth:`Writer.run` with ``inline=True``): no
request can overtake another, since the loop runs one call at a time and a call that finds
work queued goes behind it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

from sdk.errors import BrokerUnavailableError

__all__ = ["Writer"]

T = TypeVar("T")


class Writer:
    """Runs appends one at a time (see the module docstring). ``inline_allowed``: whether a
    call may run on the loop at all (False for a store under sync flush, whose appends wait
    for the disk). Its methods are called from the event loop only."""

    def __init__(self, *, inline_allowed: bool) -> None:
        self.inline_allowed = inline_allowed
        self._thread = ThreadPoolExecutor(1, thread_name_prefix="quiver-writer")
        self._queued = 0  # calls handed to the thread and not answered yet
        self._closed = False

    async def run(self, call: Callable[[], T], *, inline: bool = False) -> T:
        """``call()``'s value: on the loop at once when ``inline`` (the caller's word that the
        call is a small append), the writer allows it and the thread has nothing queued;
        otherwise on the writer thread, after the calls queued there. Raises
        :class:`~sdk.errors.BrokerUnavailableError` once the writer is shut down."""
        if self._closed:
            raise BrokerUnavailableError("the broker is shutting down")
        if inline and self.inline_allowed and not self._queued:
            return call()
        try:
            future = asyncio.get_running_loop().run_in_executor(self._thread, call)
        except RuntimeError as exc:  # "cannot schedule new futures after shutdown"
            raise BrokerUnavailableError("the broker is shutting down") from exc
        self._queued += 1
        try:
            return await future
        finally:
            self._queued -= 1

    def shutdown(self) -> None:
        """Refuse new calls, finish the queued ones, stop the thread."""
        self._closed = True
        self._thread.shutdown(wait=True)
