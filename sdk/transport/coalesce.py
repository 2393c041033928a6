"""Sends issued concurrently on one asyncio HTTP transport leave together, as a log's group
commit does: :class:`SendCoalescer`.

Invariants:

* No send waits for company. A send that finds no request of the coalescer in flight goes out
  at once, alone (``POST /v1/send``).
* Sends that arrive while a request is in flight queue up; when it is answered, the queued
  ones leave together in one ``POST /v1/send-many`` (:mod:`sdk.protocol.send_many`), in the
  order they came, as many as fit ``max_request_bytes`` of produce bodies (a send larger than
  that goes alone) and at most half of the sends in play: those queued and those just
  answered, whose callers may send again at once (:data:`FEWEST_TOGETHER` at least). The rest
  wait for that request's answer. So one request of the coalescer is in flight at a time; a
  burst of N concurrent sends costs three requests (one, then about N/2 twice), not N; and
  callers that send again as soon as they are answered settle into two groups that take
  turns: while one group's request is at the broker, the other builds its next sends.
* The callers of an answered request of queued sends resume only once the next request has
  started and the loop has turned once: each caller then builds its next send while it is
  out. (Resumed first, the callers would build their next sends while the
  broker waited: under Python 3.11 aiohttp writes a request body on a task of its own, which
  runs after every callback already queued; from 3.12 it writes at once, and the turn costs
  next to nothing.)
* Each send gets its own outcome: its :class:`~sdk.transport.models.SendResult`, or the error
  ``/v1/send`` would have answered it (a refused part fails no other); a request that fails
  whole (a reset, a timeout) fails each of its sends with that error.
* A send's request is built and stamped once, by its caller, before it is queued: a retry (its
  caller's, under the transport's retry policy) queues the same request again, so the broker
  answers a resent part from its producer window and stores it once.
* A send whose caller was cancelled before its request left is dropped from the queue.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from sdk.errors import QuiverError
from sdk.protocol.calls import CALLS, WireRequest, send_many_request
from sdk.protocol.send_many import PartError, decode_send_many_answer
from sdk.transport.models import SendResult

__all__ = ["DEFAULT_COALESCE_BYTES", "FEWEST_TOGETHER", "SendCoalescer"]

DEFAULT_COALESCE_BYTES = 256 << 10
"""The most produce-body bytes one coalesced request carries: enough for tens of batches of
100 small messages; larger requests only make the broker hold more memory per request."""

FEWEST_TOGETHER = 4
"""A request of queued sends takes at most half of the sends in play, so that two groups of
callers take turns (see the module docstring), but never fewer than this many while as many
are queued: 4 producers in groups of 2 were 14 % slower than in one request of 3 (requests
cost more than the turns saved), 8 producers in groups of 4 were 13 % faster."""

Post = Callable[[WireRequest], Awaitable[bytes]]
"""One request out and its answer's body (the error answer or failure raised)."""
PartFailure = Callable[[PartError], QuiverError]
"""The error a refused part stands for."""


@dataclass(slots=True)
class _Queued:
    request: WireRequest
    outcome: asyncio.Future[SendResult]


class SendCoalescer:
    """Carries a transport's sends (see the module docstring). ``post`` sends one request;
    ``part_failure`` turns a refused part into its error. Used on one event loop."""

    def __init__(
        self,
        post: Post,
        part_failure: PartFailure,
        *,
        max_request_bytes: int = DEFAULT_COALESCE_BYTES,
    ) -> None:
        self._post = post
        self._part_failure = part_failure
        self.max_request_bytes = max_request_bytes
        self._queue: deque[_Queued] = deque()
        self._busy = False  # a request of this coalescer is in flight
        self._tasks: set[asyncio.Task[None]] = set()

    async def send(self, request: WireRequest) -> SendResult:
        """The outcome of ``request`` (a ``send`` entry's request), sent at once when nothing
        is in flight, else with the sends queued meanwhile."""
        if self._busy:
            queued = _Queued(request, asyncio.get_running_loop().create_future())
            self._queue.append(queued)
            return await queued.outcome
        self._busy = True
        try:
            answer: SendResult = _SEND.answer(await self._post(request))
            return answer
        finally:
            self._send_queued(answered=1)

    def _next(self, answered: int) -> None:
        """Send what is queued, if anything is and nothing is in flight; ``answered``: how
        many sends the request just answered carried."""
        if self._busy:
            return
        batch = self._take(answered)
        if not batch:
            return
        self._busy = True
        task = asyncio.get_running_loop().create_task(self._send_together(batch))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _take(self, answered: int) -> list[_Queued]:
        """The queued sends the next request carries: in order, up to the byte cap (one at
        least) and half of the sends in play, the ``answered`` ones and the live queued ones
        (:data:`FEWEST_TOGETHER` at least); those whose caller gave up are dropped."""
        batch: list[_Queued] = []
        size = 0
        live = sum(not queued.outcome.done() for queued in self._queue)
        most = max(-(-(live + answered) // 2), FEWEST_TOGETHER)
        while self._queue and len(batch) < most:
            queued = self._queue[0]
            if queued.outcome.done():  # cancelled before it left
                self._queue.popleft()
                continue
            size += len(queued.request.body)
            if batch and size > self.max_request_bytes:
                break
            batch.append(self._queue.popleft())
        return batch

    async def _send_together(self, batch: list[_Queued]) -> None:
        try:
            outcomes = await self._outcomes(batch)
        except asyncio.CancelledError:
            self._send_queued(len(batch))
            for queued in batch:
                queued.outcome.cancel()
            raise
        except Exception as exc:
            self._send_queued(len(batch))
            for queued in batch:
                if not queued.outcome.done():
                    queued.outcome.set_exception(exc)
            return
        self._send_queued(len(batch))
        try:
            # One turn of the loop, so the request just started is written before these
            # callers resume: each builds its next send then, while that request is out.
            await asyncio.sleep(0)
        finally:
            for queued, outcome in zip(batch, outcomes, strict=True):
                if queued.outcome.done():
                    continue
                if isinstance(outcome, PartError):
                    queued.outcome.set_exception(self._part_failure(outcome))
                else:
                    queued.outcome.set_result(outcome)

    async def _outcomes(self, batch: list[_Queued]) -> list[SendResult | PartError]:
        """Send ``batch`` in one request: each send's outcome (raises what fails it whole)."""
        if len(batch) == 1:
            return [_SEND.answer(await self._post(batch[0].request))]
        body = await self._post(send_many_request([q.request for q in batch]))
        return decode_send_many_answer(body, len(batch))

    def _send_queued(self, answered: int) -> None:
        """The request in flight (of ``answered`` sends) was answered, or failed: send what
        queued meanwhile."""
        self._busy = False
        self._next(answered)


_SEND = CALLS["send"]
