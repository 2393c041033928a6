"""What applications send and receive.

* :class:`Message`: a message to send: topic, body, tags, keys, user properties, and an optional
  delay (one of RocketMQ's delay levels, or an absolute delivery time).
* :data:`ReceivedMessage`: what consumers receive: the stored record decoded
  (:class:`localstore.StoredMessage`): topic, queue id, queue offset, ``msg_id`` (the producer's
  UNIQ_KEY), ``offset_msg_id``, tags, keys, properties, body, born and store timestamps and
  reconsume times. The broker hands out stored records as they are; the client decodes them with
  the store's own codec.
* :class:`ConsumeResult`: what a listener answers for a batch.

Property names RocketMQ reserves (``TAGS``, ``KEYS``, ``UNIQ_KEY``, ``DELAY``, ...; see
:data:`RESERVED_PROPERTIES`) come from the fields, not from ``properties``; the producer is to
refuse a user property with a reserved name.
"""

from __future__ import annotations

import enum
import functools
import inspect
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from localstore.record.codec import PROPERTY_KEYS, PROPERTY_TAGS, StoredMessage
from localstore.record.validation import DLQ_PREFIX, RETRY_PREFIX

ReceivedMessage = StoredMessage

PROPERTY_DELIVER_AT = "__QUIVER_DELIVER_AT"
"""Quiver's property for an absolute delivery time (epoch ms); see :mod:`sdk.broker.schedule`."""

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
