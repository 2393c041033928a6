"""The records of transactional messages, in RocketMQ's shapes: half messages, the records a
commit makes, op messages. The layout and the rules that use them are in
:mod:`sdk.broker.transactions`."""

from __future__ import annotations

import dataclasses
import logging

from localstore import NewMessage, StoredMessage
from localstore.record.codec import (
    PROPERTY_REAL_QUEUE_ID,
    PROPERTY_REAL_TOPIC,
    PROPERTY_TAGS,
    PROPERTY_TRANSACTION_PREPARED,
    PROPERTY_UNIQ_KEY,
    PROPERTY_WAIT,
    SYSFLAG_TRANSACTION_COMMIT,
    SYSFLAG_TRANSACTION_MASK,
)
from sdk.broker.schedule import packed_host
from sdk.message import PROPERTY_PRODUCER_SEQ
from sdk.transport.transaction_models import PROPERTY_PRODUCER_GROUP, PROPERTY_TRANSACTION_ID

__all__ = [
    "CHECK_GROUP",
    "HALF_QUEUE",
    "HALF_TOPIC",
    "OP_QUEUE",
    "OP_REMOVE_TAG",
    "OP_TOPIC",
    "committed_message",
    "half_message",
    "op_message",
    "resolved_offsets",
    "transaction_id",
]

log = logging.getLogger(__name__)

HALF_TOPIC = "RMQ_SYS_TRANS_HALF_TOPIC"
OP_TOPIC = "RMQ_SYS_TRANS_OP_HALF_TOPIC"
CHECK_GROUP = "CID_RMQ_SYS_TRANS"
OP_REMOVE_TAG = "d"
HALF_QUEUE = 0
OP_QUEUE = 0
# a producer stamp too: the half record alone names it (sdk.broker.idempotence)
_REMOVED_PROPERTIES = (
    PROPERTY_REAL_TOPIC,
    PROPERTY_REAL_QUEUE_ID,
    PROPERTY_TRANSACTION_PREPARED,
    PROPERTY_PRODUCER_SEQ,
)


def transaction_id(message: StoredMessage) -> str:
    """The transaction a stored half (or committed) message belongs to."""
    properties = message.properties
    return properties.get(PROPERTY_TRANSACTION_ID) or properties.get(PROPERTY_UNIQ_KEY) or ""


def half_message(message: NewMessage, group: str) -> NewMessage:
    """``message`` (for its real topic and queue) as stored under ``RMQ_SYS_TRANS_HALF_TOPIC``
    (see :mod:`sdk.broker.transactions`). ``message`` needs a ``UNIQ_KEY``: the transaction id."""
    properties = dict(message.properties)
    properties[PROPERTY_REAL_TOPIC] = message.topic
    properties[PROPERTY_REAL_QUEUE_ID] = str(message.queue_id)
    properties[PROPERTY_TRANSACTION_PREPARED] = "true"
    properties[PROPERTY_PRODUCER_GROUP] = group
    properties[PROPERTY_TRANSACTION_ID] = properties[PROPERTY_UNIQ_KEY]
    return dataclasses.replace(
        message,
        topic=HALF_TOPIC,
        queue_id=HALF_QUEUE,
        properties=properties,
        sys_flag=message.sys_flag & ~SYSFLAG_TRANSACTION_MASK,
    )


def committed_message(half: StoredMessage) -> NewMessage | None:
    """The record a commit puts into the real topic for ``half`` (None without
    ``REAL_TOPIC``)."""
    properties = dict(half.properties)
    topic = properties.get(PROPERTY_REAL_TOPIC)
    queue = properties.get(PROPERTY_REAL_QUEUE_ID, "0")
    if not topic or not queue.isdigit():
        return None
    for name in _REMOVED_PROPERTIES:
        properties.pop(name, None)
    return NewMessage(
        topic=topic,
        body=half.body,
        queue_id=int(queue),
        properties=properties,
        flag=half.flag,
        sys_flag=(half.sys_flag & ~SYSFLAG_TRANSACTION_MASK) | SYSFLAG_TRANSACTION_COMMIT,
        born_timestamp=half.born_timestamp,
        born_host=packed_host(half.born_host, half.sys_flag),
        reconsume_times=half.reconsume_times,
        prepared_transaction_offset=half.phys_offset,
    )


def op_message(half_queue_offset: int, born_ms: int) -> NewMessage:
    """The op message marking ``half_queue_offset`` resolved, born at ``born_ms`` (epoch ms)."""
    return NewMessage(
        OP_TOPIC,
        str(half_queue_offset).encode(),
        OP_QUEUE,
        {PROPERTY_TAGS: OP_REMOVE_TAG, PROPERTY_WAIT: "false"},
        born_timestamp=born_ms,
    )


def resolved_offsets(op: StoredMessage) -> list[int]:
    """The half queue offsets an op message marks resolved."""
    if op.tags != OP_REMOVE_TAG:
        return []
    found = []
    for part in op.body.decode("ascii", "replace").split(","):
        try:
            found.append(int(part))
        except ValueError:
            log.warning("op message at queue offset %d: bad half offset %r", op.queue_offset, part)
    return found
