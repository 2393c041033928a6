"""What the two HTTP transports share, free of any HTTP library: the broker URL, the retry
policy, producer stamps and timeouts (their methods are generated from the call table by
:mod:`sdk.transport.derived`).

Invariants kept here:

* A call is retried only after a retriable failure, within one deadline
  (``retry_deadline_s``, exponential backoff with jitter, tenacity). A 4xx answer surfaces at
  once. A call that is not ``idempotent`` in :data:`sdk.protocol.calls.CALLS` is resent only
  when the broker certainly did not act on it (:class:`RequestNotServedError`: the connection
  could not be opened, or the broker answered 503), never after a timeout or a reset once the
  request was sent.
* A ``stamped`` call (a send) gets its :class:`~sdk.transport.models.ProducerStamp` once, before
  its first try: every retry resends the same stamp, so the broker stores it once. Sequences
  count per (topic, queue id), from 0, under a lock, under a producer id of the transport's
  own (a name given is only its prefix: see :class:`Stamper`); a batch sent again (a producer's own
  retry) gets its first stamp again (:class:`Stamper`).
* The read timeout of a request is the base timeout plus what the broker may hold it
  (``hold_ms``: a long poll).
"""

from __future__ import annotations

import asyncio
import threading
import time
import uuid
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar
from urllib.parse import urlsplit

import orjson
from tenacity import AsyncRetrying, RetryCallState, Retrying, wait_random_exponential

from localstore.record.properties import PROPERTY_UNIQ_KEY
from sdk.errors import BrokerUnavailableError, InvalidArgumentError, QuiverError
from sdk.protocol.calls import CALLS
from sdk.protocol.data_plane import PRODUCER_ID
from sdk.protocol.errors import error_from_answer, error_from_document
from sdk.protocol.send_many import PartError
from sdk.transport.models import ProducerStamp

__all__ = [
    "DEFAULT_RETRY_DEADLINE_S",
    "DEFAULT_TIMEOUT_S",
    "HEALTH_PATH",
    "MAX_PRODUCER_NAME",
    "HealthAnswer",
    "RequestNotServedError",
    "RetryPolicy",
    "Stamper",
    "answer_failure",
    "broker_url",
    "closed_error",
    "decode_health",
    "part_failure",
    "prepare",
    "read_timeout_s",
]

DEFAULT_TIMEOUT_S = 10.0
"""Connect, write and read timeout of one request (a long poll's read timeout adds its hold)."""
DEFAULT_RETRY_DEADLINE_S = 30.0
"""How long one call keeps retrying retriable failures before it gives up."""
HEALTH_PATH = "/health"

T = TypeVar("T")


class RequestNotServedError(BrokerUnavailableError):
    """The broker certainly did not act on a request: the connection could not be opened, or
    the broker answered 503 (shutting down, not serving). Any call may be sent again."""


def broker_url(url: str) -> str:
    """``url`` checked (``http`` or ``https``, a host, a valid port, no query or fragment) and
    without its trailing slash: the base every route is appended to."""
    if not isinstance(url, str):
        raise InvalidArgumentError(f"broker URL {url!r}: want a string like http://host:8080")
    parts = urlsplit(url.strip())
    if parts.scheme not in ("http", "https"):
        raise InvalidArgumentError(f"broker URL {url!r}: the scheme must be http or https")
    if not parts.hostname:
        raise InvalidArgumentError(f"broker URL {url!r}: names no host")
    try:
        port = parts.port
    except ValueError as exc:
        raise InvalidArgumentError(f"broker URL {url!r}: bad port ({exc})") from exc
    if port == 0:
        raise InvalidArgumentError(f"broker URL {url!r}: port 0 cannot be reached")
    if parts.query or parts.fragment or parts.username or parts.password:
        raise InvalidArgumentError(
            f"broker URL {url!r}: want scheme://host:port[/prefix], without query, fragment "
            "or credentials"
        )
    return f"{parts.scheme}://{parts.netloc}{parts.path.rstrip('/')}"


def read_timeout_s(timeout_s: float, hold_ms: int) -> float:
    """The read timeout of a request the broker may hold ``hold_ms`` before answering."""
    return timeout_s + hold_ms / 1000.0


def answer_failure(url: str, http_status: int, body: bytes) -> QuiverError:
    """The SDK error an error answer stands for; a retriable 503 becomes
    :class:`RequestNotServedError` (the broker did not act), naming ``url``."""
    return _served_or_not(url, http_status, error_from_answer(http_status, body))


def part_failure(url: str, part: PartError) -> QuiverError:
    """:func:`answer_failure` for a refused part of a send-many: the error a send of it alone
    would have met."""
    return _served_or_not(url, part.http_status, error_from_document(part.http_status, part.error))


def _served_or_not(url: str, http_status: int, error: QuiverError) -> QuiverError:
    if http_status == 503 and error.retriable:
        return RequestNotServedError(f"broker {url} is not serving: {error}")
    return error


@dataclass(frozen=True, slots=True)
class HealthAnswer:
    broker_name: str


def decode_health(url: str, http_status: int, body: bytes) -> HealthAnswer:
    """``GET /health``'s answer: the broker's name, or the error it stands for."""
    if http_status != 200:
        raise answer_failure(url, http_status, body)
    try:
        document = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise InvalidArgumentError(f"broker {url}: /health answer is not JSON: {exc}") from exc
    name = document.get("broker_name") if isinstance(document, dict) else None
    if not isinstance(name, str) or not name:
        raise InvalidArgumentError(f"broker {url}: /health answer names no broker_name")
    return HealthAnswer(name)


class Stamper:
    """Producer stamps of one transport: its producer id and one sequence per queue.

    The producer id is this stamper's alone: a random one, or the name given followed by
    ``.`` and a random instance part. Its sequences start at 0, so two stampers under one id
    (two producers of one :class:`~sdk.transport.remote_broker.RemoteBroker`, a producer
    started again) would stamp different batches alike, and the broker would answer the later
    ones with the earlier ones' receipts, storing nothing.

    A batch sent again is stamped as the first time: the stamps of the last
    :data:`REMEMBERED_BATCHES` batches to each queue are kept by the batch's fingerprint (its
    messages' ``UNIQ_KEY``s, which a client builds once per batch), so a producer that retries
    a send the transport gave up on resends the same stamp, and the broker stores it once."""

    def __init__(self, producer_id: str | None = None) -> None:
        instance = uuid.uuid4().hex
        if producer_id is None:
            self.producer_id = instance
        elif len(producer_id) <= MAX_PRODUCER_NAME and PRODUCER_ID.fullmatch(producer_id):
            self.producer_id = f"{producer_id}.{instance[:_INSTANCE_CHARS]}"
        else:
            raise InvalidArgumentError(
                f"producer_id {producer_id!r:.80}: want 1 to {MAX_PRODUCER_NAME} of [A-Za-z0-9_.:-]"
            )
        self._next: dict[tuple[str, int], int] = {}
        self._recent: dict[tuple[str, int], OrderedDict[tuple[Any, ...], ProducerStamp]] = {}
        self._lock = threading.Lock()

    def stamp(self, messages: Sequence[Any]) -> ProducerStamp:
        """The stamp of a send of ``messages`` (a non-empty batch to one queue)."""
        first: Any = messages if hasattr(messages, "topic") else messages[0]  # UniformBatch
        key = (first.topic, first.queue_id)
        fingerprint = _fingerprint(messages)
        with self._lock:
            recent = self._recent.setdefault(key, OrderedDict())
            if fingerprint is not None and fingerprint in recent:
                return recent[fingerprint]
            sequence = self._next.get(key, 0)
            self._next[key] = sequence + 1
            stamp = ProducerStamp(self.producer_id, sequence)
            if fingerprint is not None:
                recent[fingerprint] = stamp
                if len(recent) > REMEMBERED_BATCHES:
                    recent.popitem(last=False)
            return stamp


_INSTANCE_CHARS = 16
MAX_PRODUCER_NAME = 128 - 1 - _INSTANCE_CHARS
"""The longest producer name a transport takes (the broker takes ids of 128 characters: the
name, ``.`` and the instance part)."""

REMEMBERED_BATCHES = 64
"""Batches per queue whose stamps a transport remembers for a resend (see :class:`Stamper`)."""


def _fingerprint(messages: Any) -> tuple[Any, ...] | None:
    """What tells a batch from any other: its message count and first and last ``UNIQ_KEY``
    (None when a message has none: such a batch is stamped afresh each time)."""
    uniq_keys = getattr(messages, "uniq_keys", None)  # a UniformBatch's column
    if uniq_keys is None:
        uniq_keys = [m.properties.get(PROPERTY_UNIQ_KEY) for m in (messages[0], messages[-1])]
    first, last = uniq_keys[0], uniq_keys[-1]
    if not first or not last:
        return None
    return (len(messages), first, last)


class RetryPolicy:
    """When and how long a call is retried (see the module docstring). ``clock``, ``sleep``
    and ``async_sleep`` are injectable so that tests do not wait for real."""

    def __init__(
        self,
        url: str,
        retry_deadline_s: float,
        *,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
        async_sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        if retry_deadline_s < 0:
            raise InvalidArgumentError(f"retry_deadline_s: want >= 0, got {retry_deadline_s}")
        self.url = url
        self.retry_deadline_s = retry_deadline_s
        self.clock = clock
        self.sleep = sleep
        self.async_sleep = async_sleep
        self._backoff = wait_random_exponential(multiplier=0.05, max=2.0)

    def should_retry(self, exc: BaseException, idempotent: bool) -> bool:
        if isinstance(exc, RequestNotServedError):
            return True
        return idempotent and bool(getattr(exc, "retriable", False))

    def tenacity_arguments(self, idempotent: bool) -> dict[str, Any]:
        """Keyword arguments of ``tenacity.Retrying``/``AsyncRetrying`` for one call, its
        deadline counted from now."""
        deadline = self.clock() + self.retry_deadline_s

        def stop(state: RetryCallState) -> bool:
            return self.clock() >= deadline

        def wait(state: RetryCallState) -> float:
            return max(0.0, min(self._backoff(state), deadline - self.clock()))

        def retry(state: RetryCallState) -> bool:
            outcome = state.outcome
            failure = None if outcome is None else outcome.exception()
            return failure is not None and self.should_retry(failure, idempotent)

        return {"stop": stop, "wait": wait, "retry": retry, "reraise": True}

    def run(self, attempt: Callable[[], T], idempotent: bool) -> T:
        """``attempt()``, retried as the policy says; the last failure is raised (one the
        broker did not serve as a plain :class:`BrokerUnavailableError`).

        The first try runs without tenacity (whose set-up costs as much as a small request);
        only a failure worth retrying enters its loop, as that loop's first attempt."""
        arguments = self.tenacity_arguments(idempotent)
        try:
            try:
                return attempt()
            except Exception as exc:
                if not self.should_retry(exc, idempotent):
                    raise
                first_failure: Exception | None = exc
            for state in Retrying(sleep=self.sleep, **arguments):
                with state:
                    if first_failure is not None:
                        failure, first_failure = first_failure, None
                        raise failure
                    return attempt()
        except RequestNotServedError as exc:
            raise _unavailable(exc) from exc
        raise AssertionError("unreachable")  # pragma: no cover

    async def run_async(self, attempt: Callable[[], Awaitable[T]], idempotent: bool) -> T:
        """:meth:`run` for a coroutine ``attempt``."""
        arguments = self.tenacity_arguments(idempotent)
        try:
            try:
                return await attempt()
            except Exception as exc:
                if not self.should_retry(exc, idempotent):
                    raise
                first_failure: Exception | None = exc
            async for state in AsyncRetrying(sleep=self.async_sleep, **arguments):
                with state:
                    if first_failure is not None:
                        failure, first_failure = first_failure, None
                        raise failure
                    return await attempt()
        except RequestNotServedError as exc:
            raise _unavailable(exc) from exc
        raise AssertionError("unreachable")  # pragma: no cover


def _unavailable(exc: RequestNotServedError) -> BrokerUnavailableError:
    """What a caller sees of a call the broker never served: the SDK's public error (the
    subclass only tells the retry policy that resending is safe)."""
    return BrokerUnavailableError(str(exc))


def prepare(stamper: Stamper, name: str, args: Sequence[Any], kwargs: Mapping[str, Any]) -> Any:
    """``(call, request)``: the table's entry for method ``name`` and its request for these
    arguments, stamped when the call is (once: every retry resends this request)."""
    call = CALLS[name]
    return call, call.request(args, kwargs, stamper.stamp if call.stamped else None)


def closed_error(url: str) -> BrokerUnavailableError:
    """What a call on a closed transport raises: unavailable, and not worth retrying."""
    error = BrokerUnavailableError(f"the transport to broker {url} is closed")
    error.retriable = False
    return error
