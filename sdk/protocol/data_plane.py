"""The operations that move messages, as HTTP requests: produce, half messages, pull,
transaction checks, and the queries by key and by id. Their bodies are binary
(:mod:`sdk.protocol.produce_body`, :mod:`sdk.protocol.pull_body`, and stored records for the
answers of checks and queries); what travels beside a body is in the query string.

``POST /v1/send?topic=T&queue_id=Q&count=N&born_timestamp=MS&born_host=HEX``
    (and ``&producer=ID&sequence=S`` for an idempotent send).
    Body: a produce body of N messages (``application/octet-stream``). Answer: a
    :class:`~sdk.transport.models.SendResult` as JSON. ``born_host`` is the packed host
    (:func:`localstore.record.codec.pack_host`) in hex. ``producer`` and ``sequence`` (both or
    neither) make the send idempotent: :class:`~sdk.transport.models.ProducerStamp`.
``POST /v1/send-many``
    Several sends in one request, answered one by one: :mod:`sdk.protocol.send_many`.
``POST /v1/send-half?group=G&...`` (the rest of the query as a send's, ``count=1``)
    Body: a produce body of one message; the broker stores it as a half message of producer
    group G. Answer: a SendResult as JSON.
``POST /v1/pull``
    Body: a JSON object ``{"group", "pulls": [[topic, queue_id, queue_offset, tags, check],
    ...], "max_count", "max_bytes", "wait_ms", "generation"}`` (``tags`` a tag expression or
    null). Answer: a pull answer body (``application/octet-stream``).
``POST /v1/fetch-transaction-checks``
    Body: ``{"group", "client_id", "wait_ms"}``. Answer: ``COUNT`` (big-endian int32) then the
    half messages' stored records end to end.
``POST /v1/query-by-key``
    Body: ``{"topic", "key", "begin_ms", "end_ms", "max_count"}`` (the last three optional).
    Answer: ``COUNT`` (big-endian int32) then the found messages' stored records end to end
    (:class:`~sdk.transport.models.StoredRecords`).
``POST /v1/query-by-id``
    Body: ``{"message_id"}`` (an offsetMsgId or a UNIQ_KEY). Answer: as a query by key's.

Messages of one request share their topic, queue, born time and host, as a producer's batch
does; :func:`send_query` takes them from the first message. A body or a query that does not
follow this layout is refused with :class:`~sdk.errors.InvalidArgumentError` (or
:class:`~sdk.errors.MalformedBodyError` for the body), naming the problem.
"""

from __future__ import annotations

import re
import struct
from collections.abc import Mapping, Sequence
from typing import Any

import orjson

from localstore.record.codec import SYSFLAG_TRANSACTION_PREPARED, NewMessage
from localstore.record.uniform_batch import DEFAULT_BORN_HOST, UniformBatch
from sdk.errors import InvalidArgumentError, MalformedBodyError
from sdk.protocol.produce_body import decode_produce_body
from sdk.protocol.shapes import INT32_MAX, INT64_MAX, checked_int, checked_str, load_object
from sdk.transport.models import NO_END_MS, ProducerStamp, PullBatch, QueuePull, StoredRecords
from sdk.transport.transaction_models import TransactionChecks

__all__ = [
    "MAX_PULL_QUEUES",
    "decode_checks_answer",
    "decode_checks_request",
    "decode_pull_request",
    "decode_query_by_id_request",
    "decode_query_by_key_request",
    "decode_records_answer",
    "decode_send_query",
    "encode_checks_answer",
    "encode_checks_request",
    "encode_pull_request",
    "encode_query_by_id_request",
    "encode_query_by_key_request",
    "encode_records_answer",
    "encoded_send_query",
    "send_query",
]

MAX_PULL_QUEUES = 4096
"""The most queues one pull may name."""

PRODUCER_ID = re.compile(r"[A-Za-z0-9_.:-]{1,128}")
"""What a producer id may be: it is stored in the log with each idempotent batch."""

_COUNT = struct.Struct(">i")


# -- send and send-half ---------------------------------------------------------------------
def send_query(
    messages: Sequence[NewMessage], stamp: ProducerStamp | None = None, group: str | None = None
) -> dict[str, str]:
    """The query string of a send (or, with ``group``, a send-half) of ``messages``."""
    if not messages:
        raise InvalidArgumentError("a send needs at least one message")
    if isinstance(messages, UniformBatch):
        topic, queue_id = messages.topic, messages.queue_id
        born_timestamp, born_host = messages.born_timestamp, messages.born_host
    else:
        first = messages[0]
        topic, queue_id = first.topic, first.queue_id
        born_timestamp, born_host = first.born_timestamp, first.born_host
        for message in messages:
            if (message.topic, message.queue_id) != (topic, queue_id):
                raise InvalidArgumentError("a send's messages must share one topic and queue")
            if message.sys_flag & ~SYSFLAG_TRANSACTION_PREPARED or message.reconsume_times:
                raise InvalidArgumentError(
                    "a remote send carries body, properties and flag only "
                    f"(message to {topic} has sys_flag {message.sys_flag})"
                )
    return encoded_send_query(
        topic, queue_id, len(messages), stamp, born_timestamp=born_timestamp,
        born_host=born_host, group=group,
    )  # fmt: skip


def encoded_send_query(
    topic: str,
    queue_id: int,
    count: int,
    stamp: ProducerStamp | None,
    *,
    born_timestamp: int,
    born_host: bytes = DEFAULT_BORN_HOST,
    group: str | None = None,
) -> dict[str, str]:
    """The query string of a send of ``count`` messages to ``topic``/``queue_id`` whose
    produce body is already encoded (:func:`send_query` of messages says the same)."""
    query = {
        "topic": topic,
        "queue_id": str(queue_id),
        "count": str(count),
        "born_timestamp": str(born_timestamp),
        "born_host": born_host.hex(),
    }
    if group is not None:
        query["group"] = group
    if stamp is not None:
        query["producer"] = stamp.producer_id
        query["sequence"] = str(stamp.sequence)
    return query


def decode_send_query(
    query: Mapping[str, str], body: bytes | bytearray | memoryview, *, half: bool = False
) -> tuple[Sequence[NewMessage], ProducerStamp | None]:
    """The messages a send's query and body carry, and its producer stamp (None: not
    idempotent). ``half``: a send-half (one message, marked as the producer marks it)."""
    topic = _text(query, "topic")
    if not topic:
        raise InvalidArgumentError("topic: must not be empty")
    queue_id = _number(query, "queue_id", 0, INT32_MAX)
    count = _number(query, "count", 1, INT32_MAX)
    born_timestamp = _number(query, "born_timestamp", 0, INT64_MAX)
    born_host = _host(_text(query, "born_host"))
    messages = decode_produce_body(
        body, topic, queue_id, count=count, born_timestamp=born_timestamp, born_host=born_host
    )
    if half:
        if count != 1:
            raise InvalidArgumentError(f"count: a half message is sent alone, got {count}")
        message = messages[0]
        message.sys_flag |= SYSFLAG_TRANSACTION_PREPARED
        messages = [message]
    return messages, _stamp(query)


def _stamp(query: Mapping[str, str]) -> ProducerStamp | None:
    producer, sequence = query.get("producer"), query.get("sequence")
    if producer is None and sequence is None:
        return None
    if producer is None or sequence is None:
        raise InvalidArgumentError("producer and sequence: give both or neither")
    if not PRODUCER_ID.fullmatch(producer):
        raise InvalidArgumentError(
            f"producer: want 1 to 128 of [A-Za-z0-9_.:-], got {producer!r:.80}"
        )
    return ProducerStamp(producer, _number(query, "sequence", 0, INT64_MAX))


def _text(query: Mapping[str, str], name: str) -> str:
    value = query.get(name)
    if value is None:
        raise InvalidArgumentError(f"{name} is missing")
    return value


def _number(query: Mapping[str, str], name: str, low: int, high: int) -> int:
    text = _text(query, name)
    if not (text.isascii() and text.lstrip("-").isdigit()) or len(text) > 20:
        raise InvalidArgumentError(f"{name}: want an integer, got {text!r:.40}")
    value = int(text)
    if not low <= value <= high:
        raise InvalidArgumentError(f"{name}: want an integer in [{low}, {high}], got {value}")
    return value


def _host(text: str) -> bytes:
    """A packed host: 4 address bytes and a 4-byte port (IPv4), or 16 and 4 (IPv6)."""
    try:
        packed = bytes.fromhex(text)
    except ValueError:
        packed = b""
    if len(packed) not in (8, 20):
        raise InvalidArgumentError(f"born_host: want 16 or 40 hex digits, got {text!r:.60}")
    return packed


# -- pull -------------------------------------------------------------------------------------
def encode_pull_request(batch: PullBatch) -> bytes:
    """The JSON body of a pull of ``batch``."""
    return orjson.dumps(
        {
            "group": batch.group,
            "pulls": [[p.topic, p.queue_id, p.queue_offset, p.tags, p.check] for p in batch.pulls],
            "max_count": batch.max_count,
            "max_bytes": batch.max_bytes,
            "wait_ms": batch.wait_ms,
            "generation": batch.generation,
        }
    )


def decode_pull_request(body: bytes) -> PullBatch:
    """A pull's JSON body back into its :class:`PullBatch`, every field checked."""
    fields = load_object(body, "pull")
    pulls = fields.get("pulls")
    if not isinstance(pulls, list):
        raise InvalidArgumentError("pulls: want a list of [topic, queue_id, offset, tags, check]")
    if len(pulls) > MAX_PULL_QUEUES:
        raise InvalidArgumentError(f"pulls: at most {MAX_PULL_QUEUES} queues, got {len(pulls)}")
    return PullBatch(
        checked_str(fields.get("group"), "group"),
        tuple(_queue_pull(item, f"pulls[{i}]") for i, item in enumerate(pulls)),
        max_count=checked_int(fields.get("max_count", 32), "max_count", 1, INT32_MAX),
        max_bytes=checked_int(fields.get("max_bytes", 4 << 20), "max_bytes", 1, INT32_MAX),
        wait_ms=checked_int(fields.get("wait_ms", 0), "wait_ms", 0, INT32_MAX),
        generation=checked_int(fields.get("generation", -1), "generation", -1, INT64_MAX),
    )


def _queue_pull(item: Any, where: str) -> QueuePull:
    if not isinstance(item, list) or len(item) != 5:
        raise InvalidArgumentError(f"{where}: want [topic, queue_id, offset, tags, check]")
    topic, queue_id, offset, tags, check = item
    if tags is not None and not isinstance(tags, str):
        raise InvalidArgumentError(f"{where} tags: want a tag expression or null")
    if not isinstance(check, bool):
        raise InvalidArgumentError(f"{where} check: want true or false")
    return QueuePull(
        checked_str(topic, f"{where} topic"),
        checked_int(queue_id, f"{where} queue id", 0, INT32_MAX),
        checked_int(offset, f"{where} offset", 0, INT64_MAX),
        tags,
        check,
    )


# -- transaction checks -----------------------------------------------------------------------
def encode_checks_request(group: str, client_id: str, wait_ms: int) -> bytes:
    """The JSON body of a transaction-check fetch."""
    return orjson.dumps({"group": group, "client_id": client_id, "wait_ms": wait_ms})


def decode_checks_request(body: bytes) -> tuple[str, str, int]:
    """A transaction-check fetch's ``(group, client_id, wait_ms)``, checked."""
    fields = load_object(body, "fetch_transaction_checks")
    return (
        checked_str(fields.get("group"), "group"),
        checked_str(fields.get("client_id"), "client_id"),
        checked_int(fields.get("wait_ms", 0), "wait_ms", 0, INT32_MAX),
    )


def encode_checks_answer(checks: TransactionChecks) -> bytes:
    """The binary answer of a transaction-check fetch."""
    return _counted(checks.count, checks.raw)


def decode_checks_answer(body: bytes) -> TransactionChecks:
    """:func:`encode_checks_answer`'s body back into :class:`TransactionChecks`."""
    raw, count = _uncounted(body, "a transaction-check answer")
    return TransactionChecks(raw, count)


# -- queries by key and by id -----------------------------------------------------------------
def encode_query_by_key_request(
    topic: str, key: str, begin_ms: int, end_ms: int, max_count: int
) -> bytes:
    """The JSON body of a query by key."""
    return orjson.dumps(
        {"topic": topic, "key": key, "begin_ms": begin_ms, "end_ms": end_ms, "max_count": max_count}
    )


def decode_query_by_key_request(body: bytes) -> tuple[str, str, int, int, int]:
    """A query by key's ``(topic, key, begin_ms, end_ms, max_count)``, checked."""
    fields = load_object(body, "query_by_key")
    return (
        checked_str(fields.get("topic"), "topic"),
        checked_str(fields.get("key"), "key"),
        checked_int(fields.get("begin_ms", 0), "begin_ms", 0, INT64_MAX),
        checked_int(fields.get("end_ms", NO_END_MS), "end_ms", 0, INT64_MAX),
        checked_int(fields.get("max_count", 32), "max_count", 1, INT32_MAX),
    )


def encode_query_by_id_request(message_id: str) -> bytes:
    """The JSON body of a query by id."""
    return orjson.dumps({"message_id": message_id})


def decode_query_by_id_request(body: bytes) -> str:
    """A query by id's ``message_id``, checked."""
    return checked_str(load_object(body, "query_by_id").get("message_id"), "message_id")


def encode_records_answer(records: StoredRecords) -> bytes:
    """The binary answer of a query (by key or by id)."""
    return _counted(records.count, records.raw)


def decode_records_answer(body: bytes) -> StoredRecords:
    """:func:`encode_records_answer`'s body back into :class:`StoredRecords`."""
    raw, count = _uncounted(body, "a query answer")
    return StoredRecords(raw, count)


def _counted(count: int, raw: bytes) -> bytes:
    """``COUNT`` (big-endian int32), then ``raw``: ``count`` stored records end to end."""
    return _COUNT.pack(count) + bytes(raw)


def _uncounted(body: bytes, what: str) -> tuple[bytes, int]:
    """:func:`_counted`'s records and count, the count checked against the bytes."""
    if len(body) < _COUNT.size:
        raise MalformedBodyError(len(body), f"{what} starts with its count")
    (count,) = _COUNT.unpack_from(body)
    if count < 0 or (count == 0) != (len(body) == _COUNT.size):
        raise MalformedBodyError(0, f"count {count} does not fit {len(body) - 4} record bytes")
    return bytes(body[_COUNT.size :]), count
