"""The checks a put makes before it encodes anything: its topic (RocketMQ's rules,
:func:`localstore.record.validation.topic_error`), its batch's shape (one topic-queue), its
bodies' sizes and the store's own property (:data:`PROPERTY_PUT_RECORDS`, which only the store
writes: :mod:`localstore.record.put_mark`). A refused put is answered MESSAGE_ILLEGAL with the
reason and writes nothing.
"""

from __future__ import annotations

from collections.abc import Sequence

from localstore.record.codec import NewMessage
from localstore.record.properties import PROPERTY_PUT_RECORDS
from localstore.record.uniform_batch import UniformBatch, batch_head
from localstore.record.validation import topic_error
from localstore.results import PutResult, PutStatus


def check_batch(
    messages: Sequence[NewMessage], valid_topics: set[str], max_body: int, *, system: bool
) -> PutResult | None:
    """The rejection a put of ``messages`` gets for its topic, bodies or batch shape, or None
    (queue range and encoded sizes are checked by the put itself). ``valid_topics`` caches the
    topics that passed, so a topic is validated once."""
    if not messages:
        return PutResult(PutStatus.MESSAGE_ILLEGAL, "the batch holds no message")
    topic, queue_id, _ = batch_head(messages)
    if topic not in valid_topics:
        problem = topic_error(topic, system=system)
        if problem is not None:
            return PutResult(PutStatus.MESSAGE_ILLEGAL, problem, topic, queue_id)
        valid_topics.add(topic)
    if isinstance(messages, UniformBatch):  # one topic-queue by construction: check bodies
        sizes = list(map(len, messages.bodies))
        if not messages.plain and messages.holds_property(PROPERTY_PUT_RECORDS):
            return _reserved_rejection(topic, queue_id)
        if min(sizes) > 0 and max(sizes) <= max_body:
            return None
        index = next(i for i, size in enumerate(sizes) if not 0 < size <= max_body)
        return _body_rejection(index, sizes[index], max_body, topic, queue_id)
    if len(messages) == 1:
        size = len(messages[0].body)
        if PROPERTY_PUT_RECORDS in messages[0].properties:
            return _reserved_rejection(topic, queue_id)
        if 0 < size <= max_body:
            return None
        return _body_rejection(0, size, max_body, topic, queue_id)
    for index, message in enumerate(messages):  # one pass: the put path's per-message check
        size = len(message.body)
        if PROPERTY_PUT_RECORDS in message.properties:
            return _reserved_rejection(topic, queue_id)
        if message.topic != topic or message.queue_id != queue_id:
            return PutResult(
                PutStatus.MESSAGE_ILLEGAL,
                f"a batch goes to one queue: message {index} is for {message.topic}/"
                f"{message.queue_id}, message 0 for {topic}/{queue_id}",
                topic,
                queue_id,
            )
        if not 0 < size <= max_body:
            return _body_rejection(index, size, max_body, topic, queue_id)
    return None


def _body_rejection(index: int, size: int, max_body: int, topic: str, queue_id: int) -> PutResult:
    what = "is empty" if not size else f"is {size} bytes, over the limit {max_body}"
    return PutResult(
        PutStatus.MESSAGE_ILLEGAL, f"message {index}: the body {what}", topic, queue_id
    )


def _reserved_rejection(topic: str, queue_id: int) -> PutResult:
    return PutResult(
        PutStatus.MESSAGE_ILLEGAL,
        f"property {PROPERTY_PUT_RECORDS} is the store's own: a message may not name it",
        topic,
        queue_id,
    )
