"""From a user's :class:`Message` to what the broker stores, and back to a receipt (sans-I/O).

:class:`MessageBuilder` validates a message on the producer's side, with the broker's own rules
and error texts (so a bad message fails before any I/O, with a clear
:class:`sdk.errors.InvalidMessageError`), and turns it into a :class:`localstore.NewMessage`
(a batch into a :class:`localstore.UniformBatch`, the same messages as columns):

* ``UNIQ_KEY`` (the message id users see) is generated here, as RocketMQ's producers do;
* ``TAGS`` and ``KEYS`` come from the fields, user properties may not use reserved names
  (RocketMQ's, :data:`sdk.message.RESERVED_PROPERTIES`, nor Quiver's ``__QUIVER_*``);
* a delay becomes the ``DELAY`` property (a level) or ``__QUIVER_DELIVER_AT`` (an absolute time):
  the broker moves such a message under ``SCHEDULE_TOPIC_XXXX`` with its own delay table.

Queue selection: round-robin per topic by default; a ``sharding_key`` picks
``abs(java_hash(key)) % queue_count`` (RocketMQ's ``SelectMessageQueueByHash``, so all messages of
one key go to one queue, in order); a custom :data:`QueueSelector` may pick anything.
"""

from __future__ import annotations

import itertools
import math
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import cast, overload

from localstore.record.codec import (
    PROPERTY_DELAY,
    PROPERTY_KEYS,
    PROPERTY_REAL_QUEUE_ID,
    PROPERTY_REAL_TOPIC,
    PROPERTY_TAGS,
    PROPERTY_UNIQ_KEY,
    NewMessage,
    encode_properties,
    format_offset_msg_id,
    holds_property_separator,
)
from localstore.record.javahash import java_hash
from localstore.record.layout import MAX_PROPERTIES_BYTES
from localstore.record.message_id import UniqKeyGenerator
from localstore.record.properties import (
    KEYS_PAIR_START,
    PROPERTY_SEPARATOR,
    TAGS_PAIR_START,
    UNIQ_KEY_PAIR_START,
)
from localstore.record.uniform_batch import UniformBatch
from localstore.record.validation import topic_error
from sdk.errors import InvalidMessageError, SendRejectedError
from sdk.message import PROPERTY_DELIVER_AT, QUIVER_PROPERTY_PREFIX, Message, is_user_property
from sdk.transport.models import SendResult

__all__ = [
    "DEFAULT_MAX_BODY_BYTES",
    "MAX_PROPERTIES_BYTES",
    "BuiltBatch",
    "MessageBuilder",
    "QueueSelector",
    "SendReceipt",
    "SendReceipts",
    "receipts",
    "select_by_key",
]

DEFAULT_MAX_BODY_BYTES = 4 * 1024 * 1024
MAX_DELAY_LEVEL = 18
# What separates the tags of a subscription expression ("a || b", localstore.record.tags): a
# message tag holding it could never match one, so sending it is refused.
TAG_SEPARATOR = "||"

QueueSelector = Callable[[Message, int], int]
"""``selector(message, queue_count) -> queue id`` in ``[0, queue_count)``."""


@dataclass(slots=True, repr=False)
class SendReceipt:
    """Where a sent message was stored.

    ``msg_id`` is the producer's id (``UNIQ_KEY``), ``offset_msg_id`` the broker's (store host
    and commitlog offset). ``status`` is ``PUT_OK``, or ``FLUSH_DISK_TIMEOUT`` when the broker
    stored the message but could not confirm it on disk in time. For a delayed message
    ``queue_offset`` is -1: it gets one in ``queue_id`` only when it is delivered.
    """

    msg_id: str
    topic: str
    queue_id: int
    queue_offset: int
    store_timestamp: int
    status: str = "PUT_OK"
    phys_offset: int = -1  # commitlog offset (of the schedule copy when delayed)
    store_host: str = ""

    @property
    def offset_msg_id(self) -> str:
        if self.phys_offset < 0:
            return ""
        return format_offset_msg_id(self.store_host, self.phys_offset)

    def __repr__(self) -> str:
        return (
            f"SendReceipt(msg_id={self.msg_id!r}, offset_msg_id={self.offset_msg_id!r}, "
            f"topic={self.topic!r}, queue_id={self.queue_id}, queue_offset={self.queue_offset}, "
            f"status={self.status!r})"
        )


def select_by_key(key: str, queue_count: int) -> int:
    """The queue of sharding key ``key``: ``abs(java_hash(key)) % queue_count``."""
    return abs(java_hash(key)) % queue_count


def _body_bytes(body: object) -> bytes:
    if isinstance(body, bytes):
        return body
    if isinstance(body, bytearray | memoryview):
        return bytes(body)
    raise InvalidMessageError(f"the body must be bytes, got {type(body).__name__}")


def _check_property_names(properties: dict[str, str]) -> None:
    """User properties: str names and values without the separators, no reserved name."""
    if not isinstance(properties, dict):
        raise InvalidMessageError(
            f"properties must be a dict of str to str, got {type(properties).__name__}"
        )
    for name, value in properties.items():
        problem = _text_problem(name, "a property name") or _text_problem(
            value, f"property {name!r}"
        )
        if problem is not None:
            raise InvalidMessageError(problem)
        if not name:
            raise InvalidMessageError("a property name is empty")
    reserved = sorted(name for name in properties if not is_user_property(name))
    if reserved:
        raise InvalidMessageError(
            f"property name(s) {reserved} are reserved (RocketMQ's system properties and "
            f"Quiver's {QUIVER_PROPERTY_PREFIX}*): use the Message fields"
        )


def _text_problem(value: object, what: str) -> str | None:
    """Why ``value`` cannot be stored in a property (None: it can). Stored properties are
    ``name\x01value\x02`` pairs, so those two characters would cut or forge a property."""
    if type(value) is not str:
        return f"{what} must be a str, got {type(value).__name__}"
    if holds_property_separator(value):
        return f"{what} {value!r} holds \\x01 or \\x02, which separate stored properties"
    return None


def _tags_problem(tags: object) -> str | None:
    """Why ``tags`` cannot be a message's tag (None: it can): a property's rules, and no
    ``||``, which separates the tags of a subscription, so such a tag could never match one."""
    problem = _text_problem(tags, "tags")
    if problem is None and TAG_SEPARATOR in str(tags):
        return (
            f"tag {tags!r} holds {TAG_SEPARATOR!r}, which separates a subscription's tags: "
            "no subscription could ever match it"
        )
    return problem


def _keys_problem(keys: object) -> str:
    """Why ``keys`` cannot be stored as ``KEYS`` (space-separated, one token a key)."""
    single = isinstance(keys, str)
    for key in (keys,) if single else keys if isinstance(keys, (list, tuple)) else ():
        problem = _text_problem(key, "a key")
        if problem is not None:
            return problem
        if " " in key:
            return f"key {key!r} holds a space, which separates keys: " + (
                "pass several keys as a list" if single else "give each key alone"
            )
    if not single and not isinstance(keys, (list, tuple)):
        return f"keys must be a str or a list of str, got {type(keys).__name__}"
    return "keys must be non-empty strs"


def _check_scalar_fields(message: Message) -> None:
    """``flag`` (a 32-bit int), ``delay_level`` (an int) and ``deliver_at_ms`` (a number)."""
    flag = message.flag
    if type(flag) is not int or not -(1 << 31) <= flag < 1 << 31:
        raise InvalidMessageError(f"flag must be an int of 32 bits, got {flag!r}")
    level = message.delay_level
    if type(level) is not int:
        raise InvalidMessageError(f"delay_level must be an int, got {level!r}")
    at = message.deliver_at_ms
    if at is not None and (type(at) not in (int, float) or not math.isfinite(at)):
        raise InvalidMessageError(f"deliver_at_ms must be ms since the epoch, got {at!r}")


def _check_properties_size(properties: dict[str, str], topic: str) -> None:
    size = len(encode_properties(properties).encode())
    if size > MAX_PROPERTIES_BYTES:
        raise _properties_too_large(topic, size)


def _properties_too_large(topic: str, size: int) -> InvalidMessageError:
    return InvalidMessageError(
        f"message to {topic}: its properties take {size} bytes, over the limit "
        f"{MAX_PROPERTIES_BYTES}"
    )


def _joined_keys(keys: object) -> str | None:
    """``keys`` as the ``KEYS`` property (one key, or several joined by spaces); None when
    they are not a str or a list or tuple of non-empty strs free of spaces and separators."""
    if type(keys) is tuple and len(keys) == 1:  # the common case, checked at once
        key = keys[0]
        if type(key) is str and key and " " not in key and key.isprintable():
            return key
    if type(keys) is str:
        joined = keys
        refused = " " in keys
    elif type(keys) is tuple or type(keys) is list:
        try:
            joined = " ".join(keys)
        except TypeError:
            return None
        refused = joined.count(" ") != len(keys) - 1 or "" in keys  # a space in a key, or none
    else:
        return None
    if refused or (not joined.isprintable() and holds_property_separator(joined)):
        return None
    return joined


def _check_stored_properties(message: Message) -> None:
    """Refuse a message whose properties will not fit once stored: its own, TAGS and KEYS, the
    UNIQ_KEY added here and, for a delayed message, what the broker adds to schedule it."""
    delayed = bool(message.delay_level) or message.deliver_at_ms is not None
    keys = message.keys or ()
    budget = len(message.tags or "") + (
        len(keys) if isinstance(keys, str) else sum(map(len, keys)) + len(keys)
    )
    if message.properties:
        budget += sum(len(k) + len(v) + 2 for k, v in message.properties.items())
    budget += 64 + (len(message.topic) + 64 if delayed else 0)  # UNIQ_KEY, names, schedule
    if budget * 4 <= MAX_PROPERTIES_BYTES:  # UTF-8 takes at most 4 bytes a character
        return
    properties = {**message.properties, **message.system_properties()}
    properties[PROPERTY_UNIQ_KEY] = "0" * 32
    if delayed:
        properties[PROPERTY_DELAY] = str(MAX_DELAY_LEVEL)
        if message.deliver_at_ms is not None:
            properties[PROPERTY_DELIVER_AT] = str(int(message.deliver_at_ms))
        properties[PROPERTY_REAL_TOPIC] = message.topic
        properties[PROPERTY_REAL_QUEUE_ID] = "99999"
    _check_properties_size(properties, message.topic)


class BuiltBatch(list[NewMessage]):
    """The stored form of a batch's messages (:meth:`MessageBuilder.build_batch`), with their
    ``UNIQ_KEY``s in order (``msg_ids``), which its receipts keep instead of the messages."""

    __slots__ = ("msg_ids",)

    msg_ids: list[str]


class MessageBuilder:
    """Validates messages and builds what the broker stores; thread-safe."""

    def __init__(self, *, max_body_bytes: int = DEFAULT_MAX_BODY_BYTES) -> None:
        self.max_body_bytes = max_body_bytes
        self._ids = UniqKeyGenerator()
        self._round_robin: dict[str, itertools.count[int]] = {}
        self._valid_topics: set[str] = set()

    def check(self, message: Message) -> bytes:
        """Raise :class:`InvalidMessageError` naming what is wrong; answers the body."""
        if not isinstance(message, Message):
            raise InvalidMessageError(f"expected a sdk.Message, got {type(message).__name__}")
        self._check_topic(message.topic)
        body = self._check_body(message.body, message.topic)
        if message.properties:
            _check_property_names(message.properties)
        _check_scalar_fields(message)
        if message.tags and (problem := _tags_problem(message.tags)) is not None:
            raise InvalidMessageError(problem)
        if message.keys and _joined_keys(message.keys) is None:
            raise InvalidMessageError(_keys_problem(message.keys))
        if message.delay_level and not 0 < message.delay_level <= MAX_DELAY_LEVEL:
            raise InvalidMessageError(
                f"delay_level must be 1-{MAX_DELAY_LEVEL} (or 0 for none), got "
                f"{message.delay_level}"
            )
        if message.delay_level and message.deliver_at_ms is not None:
            raise InvalidMessageError("give delay_level or deliver_at_ms, not both")
        _check_stored_properties(message)
        return body

    def _check_topic(self, topic: str) -> None:
        if topic in self._valid_topics:
            return
        problem = topic_error(topic) if isinstance(topic, str) else "the topic must be a str"
        if problem is not None:
            raise InvalidMessageError(problem)
        self._valid_topics.add(topic)

    def _check_body(self, body: object, topic: str) -> bytes:
        if type(body) is not bytes:
            body = _body_bytes(body)
        if not body:
            raise InvalidMessageError(f"message to {topic}: the body is empty")
        if len(body) > self.max_body_bytes:
            raise InvalidMessageError(
                f"message to {topic}: the body is {len(body)} bytes, over the limit "
                f"{self.max_body_bytes}"
            )
        return body

    def build(self, message: Message, queue_id: int) -> NewMessage:
        """The message as the broker stores it, with a fresh ``UNIQ_KEY``. The caller ran
        :meth:`check` on it first (every send does, before choosing a queue)."""
        built = self._build(message, queue_id, self._ids.next(), time.time_ns() // 1_000_000)
        if message.delay_level:
            built.properties[PROPERTY_DELAY] = str(message.delay_level)
        elif message.deliver_at_ms is not None:
            built.properties[PROPERTY_DELIVER_AT] = str(int(message.deliver_at_ms))
        return built

    def _checked_fields(self, message: Message, topic: str) -> tuple[bytes, str | None, str | None]:
        """The body, TAGS and KEYS a message is stored with, each checked (its user
        properties' names and its flag too): what :meth:`_build` and :meth:`build_batch` store.
        The put path's per-message cost: keep it lean."""
        body = message.body
        if type(body) is not bytes or not body or len(body) > self.max_body_bytes:
            body = self._check_body(body, topic)
        if message.properties:
            _check_property_names(message.properties)
        flag = message.flag
        if flag and (type(flag) is not int or not -(1 << 31) <= flag < 1 << 31):
            _check_scalar_fields(message)
        tags = message.tags
        if tags:
            if type(tags) is not str or holds_property_separator(tags) or TAG_SEPARATOR in tags:
                raise InvalidMessageError(f"message to {topic}: {_tags_problem(tags)}")
        else:
            tags = None
        joined = None
        if message.keys:
            joined = _joined_keys(message.keys)
            if joined is None:
                raise InvalidMessageError(f"message to {topic}: {_keys_problem(message.keys)}")
        return body, tags, joined

    def _build(self, message: Message, queue_id: int, uniq_key: str, now_ms: int) -> NewMessage:
        """The stored form of a message whose topic was checked (body and properties are
        checked here)."""
        topic = message.topic
        body, tags, joined = self._checked_fields(message, topic)
        properties = dict(message.properties) if message.properties else {}
        if tags:
            properties[PROPERTY_TAGS] = tags
        if joined:
            properties[PROPERTY_KEYS] = joined
        properties[PROPERTY_UNIQ_KEY] = uniq_key
        # UTF-8 takes at most 4 bytes a character (+ names and separators): only a message
        # near the limit is encoded to be measured.
        if sum(len(k) + len(v) + 2 for k, v in properties.items()) * 4 > MAX_PROPERTIES_BYTES:
            _check_properties_size(properties, topic)
        return NewMessage(topic, body, queue_id, properties, message.flag, 0, now_ms)

    def build_batch(self, messages: Sequence[Message], queue_id: int) -> UniformBatch | BuiltBatch:
        """One batch for one topic-queue; no delays (a batch is appended as it is).

        Built as a :class:`localstore.UniformBatch` (columns: no message object is made, and
        each message's properties are written once, as stored), unless the messages' flags
        differ: then as a :class:`BuiltBatch` of messages. Checks each message as
        :meth:`check` does, with the same errors. The put path's per-message cost: keep the
        loop lean."""
        if not messages:
            raise InvalidMessageError("the batch is empty")
        topic = messages[0].topic
        self._check_topic(topic)
        now = time.time_ns() // 1_000_000
        ids = self._ids.next_many(len(messages))
        checked_fields = self._checked_fields
        tags_start, keys_start, uniq_key_start, end = (  # locals: the loop looks them up often
            TAGS_PAIR_START,
            KEYS_PAIR_START,
            UNIQ_KEY_PAIR_START,
            PROPERTY_SEPARATOR,
        )
        bodies: list[bytes] = []
        properties: list[bytes] = []
        all_keys: list[str | None] = []
        all_tags: list[str | None] | None = None
        plain = True  # no user properties so far
        flag = messages[0].flag
        flags_differ = False
        for index, message in enumerate(messages):
            if type(message) is not Message and not isinstance(message, Message):
                raise InvalidMessageError(f"message {index}: expected a sdk.Message")
            if message.topic != topic:
                raise InvalidMessageError(
                    f"a batch goes to one topic: message {index} is for {message.topic}, "
                    f"message 0 for {topic}"
                )
            if message.delay_level or message.deliver_at_ms is not None:
                raise InvalidMessageError(
                    f"message {index}: a batch cannot hold delayed messages; send it alone"
                )
            body, tags, joined = checked_fields(message, topic)
            if message.flag != flag:
                flags_differ = True
            # The stored properties, in the order a message's dict has them: the user's,
            # TAGS, KEYS, UNIQ_KEY.
            if message.properties:
                text = encode_properties(message.properties)
                plain = False
            else:
                text = ""
            if tags:
                text += f"{tags_start}{tags}{end}"
                if all_tags is None:
                    all_tags = [None] * index
                all_tags.append(tags)
            elif all_tags is not None:
                all_tags.append(None)
            if joined:
                text += f"{keys_start}{joined}{end}"
            stored = f"{text}{uniq_key_start}{ids[index]}{end}".encode()
            if len(stored) > MAX_PROPERTIES_BYTES:
                raise _properties_too_large(topic, len(stored))
            bodies.append(body)
            properties.append(stored)
            all_keys.append(joined)
        batch = UniformBatch(
            topic,
            queue_id,
            bodies,
            properties,
            ids,
            all_keys,
            all_tags,
            plain=plain,
            flag=flag,
            born_timestamp=now,
        )
        if not flags_differ:
            return batch
        built = BuiltBatch(batch.messages())
        for made, message in zip(built, messages, strict=True):
            made.flag = message.flag
        built.msg_ids = ids
        return built

    def select_queue(
        self,
        message: Message,
        queue_count: int,
        *,
        sharding_key: str | None = None,
        selector: QueueSelector | None = None,
    ) -> int:
        """The queue for ``message`` (see the module docstring)."""
        if queue_count <= 0:
            raise InvalidMessageError(f"topic {message.topic} has no writable queue")
        if sharding_key is not None:
            if type(sharding_key) is not str:
                raise InvalidMessageError(
                    f"sharding_key must be a str, got {type(sharding_key).__name__} "
                    f"{sharding_key!r} (str() it to shard by its text)"
                )
            return select_by_key(sharding_key, queue_count)
        if selector is not None:
            queue_id = selector(message, queue_count)
            if not 0 <= queue_id < queue_count:
                raise InvalidMessageError(
                    f"the queue selector chose queue {queue_id}, but {message.topic} has queues "
                    f"0-{queue_count - 1}"
                )
            return queue_id
        counter = self._round_robin.get(message.topic)
        if counter is None:
            counter = self._round_robin.setdefault(message.topic, itertools.count())
        return next(counter) % queue_count


def receipts(built: Sequence[NewMessage], result: SendResult) -> SendReceipts:
    """The receipts of a send, or :class:`SendRejectedError` for a refused one."""
    if not result.stored:
        raise SendRejectedError(result.status, result.detail)
    if isinstance(built, UniformBatch):  # read from its columns: no message is made
        ids = cast(Sequence[str], built.uniq_keys)  # every message built here has one
        return SendReceipts(ids, built.topic, built.queue_id, result)
    first = built[0]
    if isinstance(built, BuiltBatch):
        msg_ids = built.msg_ids
    else:
        msg_ids = [message.properties[PROPERTY_UNIQ_KEY] for message in built]
    return SendReceipts(msg_ids, first.topic, first.queue_id, result)


class SendReceipts(Sequence[SendReceipt]):
    """The receipts of one send, a :class:`SendReceipt` per message in the order sent.

    What ``send_batch`` answers: a sequence, not a list (``list(receipts)`` makes one). A
    batch's messages go to one queue with one append, so its receipts share their topic,
    queue, status and store time, and ``queue_offset`` counts up from the first. The receipts
    are made when first read: a producer that does not look at them does not pay for them
    (made eagerly, they would double the objects a batch allocates: one receipt beside each
    message). Until then only the ids and the broker's answer are kept, never the messages.
    Compares equal to a list of the same receipts, as a list does.
    """

    __slots__ = ("_made", "_msg_ids", "_queue_id", "_result", "_topic")

    def __init__(
        self,
        msg_ids: Sequence[str] = (),
        topic: str = "",
        queue_id: int = 0,
        result: SendResult | None = None,
    ):
        """``msg_ids``: the messages' ``UNIQ_KEY``s in the order sent, to ``topic`` and
        ``queue_id``; ``result``: the broker's answer (None only when nothing was sent)."""
        self._msg_ids = msg_ids
        self._topic = topic
        self._queue_id = queue_id
        self._result = result
        # Holds the receipts once made. Threads that read at once may each make them, but
        # list.append is atomic, so all of them hand out the first list appended.
        self._made: list[list[SendReceipt]] = []

    @property
    def msg_ids(self) -> list[str]:
        """The messages' ids (``UNIQ_KEY``), in the order sent."""
        return list(self._msg_ids)

    def _receipts(self) -> list[SendReceipt]:
        made = self._made
        if not made:
            made.append(self._make())
        return made[0]

    def _make(self) -> list[SendReceipt]:
        result = self._result
        if result is None:
            return []
        topic, queue_id, host = self._topic, self._queue_id, result.store_host
        stamp, status, phys = result.store_timestamp, result.status, result.phys_offsets
        base = -1 if result.topic != topic else result.queue_offset  # delayed: no offset yet
        return [
            SendReceipt(
                msg_id,
                topic,
                queue_id,
                base + index if base >= 0 else -1,
                stamp,
                status,
                phys[index] if index < len(phys) else -1,
                host,
            )
            for index, msg_id in enumerate(self._msg_ids)
        ]

    def __len__(self) -> int:
        return len(self._msg_ids)

    @overload
    def __getitem__(self, index: int) -> SendReceipt: ...

    @overload
    def __getitem__(self, index: slice) -> list[SendReceipt]: ...

    def __getitem__(self, index: int | slice) -> SendReceipt | list[SendReceipt]:
        return self._receipts()[index]

    def __iter__(self) -> Iterator[SendReceipt]:
        return iter(self._receipts())

    def __eq__(self, other: object) -> bool:
        if isinstance(other, SendReceipts):
            return self._receipts() == other._receipts()
        if isinstance(other, list):
            return self._receipts() == other
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]  # unhashable, as a list is

    def __repr__(self) -> str:
        return f"SendReceipts({self._receipts()!r})"
