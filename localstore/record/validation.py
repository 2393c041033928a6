"""Topic rules (RocketMQ's ``TopicValidator``), with RocketMQ's own error texts.

A topic is 1-127 characters of ``[%|a-zA-Z0-9_-]``; retry and dead-letter topics (``%RETRY%...``,
``%DLQ%...``) may be up to 255. System topics are the store's own: applications may not create
them, and some may not be sent to at all; the store's own services put into them with
``system=True``.
"""

from __future__ import annotations

import re

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
