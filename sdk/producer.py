"""Producers: :class:`Producer` (blocking) and :class:`AsyncProducer` (asyncio), same names.

Pipeline: validate and build (:class:`sdk.outgoing.MessageBuilder`, no I/O) -> pick a queue from
the topic's route (cached for ``route_ttl_s``) -> one request per message or per batch through
the transport -> receipts. Retriable failures (broker unreachable or closing, see
``QuiverError.retriable``) are retried with tenacity (bounded exponential backoff with jitter),
re-sending the *same* built messages: a retried message keeps its ``UNIQ_KEY``, so consumers
can tell a retry's duplicate from a new message.

``send`` waits for the broker's answer; ``send_async`` returns a future (a
``concurrent.futures.Future`` / an ``asyncio.Task``); ``send_oneway`` does not report at all
(failures are logged); ``send_batch`` stores several messages of one topic in one queue with
one request and one append.
"""

from __future__ import annotations

import asyncio
import logging
import random
import threading
import time
from collections.abc import Awaitable, Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from types import TracebackType
from typing import Self, TypeVar

from tenacity import (
    AsyncRetrying,
    Retrying,
    retry_if_exception,
    stop_after_attempt,
    wait_random_exponential,
)

from localstore.record.codec import NewMessage
from sdk.clock import SYSTEM_CLOCK, Clock
from sdk.errors import ClientClosedError, InvalidArgumentError, InvalidMessageError
from sdk.lifecycle import WarnsUnclosed
from sdk.message import Message
from sdk.outgoing import MessageBuilder, QueueSelector, SendReceipt, SendReceipts, receipts
from sdk.transport.base import AsyncBrokerTransport, BrokerTransport
from sdk.transport.resolve import owns_transport, resolve, resolve_async

__all__ = ["AsyncProducer", "Producer"]

log = logging.getLogger(__name__)

DEFAULT_PRODUCER_GROUP = "DEFAULT_PRODUCER"
T = TypeVar("T")
_FIRST_RETRY_WAIT_S = 0.05


def _is_retriable(exc: BaseException) -> bool:
    return bool(getattr(exc, "retriable", False))


class _Routes:
    """Queue counts per topic, asked of the broker at most once per ``ttl_s`` of ``clock``."""

    def __init__(self, ttl_s: float, clock: Clock) -> None:
        self.ttl_s = ttl_s
        self._clock = clock
        self._counts: dict[str, tuple[int, float]] = {}

    def cached(self, topic: str) -> int | None:
        found = self._counts.get(topic)
        if found is None or self._clock.monotonic() - found[1] > self.ttl_s:
            return None
        return found[0]

    def remember(self, topic: str, count: int) -> int:
        self._counts[topic] = (count, self._clock.monotonic())
        return count


class _ProducerBase(WarnsUnclosed):
    def __init__(
        self,
        group: str,
        selector: QueueSelector | None,
        retries: int,
        route_ttl_s: float,
        max_body_bytes: int,
        clock: Clock,
    ) -> None:
        if retries < 0:
            raise InvalidArgumentError(f"retries must be >= 0, got {retries}")
        self.group = group
        self.selector = selector
        self.retries = retries
        self.builder = MessageBuilder(max_body_bytes=max_body_bytes)
        self._routes = _Routes(route_ttl_s, clock)
        self._closed = False

    def _check_open(self) -> None:
        if self._closed:
            raise ClientClosedError(f"producer {self.group!r} is closed")

    def _pick(
        self,
        message: Message,
        count: int,
        sharding_key: str | None,
        queue_id: int | None,
    ) -> int:
        if queue_id is not None:
            if not 0 <= queue_id < count:
                raise InvalidMessageError(
                    f"queue {queue_id} does not exist: {message.topic} has queues 0-{count - 1}"
                )
            return queue_id
        return self.builder.select_queue(
            message, count, sharding_key=sharding_key, selector=self.selector
        )


class Producer(_ProducerBase):
    """Sends messages to a broker; thread-safe. Use ``with`` or call :meth:`close`.

    ``broker``: a broker URL (``"http://host:8080"``: remote mode, over a transport the producer
    makes and closes), an :class:`sdk.EmbeddedBroker` (local mode) or a transport. ``group`` is the
    producer group (recorded for transactions later; any name). ``selector`` replaces
    round-robin queue selection. ``retries``: extra attempts on retriable failures.
    ``route_ttl_s``: how long a topic's queue count is used before it is asked again, on
    ``clock`` (tests give a :class:`sdk.clock.ManualClock`).

    Queues are chosen round-robin per topic unless ``sharding_key=`` (or ``queue_id=``) is
    given. A message's ``keys`` do not choose its queue (unlike a Kafka record key): they are
    for lookup by key and deduplication only; pass the key as ``sharding_key=`` too to keep
    every message of it in one queue, in order.
    """

    def __init__(
        self,
        broker: object,
        group: str = DEFAULT_PRODUCER_GROUP,
        *,
        selector: QueueSelector | None = None,
        retries: int = 2,
        route_ttl_s: float = 30.0,
        max_body_bytes: int = 4 * 1024 * 1024,
        async_workers: int = 4,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        super().__init__(group, selector, retries, route_ttl_s, max_body_bytes, clock)
        self.transport: BrokerTransport = resolve(broker)
        self._owns_transport = owns_transport(broker)
        self._async_workers = async_workers
        self._executor: ThreadPoolExecutor | None = None
        self._executor_lock = threading.Lock()
        self._worker = threading.local()  # .is_worker: this thread is one of the executor's
        self._mark_opened()

    def _queue_count(self, topic: str) -> int:
        count = self._routes.cached(topic)
        if count is None:
            count = self._routes.remember(topic, self._call(self.transport.queue_count, topic))
        return count

    def _call(self, fn: Callable[..., T], *args: object) -> T:
        """``fn(*args)``; a retriable failure is retried with backoff (tenacity), the first
        attempt runs without the retry machinery (the common case costs nothing extra)."""
        try:
            return fn(*args)
        except Exception as exc:
            if not _is_retriable(exc) or self.retries == 0:
                raise
            log.info("send failed (%s); retrying", exc)
            time.sleep(random.uniform(0, _FIRST_RETRY_WAIT_S))
        for attempt in Retrying(
            stop=stop_after_attempt(self.retries),
            wait=wait_random_exponential(multiplier=0.05, max=1.0),
            retry=retry_if_exception(_is_retriable),
            reraise=True,
        ):
            with attempt:
                return fn(*args)
        raise AssertionError("unreachable")  # pragma: no cover

    def _send_built(self, built: Sequence[NewMessage]) -> SendReceipts:
        def attempt() -> SendReceipts:
            return receipts(built, self.transport.send(built))

        result: SendReceipts = self._call(attempt)
        return result

    def send(
        self,
        message: Message,
        *,
        sharding_key: str | None = None,
        queue_id: int | None = None,
    ) -> SendReceipt:
        """Send one message and wait for the broker's answer.

        ``sharding_key`` keeps every message of one key in one queue (ordered messages);
        ``queue_id`` names the queue outright; with neither, the queue is chosen round-robin.
        ``message.keys`` never choose the queue (unlike a Kafka record key): give the key as
        ``sharding_key=`` for that. Raises :class:`InvalidMessageError` before any
        I/O for a bad message, :class:`SendRejectedError` when the broker refuses it,
        :class:`BrokerUnavailableError` when retries ran out.
        """
        self._check_open()
        return self._send_one(message, sharding_key, queue_id)

    def _send_one(
        self, message: Message, sharding_key: str | None, queue_id: int | None
    ) -> SendReceipt:
        """:meth:`send` without the closed check: a background send accepted before
        :meth:`close` began runs through here, so closing does not refuse it."""
        self.builder.check(message)
        count = self._queue_count(message.topic)
        chosen = self._pick(message, count, sharding_key, queue_id)
        return self._send_built([self.builder.build(message, chosen)])[0]

    def send_batch(
        self,
        messages: Sequence[Message],
        *,
        sharding_key: str | None = None,
        queue_id: int | None = None,
    ) -> SendReceipts:
        """Send messages of one topic to one queue with one request (one append: all or none
        are stored). No delayed messages in a batch. Answers a receipt per message, in order
        (:class:`SendReceipts`, made when first read). The queue is chosen as for :meth:`send`,
        by ``sharding_key`` or ``queue_id`` (else round-robin), never by the messages'
        ``keys``."""
        self._check_open()
        if not messages:
            return SendReceipts()
        first = messages[0]
        self.builder.check(first)
        count = self._queue_count(first.topic)
        chosen = self._pick(first, count, sharding_key, queue_id)
        return self._send_built(self.builder.build_batch(messages, chosen))

    def send_async(
        self,
        message: Message,
        *,
        sharding_key: str | None = None,
        queue_id: int | None = None,
    ) -> Future[SendReceipt]:
        """Send in the background; the future holds the receipt or the error. A bad message
        raises here, at once; so does a send after :meth:`close` began."""
        self._check_open()
        self.builder.check(message)
        return self._submit(message, sharding_key, queue_id)

    def send_oneway(self, message: Message, *, sharding_key: str | None = None) -> None:
        """Send without waiting for, or reporting, the outcome (failures are logged)."""
        future = self.send_async(message, sharding_key=sharding_key)
        future.add_done_callback(_log_failure)

    def _submit(
        self, message: Message, sharding_key: str | None, queue_id: int | None
    ) -> Future[SendReceipt]:
        """Queue a background send. Under the lock :meth:`close` takes to mark the producer
        closed: a send is either accepted before close began (and then carried out by the
        executor close waits for) or refused here."""
        with self._executor_lock:
            self._check_open()
            if self._executor is None:
                self._executor = ThreadPoolExecutor(
                    self._async_workers,
                    thread_name_prefix=f"quiver-send-{self.group}",
                    # Not a bound method: the worker threads must not keep the producer alive.
                    initializer=_mark_worker,
                    initargs=(self._worker,),
                )
            return self._executor.submit(self._send_one, message, sharding_key, queue_id)

    def close(self) -> None:
        """Refuse new sends, then wait for the background sends accepted before (each is
        stored or fails for its own reason, its future resolved). Idempotent and
        thread-safe: every caller returns once those sends are done (except a caller on one
        of the send threads, e.g. a future's callback: it cannot wait for itself, so it
        returns at once; the accepted sends are still carried out, and a transport the
        producer made from a URL stays open until a ``close()`` from another thread)."""
        with self._executor_lock:
            self._closed = True
            executor = self._executor
        on_worker = getattr(self._worker, "is_worker", False)
        if executor is not None:
            # Runs every queued send before the threads end; safe to repeat and to call
            # from several threads at once.
            executor.shutdown(wait=not on_worker)
        if self._owns_transport and not on_worker:
            self.transport.close()  # idempotent

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


def _mark_worker(worker: threading.local) -> None:
    worker.is_worker = True


def _log_failure(future: Future[SendReceipt]) -> None:
    exc = future.exception()
    if exc is not None:
        log.error("one-way send failed: %s", exc)


class AsyncProducer(_ProducerBase):
    """The asyncio twin of :class:`Producer`: ``await send(...)``, ``await send_batch(...)``,
    ``send_async`` (a task), ``send_oneway``. Use ``async with`` or ``await close()``.

    As with :class:`Producer`, a message's ``keys`` do not choose its queue (unlike a Kafka
    record key): ``sharding_key=`` does (else ``queue_id=``, else round-robin)."""

    def __init__(
        self,
        broker: object,
        group: str = DEFAULT_PRODUCER_GROUP,
        *,
        selector: QueueSelector | None = None,
        retries: int = 2,
        route_ttl_s: float = 30.0,
        max_body_bytes: int = 4 * 1024 * 1024,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        super().__init__(group, selector, retries, route_ttl_s, max_body_bytes, clock)
        self.transport: AsyncBrokerTransport = resolve_async(broker)
        self._owns_transport = owns_transport(broker)
        self._pending: set[asyncio.Task[SendReceipt]] = set()
        # The pending sends as the first close() found them, gathered (None: still open).
        self._drained: asyncio.Future[list[SendReceipt | BaseException]] | None = None
        self._mark_opened()

    async def _queue_count(self, topic: str) -> int:
        count = self._routes.cached(topic)
        if count is None:
            transport = self.transport
            count = self._routes.remember(
                topic, await self._call(lambda: transport.queue_count(topic))
            )
        return count

    async def _call(self, make_call: Callable[[], Awaitable[T]]) -> T:
        """As :meth:`Producer._call`: the first attempt bypasses tenacity."""
        try:
            return await make_call()
        except Exception as exc:
            if not _is_retriable(exc) or self.retries == 0:
                raise
            log.info("send failed (%s); retrying", exc)
            await asyncio.sleep(random.uniform(0, _FIRST_RETRY_WAIT_S))
        async for attempt in AsyncRetrying(
            stop=stop_after_attempt(self.retries),
            wait=wait_random_exponential(multiplier=0.05, max=1.0),
            retry=retry_if_exception(_is_retriable),
            reraise=True,
        ):
            with attempt:
                return await make_call()
        raise AssertionError("unreachable")  # pragma: no cover

    async def _send_built(self, built: Sequence[NewMessage]) -> SendReceipts:
        async def attempt() -> SendReceipts:
            return receipts(built, await self.transport.send(built))

        result: SendReceipts = await self._call(attempt)
        return result

    async def send(
        self,
        message: Message,
        *,
        sharding_key: str | None = None,
        queue_id: int | None = None,
    ) -> SendReceipt:
        """Send one message and wait for the broker's answer (see :meth:`Producer.send`). The
        queue is chosen by ``sharding_key`` or ``queue_id`` (else round-robin), never by
        ``message.keys``."""
        self._check_open()
        return await self._send_one(message, sharding_key, queue_id)

    async def _send_one(
        self, message: Message, sharding_key: str | None, queue_id: int | None
    ) -> SendReceipt:
        """:meth:`send` without the closed check (a task started before :meth:`close` began
        first runs after it: it must not be refused)."""
        self.builder.check(message)
        count = await self._queue_count(message.topic)
        chosen = self._pick(message, count, sharding_key, queue_id)
        return (await self._send_built([self.builder.build(message, chosen)]))[0]

    async def send_batch(
        self,
        messages: Sequence[Message],
        *,
        sharding_key: str | None = None,
        queue_id: int | None = None,
    ) -> SendReceipts:
        """Send messages of one topic to one queue with one request and one append; answers a
        receipt per message, in order (:class:`SendReceipts`, made when first read). The queue
        is chosen by ``sharding_key`` or ``queue_id`` (else round-robin), never by the
        messages' ``keys``."""
        self._check_open()
        if not messages:
            return SendReceipts()
        first = messages[0]
        self.builder.check(first)
        count = await self._queue_count(first.topic)
        chosen = self._pick(first, count, sharding_key, queue_id)
        return await self._send_built(self.builder.build_batch(messages, chosen))

    def send_async(
        self,
        message: Message,
        *,
        sharding_key: str | None = None,
        queue_id: int | None = None,
    ) -> asyncio.Task[SendReceipt]:
        """Start a send; the task holds the receipt or the error. A bad message, or a send
        after :meth:`close` began, raises here."""
        self._check_open()
        self.builder.check(message)
        task = asyncio.get_running_loop().create_task(
            self._send_one(message, sharding_key, queue_id)
        )
        self._pending.add(task)
        task.add_done_callback(self._pending.discard)
        return task

    def send_oneway(self, message: Message, *, sharding_key: str | None = None) -> None:
        """Send without waiting for, or reporting, the outcome (failures are logged)."""
        task = self.send_async(message, sharding_key=sharding_key)
        task.add_done_callback(_log_task_failure)

    async def close(self) -> None:
        """Refuse new sends, then wait for the pending ones (each is stored or fails for its
        own reason). Idempotent: every caller returns once those sends are done. Cancelling a
        ``close()`` does not cancel the sends."""
        drained = self._drained
        if drained is None:
            self._closed = True
            drained = self._drained = asyncio.gather(*self._pending, return_exceptions=True)
        if not drained.done():
            await asyncio.shield(drained)
        if self._owns_transport:
            await self.transport.close()  # idempotent

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()


def _log_task_failure(task: asyncio.Task[SendReceipt]) -> None:
    if not task.cancelled() and task.exception() is not None:
        log.error("one-way send failed: %s", task.exception())
