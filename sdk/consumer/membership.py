"""What push and pull consumers share: identity, offset stores, queue assignment, start offsets.

* A client id is ``host@pid@instance#n``: unique per consumer object (``n`` counts them in the
  process); broadcasting consumers name their instance to find their local offsets file again.
* Clustering: the broker keeps the group's offsets (:class:`RemoteBrokerOffsetStore` over the
  transport); each member consumes the share of every subscribed topic's queues that the
  allocation strategy gives it among the group's live members (all members compute the same
  answer from the same sorted lists). Broadcasting: every member consumes every queue and keeps
  its own offsets in a local file (:class:`LocalFileOffsetStore`).
* A queue the group has never committed starts where ``consume_from`` says (RocketMQ's
  ``computePullFromWhere``): LAST_OFFSET = the queue's end (only new messages), FIRST_OFFSET = its
  minimum, TIMESTAMP = the first message stored at or after ``consume_timestamp_ms``. A retry
  topic always starts at its beginning: its messages were meant for this group.
"""

from __future__ import annotations

import enum
import itertools
import os
import socket
import time
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path

from localstore.record.tags import TagFilter
from localstore.record.validation import RETRY_PREFIX, TOPIC_PATTERN, topic_error
from offsetstore import (
    NOT_FOUND,
    LocalFileOffsetStore,
    MessageQueue,
    OffsetStore,
    ReadOffsetType,
    RemoteBrokerOffsetStore,
)
from sdk.consumer.allocate import AllocateSticky, AllocateStrategy
from sdk.errors import InvalidArgumentError
from sdk.transport.base import BrokerTransport
from sdk.transport.models import BROADCASTING, CLUSTERING

__all__ = [
    "ConsumeFrom",
    "MessageModel",
    "assigned_queues",
    "check_group",
    "heartbeat",
    "make_offset_store",
    "new_client_id",
    "start_offset",
]

_instances = itertools.count(1)
MAX_GROUP_LENGTH = 120


class MessageModel(enum.Enum):
    """Who consumes a message: one member of the group (CLUSTERING) or every member
    (BROADCASTING)."""

    CLUSTERING = CLUSTERING
    BROADCASTING = BROADCASTING


class ConsumeFrom(enum.Enum):
    """Where a group starts on a queue it has never committed."""

    LAST_OFFSET = "CONSUME_FROM_LAST_OFFSET"
    FIRST_OFFSET = "CONSUME_FROM_FIRST_OFFSET"
    TIMESTAMP = "CONSUME_FROM_TIMESTAMP"


def check_group(group: str) -> str:
    """``group`` if it is a valid consumer group name (RocketMQ's rules), else ValueError."""
    if not group or not group.strip():
        raise InvalidArgumentError("the specified group is blank")
    if len(group) > MAX_GROUP_LENGTH:
        raise InvalidArgumentError(
            f"the specified group is longer than group max length {MAX_GROUP_LENGTH}"
        )
    if not TOPIC_PATTERN.fullmatch(group):
        raise InvalidArgumentError(
            f"the specified group[{group}] contains illegal characters, allowing only "
            "^[%|a-zA-Z0-9_-]+$"
        )
    return group


def new_client_id(instance_name: str | None = None) -> str:
    """``host@pid@instance#n``: ``n`` numbers the consumers of this process, so two consumers
    never share a client id, even with the same instance name (RocketMQ's duplicate-cid trap:
    both would be given the same queues)."""
    number = next(_instances)
    instance = f"{instance_name}#{number}" if instance_name else str(number)
    return f"{socket.gethostname()}@{os.getpid()}@{instance}"


def make_offset_store(
    model: MessageModel,
    group: str,
    transport: BrokerTransport,
    *,
    instance_name: str,
    offsets_dir: str | Path | None,
    owned: Callable[[], Iterable[MessageQueue]] | None = None,
    auto_persist: bool = True,
) -> OffsetStore:
    """The broker's offsets (clustering) or a local file named by host and instance
    (broadcasting); loaded, and (``auto_persist``) persisting every 5 s. With ``owned``, the
    periodic persist of a clustering consumer commits only the queues it owns at that moment
    (and forgets others)."""
    if model is MessageModel.CLUSTERING:
        remote = RemoteBrokerOffsetStore(group, transport)
        remote.load()
        if auto_persist:
            remote.start_auto_persist(queues=owned)
        return remote
    client = f"{socket.gethostname()}@{instance_name}"
    local = LocalFileOffsetStore(client, group, offsets_dir)
    local.load()
    if auto_persist:
        local.start_auto_persist()
    return local


def heartbeat(
    transport: BrokerTransport,
    group: str,
    client_id: str,
    subscription: Mapping[str, str | None],
    model: MessageModel,
) -> int:
    """Register or refresh this member (``None`` tag expressions sent as ``*``); answers the
    group's generation."""
    expressions = {topic: (expression or "*") for topic, expression in subscription.items()}
    return transport.heartbeat(group, client_id, expressions, model.value)


def topic_queues(transport: BrokerTransport, topic: str) -> list[MessageQueue]:
    broker = transport.broker_name
    return [MessageQueue(topic, broker, q) for q in range(transport.queue_count(topic))]


def assigned_queues(
    transport: BrokerTransport,
    model: MessageModel,
    group: str,
    client_id: str,
    topics: Iterable[str],
    strategy: AllocateStrategy,
) -> set[MessageQueue]:
    """The queues this member consumes now (see the module docstring)."""
    topics = sorted(set(topics))
    if model is MessageModel.BROADCASTING:
        return {q for topic in topics for q in topic_queues(transport, topic)}
    view = transport.group_view(group)
    members = view.members
    if client_id not in members:
        return set()
    if isinstance(strategy, AllocateSticky):  # "previous" = who holds each queue now
        held: dict[str, list[MessageQueue]] = {}
        for queue, owner in view.owners.items():
            held.setdefault(owner, []).append(queue)
        strategy = AllocateSticky(held)
    mine: set[MessageQueue] = set()
    for topic in topics:
        queues = topic_queues(transport, topic)
        if queues:
            mine.update(strategy.allocate(group, client_id, queues, members))
    return mine


DEFAULT_TIMESTAMP_LOOKBACK_MS = 30 * 60_000  # ConsumeFrom.TIMESTAMP without one: RocketMQ's


def check_start(message_model: object, consume_from: object, consume_timestamp_ms: object) -> int:
    """Check where a consumer (push or pull) starts a queue its group never committed, and
    answer the timestamp it uses: ``consume_timestamp_ms``, or 30 minutes ago (RocketMQ's
    default) for TIMESTAMP without one. ValueError naming a setting of the wrong kind."""
    if not isinstance(message_model, MessageModel):
        raise InvalidArgumentError(f"message_model must be a MessageModel, got {message_model!r}")
    if not isinstance(consume_from, ConsumeFrom):
        raise InvalidArgumentError(f"consume_from must be a ConsumeFrom, got {consume_from!r}")
    if type(consume_timestamp_ms) is not int or consume_timestamp_ms < 0:
        raise InvalidArgumentError(
            f"consume_timestamp_ms must be >= 0 (an int), got {consume_timestamp_ms!r}"
        )
    if consume_from is ConsumeFrom.TIMESTAMP and not consume_timestamp_ms:
        return time.time_ns() // 1_000_000 - DEFAULT_TIMESTAMP_LOOKBACK_MS
    return consume_timestamp_ms


def start_offset(
    offsets: OffsetStore,
    transport: BrokerTransport,
    queue: MessageQueue,
    consume_from: ConsumeFrom,
    consume_timestamp_ms: int,
) -> int | None:
    """Where to start pulling ``queue``: the committed offset, or the ``consume_from`` rule for
    a queue never committed; None when the offset could not be read (try again later)."""
    found = offsets.read_offset(queue, ReadOffsetType.STORE)
    if isinstance(found, int) and found >= 0:
        return found
    if found is not NOT_FOUND:
        return None
    topic, queue_id = queue.topic, queue.queue_id
    if topic.startswith(RETRY_PREFIX) or consume_from is ConsumeFrom.FIRST_OFFSET:
        start = transport.min_offset(topic, queue_id)
    elif consume_from is ConsumeFrom.LAST_OFFSET:
        start = transport.max_offset(topic, queue_id)
    else:
        start = transport.offset_for_timestamp(topic, queue_id, consume_timestamp_ms)
    offsets.update_offset(queue, start, False)
    return start


def check_subscription(
    topics: Mapping[str, str | None] | Iterable[str],
) -> dict[str, str | None]:
    """A subscription as ``{topic: tag expression or None}``, checked: at least one topic, each
    a valid name (system topics such as ``%DLQ%`` ones allowed), each expression parsed (a bad
    one fails here, not at the first pull). InvalidArgumentError naming the problem otherwise."""
    if isinstance(topics, str | bytes):
        raise InvalidArgumentError(
            f"give topics as a list or a mapping, not the bare string {topics!r}"
        )
    chosen = dict(topics) if isinstance(topics, Mapping) else dict.fromkeys(topics)
    if not chosen:
        raise InvalidArgumentError("subscribe to at least one topic")
    for topic, expression in chosen.items():
        problem = topic_error(topic, system=True) if isinstance(topic, str) else "not a str"
        if problem is not None:
            raise InvalidArgumentError(f"cannot subscribe to topic {topic!r}: {problem}")
        _check_tag_expression(topic, expression)
    return chosen


def _check_tag_expression(topic: str, expression: str | None) -> None:
    """A bad tag expression fails when subscribing, not at the first poll."""
    try:
        TagFilter.parse(expression)
    except ValueError as exc:
        raise InvalidArgumentError(
            f"cannot subscribe to topic {topic!r}: tag expression {expression!r}: {exc}"
        ) from exc
