"""The consumer groups' committed offsets as the broker answers them: a queue's committed
offset, where a group starts the queues it takes (RocketMQ's ``computePullFromWhere``, made by
the broker), and commits.

The offsets are kept in ``{root}/config/consumerOffset.json`` (RocketMQ's file, a
:class:`~offsetstore.broker_table.ConsumerOffsetTable`); this module decides what goes in it.

Invariants:

* A start never overwrites a committed offset: a queue never committed is started by the
  ``consume_from`` rule and that start is recorded at once (so a restart does not skip what
  arrives meanwhile), but only where the queue still has no offset, so a commit or a reset that
  lands between the read and the record wins.
* A request naming an unknown rule or a queue id past its topic's queue count records nothing.
* No group keeps offsets of a topic the store deleted: what a delete interrupted between the
  store's part and the table's left behind is removed when the broker opens
  (:func:`forget_offsets_of_deleted_topics`), or a topic re-created with that name would start
  its groups at the old topic's offsets and skip its first messages.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence

from localstore import MessageStore
from offsetstore import MessageQueue
from offsetstore.broker_table import ConsumerOffsetTable
from sdk.errors import InvalidArgumentError
from sdk.transport.models import CONSUME_FROM_RULES, QueueStart, start_bound

__all__ = ["GroupOffsets", "forget_offsets_of_deleted_topics"]

log = logging.getLogger(__name__)


class GroupOffsets:
    """Queries, starts and commits of the groups' offsets in ``table``, over ``store``'s
    queues; ``queue_count`` answers a topic's read queue count (the broker's
    :meth:`~sdk.broker.service.BrokerService.queue_count`)."""

    def __init__(
        self,
        store: MessageStore,
        table: ConsumerOffsetTable,
        queue_count: Callable[[str], int],
    ):
        self._store = store
        self._table = table
        self._queue_count = queue_count

    def query(self, group: str, topic: str, queue_id: int) -> int | None:
        """The group's committed offset of a queue (0 for a young queue, see
        :meth:`ConsumerOffsetTable.query`), or None when it has none."""
        found = self._table.query(group, topic, queue_id, zero_if_young=False)
        return found if isinstance(found, int) else None

    def starts(
        self, group: str, queues: Sequence[MessageQueue], consume_from: str, timestamp_ms: int
    ) -> list[QueueStart]:
        """Where ``group`` starts each of ``queues`` (RocketMQ's ``computePullFromWhere``, made
        by the broker so a member needs one call for all its new queues): the committed offset,
        or for a queue never committed the ``consume_from`` rule's (the queue's end, its
        minimum, or the first message stored at or after ``timestamp_ms``; a retry topic from
        its minimum), recorded as the group's committed offset at once, so a restart does not
        skip what arrives meanwhile (unless a commit or a reset recorded one in between: it
        wins). An unknown rule, or a queue id past the topic's queue count, is refused
        (InvalidArgumentError) before anything is recorded."""
        if consume_from not in CONSUME_FROM_RULES:
            raise InvalidArgumentError(
                f"consume_from must be one of {sorted(CONSUME_FROM_RULES)},"
                f" not {consume_from!r:.60}"
            )
        counts = {topic: self._queue_count(topic) for topic in {q.topic for q in queues}}
        for queue in queues:
            if queue.queue_id >= counts[queue.topic]:
                raise InvalidArgumentError(
                    f"{queue.topic} has no queue {queue.queue_id}: it has {counts[queue.topic]}"
                )
        committed = {q: self.query(group, q.topic, q.queue_id) for q in queues}
        rule_starts: dict[str, dict[int, int]] = {}
        for queue, offset in committed.items():
            if offset is None:
                start = self._rule_start(queue, consume_from, timestamp_ms)
                rule_starts.setdefault(queue.topic, {})[queue.queue_id] = start
        # recorded only where still absent: a commit or a reset that came meanwhile wins
        now = {
            topic: self._table.commit_absent(group, topic, starts)
            for topic, starts in rule_starts.items()
        }
        return [
            QueueStart(
                queue, offset, now[queue.topic][queue.queue_id] if offset is None else offset
            )
            for queue, offset in committed.items()
        ]

    def _rule_start(self, queue: MessageQueue, consume_from: str, timestamp_ms: int) -> int:
        """The offset the rule starts a never-committed queue at (the broker's call named by
        :func:`~sdk.transport.models.start_bound`, as the client's own rule makes: the broker
        answers ``min_offset``, ``max_offset`` and ``offset_for_timestamp`` from the store's
        calls of those names)."""
        topic, queue_id = queue.topic, queue.queue_id
        bound = start_bound(topic, consume_from)
        timestamp = (timestamp_ms,) if bound == "offset_for_timestamp" else ()
        start: int = getattr(self._store, bound)(topic, queue_id, *timestamp)
        return start

    def commit(self, group: str, offsets: Mapping[MessageQueue, int]) -> None:
        """Record ``offsets`` as ``group``'s committed offsets (one step per topic)."""
        by_topic: dict[str, dict[int, int]] = {}
        for queue, offset in offsets.items():
            by_topic.setdefault(queue.topic, {})[queue.queue_id] = offset
        for topic, queues in by_topic.items():
            self._table.commit_many(group, topic, queues)


def forget_offsets_of_deleted_topics(store: MessageStore, table: ConsumerOffsetTable) -> None:
    """Groups' offsets of a topic the store deleted (a tombstone, no config, no queue) are
    what a delete interrupted between the store's part and the offset table's left behind:
    removed (and said at WARNING), or a topic re-created with that name would start its
    groups at the old topic's offsets and skip its first messages."""
    topics = store.topics
    gone = [
        name for name in topics.deleted if topics.get(name) is None and not store.queue_ids(name)
    ]
    removed = []
    for name in gone:
        removed += [f"{g}@{name}" for g in table.groups() if table.remove(g, name)]
    if removed:
        log.warning(
            "removing the offsets of deleted topics that a delete left behind: %s",
            ", ".join(removed),
        )
        table.persist()
