"""A consumer's offset reads and commits, as steps (:mod:`sdk.transport.steps`).

Clustering: the group's offsets live on the broker. The consumer keeps them in a
:class:`offsetstore.RemoteBrokerOffsetStore`, which decides what a commit sends (memory offsets
plus commits that failed before, by broker) and what a read found (a newer commit of ours still
waiting to land wins); the calls themselves are steps, so the blocking and the asyncio consumer
make them on their own transport. The store is built without a backend (:data:`NO_BACKEND`):
nothing reaches the broker except through these steps.

Broadcasting: the offsets are a local file (:class:`offsetstore.LocalFileOffsetStore`), read and
written at once, with no broker call: under asyncio, that small atomic write runs on the loop.

Invariant: one persist at a time per consumer (two interleaved ones could land an older offset
after a newer one); the push shells run every persist under their control lock. A commit taken
by a persist is either answered by the broker or kept and sent again with the next persist
(failed, or never answered because the persist was stopped); a failed read answers
:data:`offsetstore.READ_FAILED`.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping

from offsetstore import MessageQueue, OffsetStore, ReadOffsetType, RemoteBrokerOffsetStore
from offsetstore.base import ReadResult
from offsetstore.remote_broker import RetryPolicy, is_retriable
from sdk.errors import IllegalStateError, InvalidArgumentError
from sdk.transport.models import QueueStart
from sdk.transport.steps import Call, Pause, Steps

log = logging.getLogger(__name__)

__all__ = ["NO_BACKEND", "persist", "read_committed", "read_starts"]


class _NoBackend:
    """The backend of a consumer's broker offset store: the consumer makes every broker call
    itself (as steps); the store must never try."""

    def query_offset(self, broker_name: str, group: str, topic: str, queue_id: int) -> int | None:
        raise IllegalStateError("a consumer's offsets are read through its steps")

    def commit_offsets(
        self, broker_name: str, group: str, offsets: Mapping[MessageQueue, int]
    ) -> None:
        raise IllegalStateError("a consumer's offsets are committed through its steps")


NO_BACKEND = _NoBackend()


def _retried(call: Call, policy: RetryPolicy) -> Steps[object]:
    """``call``, tried again after the policy's jittered exponential pause on a transient
    failure (a retriable error), at most ``policy.attempts`` times; the last failure is
    raised."""
    for attempt in range(policy.attempts):
        try:
            answer = yield call
        except Exception as exc:
            if attempt + 1 >= policy.attempts or not is_retriable(exc):
                raise
            yield Pause(policy.backoff_s(attempt))
        else:
            return answer
    raise AssertionError("unreachable")  # pragma: no cover


def read_committed(offsets: OffsetStore, queue: MessageQueue) -> Steps[ReadResult]:
    """The group's committed offset of ``queue`` as its store keeps it (recorded in memory):
    an offset, NOT_FOUND, or READ_FAILED (logged)."""
    if not isinstance(offsets, RemoteBrokerOffsetStore):
        return offsets.read_offset(queue, ReadOffsetType.STORE)
    call = Call.of("query_offset", queue.broker_name, offsets.group, queue.topic, queue.queue_id)
    try:
        found = yield from _retried(call, offsets.retry)
    except Exception as exc:
        return offsets.read_failed(queue, exc)
    return offsets.offset_read(queue, found)  # type: ignore[arg-type]


def read_starts(
    offsets: RemoteBrokerOffsetStore,
    queues: list[MessageQueue],
    consume_from: str,
    timestamp_ms: int,
) -> Steps[dict[MessageQueue, int]]:
    """Where the group starts ``queues`` (of one broker), in one ``start_offsets`` call: the
    committed offset as the store keeps it (our own newer commit still waiting to land
    counted), else the ``consume_from`` rule's start, which the broker recorded as the group's
    committed offset. Each is recorded in memory; none when the call failed (logged)."""
    if not queues:
        return {}
    brokers = {queue.broker_name for queue in queues}
    if len(brokers) > 1:
        raise InvalidArgumentError(f"queues of one broker only, got {sorted(brokers)}")
    call = Call.of(
        "start_offsets", queues[0].broker_name, offsets.group, queues, consume_from, timestamp_ms
    )
    try:
        answer: list[QueueStart] = yield from _retried(call, offsets.retry)  # type: ignore[assignment]
    except Exception as exc:
        for queue in queues:
            offsets.read_failed(queue, exc)
        return {}
    starts: dict[MessageQueue, int] = {}
    for queue_start in _answered_starts(offsets.group, queues, answer):
        queue = queue_start.queue
        found = offsets.offset_read(queue, queue_start.committed)
        if not isinstance(found, int) or found < 0:  # never committed: the rule's start
            found = queue_start.start
            offsets.update_offset(queue, found, False)
        starts[queue] = found
    return starts


def _answered_starts(
    group: str, queues: list[MessageQueue], answer: list[QueueStart]
) -> list[QueueStart]:
    """The starts of ``answer`` that stand for the ``queues`` asked, one a queue; what a
    faulty broker adds is left out, logged: a queue not asked for (another member's, say), two
    different starts of one queue, a queue it left out (asked again later: by the pull
    consumer at its next poll, by the push consumer at its next rebalance)."""
    asked = set(queues)
    chosen: dict[MessageQueue, QueueStart] = {}
    conflicting: set[MessageQueue] = set()
    for queue_start in answer:
        queue = queue_start.queue
        if queue not in asked:
            log.warning(
                "the broker answered a start of %s, which group %s did not ask for; ignored",
                queue,
                group,
            )
        elif chosen.setdefault(queue, queue_start) != queue_start:
            conflicting.add(queue)
    for queue in queues:
        if queue in conflicting:
            log.warning(
                "the broker answered two starts of %s for group %s; neither taken", queue, group
            )
            del chosen[queue]
        elif queue not in chosen:
            log.warning("the broker answered no start of %s for group %s", queue, group)
    return list(chosen.values())


def persist(
    offsets: OffsetStore, queues: Iterable[MessageQueue], *, drop_others: bool
) -> Steps[None]:
    """Commit the memory offsets of ``queues`` (and every commit that failed before), in one
    call per broker (a local file store: one write); ``drop_others`` forgets the broker
    store's memory entries of other queues (those no longer owned). What
    the broker does not take, and what was not sent or not answered when the persist was
    stopped (closed generator), is kept for the next persist."""
    if not isinstance(offsets, RemoteBrokerOffsetStore):
        offsets.persist_all(queues)  # one file write; a local store keeps every memory entry
        return
    due = offsets.commits_due(queues, drop_others=drop_others)
    unanswered = dict(due)
    try:
        for broker_name, batch in due.items():
            try:
                commit = Call.of("commit_offsets", broker_name, offsets.group, batch)
                yield from _retried(commit, offsets.retry)
            except Exception as exc:
                offsets.commit_failed(broker_name, batch, exc)
            del unanswered[broker_name]
    finally:  # stopped half-way (a cancelled task, an interrupt): the store alone holds them now
        for batch in unanswered.values():
            offsets.commit_unanswered(batch)
