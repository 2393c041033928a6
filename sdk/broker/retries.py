"""Send-back (RocketMQ's ``consumerSendMsgBack``): a message a consumer failed, stored again for
its group to retry later, or in the group's dead-letter queue once its retries ran out.

The copy goes under ``%RETRY%{group}`` (queue 0) with ``reconsume_times + 1`` and delay level
``3 + reconsume_times`` (or the level asked for), keeping ``RETRY_TOPIC`` (its original topic)
and ``ORIGIN_MESSAGE_ID``; once ``reconsume_times`` reaches the maximum (16 by default) it goes
to ``%DLQ%{group}`` instead, and so does one whose consumer asked for no retry (a negative delay
level). Every message stored in a dead-letter queue is said at WARNING: nothing delivers it
again unless someone consumes ``%DLQ%{group}``.

Invariant: a send-back stores a copy and never changes the original; the copy carries one
reconsume more than the count it was sent back with, and one sent back with a count at or past
the limit goes to the dead-letter queue, never to the retry topic. The copy drops ``DELAY``
(its delay is the retry's own) and the producer's stamp (the original alone names it). A record
of the broker's own topics (half, op and scheduled messages) is refused, as is a count whose
copy would not fit the record's signed 32-bit field.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable

from localstore import MessageStore, NewMessage
from localstore.record.codec import (
    PROPERTY_DELAY,
    PROPERTY_ORIGIN_MESSAGE_ID,
    PROPERTY_RETRY_TOPIC,
    PROPERTY_UNIQ_KEY,
    RecordError,
    StoredMessage,
)
from localstore.record.validation import NOT_ALLOWED_TO_SEND
from sdk.broker.schedule import delayed_message, packed_host
from sdk.broker.send_answers import rejected
from sdk.message import PROPERTY_PRODUCER_SEQ, dlq_topic, retry_topic
from sdk.transport.models import SendResult

__all__ = ["DEFAULT_MAX_RECONSUME_TIMES", "Retries"]

log = logging.getLogger(__name__)

DEFAULT_MAX_RECONSUME_TIMES = 16
_RETRY_BASE_LEVEL = 3  # RocketMQ: delay level 3 + reconsume times

# A record's reconsume count is a signed 32-bit field: a copy one count further must fit.
_MAX_RECONSUME_COUNT = 2**31 - 1


class Retries:
    """Sends failed messages back for their group: to the retry topic, delayed, or to the
    dead-letter queue. ``put_system`` stores a message in a system topic (and wakes its
    readers); ``delays`` gives the schedule's delay table in ms and ``max_reconsume_times``
    the broker's limit, each read at every send-back (as the broker's options are)."""

    def __init__(
        self,
        store: MessageStore,
        put_system: Callable[[NewMessage], SendResult],
        *,
        delays: Callable[[], tuple[int, ...]],
        max_reconsume_times: Callable[[], int] = lambda: DEFAULT_MAX_RECONSUME_TIMES,
    ):
        self._store = store
        self._put_system = put_system
        self._delays = delays
        self._max_reconsume_times = max_reconsume_times

    def send_back(
        self,
        group: str,
        phys_offset: int,
        *,
        delay_level: int = 0,
        max_reconsume_times: int | None = None,
        reconsume_times: int = -1,
    ) -> SendResult:
        """Re-store the message at ``phys_offset`` for ``group`` to consume again later, or in
        its dead-letter queue once it was reconsumed ``max_reconsume_times`` times (see the
        module docstring). ``delay_level`` < 0 sends it to the DLQ at once; 0 picks
        ``3 + reconsume_times``. ``reconsume_times`` >= 0 is how often the consumer already
        retried it itself (an orderly consumer retries in place, so the stored count stays
        behind); the copy carries one more."""
        try:
            original = self._store.message_at(phys_offset)
        except RecordError as exc:
            return rejected("MESSAGE_ILLEGAL", f"no message to send back: {exc}")
        if original.topic in NOT_ALLOWED_TO_SEND:  # a half, op or scheduled record
            why = f"the record at {phys_offset} is in the broker's own topic {original.topic}"
            return rejected("MESSAGE_ILLEGAL", f"no message to send back: {why}")
        limit = self._max_reconsume_times()
        if max_reconsume_times is not None and max_reconsume_times >= 0:
            limit = max_reconsume_times
        done = original.reconsume_times if reconsume_times < 0 else reconsume_times
        if done >= _MAX_RECONSUME_COUNT:  # the copy carries one more, in a 32-bit field
            return rejected("MESSAGE_ILLEGAL", f"reconsume times {done} out of range")
        message = _retry_copy(original, done)
        if done >= limit:
            return self._dead_letter(group, message, f"after {done} reconsumes (limit {limit})")
        if delay_level < 0:
            why = f"without a retry, as its consumer asked (delay level {delay_level})"
            return self._dead_letter(group, message, why)
        retry = dataclasses.replace(message, topic=retry_topic(group), queue_id=0)
        level = delay_level or _RETRY_BASE_LEVEL + done
        return self._put_system(delayed_message(retry, level=level, levels=self._delays()))

    def _dead_letter(self, group: str, message: NewMessage, why: str) -> SendResult:
        """Store ``message`` in ``group``'s dead-letter queue, and say so at WARNING with
        ``why`` (its reconsumes ran out, or its consumer sent it there without a retry): nothing
        delivers it again unless someone consumes ``%DLQ%{group}``."""
        dead = dataclasses.replace(message, topic=dlq_topic(group), queue_id=0)
        answer = self._put_system(dead)
        if answer.stored:
            log.warning(
                "message %s of topic %s moved to the dead-letter queue %s of group %s %s",
                message.properties.get(PROPERTY_ORIGIN_MESSAGE_ID),
                message.properties.get(PROPERTY_RETRY_TOPIC, message.topic),
                dead.topic,
                group,
                why,
            )
        return answer


def _retry_copy(original: StoredMessage, reconsumed: int) -> NewMessage:
    properties = dict(original.properties)
    properties.setdefault(PROPERTY_RETRY_TOPIC, original.topic)
    origin = properties.get(PROPERTY_UNIQ_KEY) or original.offset_msg_id
    properties.setdefault(PROPERTY_ORIGIN_MESSAGE_ID, origin)
    properties.pop(PROPERTY_DELAY, None)
    properties.pop(PROPERTY_PRODUCER_SEQ, None)  # the original alone names its stamp
    return NewMessage(
        topic=original.topic,
        body=original.body,
        properties=properties,
        flag=original.flag,
        sys_flag=original.sys_flag,
        born_timestamp=original.born_timestamp,
        born_host=packed_host(original.born_host, original.sys_flag),
        reconsume_times=reconsumed + 1,
    )
