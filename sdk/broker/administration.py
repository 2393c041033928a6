"""A broker's administration: topics, consumer groups, lag and offset resets.

Every transport's admin calls end here (:attr:`sdk.broker.service.BrokerService.admin`).
Topic configs are the store's ``config/topics.json`` (RocketMQ's ``readQueueNums``,
``writeQueueNums``, ``perm``); offsets are the broker's ``consumerOffset.json``.

Decisions, each kept by one method:

* Queue counts: Quiver's producers and consumers use one count per topic, so an update sets
  read and write queue numbers together. Fewer queues are refused while a queue that would go
  holds messages some group has not consumed (or that no group ever consumed): the writes are
  narrowed first (RocketMQ's procedure: fewer write queues, then fewer read queues once they
  drained), the hidden queues checked, then the reads narrowed; a refusal restores the writes.
  Nothing is deleted: growing the count again shows the queues as they were.
* Permission: RocketMQ's bits (4 read, 2 write, 6 both). Sends to a topic without the write bit
  are refused by the store; the read bit is recorded for RocketMQ (the embedded broker's pulls
  do not check it).
* Deleting a topic removes its config, its consume queues and every group's offsets of it, as
  RocketMQ's ``deleteTopic`` does; its records stay in the commitlog until retention (the key
  index still finds them). The broker's own topics (retry, dead-letter, schedule, transaction
  half, ``rmq_sys_*``...) are refused, and so is a topic a running consumer subscribes to (its
  next send would create the topic again).
* A reset is refused while the group has running consumers (they would overwrite it with their
  next commit: stop them, reset, start them), and for a group the broker knows nothing of (no
  offsets, no members) unless ``create`` says to make it. It is persisted before it answers.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Concatenate, ParamSpec, TypeVar

from localstore import MessageStore
from localstore.record.validation import (
    DLQ_PREFIX,
    RETRY_PREFIX,
    is_system_topic,
    topic_error,
)
from offsetstore.broker_table import ConsumerOffsetTable
from sdk.broker.group_report import build_report, queue_lags, read_snapshot
from sdk.broker.groups import GroupRegistry
from sdk.errors import IllegalStateError, InvalidArgumentError, UnknownGroupError, UnknownTopicError
from sdk.transport.admin_models import GroupInfo, OffsetReset, QueueLag, ResetRequest, TopicInfo
from sdk.transport.models import GroupView

__all__ = ["MAX_ADMIN_QUEUE_COUNT", "BrokerAdministration", "check_name"]

P = ParamSpec("P")
T = TypeVar("T")

MAX_ADMIN_QUEUE_COUNT = 1024  # every consumer of a topic pulls each of its queues
PERMS = frozenset({2, 4, 6})  # write only, read only, read and write


def _one_change_at_a_time(
    method: Callable[Concatenate[BrokerAdministration, P], T],
) -> Callable[Concatenate[BrokerAdministration, P], T]:
    """Run ``method`` under the administration's change lock."""

    def run(admin: BrokerAdministration, /, *args: P.args, **kwargs: P.kwargs) -> T:
        with admin._changing:
            return method(admin, *args, **kwargs)

    functools.update_wrapper(run, method)
    return run


class BrokerAdministration:
    """Topic, group and offset administration over one broker's parts (thread-safe as they
    are)."""

    def __init__(
        self,
        store: MessageStore,
        offsets: ConsumerOffsetTable,
        groups: GroupRegistry,
        group_view: Callable[[str], GroupView],
        live_report: Callable[[str], GroupInfo],
        *,
        broker_name: str,
        root: Path,
        on_topic_gone: Callable[[str, Sequence[int]], None],
    ) -> None:
        self._store = store
        self._offsets = offsets
        self._groups = groups
        self._group_view = group_view
        self._live_report = live_report  # a group this broker has seen, as it sees it now
        self._broker_name = broker_name
        self._root = root
        self._on_topic_gone = on_topic_gone
        # Held by every change (topics, resets): a check and the write it allows are not
        # interleaved with another change's (a narrowing and its restore, say).
        self._changing = threading.Lock()

    # -- topics ------------------------------------------------------------------------------
    def list_topics(self) -> list[TopicInfo]:
        """Every topic of the store, sorted by name (the broker's own ones included)."""
        return [self._topic_info(name) for name in sorted(self._store.topics.topics)]

    def topic(self, name: str) -> TopicInfo:
        if self._store.topics.get(name) is None:
            raise UnknownTopicError(f"topic {name} does not exist in broker {self._broker_name}")
        return self._topic_info(name)

    @_one_change_at_a_time
    def create_topic(self, name: str, queue_count: int, perm: int) -> TopicInfo:
        """Create ``name`` with ``queue_count`` read and write queues; an existing topic is
        refused (change it with :meth:`update_topic`)."""
        _check_user_topic(name)
        _check_queue_count(queue_count)
        _check_perm(perm)
        if self._store.topics.get(name) is not None:
            raise IllegalStateError(f"topic {name} already exists (change it with an update)")
        self._store.set_topic(
            name, read_queue_nums=queue_count, write_queue_nums=queue_count, perm=perm
        )
        return self._topic_info(name)

    @_one_change_at_a_time
    def update_topic(self, name: str, queue_count: int | None, perm: int | None) -> TopicInfo:
        """Change the queue count (read and write) and/or the permission of ``name``."""
        _check_user_topic(name)
        config = self._store.topics.get(name)
        if config is None:
            raise UnknownTopicError(f"topic {name} does not exist in broker {self._broker_name}")
        if perm is not None:
            _check_perm(perm)
        new_perm = config.perm if perm is None else perm
        if queue_count is None:
            read, write = config.read_queue_nums, config.write_queue_nums
        else:
            _check_queue_count(queue_count)
            read = write = queue_count
        store = self._store
        # ``config`` is the store's own object, changed in place by set_topic: keep the old values
        old_read, old_write, old_perm = config.read_queue_nums, config.write_queue_nums, config.perm
        if read < old_read:  # writes narrowed first: nothing new lands there
            store.set_topic(name, read_queue_nums=old_read, write_queue_nums=write, perm=old_perm)
            try:
                self._check_drained(name, range(read, old_read))
            except IllegalStateError:  # refused: the topic stays exactly as it was
                store.set_topic(
                    name, read_queue_nums=old_read, write_queue_nums=old_write, perm=old_perm
                )
                raise
        store.set_topic(name, read_queue_nums=read, write_queue_nums=write, perm=new_perm)
        return self._topic_info(name)

    @_one_change_at_a_time
    def delete_topic(self, name: str) -> list[int]:
        """Delete ``name`` (see the module docstring); answers the ids of the queues whose
        files were removed (those that ever held a message)."""
        if _is_broker_topic(name):
            raise InvalidArgumentError(f"topic {name} is one of the broker's own: not deleted")
        if self._store.topics.get(name) is None and not self._store.queue_ids(name):
            raise UnknownTopicError(f"topic {name} does not exist in broker {self._broker_name}")
        users = self._subscribers(name)
        if users:
            raise IllegalStateError(
                f"topic {name} has running consumers in group(s) {', '.join(users)}: stop them "
                "first (their next send or subscription would create it again)"
            )
        queue_ids = self._store.delete_topic(name)
        for group in self._offsets.groups():
            self._offsets.remove(group, name)
        self._offsets.persist()
        self._on_topic_gone(name, queue_ids)
        return queue_ids

    def _topic_info(self, name: str) -> TopicInfo:
        config = self._store.topics.get(name)
        assert config is not None
        return TopicInfo(
            name,
            config.read_queue_nums,
            config.write_queue_nums,
            config.perm,
            _is_broker_topic(name),
        )

    def _check_drained(self, topic: str, queue_ids: Iterable[int]) -> None:
        """Refuse when a queue of ``queue_ids`` holds messages a group has not consumed."""
        store = self._store
        groups = [g for g in self._offsets.groups() if topic in self._offsets.topics(g)]
        for queue_id in queue_ids:
            low, high = store.min_offset(topic, queue_id), store.max_offset(topic, queue_id)
            if high <= low:
                continue
            if not groups:
                raise IllegalStateError(
                    f"queue {topic}/{queue_id} holds {high - low} message(s) no group has "
                    "consumed: fewer queues would hide them"
                )
            for group in groups:
                committed = self._offsets.offsets(group, topic).get(queue_id, low)
                if committed < high:
                    raise IllegalStateError(
                        f"queue {topic}/{queue_id} holds {high - committed} message(s) group "
                        f"{group} has not consumed: fewer queues would hide them"
                    )

    def _subscribers(self, topic: str) -> list[str]:
        """Groups with a live member subscribed to ``topic``."""
        found = []
        for group in self._groups.groups():
            view = self._group_view(group)
            if any(topic in subs for subs in view.subscriptions.values()):
                found.append(group)
        return found

    # -- groups ------------------------------------------------------------------------------
    def list_groups(self) -> list[GroupInfo]:
        """Every group the broker has members or offsets of, sorted by name (its own too)."""
        names = set(self._groups.groups()) | set(self._offsets.groups())
        reports = (self._report(name) for name in sorted(names))
        # a group whose members all left and which committed nothing is not listed
        return [r for r in reports if r.members or r.queues]

    def describe_group(self, group: str) -> GroupInfo:
        """Members and per-queue lag of ``group``: live when this broker has seen the group,
        else as last recorded (``config/quiverConsumerGroups.json``)."""
        check_name("group", group)
        report = self._report(group)
        if not report.members and not report.queues:
            raise UnknownGroupError(
                f"group {group} has no members or offsets in broker {self._broker_name}"
            )
        return report

    def lag(self, group: str, topic: str | None) -> list[QueueLag]:
        """Per queue: committed offset, bounds and lag of ``group`` on ``topic`` (every queue
        of the topic, whether the group committed or not), or on every topic it subscribes to
        or has offsets of (``topic`` None: an unknown group is refused)."""
        check_name("group", group)
        if topic is None:
            return list(self.describe_group(group).queues)
        self.topic_queue_ids(topic)
        owners = {
            q.queue_id: q.owner
            for q in self._report(group).queues
            if q.topic == topic and q.owner is not None
        }
        return queue_lags(topic, self._offsets.offsets(group, topic), self._store, owners)

    def topic_queue_ids(self, topic: str) -> list[int]:
        """The queues of ``topic`` (stored or configured); an unknown topic is refused."""
        check_name("topic", topic)
        config = self._store.topics.get(topic)
        stored = self._store.queue_ids(topic)
        if config is None and not stored:
            raise UnknownTopicError(
                f"topic {topic} does not exist (it has no queues) in broker {self._broker_name}"
            )
        configured = range(config.read_queue_nums) if config is not None else range(0)
        return sorted(set(stored) | set(configured))

    def _report(self, group: str) -> GroupInfo:
        if group in self._groups.groups():
            return self._live_report(group)
        view, models, as_of_ms = read_snapshot(self._root, group, self._broker_name)
        return build_report(
            group, view, models, self._offsets, self._store, live=False, as_of_ms=as_of_ms
        )

    # -- offsets -----------------------------------------------------------------------------
    @_one_change_at_a_time
    def reset_offsets(
        self, group: str, topic: str, request: ResetRequest, *, create: bool
    ) -> list[OffsetReset]:
        """Move ``group``'s offsets of ``topic`` (see the module docstring); persisted."""
        check_name("group", group)
        queue_ids = self.topic_queue_ids(topic)
        members = self._group_view(group).members
        if members:
            raise IllegalStateError(
                f"group {group} has {len(members)} running consumer(s) ({', '.join(members)}): "
                "stop them first, or their next commit overwrites the reset"
            )
        if not create and not self._offsets.topics(group):
            raise UnknownGroupError(
                f"group {group} has no offsets or members in broker {self._broker_name} "
                "(to create it with these offsets, ask for it: create)"
            )
        before = self._offsets.offsets(group, topic)
        after = self._target_offsets(group, topic, queue_ids, request)
        self._offsets.persist()
        return [OffsetReset(topic, q, before.get(q), offset) for q, offset in after.items()]

    def _target_offsets(
        self, group: str, topic: str, queue_ids: list[int], request: ResetRequest
    ) -> dict[int, int]:
        store, offsets = self._store, self._offsets
        if request.to is not None:
            return offsets.reset(group, topic, request.to, store)
        if request.timestamp_ms is not None:
            return offsets.reset(group, topic, request.timestamp_ms, store)
        wanted = dict(request.offsets or ())
        for queue_id, offset in wanted.items():
            if queue_id not in queue_ids:
                raise InvalidArgumentError(
                    f"topic {topic} has no queue {queue_id} (queues: {queue_ids})"
                )
            low, high = store.min_offset(topic, queue_id), store.max_offset(topic, queue_id)
            if not low <= offset <= high:
                raise InvalidArgumentError(
                    f"offset {offset} is outside queue {topic}/{queue_id}'s [{low}, {high}]"
                )
        offsets.commit_many(group, topic, wanted)
        return dict(sorted(wanted.items()))


def _is_broker_topic(name: str) -> bool:
    return is_system_topic(name) or name.startswith((RETRY_PREFIX, DLQ_PREFIX))


def check_name(kind: str, name: str) -> None:
    """A group or topic name the offset table can hold (non-empty, without ``@``), else
    :class:`InvalidArgumentError` naming it."""
    if not name or "@" in name:
        raise InvalidArgumentError(f"bad {kind} name {name!r} (must be non-empty, without '@')")


def _check_user_topic(name: str) -> None:
    """A topic an administrator may create or change: RocketMQ's rules, not the broker's own."""
    check_name("topic", name)
    if _is_broker_topic(name):
        raise InvalidArgumentError(f"topic {name} is one of the broker's own: not changed")
    why = topic_error(name)
    if why is not None:
        raise InvalidArgumentError(why)


def _check_queue_count(queue_count: int) -> None:
    if isinstance(queue_count, bool) or not 1 <= queue_count <= MAX_ADMIN_QUEUE_COUNT:
        raise InvalidArgumentError(
            f"queue count must be in [1, {MAX_ADMIN_QUEUE_COUNT}], not {queue_count!r}"
        )


def _check_perm(perm: int) -> None:
    if perm not in PERMS:
        raise InvalidArgumentError(
            f"perm must be 6 (read and write), 4 (read only) or 2 (write only), not {perm!r}"
        )
