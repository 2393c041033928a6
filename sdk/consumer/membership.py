"""What push and pull consumers share: identity, offset stores, queue assignment, start offsets.

* A client id is ``host@pid@instance#n``: unique per consumer object (``n`` counts them in the
  process); broadcasting consumers name their instance to find their local offsets file again.
* Clustering: the broker keeps the group's offsets (:class:`RemoteBrokerOffsetStore`, read and
  committed as steps); each member consumes the share of every subscribed topic's queues that the
  allocation strategy gives it among the group's live members (all members compute the same
  answer from the same sorted lists). Broadcasting: every member consumes every queue and keeps
  its own offsets in a local file (:class:`LocalFileOffsetStore`).
* What talks to the broker here is written as steps (:mod:`sdk.transport.steps`): each shell,
  blocking or asyncio, runs them on its own transport.
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
from collections.abc import Iterable, Mapping
from pathlib import Path

from localstore.record.tags import TagFilter
from localstore.record.validation import TOPIC_PATTERN, topic_error
from offsetstore import (
    NOT_FOUND,
    LocalFileOffsetStore,
    MessageQueue,
    OffsetStore,
    RemoteBrokerOffsetStore,
)
from sdk.consumer.allocate import AllocateSticky, AllocateStrategy
from sdk.consumer.offset_steps import NO_BACKEND, read_committed, read_starts
from sdk.errors import InvalidArgumentError
from sdk.transport.models import (
    BROADCASTING,
    CLUSTERING,
    CONSUME_FROM_FIRST_OFFSET,
    CONSUME_FROM_LAST_OFFSET,
    CONSUME_FROM_TIMESTAMP,
    GroupView,
    start_bound,
)
from sdk.transport.steps import Call, Steps

__all__ = [
    "ConsumeFrom",
    "MessageModel",
    "assigned_queues",
    "check_group",
    "heartbeat",
    "make_offset_store",
    "new_client_id",
    "start_offset",
    "start_offsets",
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

    LAST_OFFSET = CONSUME_FROM_LAST_OFFSET
    FIRST_OFFSET = CONSUME_FROM_FIRST_OFFSET
    TIMESTAMP = CONSUME_FROM_TIMESTAMP


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
    *,
    instance_name: str,
    offsets_dir: str | Path | None,
) -> OffsetStore:
    """The broker's offsets (clustering: :class:`RemoteBrokerOffsetStore`, whose reads and
    commits the consumer makes as steps, :mod:`sdk.consumer.offset_steps`) or a local file named
    by host and instance (broadcasting), loaded. Nothing persists on its own: the consumer
    persists (periodically, and at once where it must)."""
    if model is MessageModel.CLUSTERING:
        return RemoteBrokerOffsetStore(group, NO_BACKEND)
    client = f"{socket.gethostname()}@{instance_name}"
    local = LocalFileOffsetStore(client, group, offsets_dir)
    local.load()
    return local


def heartbeat(
    group: str,
    client_id: str,
    subscription: Mapping[str, str | None],
    model: MessageModel,
) -> Steps[int]:
    """Register or refresh this member (``None`` tag expressions sent as ``*``); answers the
    group's generation."""
    expressions = {topic: (expression or "*") for topic, expression in subscription.items()}
    generation: int = yield Call.of("heartbeat", group, client_id, expressions, model.value)
    return generation


def topic_queues(broker_name: str, topic: str) -> Steps[list[MessageQueue]]:
    """Every queue of ``topic`` on broker ``broker_name``."""
    count: int = yield Call.of("queue_count", topic)
    return [MessageQueue(topic, broker_name, q) for q in range(count)]


def assigned_queues(
    broker_name: str,
    model: MessageModel,
    group: str,
    client_id: str,
    topics: Iterable[str],
    strategy: AllocateStrategy,
    heartbeat_generation: int,
) -> Steps[tuple[int, set[MessageQueue]]]:
    """The group's generation and the queues this member consumes at it (see the module
    docstring), from one ``rebalance_view`` call: the group's members and the topics' queue
    counts as the broker sees them now. The generation is the view's, not the member's own
    heartbeat's (``heartbeat_generation``): a member that joined with others at once allocated
    among all it saw, and a pull's answer at that generation does not send it round again. A
    clustering member missing from the view answers the heartbeat's generation instead, so its
    next pull comes back at once and it joins again."""
    topics = sorted(set(topics))
    view: GroupView = yield Call.of("rebalance_view", group, topics)
    queues_of = {
        topic: [MessageQueue(topic, broker_name, q) for q in range(view.queue_counts.get(topic, 0))]
        for topic in topics
    }
    if model is MessageModel.BROADCASTING:
        return view.generation, {queue for queues in queues_of.values() for queue in queues}
    members = view.members
    if client_id not in members:  # the broker forgot it since its heartbeat (a restart, say):
        # the heartbeat's generation is not the view's, so the next pull comes back at once and
        # the member joins again
        return heartbeat_generation, set()
    if isinstance(strategy, AllocateSticky):  # "previous" = who holds each queue now
        held: dict[str, list[MessageQueue]] = {}
        for queue, owner in view.owners.items():
            held.setdefault(owner, []).append(queue)
        strategy = AllocateSticky(held)
    mine: set[MessageQueue] = set()
    for queues in queues_of.values():
        if queues:
            mine.update(strategy.allocate(group, client_id, queues, members))
    return view.generation, mine


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
    queue: MessageQueue,
    consume_from: ConsumeFrom,
    consume_timestamp_ms: int,
) -> Steps[int | None]:
    """Where to start pulling ``queue``: the committed offset, or the ``consume_from`` rule for
    a queue never committed (recorded in ``offsets``); None when the offset could not be read
    (try again later)."""
    found = yield from read_committed(offsets, queue)
    if isinstance(found, int) and found >= 0:
        return found
    if found is not NOT_FOUND:
        return None
    topic, queue_id = queue.topic, queue.queue_id
    bound = start_bound(topic, consume_from.value)
    timestamp = (consume_timestamp_ms,) if bound == "offset_for_timestamp" else ()
    start: int = yield Call.of(bound, topic, queue_id, *timestamp)
    offsets.update_offset(queue, start, False)
    return start


def start_offsets(
    offsets: OffsetStore,
    queues: Iterable[MessageQueue],
    consume_from: ConsumeFrom,
    consume_timestamp_ms: int,
) -> Steps[dict[MessageQueue, int]]:
    """Where to start pulling each of ``queues`` (a queue whose offset could not be read is
    left out: try again later), recorded in ``offsets``. The broker's offsets (clustering): one
    ``start_offsets`` call for them all, in which the broker records the ``consume_from`` start
    of a queue never committed; local ones (broadcasting): :func:`start_offset` per queue, and
    the caller persists them."""
    queues = sorted(queues)
    if not isinstance(offsets, RemoteBrokerOffsetStore):
        found: dict[MessageQueue, int] = {}
        for queue in queues:
            start = yield from start_offset(offsets, queue, consume_from, consume_timestamp_ms)
            if start is not None:
                found[queue] = start
        return found
    return (yield from read_starts(offsets, queues, consume_from.value, consume_timestamp_ms))


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
