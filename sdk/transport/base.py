"""The transport seam: what clients need from a broker, whatever carries the request.

:class:`BrokerTransport` (blocking) and :class:`AsyncBrokerTransport` (asyncio) name the same
operations. The in-process transport (:mod:`sdk.transport.in_process`) calls a
:class:`sdk.broker.service.BrokerService` directly; the HTTP transports of remote mode encode
the same requests. Producers and consumers only ever talk to these protocols, so one behaviour
suite runs against every transport.

Failures: a transport raises :class:`sdk.errors.BrokerUnavailableError` (retriable) when the
broker cannot be reached or is closed; refusals are statuses in the answers, not exceptions.

Clients write what they decide once, as step generators (:mod:`sdk.transport.steps`) that name
the calls they need; a blocking shell runs them on a :class:`BrokerTransport`, an asyncio shell on
an :class:`AsyncBrokerTransport`, so both transports offer every operation.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Protocol

from localstore.record.codec import NewMessage
from offsetstore import MessageQueue
from sdk.transport.admin_models import (
    GroupInfo,
    OffsetReset,
    QueueLag,
    ResetRequest,
    TopicInfo,
)
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

__all__ = ["AsyncBrokerTransport", "BrokerTransport"]


class BrokerTransport(Protocol):
    """Blocking access to one broker."""

    @property
    def broker_name(self) -> str: ...

    def send(self, messages: Sequence[NewMessage]) -> SendResult:
        """Store one message or a batch to one topic-queue (one append)."""
        ...

    def send_back(
        self,
        group: str,
        phys_offset: int,
        *,
        delay_level: int = 0,
        max_reconsume_times: int = -1,
        reconsume_times: int = -1,
    ) -> SendResult:
        """Have the broker re-deliver a consumed message later (retry topic) or dead-letter it.
        ``reconsume_times`` >= 0: how often the consumer already retried it itself (an orderly
        consumer retries in place); -1: as the stored message says."""
        ...

    def pull(self, batch: PullBatch) -> PullBatchResult:
        """Pull several queues at once, waiting up to ``batch.wait_ms`` for anything new."""
        ...

    def queue_count(self, topic: str) -> int:
        """How many queues ``topic`` has (for a topic not created yet: how many it will get)."""
        ...

    def min_offset(self, topic: str, queue_id: int) -> int: ...

    def max_offset(self, topic: str, queue_id: int) -> int: ...

    def offset_for_timestamp(self, topic: str, queue_id: int, timestamp_ms: int) -> int: ...

    def query_by_key(
        self,
        topic: str,
        key: str,
        *,
        begin_ms: int = 0,
        end_ms: int = NO_END_MS,
        max_count: int = 32,
    ) -> StoredRecords:
        """Messages of ``topic`` whose KEYS hold ``key`` (or whose UNIQ_KEY is ``key``), stored
        within [``begin_ms``, ``end_ms``], newest first; at most ``max_count`` (capped at 64)."""
        ...

    def query_by_id(self, message_id: str) -> StoredRecords:
        """The message whose offsetMsgId is ``message_id``, or those (of any topic) whose
        UNIQ_KEY is ``message_id``; none when no message has that id."""
        ...

    def query_offset(self, broker_name: str, group: str, topic: str, queue_id: int) -> int | None:
        """The group's committed offset of a queue, or None."""
        ...

    def commit_offsets(
        self, broker_name: str, group: str, offsets: Mapping[MessageQueue, int]
    ) -> None: ...

    def start_offsets(
        self,
        broker_name: str,
        group: str,
        queues: Sequence[MessageQueue],
        consume_from: str,
        timestamp_ms: int,
    ) -> list[QueueStart]:
        """Where ``group`` starts each of ``queues``: its committed offset, or for a queue it
        never committed the ``consume_from`` rule's offset (a ``CONSUME_FROM_*`` name;
        ``timestamp_ms`` for the timestamp rule; a retry topic from its beginning), recorded as
        the group's committed offset at once."""
        ...

    def heartbeat(
        self, group: str, client_id: str, subscriptions: Mapping[str, str], message_model: str
    ) -> int:
        """Register or refresh a consumer; answers the group's generation."""
        ...

    def unregister(self, group: str, client_id: str) -> None: ...

    def lock_queues(
        self, group: str, client_id: str, queues: Sequence[MessageQueue]
    ) -> set[MessageQueue]:
        """Take or renew this member's leases on ``queues``; answers those it holds."""
        ...

    def unlock_queues(self, group: str, client_id: str, queues: Sequence[MessageQueue]) -> None:
        """Give leases back (after the queues' offsets were committed)."""
        ...

    def group_view(self, group: str) -> GroupView: ...

    def rebalance_view(self, group: str, topics: Sequence[str]) -> GroupView:
        """What a member needs to compute its share in one answer: the group's view (members,
        generation, lease owners) and the queue count of each of ``topics``."""
        ...

    # transactions (sdk.transport.transaction_models)
    def send_half(self, group: str, message: NewMessage) -> SendResult:
        """Store a half message of producer group ``group`` (invisible until committed)."""
        ...

    def end_transaction(
        self,
        group: str,
        half_phys_offset: int,
        transaction_id: str,
        verdict: str,
        *,
        from_check: bool = False,
    ) -> EndTransactionResult:
        """Commit or roll back the half message at ``half_phys_offset`` (idempotent)."""
        ...

    def fetch_transaction_checks(
        self, group: str, client_id: str, wait_ms: int
    ) -> TransactionChecks:
        """Half messages ``group`` is asked to decide, waiting up to ``wait_ms``."""
        ...

    def close(self) -> None:
        """Release what the transport holds (not the broker)."""
        ...

    # -- administration (sdk.transport.admin_models) -------------------------------------------
    # Refusals raise typed errors (UnknownTopicError, UnknownGroupError, InvalidArgumentError,
    # IllegalStateError); sdk.Admin is the public face.
    def list_topics(self) -> list[TopicInfo]:
        """Every topic of the broker, sorted by name."""
        ...

    def create_topic(self, name: str, queue_count: int, perm: int) -> TopicInfo:
        """Create a topic with ``queue_count`` read and write queues (refused if it exists)."""
        ...

    def update_topic(self, name: str, *, queue_count: int | None, perm: int | None) -> TopicInfo:
        """Change a topic's queue count and/or permission."""
        ...

    def delete_topic(self, name: str) -> list[int]:
        """Delete a topic (config, queues, offsets; records stay until retention)."""
        ...

    def list_groups(self) -> list[GroupInfo]:
        """Every group the broker has members or offsets of."""
        ...

    def describe_group(self, group: str) -> GroupInfo:
        """A group's members and per-queue lag."""
        ...

    def group_lag(self, group: str, topic: str | None) -> list[QueueLag]:
        """A group's lag per queue of ``topic`` (None: of every topic it consumes)."""
        ...

    def reset_offsets(
        self, group: str, topic: str, request: ResetRequest, *, create: bool
    ) -> list[OffsetReset]:
        """Move a group's offsets of a topic; ``create`` allows a group the broker lacks."""
        ...


class AsyncBrokerTransport(Protocol):
    """:class:`BrokerTransport` for asyncio clients: every operation, awaitable. Nothing blocks
    the event loop for long and no client thread is needed: a waiting pull or transaction
    fetch parks a future, not a thread."""

    @property
    def broker_name(self) -> str:
        """The broker's name; a remote transport may have to ask for it (blocking) unless
        :meth:`connect` was awaited first."""
        ...

    async def connect(self) -> str:
        """The broker's name, learnt without blocking the loop (a remote transport asks the
        broker once); :attr:`broker_name` answers at once afterwards."""
        ...

    async def send(self, messages: Sequence[NewMessage]) -> SendResult: ...

    async def send_back(
        self,
        group: str,
        phys_offset: int,
        *,
        delay_level: int = 0,
        max_reconsume_times: int = -1,
        reconsume_times: int = -1,
    ) -> SendResult: ...

    async def pull(self, batch: PullBatch) -> PullBatchResult: ...

    async def queue_count(self, topic: str) -> int: ...

    async def min_offset(self, topic: str, queue_id: int) -> int: ...

    async def max_offset(self, topic: str, queue_id: int) -> int: ...

    async def offset_for_timestamp(self, topic: str, queue_id: int, timestamp_ms: int) -> int: ...

    async def query_by_key(
        self,
        topic: str,
        key: str,
        *,
        begin_ms: int = 0,
        end_ms: int = NO_END_MS,
        max_count: int = 32,
    ) -> StoredRecords: ...

    async def query_by_id(self, message_id: str) -> StoredRecords: ...

    async def query_offset(
        self, broker_name: str, group: str, topic: str, queue_id: int
    ) -> int | None: ...

    async def commit_offsets(
        self, broker_name: str, group: str, offsets: Mapping[MessageQueue, int]
    ) -> None: ...

    async def start_offsets(
        self,
        broker_name: str,
        group: str,
        queues: Sequence[MessageQueue],
        consume_from: str,
        timestamp_ms: int,
    ) -> list[QueueStart]: ...

    async def heartbeat(
        self, group: str, client_id: str, subscriptions: Mapping[str, str], message_model: str
    ) -> int: ...

    async def unregister(self, group: str, client_id: str) -> None: ...

    async def lock_queues(
        self, group: str, client_id: str, queues: Sequence[MessageQueue]
    ) -> set[MessageQueue]: ...

    async def unlock_queues(
        self, group: str, client_id: str, queues: Sequence[MessageQueue]
    ) -> None: ...

    async def group_view(self, group: str) -> GroupView: ...

    async def rebalance_view(self, group: str, topics: Sequence[str]) -> GroupView: ...

    # transactions: as BrokerTransport's
    async def send_half(self, group: str, message: NewMessage) -> SendResult: ...

    async def end_transaction(
        self,
        group: str,
        half_phys_offset: int,
        transaction_id: str,
        verdict: str,
        *,
        from_check: bool = False,
    ) -> EndTransactionResult: ...

    async def fetch_transaction_checks(
        self, group: str, client_id: str, wait_ms: int
    ) -> TransactionChecks: ...

    async def close(self) -> None: ...

    # -- administration: as BrokerTransport's -------------------------------------------------
    async def list_topics(self) -> list[TopicInfo]: ...

    async def create_topic(self, name: str, queue_count: int, perm: int) -> TopicInfo: ...

    async def update_topic(
        self, name: str, *, queue_count: int | None, perm: int | None
    ) -> TopicInfo: ...

    async def delete_topic(self, name: str) -> list[int]: ...

    async def list_groups(self) -> list[GroupInfo]: ...

    async def describe_group(self, group: str) -> GroupInfo: ...

    async def group_lag(self, group: str, topic: str | None) -> list[QueueLag]: ...

    async def reset_offsets(
        self, group: str, topic: str, request: ResetRequest, *, create: bool
    ) -> list[OffsetReset]: ...
