"""What ``quiver read`` and ``quiver query time`` read from a running broker (``--broker URL``):
a topic's queues, and a queue's messages pulled through the transport seam.

A read pulls from an offset and commits nothing: it names a group the broker only uses to
answer the pull (:data:`READ_GROUP`), which joins no group and leaves no committed offset.
Each pull answers the stored records, decoded here as the store's reader decodes them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from sdk.cli.common import EXIT_FAILED, CliError

if TYPE_CHECKING:
    from localstore.record.codec import StoredMessage
    from sdk.admin import Admin
    from sdk.transport.base import BrokerTransport

__all__ = ["READ_GROUP", "broker_queue_ids", "read_broker_queue"]

READ_GROUP = "quiver-cli-read"
"""The group a read's pulls name (a pull commits nothing and joins no group)."""

_READING = frozenset({"FOUND", "NO_MATCHED_MESSAGE"})
"""Pull statuses after which a queue may have more to read."""


def broker_queue_ids(admin: Admin, url: str, topic: str, queue: int | None) -> list[int]:
    """The queues of ``topic`` a command reads (``queue``, or all when None); an unknown topic
    or queue is an error (exit 1), as for a store."""
    found = [info for info in admin.list_topics(include_system=True) if info.name == topic]
    if not found:
        raise CliError(f"topic {topic} does not exist on the broker at {url}", EXIT_FAILED)
    count = found[0].read_queue_nums
    if queue is None:
        return list(range(count))
    if queue >= count:
        raise CliError(
            f"topic {topic} has no queue {queue} (it has {count} read queues)", EXIT_FAILED
        )
    return [queue]


def read_broker_queue(
    transport: BrokerTransport,
    topic: str,
    queue_id: int,
    offset: int,
    *,
    tags: str | None,
    remaining: int,
    batch: int,
    show: Callable[[list[StoredMessage]], None],
) -> int:
    """Pull ``topic``/``queue_id`` from ``offset`` until its end (or ``remaining`` messages,
    -1: all), ``batch`` at a time, handing each batch's messages to ``show``. Returns how
    many were read."""
    from sdk.transport.models import PullBatch, QueuePull, decode_records

    read = 0
    while remaining != 0:
        want = batch if remaining < 0 else min(batch, remaining)
        pull = PullBatch(READ_GROUP, (QueuePull(topic, queue_id, offset, tags),), max_count=want)
        (answer,) = transport.pull(pull).results
        messages = decode_records(answer.raw)  # those before a damaged record, if any
        show(messages)
        read += len(messages)
        if answer.damaged is not None:
            damaged = answer.damaged
            raise CliError(
                f"cannot read {topic}/{queue_id} at offset {damaged.queue_offset}: {damaged.reason}"
            )
        if answer.status not in _READING:
            break
        if remaining > 0:
            remaining -= len(messages)
        if answer.next_offset <= offset:
            break
        offset = answer.next_offset
    return read
