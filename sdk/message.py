"""What applications send and receive.

* :class:`Message`: a message to send: topic, body, tags, keys, user properties, and an optional
  delay (one of RocketMQ's delay levels, or an absolute delivery time).
* :class:`ReceivedMessage`: what consumers (and transaction checkers) receive: the SDK's view of
  a stored record, its system properties as attributes (``tags``, ``keys``, ``msg_id``, ...) and
  only the user's in ``properties``. The broker hands out stored records as they are; the client
  decodes each straight into one with the store's own codec, where a pull answer is read.
* :class:`ConsumeResult`: what a listener answers for a batch.

Property names RocketMQ reserves (``TAGS``, ``KEYS``, ``UNIQ_KEY``, ``DELAY``, ...; see
:data:`RESERVED_PROPERTIES`) and Quiver's own (``__QUIVER_*``, :data:`QUIVER_PROPERTY_PREFIX`)
come from the fields, never from ``properties``: the producer refuses a user property with such a
name, and a received message leaves them out of its ``properties``.
"""

from __future__ import annotations

import enum
import functools
import inspect
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Protocol

from localstore.record.codec import (
    PROPERTY_KEYS,
    PROPERTY_RETRY_TOPIC,
    PROPERTY_TAGS,
    PROPERTY_UNIQ_KEY,
    StoredMessage,
    make_offset_msg_id,
    split_keys,
)
from localstore.record.properties import parse_once
from localstore.record.validation import DLQ_PREFIX, RETRY_PREFIX
from sdk.transport.transaction_models import PROPERTY_TRANSACTION_ID

QUIVER_PROPERTY_PREFIX = "__QUIVER_"
"""The prefix of Quiver's own property names (reserved, as RocketMQ's are)."""

PROPERTY_DELIVER_AT = QUIVER_PROPERTY_PREFIX + "DELIVER_AT"
"""Quiver's property for an absolute delivery time (epoch ms); see :mod:`sdk.broker.schedule`."""

PROPERTY_PRODUCER_SEQ = QUIVER_PROPERTY_PREFIX + "PRODUCER_SEQ"
"""Quiver's property on the last message of an idempotent batch: ``<producer id>:<sequence>:
<count>``, what the broker rebuilds its producer windows from (:mod:`sdk.broker.idempotence`)."""

log = logging.getLogger(__name__)


def retry_topic(group: str) -> str:
    """The topic through which ``group``'s failed messages come back: ``%RETRY%{group}``."""
    return RETRY_PREFIX + group


def dlq_topic(group: str) -> str:
    """The dead-letter topic of ``group``: ``%DLQ%{group}`` (one queue)."""
    return DLQ_PREFIX + group


RESERVED_PROPERTIES = frozenset({
    "KEYS", "TAGS", "UNIQ_KEY", "WAIT", "DELAY", "RETRY_TOPIC", "REAL_TOPIC", "REAL_QID",
    "TRAN_MSG", "PGROUP", "RECONSUME_TIME", "MAX_RECONSUME_TIMES", "ORIGIN_MESSAGE_ID",
    "CONSUME_START_TIME", "MIN_OFFSET", "MAX_OFFSET", "__transactionId__",
    "TRAN_PREPARED_QUEUE_OFFSET", "DUP_INFO", "INNER_NUM", "INNER_BASE",
})  # fmt: skip


@dataclass(slots=True)
class Message:
    """A message to send. ``keys`` are business keys (query by key finds the message by any of
    them; a single string is one key); they do not choose the queue (the producer's
    ``sharding_key=`` does, unlike a Kafka record key). ``delay_level`` is 1-18 (RocketMQ's
    levels, 1 s to 2 h) or 0 for none; ``deliver_at_ms`` is an absolute delivery time (ms since
    the epoch) instead."""

    topic: str
    body: bytes
    tags: str | None = None
    keys: Sequence[str] = ()
    properties: dict[str, str] = field(default_factory=dict)
    delay_level: int = 0
    deliver_at_ms: int | None = None
    flag: int = 0

    def system_properties(self) -> dict[str, str]:
        """Tags and keys as the stored properties RocketMQ uses (``TAGS``, ``KEYS``)."""
        result: dict[str, str] = {}
        if self.tags:
            result[PROPERTY_TAGS] = self.tags
        if self.keys:
            keys = self.keys
            result[PROPERTY_KEYS] = keys if isinstance(keys, str) else " ".join(keys)
        return result


def is_user_property(name: str) -> bool:
    """Whether ``name`` is free for a user property: neither RocketMQ's
    (:data:`RESERVED_PROPERTIES`) nor Quiver's (``__QUIVER_*``)."""
    return name not in RESERVED_PROPERTIES and not name.startswith(QUIVER_PROPERTY_PREFIX)


class ReceivedMessage:
    """A message as a consumer (or a transaction checker) receives it.

    Where it was stored: ``topic`` (the topic it was sent to; for a message that came back
    through its group's retry topic, the original topic, as RocketMQ's push consumer shows it),
    ``stored_topic`` (the topic it was read from: ``%RETRY%{group}`` for such a message),
    ``queue_id``, ``queue_offset``, ``phys_offset`` (its commitlog offset) and ``store_size``
    (its record's bytes).

    What was sent: ``body``, ``tags`` (None without), ``keys`` (a tuple of str, empty without),
    ``flag`` and ``properties``: the **user's** properties only, a read-only mapping.

    What the producer and the broker added, RocketMQ's system properties and header fields:
    ``msg_id`` (the producer's ``UNIQ_KEY``, the id users see; the ``offset_msg_id`` for a
    record stored without one), ``offset_msg_id`` (store host and commitlog offset, in hex),
    ``born_timestamp`` and ``store_timestamp`` (ms since the epoch), ``born_host`` and
    ``store_host`` (``"address:port"``), ``reconsume_times`` (how many times it was consumed
    and failed; a push consumer counts its own retries here), ``original_topic`` (the
    ``RETRY_TOPIC`` of a message re-stored in a retry or dead-letter topic, else None) and
    ``transaction_id`` (a transactional message's, else None). No system property (``TAGS``,
    ``KEYS``, ``UNIQ_KEY``, ``RETRY_TOPIC``, ``ORIGIN_MESSAGE_ID``, ``REAL_TOPIC``,
    ``__QUIVER_*``, ...) shows in ``properties``; a delayed message arrives with its delay
    spent, so it carries none.

    A consumer decodes each record straight into one (``localstore``'s ``decode_record`` with
    ``make=ReceivedMessage``, the fields given as :class:`~localstore.StoredMessage`'s are), and
    the stored properties text is parsed only when a property-backed attribute is first read:
    a consumer that hands messages on without looking at them pays no more than for the
    store's own record. :meth:`from_stored` converts a record read from a store. Two received
    messages are equal when every field is, the properties included."""

    __slots__ = (
        "_properties",
        "_store_host_raw",
        "_user_properties",
        "body",
        "born_host",
        "born_timestamp",
        "flag",
        "phys_offset",
        "queue_id",
        "queue_offset",
        "reconsume_times",
        "store_host",
        "store_size",
        "store_timestamp",
        "stored_topic",
    )
    _user_properties: Mapping[str, str]  # set on first read of ``properties``
    __hash__ = None  # type: ignore[assignment]  # compared by value, and reconsume_times changes

    def __init__(
        self,
        topic: str,
        queue_id: int,
        queue_offset: int,
        phys_offset: int,
        store_size: int,
        body_crc: int,
        flag: int,
        sys_flag: int,
        born_timestamp: int,
        born_host: str,
        store_timestamp: int,
        store_host: str,
        reconsume_times: int,
        prepared_transaction_offset: int,
        body: bytes,
        properties: dict[str, str] | str,
        store_host_raw: bytes = b"",
    ) -> None:
        self.stored_topic = topic
        self.queue_id = queue_id
        self.queue_offset = queue_offset
        self.phys_offset = phys_offset
        self.store_size = store_size
        self.flag = flag
        self.born_timestamp = born_timestamp
        self.born_host = born_host
        self.store_timestamp = store_timestamp
        self.store_host = store_host
        self.reconsume_times = reconsume_times
        self.body = body
        self._properties = properties
        self._store_host_raw = store_host_raw

    @classmethod
    def from_stored(cls, stored: StoredMessage) -> ReceivedMessage:
        """The message a consumer would receive for ``stored`` (a record read from a store)."""
        return cls(
            stored.topic,
            stored.queue_id,
            stored.queue_offset,
            stored.phys_offset,
            stored.store_size,
            stored.body_crc,
            stored.flag,
            stored.sys_flag,
            stored.born_timestamp,
            stored.born_host,
            stored.store_timestamp,
            stored.store_host,
            stored.reconsume_times,
            stored.prepared_transaction_offset,
            stored.body,
            dict(stored.properties),
            stored.store_host_raw,
        )

    def _system_properties(self) -> dict[str, str]:
        """Every stored property, parsed on first read (as ``StoredMessage`` does)."""
        properties = self._properties
        return parse_once(self) if type(properties) is str else properties  # type: ignore[return-value]

    @property
    def topic(self) -> str:
        """The topic the message was sent to (a retried message's original one, see above)."""
        topic = self.stored_topic
        if topic.startswith(RETRY_PREFIX):
            return self._system_properties().get(PROPERTY_RETRY_TOPIC, topic)
        return topic

    @property
    def tags(self) -> str | None:
        return self._system_properties().get(PROPERTY_TAGS)

    @property
    def keys(self) -> tuple[str, ...]:
        raw = self._system_properties().get(PROPERTY_KEYS)
        return tuple(split_keys(raw)) if raw else ()

    @property
    def msg_id(self) -> str:
        """The producer's id (``UNIQ_KEY``): the same for every delivery and retry of a send."""
        return self._system_properties().get(PROPERTY_UNIQ_KEY) or self.offset_msg_id

    @property
    def offset_msg_id(self) -> str:
        """The broker's id of this stored record: store host and commitlog offset, in hex."""
        return make_offset_msg_id(self._store_host_raw, self.phys_offset)

    @property
    def original_topic(self) -> str | None:
        return self._system_properties().get(PROPERTY_RETRY_TOPIC)

    @property
    def transaction_id(self) -> str | None:
        return self._system_properties().get(PROPERTY_TRANSACTION_ID)

    @property
    def properties(self) -> Mapping[str, str]:
        """The user's properties (read-only; no system property, see the class docstring)."""
        try:
            return self._user_properties
        except AttributeError:  # first read: filtered once, kept
            pass
        every = self._system_properties()
        user = MappingProxyType({n: v for n, v in every.items() if is_user_property(n)})
        self._user_properties = user
        return user

    def _fields(self) -> tuple[object, ...]:
        return (
            *(getattr(self, name) for name in _COMPARED_FIELDS),
            self._system_properties(),
            self._store_host_raw,
        )

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, ReceivedMessage):
            return NotImplemented
        return self._fields() == other._fields()

    def __repr__(self) -> str:
        return (
            f"ReceivedMessage(topic={self.topic!r}, queue_id={self.queue_id}, "
            f"queue_offset={self.queue_offset}, msg_id={self.msg_id!r}, tags={self.tags!r}, "
            f"keys={self.keys!r}, properties={dict(self.properties)!r}, "
            f"reconsume_times={self.reconsume_times}, body={_short(self.body)!r})"
        )


_COMPARED_FIELDS = tuple(name for name in ReceivedMessage.__slots__ if not name.startswith("_"))


def _short(body: bytes, limit: int = 64) -> bytes:
    """``body`` cut to ``limit`` bytes for a repr (a long body would drown the fields)."""
    return body if len(body) <= limit else body[:limit] + b"..."


class ConsumeResult(enum.Enum):
    """What a listener answers for a batch (RocketMQ's ConsumeConcurrentlyStatus); raising an
    exception counts as RECONSUME_LATER."""

    SUCCESS = "CONSUME_SUCCESS"
    RECONSUME_LATER = "RECONSUME_LATER"


class _Identified(Protocol):
    """A message as :func:`read_answer` names it."""

    @property
    def msg_id(self) -> str | None: ...


def read_answer(
    answer: object, listener: Callable[[], str], messages: Sequence[_Identified] = ()
) -> ConsumeResult:
    """A listener's answer as every consumer reads it (the one place that decides it):

    * ``None`` (a callback that returns nothing) or ``SUCCESS``: SUCCESS;
    * ``RECONSUME_LATER``: itself;
    * anything else (``True``, ``"ok"``, ``1``, a coroutine nobody awaited): a programming error,
      logged at ERROR with the value's repr, ``listener()`` (a name that says whose, the group
      included) and the ids of ``messages``, and read as RECONSUME_LATER: the batch is retried,
      never acknowledged (an orderly consumer retries it in place).

    The name and the ids are made only for that log line: reading a message's id parses its
    properties, which a consumer otherwise leaves to the listener."""
    if answer is None or answer is ConsumeResult.SUCCESS:
        return ConsumeResult.SUCCESS
    if answer is not ConsumeResult.RECONSUME_LATER:
        log.error(
            "%s answered %r for message(s) %s, which is not a ConsumeResult (return "
            "ConsumeResult.SUCCESS or None for success): retrying the batch",
            listener(),
            answer,
            ", ".join(str(m.msg_id) for m in messages) or "-",
        )
        if inspect.iscoroutine(answer):
            answer.close()  # never awaited: closed, so no warning is left behind
    return ConsumeResult.RECONSUME_LATER


def is_async_callable(listener: object) -> bool:
    """Whether calling ``listener`` gives a coroutine, as far as :mod:`inspect` can tell: an
    ``async def`` function or method, a :func:`functools.partial` of one, an object whose
    ``__call__`` is ``async def``, or a callable marked with
    :func:`inspect.markcoroutinefunction` (Python 3.12+)."""
    while isinstance(listener, functools.partial):
        listener = listener.func
    if inspect.iscoroutinefunction(listener):
        return True
    if inspect.isroutine(listener) or inspect.isclass(listener):
        return False  # a function's (or class's) own __call__ says nothing about what it returns
    call = getattr(listener, "__call__", None)  # noqa: B004 - an instance's async __call__
    return inspect.iscoroutinefunction(call)
