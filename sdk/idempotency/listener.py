"""Wrappers that make a listener idempotent: each message's effect happens once per dedup key
while its record lives, however often the message is delivered.

For a batch, :func:`idempotent` does, per message:

1. compute the key (``key(message)``, prefixed by ``namespace``). A message without a key is
   handed to the listener without deduplication; a key repeated within the batch is a duplicate.
2. claim it: ``CLAIMED`` / ``TAKEN_OVER`` (no record, or a crashed consumer's expired lease) ->
   handed to the listener; ``DUPLICATE`` (live ``CONSUMED`` record) -> skipped;
   ``IN_PROGRESS`` (another consumer holds a live lease) -> not processed now.
3. call the listener once with the handed-on messages, in their delivery order.
4. ``SUCCESS`` or ``None`` -> mark the claimed keys ``CONSUMED`` (kept ``ttl_s``);
   ``RECONSUME_LATER`` or an exception -> release the claims (so the retry can claim them) and
   propagate it.

The listener's answer means what it means to :class:`~sdk.consumer.push.PushConsumer`:
``ConsumeResult.SUCCESS`` or ``None`` is success; ``RECONSUME_LATER`` or raising is failure; any
other value (a string, a coroutine, ...) is logged as an error and treated as failure, so the
wrapper answers ``RECONSUME_LATER`` and the batch is delivered again rather than silently
acknowledged.

:func:`idempotent` wraps an ``async def`` listener (for
:class:`~sdk.consumer.push.AsyncPushConsumer`) into an ``async def`` wrapper with the same steps
and answers. The store's calls are blocking: :class:`MemoryDedupStore`'s (a dict under a lock,
microseconds) run inline on the event loop; any other store's (:class:`SqliteDedupStore`: a
``BEGIN IMMEDIATE`` write that may wait up to its ``busy_timeout_s`` for another process, then a
synced commit) run in a worker thread (:func:`asyncio.to_thread`), so the loop never waits for
the disk or a lock. :func:`idempotent_in_transaction` stays synchronous: it refuses an ``async
def`` listener with :class:`TypeError` (its transaction holds the write lock and could not stay
open across awaits).

Choice for ``IN_PROGRESS`` messages: the wrapper filters them out of the listener's batch but
answers ``RECONSUME_LATER`` for the batch (after recording the others as consumed). Answering
``SUCCESS`` would let the consumer commit the offset past a message whose processing may still
fail or crash elsewhere (lost message); with ``RECONSUME_LATER`` the batch comes back, the
messages processed meanwhile are skipped as duplicates, and the in-progress one is either done by
then (skipped) or its lease has expired (taken over).

The effect is at-least-once plus deduplication: a crash between the listener's effect and
``mark_consumed`` repeats the effect once the lease expires. :func:`idempotent_in_transaction`
closes that gap when the business data lives in the :class:`SqliteDedupStore`'s database: the
listener's writes and the ``CONSUMED`` records commit in one SQLite transaction (exactly-once
effect). A lease should outlast the longest processing time; it is not renewed.
"""

from __future__ import annotations

import asyncio
import logging
import sqlite3
import uuid
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar, overload

from sdk.errors import ArgumentTypeError
from sdk.idempotency.memory import MemoryDedupStore
from sdk.idempotency.records import (
    ClaimStatus,
    ConsumeResult,
    DedupState,
    DedupStore,
    KeyFunction,
    ReceivedMessage,
    uniq_key,
)
from sdk.idempotency.sqlite import SqliteDedupStore
from sdk.message import is_async_callable, read_answer

__all__ = [
    "DEFAULT_LEASE_S",
    "DEFAULT_TTL_S",
    "AsyncListener",
    "Listener",
    "SkipHook",
    "TransactionalListener",
    "idempotent",
    "idempotent_in_transaction",
]

log = logging.getLogger(__name__)

M = TypeVar("M", bound=ReceivedMessage)

Listener = Callable[[list[M]], ConsumeResult | None]
"""A listener: takes a batch of received messages, answers a :class:`ConsumeResult` (``None``
counts as ``SUCCESS``) or raises."""

AsyncListener = Callable[[list[M]], Awaitable[ConsumeResult | None]]
"""An ``async def`` listener: answers as a :data:`Listener` does, once awaited."""

TransactionalListener = Callable[[list[M], sqlite3.Connection], ConsumeResult | None]
"""A listener that writes through the connection of an open SQLite transaction (answers as a
:data:`Listener` does)."""

SkipHook = Callable[[M, ClaimStatus], None]
"""Called for each message not handed to the listener (``DUPLICATE`` or ``IN_PROGRESS``)."""

DEFAULT_LEASE_S = 60.0
"""How long a claim stays ``CONSUMING`` before another consumer may take the message over."""

DEFAULT_TTL_S = 24 * 3600.0
"""How long a ``CONSUMED`` record is kept: re-deliveries within it are skipped."""


@dataclass
class _Claims(Generic[M]):
    """One batch after claiming: what to run, which keys this call owns."""

    owner: str
    run: list[M] = field(default_factory=list)
    owned: dict[str, M] = field(default_factory=dict)
    in_progress: bool = False

    def result(self) -> ConsumeResult:
        """The batch's answer once the handed-on messages succeeded."""
        return ConsumeResult.RECONSUME_LATER if self.in_progress else ConsumeResult.SUCCESS


def _require_sync(listener: Callable[..., object], wrapper: str) -> None:
    """Refuse an ``async def`` listener: a synchronous wrapper would get a coroutine back."""
    if is_async_callable(listener):
        raise ArgumentTypeError(
            f"{wrapper}() wraps synchronous listeners; {listener!r} is a coroutine function"
        )


def _succeeded(answer: object, listener: Callable[..., object], messages: Sequence[M]) -> bool:
    """Whether the listener's ``answer`` means success, as the push consumer reads it."""
    label = lambda: f"idempotent listener {listener!r}"  # noqa: E731  (made only to log)
    return read_answer(answer, label, messages) is ConsumeResult.SUCCESS


def _skip(on_skip: SkipHook[M] | None, message: M, status: ClaimStatus) -> None:
    if on_skip is not None:
        on_skip(message, status)


def _keyed(
    messages: list[M], key: KeyFunction, namespace: str
) -> tuple[list[tuple[M, str | None]], list[str]]:
    """Each message with its namespaced key (None: not deduplicated), and the distinct keys."""
    keyed: list[tuple[M, str | None]] = []
    for message in messages:
        raw = key(message)
        keyed.append((message, None if raw is None else f"{namespace}{raw}"))
    unique = list(dict.fromkeys(k for _, k in keyed if k is not None))
    return keyed, unique


def _sort_claims(
    owner: str,
    keyed: list[tuple[M, str | None]],
    outcome: dict[str, ClaimStatus],
    on_skip: SkipHook[M] | None,
) -> _Claims[M]:
    """The batch after ``store.claim`` answered ``outcome``: what to run, which keys ``owner``
    holds, and whether a message is in progress elsewhere."""
    claims: _Claims[M] = _Claims(owner=owner)
    seen: set[str] = set()
    for message, k in keyed:
        if k is None:
            claims.run.append(message)
            continue
        status = ClaimStatus.DUPLICATE if k in seen else outcome[k]
        seen.add(k)
        if status.owned:
            claims.run.append(message)
            claims.owned[k] = message
        else:
            claims.in_progress |= status is ClaimStatus.IN_PROGRESS
            _skip(on_skip, message, status)
    return claims


def _claim(
    messages: list[M],
    store: DedupStore,
    key: KeyFunction,
    namespace: str,
    lease_s: float,
    on_skip: SkipHook[M] | None,
) -> _Claims[M]:
    owner = uuid.uuid4().hex
    keyed, unique = _keyed(messages, key, namespace)
    outcome = store.claim(unique, owner=owner, lease_s=lease_s) if unique else {}
    return _sort_claims(owner, keyed, outcome, on_skip)


_R = TypeVar("_R")


async def _store_call(store: DedupStore, call: Callable[..., _R], *args: Any, **kwargs: Any) -> _R:
    """Run a blocking store method from the event loop: inline for :class:`MemoryDedupStore`
    (a dict under a lock), in a worker thread for any other store (SQLite may wait for its
    write lock and the disk)."""
    if isinstance(store, MemoryDedupStore):
        return call(*args, **kwargs)
    return await asyncio.to_thread(call, *args, **kwargs)


@overload
def idempotent(
    listener: AsyncListener[M],
    store: DedupStore,
    *,
    key: KeyFunction = uniq_key,
    lease_s: float = DEFAULT_LEASE_S,
    ttl_s: float = DEFAULT_TTL_S,
    namespace: str = "",
    on_skip: SkipHook[M] | None = None,
) -> Callable[[list[M]], Coroutine[Any, Any, ConsumeResult]]: ...


@overload
def idempotent(
    listener: Listener[M],
    store: DedupStore,
    *,
    key: KeyFunction = uniq_key,
    lease_s: float = DEFAULT_LEASE_S,
    ttl_s: float = DEFAULT_TTL_S,
    namespace: str = "",
    on_skip: SkipHook[M] | None = None,
) -> Callable[[list[M]], ConsumeResult]: ...


def idempotent(
    listener: Listener[M] | AsyncListener[M],
    store: DedupStore,
    *,
    key: KeyFunction = uniq_key,
    lease_s: float = DEFAULT_LEASE_S,
    ttl_s: float = DEFAULT_TTL_S,
    namespace: str = "",
    on_skip: SkipHook[M] | None = None,
) -> Callable[[list[M]], ConsumeResult] | Callable[[list[M]], Coroutine[Any, Any, ConsumeResult]]:
    """Wrap ``listener`` so a message whose key was already consumed (within ``ttl_s``) is skipped
    and one being consumed elsewhere (within its ``lease_s``) is not processed twice.

    ``key`` maps a message to its dedup key (default: its ``UNIQ_KEY``; see
    :func:`~sdk.idempotency.records.first_key` and
    :func:`~sdk.idempotency.records.property_key` for business keys). ``namespace`` prefixes every
    key, e.g. with the consumer group, so groups sharing a store do not skip each other's messages.
    ``on_skip`` is told of every message not handed to the listener.

    The listener answers as a push consumer's does: ``ConsumeResult.SUCCESS`` or ``None`` marks
    the claimed keys ``CONSUMED``; ``RECONSUME_LATER`` releases them and is answered back; an
    exception releases them and propagates. Any other answer (not a :class:`ConsumeResult`) is
    logged and treated as failure, exactly as :class:`~sdk.consumer.push.PushConsumer` treats
    it: the claims are released and the wrapper answers ``RECONSUME_LATER``, so the batch is
    retried. The wrapper itself always answers a :class:`ConsumeResult`.

    An ``async def`` listener (as :func:`~sdk.message.is_async_callable` tells) gives an
    ``async def`` wrapper, for :class:`~sdk.consumer.push.AsyncPushConsumer`, with the same
    semantics; the store's blocking calls run inline for a :class:`MemoryDedupStore` and in a
    worker thread for any other store (see the module docstring). A plain callable gives a
    plain wrapper.
    """
    if is_async_callable(listener):
        async_listener: AsyncListener[M] = listener  # type: ignore[assignment]
        return _idempotent_async(async_listener, store, key, lease_s, ttl_s, namespace, on_skip)
    sync_listener: Listener[M] = listener  # type: ignore[assignment]

    def idempotent_listener(messages: list[M]) -> ConsumeResult:
        claims = _claim(messages, store, key, namespace, lease_s, on_skip)
        if not claims.run:
            return claims.result()
        try:
            answer = sync_listener(claims.run)
        except BaseException:
            store.release(list(claims.owned), owner=claims.owner)
            raise
        if not _succeeded(answer, sync_listener, claims.run):
            store.release(list(claims.owned), owner=claims.owner)
            return ConsumeResult.RECONSUME_LATER
        store.mark_consumed(list(claims.owned), ttl_s=ttl_s)
        return claims.result()

    idempotent_listener.__wrapped__ = listener  # type: ignore[attr-defined]
    return idempotent_listener


def _idempotent_async(
    listener: AsyncListener[M],
    store: DedupStore,
    key: KeyFunction,
    lease_s: float,
    ttl_s: float,
    namespace: str,
    on_skip: SkipHook[M] | None,
) -> Callable[[list[M]], Coroutine[Any, Any, ConsumeResult]]:
    """:func:`idempotent` for an ``async def`` listener: the same steps, awaited; the store's
    calls through :func:`_store_call`. A cancelled call releases its claims like a failed one."""

    async def idempotent_listener(messages: list[M]) -> ConsumeResult:
        owner = uuid.uuid4().hex
        keyed, unique = _keyed(messages, key, namespace)
        outcome = {}
        if unique:
            outcome = await _store_call(store, store.claim, unique, owner=owner, lease_s=lease_s)
        claims = _sort_claims(owner, keyed, outcome, on_skip)
        if not claims.run:
            return claims.result()
        owned = list(claims.owned)
        try:
            answer = await listener(claims.run)
        except BaseException:
            await _store_call(store, store.release, owned, owner=owner)
            raise
        if not _succeeded(answer, listener, claims.run):
            await _store_call(store, store.release, owned, owner=owner)
            return ConsumeResult.RECONSUME_LATER
        await _store_call(store, store.mark_consumed, owned, ttl_s=ttl_s)
        return claims.result()

    idempotent_listener.__wrapped__ = listener  # type: ignore[attr-defined]
    return idempotent_listener


class _RollbackError(Exception):
    """Raised inside the transaction to roll it back when the listener does not succeed."""


def idempotent_in_transaction(
    listener: TransactionalListener[M],
    store: SqliteDedupStore,
    *,
    key: KeyFunction = uniq_key,
    lease_s: float = DEFAULT_LEASE_S,
    ttl_s: float = DEFAULT_TTL_S,
    namespace: str = "",
    on_skip: SkipHook[M] | None = None,
) -> Callable[[list[M]], ConsumeResult]:
    """Like :func:`idempotent`, but the listener runs inside ``store.transaction()`` and gets its
    connection: its writes and the ``CONSUMED`` records commit together or not at all.

    Inside the transaction (write lock held) the claimed keys are checked again: one that another
    consumer committed meanwhile (after this call's lease expired and it took the message over)
    is skipped as a duplicate, so the business write happens exactly once per key.

    The listener answers as a push consumer's does: ``ConsumeResult.SUCCESS`` or ``None``
    commits its writes together with the ``CONSUMED`` records. On ``RECONSUME_LATER`` the
    transaction rolls back, the claims are released and ``RECONSUME_LATER`` is answered; on an
    exception the same happens and the exception propagates. Any other answer (not a
    :class:`ConsumeResult`) is logged and treated as failure, exactly as
    :class:`~sdk.consumer.push.PushConsumer` treats it: rolled back, claims released, and the
    wrapper answers ``RECONSUME_LATER`` so the batch is retried.

    Raises :class:`TypeError` if ``listener`` is an ``async def`` function: the wrapper is
    synchronous and would only get a coroutine back (and could not hold the transaction open
    across it).

    The listener runs while the database's write lock is held (other writers wait up to the
    store's ``busy_timeout_s``), so it should only write, not do slow work.
    """
    _require_sync(listener, "idempotent_in_transaction")

    def transactional_listener(messages: list[M]) -> ConsumeResult:
        claims = _claim(messages, store, key, namespace, lease_s, on_skip)
        if not claims.run:
            return claims.result()
        try:
            with store.transaction() as conn:
                run, done = _drop_consumed(claims, store, on_skip)
                if run and not _succeeded(listener(run, conn), listener, run):
                    raise _RollbackError
                store.mark_consumed(done, ttl_s=ttl_s)
        except _RollbackError:
            store.release(list(claims.owned), owner=claims.owner)
            return ConsumeResult.RECONSUME_LATER
        except BaseException:
            store.release(list(claims.owned), owner=claims.owner)
            raise
        return claims.result()

    transactional_listener.__wrapped__ = listener  # type: ignore[attr-defined]
    return transactional_listener


def _drop_consumed(
    claims: _Claims[M], store: SqliteDedupStore, on_skip: SkipHook[M] | None
) -> tuple[list[M], list[str]]:
    """The messages still to run and the keys to mark, leaving out keys already ``CONSUMED``."""
    dropped: set[int] = set()
    done: list[str] = []
    for k, message in claims.owned.items():
        record = store.get(k)
        if record is not None and record.state is DedupState.CONSUMED:
            dropped.add(id(message))
            _skip(on_skip, message, ClaimStatus.DUPLICATE)
        else:
            done.append(k)
    return [m for m in claims.run if id(m) not in dropped], done
