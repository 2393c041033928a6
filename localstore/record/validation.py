"""Topic rules (RocketMQ's ``TopicValidator``), with RocketMQ's own error texts.

A topic is 1-127 characters of ``[%|a-zA-Z0-9_-]``; retry and dead-letter topics (``%RETRY%...``,
``%DLQ%...``) may be up to 255. System topics are the store's own: applications may not create
them, and some may not be sent to at all; the store's own services put into them with
``system=True``.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from localstore.record.codec import NewMessage
from localstore.record.uniform_batch import UniformBatch, batch_head
from localstore.results import PutResult, PutStatus

TOPIC_PATTERN = re.compile(r"[%|a-zA-Z0-9_-]+")
MAX_TOPIC_LENGTH = 127
MAX_RETRY_OR_DLQ_TOPIC_LENGTH = 255
RETRY_PREFIX = "%RETRY%"
DLQ_PREFIX = "%DLQ%"
SYSTEM_TOPIC_PREFIX = "rmq_sys_"
SYSTEM_TOPICS = frozenset(
    {
        "TBW102",
        "SCHEDULE_TOPIC_XXXX",
        "BenchmarkTest",
        "RMQ_SYS_TRANS_HALF_TOPIC",
        "RMQ_SYS_TRACE_TOPIC",
        "RMQ_SYS_TRANS_OP_HALF_TOPIC",
        "TRANS_CHECK_MAX_TIME_TOPIC",
        "SELF_TEST_TOPIC",
        "OFFSET_MOVED_EVENT",
        "CHECKPOINT_TOPIC",
    }
)
NOT_ALLOWED_TO_SEND = frozenset(
    {
        "SCHEDULE_TOPIC_XXXX",
        "RMQ_SYS_TRANS_HALF_TOPIC",
        "RMQ_SYS_TRANS_OP_HALF_TOPIC",
        "TRANS_CHECK_MAX_TIME_TOPIC",
        "SELF_TEST_TOPIC",
        "OFFSET_MOVED_EVENT",
    }
)


def is_system_topic(topic: str) -> bool:
    return topic in SYSTEM_TOPICS or topic.startswith(SYSTEM_TOPIC_PREFIX)


def topic_error(topic: str, *, system: bool = False) -> str | None:
    """Why ``topic`` cannot be put to, or None. ``system`` allows the store's own topics."""
    if not topic or not topic.strip():
        return "The specified topic is blank"
    if not TOPIC_PATTERN.fullmatch(topic):
        return (
            f"The specified topic[{topic}] contains illegal characters, allowing only "
            "^[%|a-zA-Z0-9_-]+$"
        )
    long_allowed = topic.startswith((RETRY_PREFIX, DLQ_PREFIX))
    limit = MAX_RETRY_OR_DLQ_TOPIC_LENGTH if long_allowed else MAX_TOPIC_LENGTH
    if len(topic) > limit:
        return f"The specified topic is longer than topic max length {limit}: {len(topic)}"
    if not system:
        if topic in NOT_ALLOWED_TO_SEND:
            return f"Sending message to topic[{topic}] is forbidden."
        if is_system_topic(topic):
            return f"The topic[{topic}] is conflict with system topic."
    return None


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
        if min(sizes) > 0 and max(sizes) <= max_body:
            return None
        index = next(i for i, size in enumerate(sizes) if not 0 < size <= max_body)
        return _body_rejection(index, sizes[index], max_body, topic, queue_id)
    if len(messages) == 1:
        size = len(messages[0].body)
        if 0 < size <= max_body:
            return None
        return _body_rejection(0, size, max_body, topic, queue_id)
    for index, message in enumerate(messages):  # one pass: the put path's per-message check
        size = len(message.body)
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
