"""Administration of a broker: topics, consumer groups, lag and offset resets.

    from sdk import Admin, EmbeddedBroker

    with EmbeddedBroker("./data") as broker, Admin(broker) as admin:
        admin.create_topic("orders", queue_count=8)
        for topic in admin.list_topics():
            print(topic.name, topic.read_queue_nums, topic.perm)
        print(admin.lag("billing"))
        admin.reset_offsets("billing", "orders", to="earliest")
        for message in admin.query_by_key("orders", "order-42"):
            print(message.queue_id, message.queue_offset, message.body)

:class:`Admin` blocks, :class:`AsyncAdmin` awaits; both take a broker URL
(``Admin("http://host:8080")``), an :class:`sdk.EmbeddedBroker` or a transport and reach it
through the transport seam, so a remote broker is administered the same way. They share their
argument checks (:func:`reset_request`). The broker's rules
(queue counts, permissions, what deleting a topic removes, when a reset is refused) are
documented in :mod:`sdk.broker.administration`; answers are the frozen dataclasses of
:mod:`sdk.transport.admin_models`.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import TracebackType
from typing import TYPE_CHECKING, Literal, TypeVar

from sdk.errors import ClientClosedError, InvalidArgumentError
from sdk.lifecycle import WarnsUnclosed
from sdk.transport.admin_models import (
    PERM_READ,
    PERM_READ_WRITE,
    PERM_WRITE,
    GroupInfo,
    MemberInfo,
    OffsetReset,
    QueueLag,
    ResetRequest,
    TopicInfo,
)
from sdk.transport.base import AsyncBrokerTransport, BrokerTransport
from sdk.transport.models import MAX_QUERY_COUNT, NO_END_MS
from sdk.transport.resolve import owns_transport, resolve, resolve_async

if TYPE_CHECKING:
    from localstore.record.codec import StoredMessage

__all__ = [
    "PERM_READ",
    "PERM_READ_WRITE",
    "PERM_WRITE",
    "Admin",
    "AsyncAdmin",
    "GroupInfo",
    "MemberInfo",
    "OffsetReset",
    "QueueLag",
    "TopicInfo",
    "reset_request",
]

ResetTo = Literal["earliest", "latest"]


def reset_request(
    to: ResetTo | None, timestamp_ms: int | None, offsets: Mapping[int, int] | None
) -> ResetRequest:
    """The request of a reset given exactly one of ``to``, ``timestamp_ms`` or ``offsets``."""
    given = [name for name, value in (("to", to), ("timestamp_ms", timestamp_ms),
                                      ("offsets", offsets)) if value is not None]  # fmt: skip
    if len(given) != 1:
        raise InvalidArgumentError(
            "give exactly one of to=, timestamp_ms= or offsets= "
            f"({'none' if not given else ', '.join(given)} given)"
        )
    if to is not None and to not in ("earliest", "latest"):
        raise InvalidArgumentError(f"to must be 'earliest' or 'latest', not {to!r}")
    if timestamp_ms is not None and (_not_int(timestamp_ms) or timestamp_ms < 0):
        raise InvalidArgumentError(f"timestamp_ms must be an int >= 0, not {timestamp_ms!r}")
    pairs = None
    if offsets is not None:
        if not offsets:
            raise InvalidArgumentError("offsets= names no queue")
        for queue_id, offset in offsets.items():
            if _not_int(queue_id) or _not_int(offset) or queue_id < 0 or offset < 0:
                raise InvalidArgumentError(
                    f"offsets= maps queue ids to offsets, ints >= 0: not {queue_id!r}: {offset!r}"
                )
        pairs = tuple(sorted(offsets.items()))
    return ResetRequest(to, timestamp_ms, pairs)


def query_bounds(begin_ms: int, end_ms: int | None, max_count: int) -> tuple[int, int]:
    """A query by key's checked ``(end_ms, max_count)``: no end is no bound, and the count is
    capped at :data:`~sdk.transport.models.MAX_QUERY_COUNT`."""
    end = NO_END_MS if end_ms is None else end_ms
    for name, value in (("begin_ms", begin_ms), ("end_ms", end), ("max_count", max_count)):
        if _not_int(value) or value < 0:
            raise InvalidArgumentError(f"{name} must be an int >= 0, not {value!r}")
    if max_count < 1:
        raise InvalidArgumentError(f"max_count must be at least 1, not {max_count}")
    if begin_ms > end:
        raise InvalidArgumentError(f"begin_ms {begin_ms} is after end_ms {end}")
    return end, min(max_count, MAX_QUERY_COUNT)


def _not_int(value: object) -> bool:
    return not isinstance(value, int) or isinstance(value, bool)


_Listed = TypeVar("_Listed", TopicInfo, GroupInfo)


def _shown(listed: list[_Listed], include_system: bool) -> list[_Listed]:
    """``listed`` without the broker's own topics or groups, unless ``include_system``."""
    return listed if include_system else [item for item in listed if not item.system]


class _AdminBase(WarnsUnclosed):
    _closed = True  # until the constructor finished

    def _check_open(self) -> None:
        if self._closed:
            raise ClientClosedError(f"{type(self).__name__} is closed")


class Admin(_AdminBase):
    """Blocking administration of the broker ``broker`` (a broker URL, an
    :class:`sdk.EmbeddedBroker` or a transport). Close it (or use ``with``); the broker stays
    open, and so does a transport it was given (one it made from a URL is closed).

    Topics: :meth:`list_topics`, :meth:`create_topic`, :meth:`update_topic`,
    :meth:`delete_topic`. Groups: :meth:`list_groups`, :meth:`describe_group`, :meth:`lag`,
    :meth:`reset_offsets`. Stored messages: :meth:`query_by_key`, :meth:`view_message`.
    Refusals raise :class:`sdk.errors.UnknownTopicError`, :class:`sdk.errors.UnknownGroupError`,
    :class:`sdk.errors.InvalidArgumentError` or :class:`sdk.errors.IllegalStateError`, each
    naming what was refused and why.
    """

    def __init__(self, broker: object) -> None:
        self.transport: BrokerTransport = resolve(broker)
        self._owns_transport = owns_transport(broker)
        self._closed = False
        self._mark_opened()

    def list_topics(self, *, include_system: bool = False) -> list[TopicInfo]:
        """The broker's topics sorted by name (its own retry, dead-letter and schedule topics
        too when ``include_system``)."""
        self._check_open()
        topics = self.transport.list_topics()
        return _shown(topics, include_system)

    def create_topic(
        self, name: str, queue_count: int = 4, *, perm: int = PERM_READ_WRITE
    ) -> TopicInfo:
        """Create topic ``name`` with ``queue_count`` queues (producers spread over them,
        consumers share them); an existing topic is refused."""
        self._check_open()
        return self.transport.create_topic(name, queue_count, perm)

    def update_topic(
        self, name: str, *, queue_count: int | None = None, perm: int | None = None
    ) -> TopicInfo:
        """Change the queue count and/or permission of ``name``. Fewer queues are refused
        while a queue that would go holds messages not consumed yet."""
        self._check_open()
        return self.transport.update_topic(name, queue_count=queue_count, perm=perm)

    def delete_topic(self, name: str) -> list[int]:
        """Delete ``name``: its config, queues and every group's offsets of it (its records
        stay in the commitlog until retention removes them); answers the ids of the queues
        whose files were removed. The broker's own topics, and a topic a running consumer
        subscribes to, are refused. A pull consumer that assigns its queues by hand does not
        join its group, so the broker cannot see it: stop such consumers first."""
        self._check_open()
        return self.transport.delete_topic(name)

    def list_groups(self, *, include_system: bool = False) -> list[GroupInfo]:
        """Every group the broker has members or committed offsets of, with its lag (the
        broker's own ``CID_RMQ_SYS_*`` groups too when ``include_system``)."""
        self._check_open()
        groups = self.transport.list_groups()
        return _shown(groups, include_system)

    def describe_group(self, group: str) -> GroupInfo:
        """``group``'s members, the queues each owns, and its lag per queue."""
        self._check_open()
        return self.transport.describe_group(group)

    def lag(self, group: str, topic: str | None = None) -> list[QueueLag]:
        """``group``'s committed offset, bounds and lag per queue of ``topic`` (default: of
        every topic it subscribes to or committed offsets of)."""
        self._check_open()
        return self.transport.group_lag(group, topic)

    def reset_offsets(
        self,
        group: str,
        topic: str,
        *,
        to: ResetTo | None = None,
        timestamp_ms: int | None = None,
        offsets: Mapping[int, int] | None = None,
        create: bool = False,
    ) -> list[OffsetReset]:
        """Move ``group``'s offsets of ``topic`` to the ``earliest``/``latest`` offset, to the
        first message stored at or after ``timestamp_ms``, or to ``offsets`` (queue id ->
        offset). Refused while the group's consumers run, and for a group the broker has no
        offsets or members of unless ``create``. A pull consumer that assigns its queues by
        hand does not join its group, so the broker cannot see it: stop it first, or its next
        commit overwrites the reset."""
        request = reset_request(to, timestamp_ms, offsets)
        self._check_open()
        return self.transport.reset_offsets(group, topic, request, create=create)

    def query_by_key(
        self,
        topic: str,
        key: str,
        *,
        begin_ms: int = 0,
        end_ms: int | None = None,
        max_count: int = 32,
    ) -> list[StoredMessage]:
        """Messages of ``topic`` whose KEYS hold ``key`` (or whose UNIQ_KEY is ``key``), stored
        within [``begin_ms``, ``end_ms``] (ms since the epoch; None: no end), newest first: at
        most ``max_count`` (capped at 64), found through the broker's key index. Each is the
        stored record, decoded: every property (the broker's own too), where it is stored and
        when. Raises :class:`sdk.errors.IllegalStateError` for a broker kept without a key
        index."""
        end, count = query_bounds(begin_ms, end_ms, max_count)
        self._check_open()
        found = self.transport.query_by_key(
            topic, key, begin_ms=begin_ms, end_ms=end, max_count=count
        )
        return found.messages()

    def view_message(self, message_id: str) -> list[StoredMessage]:
        """The stored message whose offsetMsgId is ``message_id`` (host, port and commitlog
        offset, as a send result gives it), or the messages of any topic whose UNIQ_KEY (the
        id producers show) is ``message_id``: several when it was stored more than once (a
        retry copy, a transaction's committed message). Empty when no message has the id."""
        self._check_open()
        return self.transport.query_by_id(message_id).messages()

    def close(self) -> None:
        """Release a transport made from a URL (not the broker). Idempotent."""
        if not self._closed:
            self._closed = True
            if self._owns_transport:
                self.transport.close()

    def __enter__(self) -> Admin:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


class AsyncAdmin(_AdminBase):
    """:class:`Admin` for asyncio: the same calls, awaited. Close it with ``await close()`` or
    ``async with``."""

    def __init__(self, broker: object) -> None:
        self.transport: AsyncBrokerTransport = resolve_async(broker)
        self._owns_transport = owns_transport(broker)
        self._closed = False
        self._mark_opened()

    async def list_topics(self, *, include_system: bool = False) -> list[TopicInfo]:
        """As :meth:`Admin.list_topics`."""
        self._check_open()
        topics = await self.transport.list_topics()
        return _shown(topics, include_system)

    async def create_topic(
        self, name: str, queue_count: int = 4, *, perm: int = PERM_READ_WRITE
    ) -> TopicInfo:
        """As :meth:`Admin.create_topic`."""
        self._check_open()
        return await self.transport.create_topic(name, queue_count, perm)

    async def update_topic(
        self, name: str, *, queue_count: int | None = None, perm: int | None = None
    ) -> TopicInfo:
        """As :meth:`Admin.update_topic`."""
        self._check_open()
        return await self.transport.update_topic(name, queue_count=queue_count, perm=perm)

    async def delete_topic(self, name: str) -> list[int]:
        """As :meth:`Admin.delete_topic`."""
        self._check_open()
        return await self.transport.delete_topic(name)

    async def list_groups(self, *, include_system: bool = False) -> list[GroupInfo]:
        """As :meth:`Admin.list_groups`."""
        self._check_open()
        groups = await self.transport.list_groups()
        return _shown(groups, include_system)

    async def describe_group(self, group: str) -> GroupInfo:
        """As :meth:`Admin.describe_group`."""
        self._check_open()
        return await self.transport.describe_group(group)

    async def lag(self, group: str, topic: str | None = None) -> list[QueueLag]:
        """As :meth:`Admin.lag`."""
        self._check_open()
        return await self.transport.group_lag(group, topic)

    async def reset_offsets(
        self,
        group: str,
        topic: str,
        *,
        to: ResetTo | None = None,
        timestamp_ms: int | None = None,
        offsets: Mapping[int, int] | None = None,
        create: bool = False,
    ) -> list[OffsetReset]:
        """As :meth:`Admin.reset_offsets`."""
        request = reset_request(to, timestamp_ms, offsets)
        self._check_open()
        return await self.transport.reset_offsets(group, topic, request, create=create)

    async def query_by_key(
        self,
        topic: str,
        key: str,
        *,
        begin_ms: int = 0,
        end_ms: int | None = None,
        max_count: int = 32,
    ) -> list[StoredMessage]:
        """As :meth:`Admin.query_by_key`."""
        end, count = query_bounds(begin_ms, end_ms, max_count)
        self._check_open()
        found = await self.transport.query_by_key(
            topic, key, begin_ms=begin_ms, end_ms=end, max_count=count
        )
        return found.messages()

    async def view_message(self, message_id: str) -> list[StoredMessage]:
        """As :meth:`Admin.view_message`."""
        self._check_open()
        return (await self.transport.query_by_id(message_id)).messages()

    async def close(self) -> None:
        """As :meth:`Admin.close`."""
        if not self._closed:
            self._closed = True
            if self._owns_transport:
                await self.transport.close()

    async def __aenter__(self) -> AsyncAdmin:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()
