"""Queries of the stored messages by key and by id, answered as stored record bytes.

The store finds the messages (:meth:`localstore.MessageStore.query_by_key`,
:meth:`~localstore.MessageStore.query_by_id`: every hit re-checked against the stored record);
this module copies each found record's bytes out of the commitlog as they lie there, so the
answer crosses the transport seam the way a pull's does (:class:`StoredRecords`), and a client
decodes it with the store's codec. A record that retention deleted between the find and the
copy is left out. A query by key answers at most :data:`MAX_QUERY_COUNT` messages.

A store kept without a key index cannot answer a query by key (nor by UNIQ_KEY): that is an
:class:`~sdk.errors.IllegalStateError` naming the store, not a failure of the broker. A closed
store stays a :class:`~localstore.StoreClosedError` (the transports report an unavailable broker).
"""

from __future__ import annotations

from collections.abc import Iterable

from localstore import MessageStore
from localstore.errors import StoreClosedError, StoreError
from localstore.record.codec import StoredMessage
from sdk.errors import IllegalStateError, InvalidArgumentError
from sdk.transport.models import MAX_QUERY_COUNT, StoredRecords

__all__ = ["query_by_id", "query_by_key"]


def query_by_key(
    store: MessageStore, topic: str, key: str, *, begin_ms: int, end_ms: int, max_count: int
) -> StoredRecords:
    """Messages of ``topic`` whose KEYS hold ``key`` (or whose UNIQ_KEY is ``key``) stored
    within [``begin_ms``, ``end_ms``], newest first, at most ``max_count`` (capped at
    :data:`MAX_QUERY_COUNT`)."""
    if not topic or not key:
        raise InvalidArgumentError("a query by key names a topic and a key (neither empty)")
    if max_count < 1:
        raise InvalidArgumentError(f"max_count must be at least 1, got {max_count}")
    if begin_ms > end_ms:
        raise InvalidArgumentError(f"begin_ms {begin_ms} is after end_ms {end_ms}")
    try:
        found = store.query_by_key(
            topic, key, max_count=min(max_count, MAX_QUERY_COUNT), begin_ms=begin_ms, end_ms=end_ms
        )
    except StoreClosedError:
        raise  # the broker is going away, not a store that cannot be queried
    except StoreError as exc:
        raise IllegalStateError(f"cannot query by key: {exc}") from exc
    return _records(store, found)


def query_by_id(store: MessageStore, message_id: str) -> StoredRecords:
    """The message whose offsetMsgId is ``message_id``, or the messages (of any topic) whose
    UNIQ_KEY is ``message_id``; none when no message has that id."""
    if not message_id:
        raise InvalidArgumentError("a query by id names an id (an offsetMsgId or a UNIQ_KEY)")
    try:
        found = store.query_by_id(message_id)
    except StoreClosedError:
        raise
    except StoreError as exc:
        raise IllegalStateError(f"cannot query by id: {exc}") from exc
    return _records(store, found)


def _records(store: MessageStore, messages: Iterable[StoredMessage]) -> StoredRecords:
    """The stored bytes of ``messages``, end to end (those retention deleted meanwhile left
    out)."""
    parts = []
    for message in messages:
        located = store.commitlog.segment_view(message.phys_offset)
        if located is None:
            continue
        view, start = located
        parts.append(bytes(view[start : start + message.store_size]))
    return StoredRecords(b"".join(parts), len(parts))
