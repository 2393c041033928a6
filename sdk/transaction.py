"""Transactional producers: a message becomes visible only if the local transaction commits.

:meth:`TransactionalProducer.send_in_transaction` runs RocketMQ's two phases:

1. the message is stored as a *half message* (invisible to consumers: the broker keeps it under
   ``RMQ_SYS_TRANS_HALF_TOPIC``, see :mod:`sdk.broker.transactions`);
2. the local transaction runs (``execute_local(message)``, e.g. a database write) and answers a
   :class:`TransactionState`; raising counts as UNKNOWN;
3. COMMIT puts the message into its topic, ROLLBACK discards it; UNKNOWN does nothing yet.

A half message left unresolved (UNKNOWN, or a producer that died between the phases) is asked
about by the broker once it is older than the broker's ``transaction_timeout_ms``: the producer
group's *checker* (``checker(message) -> TransactionState``, given the half message as
consumers would see it: its real topic and queue, ``msg_id`` = the transaction id) decides.
Every :class:`TransactionalProducer` of the group collects these checks on a background thread
(long polling through the transport: the broker never calls client code) and answers them;
UNKNOWN, or a checker that raises, leaves the question to the next check. After the broker's
``transaction_max_checks`` checks without an answer it rolls the message back. Nothing stops the
collecting thread but ``close()``: a failure (collecting, decoding, the checker, answering) is
logged and the next checks are answered. Once ``close()`` began no checks are collected; a
request already waiting at the broker that brings some back answers none (the broker asks again
after its check interval, each time counting towards the maximum).

A committed message is delivered exactly as a plain one (consumers see its real topic; the
producer's and a check's commit of the same transaction make it visible once). A transactional
message cannot be delayed.

:class:`AsyncTransactionalProducer` is the asyncio twin: coroutine functions for the local
transaction and the checker, the checks collected by a task.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import functools
import logging
import threading
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Self

from localstore.record.codec import (
    PROPERTY_REAL_QUEUE_ID,
    PROPERTY_REAL_TOPIC,
    PROPERTY_TRANSACTION_PREPARED,
    PROPERTY_UNIQ_KEY,
    SYSFLAG_TRANSACTION_PREPARED,
    NewMessage,
    StoredMessage,
)
from localstore.record.message_id import parse_offset_msg_id
from sdk.consumer.membership import check_group, new_client_id
from sdk.errors import InvalidArgumentError, InvalidMessageError, QuiverError
from sdk.message import Message, ReceivedMessage
from sdk.outgoing import MessageBuilder, QueueSelector, SendReceipt, SendReceipts, receipts
from sdk.producer import AsyncProducer, Producer
from sdk.transport.models import decode_records
from sdk.transport.transaction_models import (
    LEFT_UNKNOWN,
    PROPERTY_PRODUCER_GROUP,
    PROPERTY_TRANSACTION_ID,
    EndTransactionResult,
)

__all__ = [
    "AsyncTransactionalProducer",
    "TransactionReceipt",
    "TransactionState",
    "TransactionalProducer",
    "checked_message",
]

log = logging.getLogger(__name__)

DEFAULT_CHECK_WAIT_MS = 1000
_ERROR_PAUSE_S = 1.0
BROKER_UNAVAILABLE = "BROKER_UNAVAILABLE"


class TransactionState(enum.Enum):
    """A local transaction's outcome (RocketMQ's ``LocalTransactionState``)."""

    COMMIT = "COMMIT"
    ROLLBACK = "ROLLBACK"
    UNKNOWN = "UNKNOWN"


LocalTransaction = Callable[[Message], TransactionState]
TransactionChecker = Callable[[ReceivedMessage], TransactionState]
AsyncLocalTransaction = Callable[[Message], Awaitable[TransactionState]]
AsyncTransactionChecker = Callable[[ReceivedMessage], Awaitable[TransactionState]]


@dataclass(slots=True)
class TransactionReceipt:
    """What :meth:`TransactionalProducer.send_in_transaction` did.

    ``half`` is the half message's receipt (its ``msg_id`` is the transaction id; its
    ``queue_offset`` is -1). ``state`` is the local transaction's answer (UNKNOWN when it
    raised). ``end_status`` is the broker's answer to the commit or rollback: ``COMMITTED``,
    ``ROLLED_BACK``, ``ALREADY_RESOLVED`` (a check was answered first), ``UNKNOWN`` (nothing
    sent: the check-back decides), or a failure (``BROKER_UNAVAILABLE``, a put status), after
    which the check-back decides too. ``queue_offset`` is the committed message's (else -1).
    """

    half: SendReceipt
    state: TransactionState
    end_status: str
    queue_offset: int = -1

    @property
    def transaction_id(self) -> str:
        return self.half.msg_id

    @property
    def msg_id(self) -> str:
        return self.half.msg_id

    @property
    def topic(self) -> str:
        return self.half.topic

    @property
    def queue_id(self) -> int:
        return self.half.queue_id


def checked_message(half: StoredMessage) -> ReceivedMessage:
    """A stored half message as a checker sees it: its real topic and queue id (the rest, such
    as ``msg_id``, ``transaction_id`` and ``phys_offset``, stay the half message's)."""
    properties = half.properties
    topic = properties.get(PROPERTY_REAL_TOPIC, half.topic)
    queue = properties.get(PROPERTY_REAL_QUEUE_ID, "")
    queue_id = int(queue) if queue.isdigit() else half.queue_id
    return ReceivedMessage.from_stored(half.replace(topic=topic, queue_id=queue_id))


def _transaction_id(half: StoredMessage) -> str:
    properties = half.properties
    return properties.get(PROPERTY_TRANSACTION_ID) or properties.get(PROPERTY_UNIQ_KEY) or ""


def _state(answer: object, what: str) -> TransactionState:
    if isinstance(answer, TransactionState):
        return answer
    log.error("%s answered %r, not a TransactionState: counted as UNKNOWN", what, answer)
    return TransactionState.UNKNOWN


def _check_transactional(message: Message) -> None:
    if message.delay_level or message.deliver_at_ms is not None:
        raise InvalidMessageError(
            f"message to {message.topic}: a transactional message cannot be delayed"
        )


def _half(builder: MessageBuilder, message: Message, queue_id: int, group: str) -> NewMessage:
    """The message as sent for phase 1 (RocketMQ's producer: ``TRAN_MSG``, ``PGROUP``, sys
    flag PREPARED; the broker turns it into the stored half message)."""
    built = builder.build(message, queue_id)
    built.properties[PROPERTY_TRANSACTION_PREPARED] = "true"
    built.properties[PROPERTY_PRODUCER_GROUP] = group
    built.sys_flag |= SYSFLAG_TRANSACTION_PREPARED
    return built


def _receipt(
    half: SendReceipt, state: TransactionState, ended: EndTransactionResult | None
) -> TransactionReceipt:
    if ended is None:
        return TransactionReceipt(half, state, LEFT_UNKNOWN)
    if not ended.settled:
        log.warning(
            "ending transaction %s (%s) failed: %s %s; the broker's check-back will decide",
            half.msg_id,
            state.value,
            ended.status,
            ended.detail,
        )
    return TransactionReceipt(half, state, ended.status, ended.queue_offset)


def _log_unanswered(group: str, count: int) -> None:
    log.debug(
        "%d transaction check(s) of %s arrived while closing: not answered; the broker asks"
        " again after its check interval",
        count,
        group,
    )


def _check_settings(group: str, check_wait_ms: int) -> None:
    check_group(group)
    if check_wait_ms < 10:
        raise InvalidArgumentError(f"check_wait_ms must be >= 10, got {check_wait_ms}")


class TransactionalProducer(Producer):
    """A :class:`sdk.Producer` that also sends messages in transactions (see the module
    docstring). ``group`` names the producer group the broker asks about its half messages;
    ``checker(message) -> TransactionState`` answers those checks on a background thread, which
    waits up to ``check_wait_ms`` per request to the broker. Plain sends work as usual.
    Close it (or use ``with``) before the broker.
    """

    def __init__(
        self,
        broker: object,
        group: str,
        checker: TransactionChecker,
        *,
        check_wait_ms: int = DEFAULT_CHECK_WAIT_MS,
        instance_name: str | None = None,
        selector: QueueSelector | None = None,
        retries: int = 2,
        route_ttl_s: float = 30.0,
        max_body_bytes: int = 4 * 1024 * 1024,
        async_workers: int = 4,
    ) -> None:
        _check_settings(group, check_wait_ms)
        super().__init__(
            broker,
            group,
            selector=selector,
            retries=retries,
            route_ttl_s=route_ttl_s,
            max_body_bytes=max_body_bytes,
            async_workers=async_workers,
        )
        self.checker = checker
        self.check_wait_ms = check_wait_ms
        self.client_id = new_client_id(instance_name)
        self._stop = threading.Event()
        self._checking = threading.RLock()  # held while the checker runs; close() waits on it
        self._check_thread = threading.Thread(
            target=self._collect_checks, name=f"quiver-tx-check-{group}", daemon=True
        )
        self._check_thread.start()

    def send_in_transaction(
        self,
        message: Message,
        execute_local: LocalTransaction,
        *,
        sharding_key: str | None = None,
        queue_id: int | None = None,
    ) -> TransactionReceipt:
        """Store ``message`` as a half message, run ``execute_local(message)``, then commit
        or roll back as it answers (UNKNOWN, or raising: left to the check-back).

        Raises like :meth:`send` when the half message cannot be stored (then the local
        transaction does not run). Once it ran, the outcome is in the receipt, never raised.
        """
        self._check_open()
        self.builder.check(message)
        _check_transactional(message)
        count = self._queue_count(message.topic)
        built = _half(
            self.builder, message, self._pick(message, count, sharding_key, queue_id), self.group
        )
        half = self._send_half(built)
        try:
            answer: object = execute_local(message)
        except Exception:
            log.warning("local transaction of %s raised: UNKNOWN", half.msg_id, exc_info=True)
            answer = TransactionState.UNKNOWN
        state = _state(answer, f"local transaction of {half.msg_id}")
        ended = None
        if state is not TransactionState.UNKNOWN:
            _, phys_offset = parse_offset_msg_id(half.offset_msg_id)
            ended = self._end(phys_offset, half.msg_id, state, from_check=False)
        return _receipt(half, state, ended)

    def _send_half(self, built: NewMessage) -> SendReceipt:
        def attempt() -> SendReceipts:
            return receipts([built], self.transport.send_half(self.group, built))

        result: SendReceipts = self._call(attempt)
        return result[0]

    def _end(
        self, phys_offset: int, transaction: str, state: TransactionState, *, from_check: bool
    ) -> EndTransactionResult:
        call = functools.partial(
            self.transport.end_transaction,
            self.group,
            phys_offset,
            transaction,
            state.value,
            from_check=from_check,
        )
        try:
            result: EndTransactionResult = self._call(call)
        except QuiverError as exc:
            return EndTransactionResult(BROKER_UNAVAILABLE if exc.retriable else "FAILED", str(exc))
        return result

    # -- the check-back ------------------------------------------------------------------------
    def _collect_checks(self) -> None:
        """The check thread: nothing but ``close()`` ends it (a failure is logged, then the
        next checks are collected after a pause)."""
        while not self._stop.is_set():  # never a new request once closing began
            try:
                self._collect_once()
            except Exception:
                log.error(
                    "answering transaction checks of %s failed; going on", self.group, exc_info=True
                )
                self._stop.wait(_ERROR_PAUSE_S)

    def _collect_once(self) -> None:
        try:
            checks = self.transport.fetch_transaction_checks(
                self.group, self.client_id, self.check_wait_ms
            )
        except Exception as exc:
            if not self._stop.is_set():
                log.warning("collecting transaction checks of %s failed: %s", self.group, exc)
                self._stop.wait(_ERROR_PAUSE_S)
            return
        if not checks.count:
            return
        with self._checking:
            if self._stop.is_set():
                # The request was out when close() began: the broker counted these checks but
                # gets no answer; it asks again after its check interval (another producer of
                # the group, or this one restarted, answers then).
                _log_unanswered(self.group, checks.count)
                return
            for half in decode_records(checks.raw):
                try:
                    self._answer(half)
                except Exception:  # the next half messages of the batch are still answered
                    log.error(
                        "answering the check of %s failed", _transaction_id(half), exc_info=True
                    )

    def _answer(self, half: StoredMessage) -> None:
        transaction = _transaction_id(half)
        try:
            answer: object = self.checker(checked_message(half))
        except Exception:
            log.warning("checker of %s raised: UNKNOWN", transaction, exc_info=True)
            return
        state = _state(answer, f"checker of {transaction}")
        if state is TransactionState.UNKNOWN:
            return
        ended = self._end(half.phys_offset, transaction, state, from_check=True)
        if not ended.settled:
            log.warning(
                "answering the check of %s failed: %s %s", transaction, ended.status, ended.detail
            )

    def close(self) -> None:
        """Stop answering checks (a checker call in progress finishes first), then close the
        producer. The thread collecting checks ends by itself within ``check_wait_ms``: it
        never calls the checker after ``close()``. Idempotent."""
        self._stop.set()
        with self._checking:
            pass
        super().close()


class AsyncTransactionalProducer(AsyncProducer):
    """The asyncio twin of :class:`TransactionalProducer`: ``execute_local`` and ``checker``
    are coroutine functions. Checks are collected by a task started by :meth:`start` (or
    entering ``async with``, or the first :meth:`send_in_transaction`)."""

    def __init__(
        self,
        broker: object,
        group: str,
        checker: AsyncTransactionChecker,
        *,
        check_wait_ms: int = DEFAULT_CHECK_WAIT_MS,
        instance_name: str | None = None,
        selector: QueueSelector | None = None,
        retries: int = 2,
        route_ttl_s: float = 30.0,
        max_body_bytes: int = 4 * 1024 * 1024,
    ) -> None:
        _check_settings(group, check_wait_ms)
        super().__init__(
            broker,
            group,
            selector=selector,
            retries=retries,
            route_ttl_s=route_ttl_s,
            max_body_bytes=max_body_bytes,
        )
        self.checker = checker
        self.check_wait_ms = check_wait_ms
        self.client_id = new_client_id(instance_name)
        self._check_task: asyncio.Task[None] | None = None
        self._stopping = False  # close() began: no new request for checks
        self._answering = False  # the task is answering a batch of checks

    async def start(self) -> None:
        """Start answering the broker's checks (idempotent)."""
        self._check_open()
        if self._check_task is None:
            self._check_task = asyncio.get_running_loop().create_task(self._collect_checks())

    async def send_in_transaction(
        self,
        message: Message,
        execute_local: AsyncLocalTransaction,
        *,
        sharding_key: str | None = None,
        queue_id: int | None = None,
    ) -> TransactionReceipt:
        """As :meth:`TransactionalProducer.send_in_transaction`, awaiting ``execute_local``."""
        await self.start()
        self.builder.check(message)
        _check_transactional(message)
        count = await self._queue_count(message.topic)
        built = _half(
            self.builder, message, self._pick(message, count, sharding_key, queue_id), self.group
        )
        half = await self._send_half(built)
        try:
            answer: object = await execute_local(message)
        except Exception:
            log.warning("local transaction of %s raised: UNKNOWN", half.msg_id, exc_info=True)
            answer = TransactionState.UNKNOWN
        state = _state(answer, f"local transaction of {half.msg_id}")
        ended = None
        if state is not TransactionState.UNKNOWN:
            _, phys_offset = parse_offset_msg_id(half.offset_msg_id)
            ended = await self._end(phys_offset, half.msg_id, state, from_check=False)
        return _receipt(half, state, ended)

    async def _send_half(self, built: NewMessage) -> SendReceipt:
        async def attempt() -> SendReceipts:
            return receipts([built], await self.transport.send_half(self.group, built))

        result: SendReceipts = await self._call(attempt)
        return result[0]

    async def _end(
        self, phys_offset: int, transaction: str, state: TransactionState, *, from_check: bool
    ) -> EndTransactionResult:
        def attempt() -> Awaitable[EndTransactionResult]:
            return self.transport.end_transaction(
                self.group, phys_offset, transaction, state.value, from_check=from_check
            )

        try:
            result: EndTransactionResult = await self._call(attempt)
        except QuiverError as exc:
            return EndTransactionResult(BROKER_UNAVAILABLE if exc.retriable else "FAILED", str(exc))
        return result

    async def _collect_checks(self) -> None:
        """The check task: nothing but ``close()`` ends it (a failure is logged, then the next
        checks are collected after a pause)."""
        while not self._stopping:  # never a new request once closing began
            try:
                await self._collect_once()
            except Exception:
                log.error(
                    "answering transaction checks of %s failed; going on", self.group, exc_info=True
                )
                await asyncio.sleep(_ERROR_PAUSE_S)

    async def _collect_once(self) -> None:
        try:
            checks = await self.transport.fetch_transaction_checks(
                self.group, self.client_id, self.check_wait_ms
            )
        except Exception as exc:
            if not self._stopping:
                log.warning("collecting transaction checks of %s failed: %s", self.group, exc)
                await asyncio.sleep(_ERROR_PAUSE_S)
            return
        if not checks.count:
            return
        if self._stopping:
            # The request was out when close() began: the broker counted these checks but gets
            # no answer; it asks again after its check interval.
            _log_unanswered(self.group, checks.count)
            return
        self._answering = True  # close() lets the batch finish (as the blocking producer does)
        try:
            for half in decode_records(checks.raw):
                try:
                    await self._answer(half)
                except Exception:  # the next half messages of the batch are still answered
                    log.error(
                        "answering the check of %s failed", _transaction_id(half), exc_info=True
                    )
        finally:
            self._answering = False

    async def _answer(self, half: StoredMessage) -> None:
        transaction = _transaction_id(half)
        try:
            answer: object = await self.checker(checked_message(half))
        except Exception:
            log.warning("checker of %s raised: UNKNOWN", transaction, exc_info=True)
            return
        state = _state(answer, f"checker of {transaction}")
        if state is TransactionState.UNKNOWN:
            return
        ended = await self._end(half.phys_offset, transaction, state, from_check=True)
        if not ended.settled:
            log.warning(
                "answering the check of %s failed: %s %s", transaction, ended.status, ended.detail
            )

    async def close(self) -> None:
        """Stop collecting checks (a batch of checks being answered is finished first; a
        request waiting at the broker is cancelled), wait for pending sends, then refuse new
        ones. Idempotent."""
        self._stopping = True
        task, self._check_task = self._check_task, None
        if task is not None:
            if not self._answering:
                task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task  # ends at once (cancelled) or after its batch; never raises here
        await super().close()

    async def __aenter__(self) -> Self:
        await self.start()
        return self
