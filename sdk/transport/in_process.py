"""The embedded transport: calls into a broker service in the same process.

Nothing is encoded: requests and answers are the seam's objects themselves. A pull that has to
wait parks on the service's arrival notifier (a thread event for :class:`InProcessTransport`, a
loop future for :class:`AsyncInProcessTransport`), so a waiting consumer costs no CPU.

A closed broker is reported as :class:`sdk.errors.BrokerUnavailableError`, as an unreachable
broker is by the HTTP transports.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, ParamSpec, TypeVar

from localstore import StoreClosedError
from localstore.record.codec import NewMessage
from offsetstore import MessageQueue
from sdk.errors import BrokerUnavailableError, InvalidArgumentError
from sdk.transport.admin_models import (
    GroupInfo,
    OffsetReset,
    QueueLag,
    ResetRequest,
    TopicInfo,
)
from sdk.transport.derived import install_methods
from sdk.transport.models import (
    NO_END_MS,
    GroupView,
    PullBatch,
    PullBatchResult,
    QueueStart,
    SendResult,
    StoredRecords,
)
from sdk.transport.transaction_models import EndTransactionResult, TransactionChecks

if TYPE_CHECKING:
    from sdk.broker.administration import BrokerAdministration
    from sdk.broker.service import BrokerService

__all__ = ["AsyncInProcessTransport", "InProcessTransport"]

P = ParamSpec("P")
T = TypeVar("T")


def _translated(method: Callable[P, T]) -> Callable[P, T]:
    """Report a closed broker as BrokerUnavailableError."""

    @functools.wraps(method)
    def call(*args: P.args, **kwargs: P.kwargs) -> T:
        try:
            return method(*args, **kwargs)
        except StoreClosedError as exc:
            raise BrokerUnavailableError(f"the embedded broker is closed: {exc}") from exc

    return call


class InProcessTransport:
    """A :class:`sdk.transport.base.BrokerTransport` over a :class:`BrokerService`."""

    def __init__(self, service: BrokerService) -> None:
        self.service = service

    @property
    def broker_name(self) -> str:
        return self.service.broker_name

    def _check_open(self) -> None:
        if self.service.closed:
            raise BrokerUnavailableError("the embedded broker is closed")

    @_translated
    def send(self, messages: Sequence[NewMessage]) -> SendResult:
        self._check_open()
        return self.service.send(messages)

    @_translated
    def send_back(
        self,
        group: str,
        phys_offset: int,
        *,
        delay_level: int = 0,
        max_reconsume_times: int = -1,
        reconsume_times: int = -1,
    ) -> SendResult:
        self._check_open()
        return self.service.send_back(
            group,
            phys_offset,
            delay_level=delay_level,
            max_reconsume_times=max_reconsume_times,
            reconsume_times=reconsume_times,
        )

    @_translated
    def pull(self, batch: PullBatch) -> PullBatchResult:
        self._check_open()
        return self.service.pull_wait(batch)

    @_translated
    def queue_count(self, topic: str) -> int:
        self._check_open()
        return self.service.queue_count(topic)

    @_translated
    def min_offset(self, topic: str, queue_id: int) -> int:
        return self.service.min_offset(topic, queue_id)

    @_translated
    def max_offset(self, topic: str, queue_id: int) -> int:
        return self.service.max_offset(topic, queue_id)

    @_translated
    def offset_for_timestamp(self, topic: str, queue_id: int, timestamp_ms: int) -> int:
        return self.service.offset_for_timestamp(topic, queue_id, timestamp_ms)

    @_translated
    def query_by_key(
        self,
        topic: str,
        key: str,
        *,
        begin_ms: int = 0,
        end_ms: int = NO_END_MS,
        max_count: int = 32,
    ) -> StoredRecords:
        self._check_open()
        return self.service.query_by_key(
            topic, key, begin_ms=begin_ms, end_ms=end_ms, max_count=max_count
        )

    @_translated
    def query_by_id(self, message_id: str) -> StoredRecords:
        self._check_open()
        return self.service.query_by_id(message_id)

    def query_offset(self, broker_name: str, group: str, topic: str, queue_id: int) -> int | None:
        self._check_broker(broker_name)
        return self.service.query_offset(group, topic, queue_id)

    def commit_offsets(
        self, broker_name: str, group: str, offsets: Mapping[MessageQueue, int]
    ) -> None:
        self._check_broker(broker_name)
        self.service.commit_offsets(group, offsets)

    @_translated
    def start_offsets(
        self,
        broker_name: str,
        group: str,
        queues: Sequence[MessageQueue],
        consume_from: str,
        timestamp_ms: int,
    ) -> list[QueueStart]:
        for name in {broker_name, *(queue.broker_name for queue in queues)}:
            self._check_broker(name)
        return self.service.start_offsets(group, queues, consume_from, timestamp_ms)

    def _check_broker(self, broker_name: str) -> None:
        self._check_open()
        if broker_name != self.service.broker_name:
            raise InvalidArgumentError(
                f"queue of broker {broker_name!r} asked of broker {self.service.broker_name!r}"
            )

    def heartbeat(
        self, group: str, client_id: str, subscriptions: Mapping[str, str], message_model: str
    ) -> int:
        self._check_open()
        return self.service.heartbeat(group, client_id, subscriptions, message_model)

    def unregister(self, group: str, client_id: str) -> None:
        if not self.service.closed:
            self.service.unregister(group, client_id)

    def group_view(self, group: str) -> GroupView:
        self._check_open()
        return self.service.group_view(group)

    @_translated
    def rebalance_view(self, group: str, topics: Sequence[str]) -> GroupView:
        self._check_open()
        return self.service.rebalance_view(group, topics)

    def lock_queues(
        self, group: str, client_id: str, queues: Sequence[MessageQueue]
    ) -> set[MessageQueue]:
        self._check_open()
        return self.service.lock_queues(group, client_id, queues)

    def unlock_queues(self, group: str, client_id: str, queues: Sequence[MessageQueue]) -> None:
        if not self.service.closed:
            self.service.unlock_queues(group, client_id, queues)

    # -- transactions --------------------------------------------------------------------------
    @_translated
    def send_half(self, group: str, message: NewMessage) -> SendResult:
        self._check_open()
        return self.service.send_half(group, message)

    @_translated
    def end_transaction(
        self,
        group: str,
        half_phys_offset: int,
        transaction_id: str,
        verdict: str,
        *,
        from_check: bool = False,
    ) -> EndTransactionResult:
        self._check_open()
        return self.service.end_transaction(
            group, half_phys_offset, transaction_id, verdict, from_check=from_check
        )

    @_translated
    def fetch_transaction_checks(
        self, group: str, client_id: str, wait_ms: int
    ) -> TransactionChecks:
        self._check_open()
        return self.service.fetch_transaction_checks(group, client_id, wait_ms)

    def close(self) -> None:
        """Nothing to release: the broker belongs to whoever opened it."""

    # -- administration (sdk.broker.administration, answers in sdk.transport.admin_models) ---
    def _admin_call(self, call: Callable[[BrokerAdministration], T]) -> T:
        """``call`` on the broker's administration; a closed broker is unavailable."""
        if self.service.closed:
            raise BrokerUnavailableError("the embedded broker is closed")
        try:
            return call(self.service.admin)
        except StoreClosedError as exc:
            raise BrokerUnavailableError(f"the embedded broker is closed: {exc}") from exc

    def list_topics(self) -> list[TopicInfo]:
        return self._admin_call(lambda admin: admin.list_topics())

    def create_topic(self, name: str, queue_count: int, perm: int) -> TopicInfo:
        return self._admin_call(lambda admin: admin.create_topic(name, queue_count, perm))

    def update_topic(self, name: str, *, queue_count: int | None, perm: int | None) -> TopicInfo:
        return self._admin_call(lambda admin: admin.update_topic(name, queue_count, perm))

    def delete_topic(self, name: str) -> list[int]:
        return self._admin_call(lambda admin: admin.delete_topic(name))

    def list_groups(self) -> list[GroupInfo]:
        return self._admin_call(lambda admin: admin.list_groups())

    def describe_group(self, group: str) -> GroupInfo:
        return self._admin_call(lambda admin: admin.describe_group(group))

    def group_lag(self, group: str, topic: str | None) -> list[QueueLag]:
        return self._admin_call(lambda admin: admin.lag(group, topic))

    def reset_offsets(
        self, group: str, topic: str, request: ResetRequest, *, create: bool
    ) -> list[OffsetReset]:
        return self._admin_call(
            lambda admin: admin.reset_offsets(group, topic, request, create=create),
        )


class AsyncInProcessTransport:
    """A :class:`sdk.transport.base.AsyncBrokerTransport` over a :class:`BrokerService`.

    Everything runs on the event loop: the broker's answers are in memory (membership, leases,
    offsets, queue bounds) or an append of microseconds; a waiting pull or transaction fetch
    parks a future on the broker's notifier, not a thread. The one exception is a broker under
    sync flush: a write (:data:`WAITS_FOR_DISK`) waits for the disk, and that wait runs in a
    worker thread so the loop goes on meanwhile.

    Every operation but the two that park is derived from the blocking transport's method of
    the same name (:mod:`sdk.transport.derived`), not written out again.
    """

    def __init__(self, service: BrokerService) -> None:
        self.service = service
        self._blocking = InProcessTransport(service)
        self._sync_flush = service.store.geometry.flush_mode == "sync"

    @property
    def broker_name(self) -> str:
        return self.service.broker_name

    async def connect(self) -> str:
        return self.service.broker_name

    async def _call(self, name: str, args: Sequence[Any], kwargs: Mapping[str, Any]) -> Any:
        """The blocking transport's ``name``: on the loop, or in a worker thread for a write
        that waits for a sync flush."""
        call = functools.partial(getattr(self._blocking, name), *args, **kwargs)
        if self._sync_flush and name in WAITS_FOR_DISK:
            return await asyncio.to_thread(call)
        return call()

    async def pull(self, batch: PullBatch) -> PullBatchResult:
        self._blocking._check_open()
        try:
            return await self.service.pull_async(batch)
        except StoreClosedError as exc:
            raise BrokerUnavailableError(f"the embedded broker is closed: {exc}") from exc

    async def fetch_transaction_checks(
        self, group: str, client_id: str, wait_ms: int
    ) -> TransactionChecks:
        self._blocking._check_open()
        try:
            return await self.service.fetch_transaction_checks_async(group, client_id, wait_ms)
        except StoreClosedError as exc:
            raise BrokerUnavailableError(f"the embedded broker is closed: {exc}") from exc

    async def close(self) -> None:
        """Nothing to release: the broker belongs to whoever opened it."""

    if TYPE_CHECKING:  # the derived operations (install_methods below)

        def __getattr__(self, name: str) -> Any: ...


WAITS_FOR_DISK = frozenset({"send", "send_back", "send_half", "end_transaction"})
"""The operations that append to the log: under sync flush they wait for the disk."""


def _derived(name: str) -> Callable[..., Any]:
    async def method(self: AsyncInProcessTransport, *args: Any, **kwargs: Any) -> Any:
        return await self._call(name, args, kwargs)

    return method


install_methods(AsyncInProcessTransport, _derived, but={"pull", "fetch_transaction_checks"})
