"""How the transport seam's values travel as JSON (orjson): one :class:`Shape` per kind of
value, each a checked pair of functions.

``encode`` turns a Python value into what ``orjson.dumps`` writes; ``decode`` reads it back and
refuses, with :class:`~sdk.errors.InvalidArgumentError` naming the field, anything of the wrong
kind (a broker must answer bad input with a 400 that names the problem, never a 500). Objects
decode with the fields they know and ignore the others (a newer peer may send more).

Queues travel as ``[topic, broker_name, queue_id]``; a queue's offset as
``[topic, broker_name, queue_id, offset]``; results as objects of their fields. Bytes never
travel as JSON: message batches and pull answers are binary bodies of their own.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from offsetstore import MessageQueue
from sdk.errors import InvalidArgumentError
from sdk.transport.models import GroupView, SendResult
from sdk.transport.transaction_models import EndTransactionResult

__all__ = [
    "BOOL",
    "END_TRANSACTION_RESULT",
    "GROUP_VIEW",
    "INT",
    "NOTHING",
    "OFFSETS",
    "OPTIONAL_INT",
    "QUEUES",
    "QUEUE_SET",
    "SEND_RESULT",
    "STR",
    "STR_MAP",
    "Shape",
]


@dataclass(frozen=True, slots=True)
class Shape:
    """A kind of value on the wire: ``name`` for messages, and its two checked conversions."""

    name: str
    encode: Callable[[Any], Any]
    decode: Callable[[Any, str], Any]  # (the JSON value, the field's name for errors)


def _refuse(field: str, shape: str, value: object) -> InvalidArgumentError:
    return InvalidArgumentError(f"{field}: want {shape}, got {type(value).__name__} {value!r:.80}")


def _int(value: Any, field: str) -> int:
    if type(value) is not int:
        raise _refuse(field, "an integer", value)
    return value


def _str(value: Any, field: str) -> str:
    if not isinstance(value, str):
        raise _refuse(field, "a string", value)
    return value


def _bool(value: Any, field: str) -> bool:
    if not isinstance(value, bool):
        raise _refuse(field, "true or false", value)
    return value


def _identity(value: Any) -> Any:
    return value


INT = Shape("an integer", _identity, _int)
STR = Shape("a string", _identity, _str)
BOOL = Shape("true or false", _identity, _bool)
OPTIONAL_INT = Shape(
    "an integer or null", _identity, lambda v, f: None if v is None else _int(v, f)
)
NOTHING = Shape("null", lambda _: None, lambda _v, _f: None)


def _decode_str_map(value: Any, field: str) -> dict[str, str]:
    if not isinstance(value, dict):
        raise _refuse(field, "an object of strings", value)
    return {_str(k, field): _str(v, f"{field}.{k}") for k, v in value.items()}


STR_MAP = Shape("an object of strings", dict, _decode_str_map)


def _encode_queue(queue: MessageQueue) -> list[Any]:
    return [queue.topic, queue.broker_name, queue.queue_id]


def _decode_queue(value: Any, field: str) -> MessageQueue:
    if not isinstance(value, list) or len(value) != 3:
        raise _refuse(field, "[topic, broker_name, queue_id]", value)
    return MessageQueue(_str(value[0], field), _str(value[1], field), _int(value[2], field))


def _decode_queues(value: Any, field: str) -> list[MessageQueue]:
    if not isinstance(value, list):
        raise _refuse(field, "a list of queues", value)
    return [_decode_queue(item, f"{field}[{i}]") for i, item in enumerate(value)]


QUEUES = Shape(
    "a list of [topic, broker_name, queue_id]",
    lambda queues: [_encode_queue(q) for q in queues],
    _decode_queues,
)
QUEUE_SET = Shape(
    "a list of [topic, broker_name, queue_id]",
    lambda queues: [_encode_queue(q) for q in sorted(queues)],
    lambda value, field: set(_decode_queues(value, field)),
)


def _decode_offsets(value: Any, field: str) -> dict[MessageQueue, int]:
    if not isinstance(value, list):
        raise _refuse(field, "a list of [topic, broker_name, queue_id, offset]", value)
    offsets: dict[MessageQueue, int] = {}
    for i, item in enumerate(value):
        where = f"{field}[{i}]"
        if not isinstance(item, list) or len(item) != 4:
            raise _refuse(where, "[topic, broker_name, queue_id, offset]", item)
        offsets[_decode_queue(item[:3], where)] = _int(item[3], where)
    return offsets


OFFSETS = Shape(
    "a list of [topic, broker_name, queue_id, offset]",
    lambda offsets: [[*_encode_queue(q), o] for q, o in sorted(offsets.items())],
    _decode_offsets,
)


def _object(value: Any, field: str) -> Mapping[str, Any]:
    if not isinstance(value, dict):
        raise _refuse(field, "an object", value)
    return value


def _decode_send_result(value: Any, field: str) -> SendResult:
    fields = _object(value, field)
    phys_offsets = fields.get("phys_offsets", [])
    if not isinstance(phys_offsets, list):
        raise _refuse(f"{field}.phys_offsets", "a list of integers", phys_offsets)
    return SendResult(
        _str(fields.get("status"), f"{field}.status"),
        _str(fields.get("detail", ""), f"{field}.detail"),
        _str(fields.get("topic", ""), f"{field}.topic"),
        _int(fields.get("queue_id", 0), f"{field}.queue_id"),
        _int(fields.get("queue_offset", -1), f"{field}.queue_offset"),
        [_int(o, f"{field}.phys_offsets") for o in phys_offsets],
        _str(fields.get("store_host", ""), f"{field}.store_host"),
        _int(fields.get("store_timestamp", 0), f"{field}.store_timestamp"),
    )


SEND_RESULT = Shape(
    "a send result",
    lambda r: {
        "status": r.status,
        "detail": r.detail,
        "topic": r.topic,
        "queue_id": r.queue_id,
        "queue_offset": r.queue_offset,
        "phys_offsets": list(r.phys_offsets),
        "store_host": r.store_host,
        "store_timestamp": r.store_timestamp,
    },
    _decode_send_result,
)


def _decode_end_result(value: Any, field: str) -> EndTransactionResult:
    fields = _object(value, field)
    return EndTransactionResult(
        _str(fields.get("status"), f"{field}.status"),
        _str(fields.get("detail", ""), f"{field}.detail"),
        _str(fields.get("topic", ""), f"{field}.topic"),
        _int(fields.get("queue_id", 0), f"{field}.queue_id"),
        _int(fields.get("queue_offset", -1), f"{field}.queue_offset"),
    )


END_TRANSACTION_RESULT = Shape(
    "a transaction end result",
    lambda r: {
        "status": r.status,
        "detail": r.detail,
        "topic": r.topic,
        "queue_id": r.queue_id,
        "queue_offset": r.queue_offset,
    },
    _decode_end_result,
)


def _decode_group_view(value: Any, field: str) -> GroupView:
    fields = _object(value, field)
    members = fields.get("members", [])
    if not isinstance(members, list):
        raise _refuse(f"{field}.members", "a list of client ids", members)
    subscriptions = _object(fields.get("subscriptions", {}), f"{field}.subscriptions")
    owners = fields.get("owners", [])
    if not isinstance(owners, list):
        raise _refuse(f"{field}.owners", "a list of [topic, broker_name, queue_id, owner]", owners)
    owned: dict[MessageQueue, str] = {}
    for i, item in enumerate(owners):
        where = f"{field}.owners[{i}]"
        if not isinstance(item, list) or len(item) != 4:
            raise _refuse(where, "[topic, broker_name, queue_id, owner]", item)
        owned[_decode_queue(item[:3], where)] = _str(item[3], where)
    return GroupView(
        _int(fields.get("generation"), f"{field}.generation"),
        tuple(_str(m, f"{field}.members") for m in members),
        {c: _decode_str_map(s, f"{field}.subscriptions.{c}") for c, s in subscriptions.items()},
        owned,
    )


GROUP_VIEW = Shape(
    "a group view",
    lambda v: {
        "generation": v.generation,
        "members": list(v.members),
        "subscriptions": {c: dict(s) for c, s in v.subscriptions.items()},
        "owners": [[*_encode_queue(q), owner] for q, owner in sorted(v.owners.items())],
    },
    _decode_group_view,
)
