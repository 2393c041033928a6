"""I/O-free client logic: what a client decides, written once, driven by a blocking or an asyncio
shell.

A client's control plane (join the group, take queues under leases, read and commit offsets,
send failed messages back) is a sequence of broker calls interleaved with decisions. Written as
a generator that *yields* each call it needs (a :class:`Call`: a transport method's name and
arguments) and is *sent* the answer (or *thrown* the call's exception, which it may catch), the
sequence does no I/O itself: :func:`run_steps` drives it on a
:class:`~sdk.transport.base.BrokerTransport` (each call blocks its thread),
:func:`run_steps_async` on an :class:`~sdk.transport.base.AsyncBrokerTransport` (each call is
awaited on the event loop, no thread involved). A :class:`Pause` asks the driver to wait (a retry
backoff): the blocking driver sleeps, the async one awaits :func:`asyncio.sleep`.

A step generator never holds a lock across a ``yield``: under the asyncio driver other tasks
run while a call is out, and a thread lock held then would stop the loop. Shells serialise the
sequences that must not interleave themselves (a thread lock around :func:`run_steps`, an
:class:`asyncio.Lock` around :func:`run_steps_async`).

Tests drive a sequence with a script of answers (no broker at all) or with a real broker through
either driver.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Generator
from dataclasses import dataclass
from typing import Any, TypeVar

from sdk.transport.base import AsyncBrokerTransport, BrokerTransport

__all__ = ["Call", "Pause", "Steps", "run_steps", "run_steps_async"]

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Call:
    """Call ``method`` of the transport with ``args`` and ``kwargs``; the answer is sent back
    into the generator (an exception is thrown into it)."""

    method: str
    args: tuple[Any, ...] = ()
    kwargs: tuple[tuple[str, Any], ...] = ()

    @classmethod
    def of(cls, method: str, *args: Any, **kwargs: Any) -> Call:
        """``Call.of("heartbeat", group, client_id, ...)``: the call as it would be written."""
        return cls(method, args, tuple(kwargs.items()))


@dataclass(frozen=True, slots=True)
class Pause:
    """Wait ``seconds`` before going on (a retry's backoff); answers None."""

    seconds: float


Step = Call | Pause
Steps = Generator[Step, Any, T]
"""A step generator: yields :class:`Call` and :class:`Pause`, returns ``T``."""


def _advance(steps: Steps[T], answer: Any, failure: Exception | None) -> tuple[Step | None, Any]:
    """Give ``steps`` the outcome of its last step (``answer``, or ``failure`` thrown in): the
    next step it asks for, or (None, what it returned) once it is done."""
    try:
        return (steps.send(answer) if failure is None else steps.throw(failure)), None
    except StopIteration as done:
        return None, done.value


def run_steps(steps: Steps[T], transport: BrokerTransport) -> T:
    """Run ``steps`` to its end on a blocking transport; answers what it returns. An
    interruption (KeyboardInterrupt) closes the generator: its ``finally`` blocks run."""
    try:
        step, result = _advance(steps, None, None)
        while step is not None:
            answer, failure = None, None
            try:
                if isinstance(step, Pause):
                    time.sleep(step.seconds)
                else:
                    answer = getattr(transport, step.method)(*step.args, **dict(step.kwargs))
            except Exception as exc:
                failure = exc
            step, result = _advance(steps, answer, failure)
        return result  # type: ignore[no-any-return]
    finally:
        steps.close()


async def run_steps_async(steps: Steps[T], transport: AsyncBrokerTransport) -> T:
    """Run ``steps`` to its end on an asyncio transport; answers what it returns. Cancelling
    the task closes the generator (its ``finally`` blocks run; it makes no further call)."""
    try:
        step, result = _advance(steps, None, None)
        while step is not None:
            answer, failure = None, None
            try:
                if isinstance(step, Pause):
                    await asyncio.sleep(step.seconds)
                else:
                    call = getattr(transport, step.method)
                    answer = await call(*step.args, **dict(step.kwargs))
            except Exception as exc:
                failure = exc
            step, result = _advance(steps, answer, failure)
        return result  # type: ignore[no-any-return]
    finally:
        steps.close()
