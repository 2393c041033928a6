"""How the transport seam's values travel as JSON (orjson): one :class:`Shape` per kind of
value, each a checked pair of functions.

``encode`` turns a Python value into what ``orjson.dumps`` writes; ``decode`` reads it back and
refuses, with :class:`~sdk.errors.InvalidArgumentError` naming the field, anything of the wrong
kind (a broker must answer bad input with a 400 that names the problem, never a 500). Objects
decode with the fields they know and ignore the others (a newer peer may send more).

Integers are Java's: a long (``[-2**63, 2**63 - 1]``) unless narrower; a queue id is an int in
``[0, 2**31 - 1]`` and a committed offset a long in ``[0, 2**63 - 1]``, as the store and the
offset file hold them (a value outside would be taken, then break the broker's files). Queues
travel as ``[topic, broker_name, queue_id]``; a queue's offset as
``[topic, broker_name, queue_id, offset]``; results as objects of their fields. Bytes never
travel as JSON: message batches and pull answers are binary bodies of their own.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import orjson

from offsetstore import MessageQueue
from sdk.errors import InvalidArgumentError
from sdk.transport.admin_models import (
    GroupInfo,
    MemberInfo,
    OffsetReset,
    QueueLag,
    ResetRequest,
    TopicInfo,
)
from sdk.transport.models import GroupView, QueueStart, SendResult
from sdk.transport.transaction_models import EndTransactionResult

__all__ = [
    "BOOL",
    "END_TRANSACTION_RESULT",
    "GROUP_INFO",
    "GROUP_VIEW",
    "INT",
    "INT32",
    "NOTHING",
    "OFFSETS",
    "OFFSET_RESET",
    "OPTIONAL_INT",
    "QUEUES",
    "QUEUE_LAG",
    "QUEUE_SET",
    "QUEUE_STARTS",
    "RESET_REQUEST",
    "SEND_RESULT",
    "STR",
    "STR_MAP",
    "TOPIC_INFO",
    "Shape",
    "checked_int",
    "checked_str",
    "list_of",
    "load_json",
    "load_object",
    "optional",
    "pair",
    "record",
]


@dataclass(frozen=True, slots=True)
class Shape:
    """A kind of value on the wire: ``name`` for messages, its two checked conversions, and its
    JSON Schema (OpenAPI 3.0's dialect), which the broker's ``/openapi.json`` publishes."""

    name: str
    encode: Callable[[Any], Any]
    decode: Callable[[Any, str], Any]  # (the JSON value, the field's name for errors)
    schema: Mapping[str, Any] = dataclasses.field(default_factory=dict)


def _refuse(field: str, shape: str, value: object) -> InvalidArgumentError:
    return InvalidArgumentError(f"{field}: want {shape}, got {type(value).__name__} {value!r:.80}")


INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1  # a Java long
INT32_MAX = 2**31 - 1  # a Java int: queue ids


def load_json(body: bytes, what: str) -> Any:
    """The JSON value of ``body``; InvalidArgumentError saying ``what`` is not JSON."""
    try:
        return orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise InvalidArgumentError(f"{what} is not JSON: {exc}") from exc


def load_object(body: bytes, what: str) -> dict[str, Any]:
    """A request body that must be a JSON object (its parameters), for request ``what``."""
    fields = load_json(body, f"{what}: the body")
    if not isinstance(fields, dict):
        raise InvalidArgumentError(f"{what}: the body must be a JSON object")
    return fields


def checked_int(value: Any, field: str, low: int = INT64_MIN, high: int = INT64_MAX) -> int:
    """``value`` if it is a JSON integer in ``[low, high]``; else refused, naming ``field``."""
    if type(value) is not int:  # a bool is an int to Python, not on the wire
        raise _refuse(field, "an integer", value)
    if not low <= value <= high:
        raise InvalidArgumentError(f"{field}: want an integer in [{low}, {high}], got {value}")
    return value


def checked_str(value: Any, field: str) -> str:
    """``value`` if it is a JSON string; else refused, naming ``field``."""
    if not isinstance(value, str):
        raise _refuse(field, "a string", value)
    return value


def _bool(value: Any, field: str) -> bool:
    if not isinstance(value, bool):
        raise _refuse(field, "true or false", value)
    return value


def _identity(value: Any) -> Any:
    return value


_INT_SCHEMA = {"type": "integer", "format": "int64", "minimum": INT64_MIN, "maximum": INT64_MAX}
_QUEUE_ID_SCHEMA = {"type": "integer", "format": "int32", "minimum": 0, "maximum": INT32_MAX}
_OFFSET_SCHEMA = {"type": "integer", "format": "int64", "minimum": 0, "maximum": INT64_MAX}
INT = Shape("an integer", _identity, checked_int, _INT_SCHEMA)
# a Java int: delay levels, reconsume counts (the store packs them in 4 bytes)
INT32 = Shape(
    "a 32-bit integer",
    _identity,
    lambda v, f: checked_int(v, f, -INT32_MAX - 1, INT32_MAX),
    {"type": "integer", "format": "int32", "minimum": -INT32_MAX - 1, "maximum": INT32_MAX},
)
STR = Shape("a string", _identity, checked_str, {"type": "string"})
BOOL = Shape("true or false", _identity, _bool, {"type": "boolean"})
OPTIONAL_INT = Shape(
    "an integer or null",
    _identity,
    lambda v, f: None if v is None else checked_int(v, f),
    {**_INT_SCHEMA, "nullable": True},
)
NOTHING = Shape("null", lambda _: None, lambda _v, _f: None, {"nullable": True, "enum": [None]})


def _decode_str_map(value: Any, field: str) -> dict[str, str]:
    if not isinstance(value, dict):
        raise _refuse(field, "an object of strings", value)
    return {checked_str(k, field): checked_str(v, f"{field}.{k}") for k, v in value.items()}


STR_MAP = Shape(
    "an object of strings",
    dict,
    _decode_str_map,
    {"type": "object", "additionalProperties": {"type": "string"}},
)


def _encode_queue(queue: MessageQueue) -> list[Any]:
    return [queue.topic, queue.broker_name, queue.queue_id]


def _decode_queue(value: Any, field: str) -> MessageQueue:
    if not isinstance(value, list) or len(value) != 3:
        raise _refuse(field, "[topic, broker_name, queue_id]", value)
    queue_id = checked_int(value[2], f"{field} queue id", 0, INT32_MAX)
    return MessageQueue(checked_str(value[0], field), checked_str(value[1], field), queue_id)


def _decode_queues(value: Any, field: str) -> list[MessageQueue]:
    if not isinstance(value, list):
        raise _refuse(field, "a list of queues", value)
    return [_decode_queue(item, f"{field}[{i}]") for i, item in enumerate(value)]


def _tuple_schema(*items: Mapping[str, Any]) -> dict[str, Any]:
    """A fixed-length JSON list (OpenAPI 3.0 has no per-position items: any of them)."""
    kinds = list({repr(i): i for i in items}.values())
    return {
        "type": "array",
        "items": kinds[0] if len(kinds) == 1 else {"anyOf": kinds},
        "minItems": len(items),
        "maxItems": len(items),
    }


_STR_SCHEMA = {"type": "string"}
_QUEUE_SCHEMA = _tuple_schema(_STR_SCHEMA, _STR_SCHEMA, _QUEUE_ID_SCHEMA)
_QUEUES_SCHEMA = {"type": "array", "items": _QUEUE_SCHEMA}
QUEUES = Shape(
    "a list of [topic, broker_name, queue_id]",
    lambda queues: [_encode_queue(q) for q in queues],
    _decode_queues,
    _QUEUES_SCHEMA,
)
QUEUE_SET = Shape(
    "a list of [topic, broker_name, queue_id]",
    lambda queues: [_encode_queue(q) for q in sorted(queues)],
    lambda value, field: set(_decode_queues(value, field)),
    _QUEUES_SCHEMA,
)


def _decode_offsets(value: Any, field: str) -> dict[MessageQueue, int]:
    if not isinstance(value, list):
        raise _refuse(field, "a list of [topic, broker_name, queue_id, offset]", value)
    offsets: dict[MessageQueue, int] = {}
    for i, item in enumerate(value):
        where = f"{field}[{i}]"
        if not isinstance(item, list) or len(item) != 4:
            raise _refuse(where, "[topic, broker_name, queue_id, offset]", item)
        offsets[_decode_queue(item[:3], where)] = checked_int(
            item[3], f"{where} offset", 0, INT64_MAX
        )
    return offsets


OFFSETS = Shape(
    "a list of [topic, broker_name, queue_id, offset]",
    lambda offsets: [[*_encode_queue(q), o] for q, o in sorted(offsets.items())],
    _decode_offsets,
    {
        "type": "array",
        "items": _tuple_schema(_STR_SCHEMA, _STR_SCHEMA, _QUEUE_ID_SCHEMA, _OFFSET_SCHEMA),
    },
)


def _decode_queue_starts(value: Any, field: str) -> list[QueueStart]:
    if not isinstance(value, list):
        raise _refuse(field, "a list of [topic, broker_name, queue_id, committed, start]", value)
    starts = []
    for i, item in enumerate(value):
        where = f"{field}[{i}]"
        if not isinstance(item, list) or len(item) != 5:
            raise _refuse(where, "[topic, broker_name, queue_id, committed, start]", item)
        committed = None if item[3] is None else checked_int(item[3], f"{where} committed", 0)
        start = checked_int(item[4], f"{where} start", 0)
        starts.append(QueueStart(_decode_queue(item[:3], where), committed, start))
    return starts


QUEUE_STARTS = Shape(
    "a list of [topic, broker_name, queue_id, committed, start]",
    lambda starts: [[*_encode_queue(s.queue), s.committed, s.start] for s in starts],
    _decode_queue_starts,
    {
        "type": "array",
        "items": _tuple_schema(
            _STR_SCHEMA,
            _STR_SCHEMA,
            _QUEUE_ID_SCHEMA,
            {**_OFFSET_SCHEMA, "nullable": True},
            _OFFSET_SCHEMA,
        ),
    },
)


def _object(value: Any, field: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise _refuse(field, "an object", value)
    return value


def optional(shape: Shape) -> Shape:
    """``shape`` or null."""
    return Shape(
        f"{shape.name} or null",
        lambda v: None if v is None else shape.encode(v),
        lambda v, f: None if v is None else shape.decode(v, f),
        {**shape.schema, "nullable": True},
    )


def list_of(shape: Shape, *, as_tuple: bool = False) -> Shape:
    """A JSON list of ``shape``; decoded as a list (or a tuple). A list of :data:`INT` (a
    send's commitlog offsets) is checked in one pass over its items; an item that fails a
    check is named by its index."""
    decode_item, encode_item = shape.decode, shape.encode

    def decode(value: Any, field: str) -> Any:
        if not isinstance(value, list):
            raise _refuse(field, f"a list of {shape.name}", value)
        if shape is INT and _all_int64(value):
            items = list(value)
        else:
            items = [decode_item(item, f"{field}[{i}]") for i, item in enumerate(value)]
        return tuple(items) if as_tuple else items

    def encode(value: Any) -> list[Any]:
        return list(value) if encode_item is _identity else [encode_item(i) for i in value]

    return Shape(
        f"a list of {shape.name}",
        encode,
        decode,
        {"type": "array", "items": shape.schema},
    )


def _all_int64(value: list[Any]) -> bool:
    """Every item of ``value`` is a JSON integer that fits a Java long (no bool)."""
    return not value or (
        set(map(type, value)) == {int} and min(value) >= INT64_MIN and max(value) <= INT64_MAX
    )


def pair(first: Shape, second: Shape) -> Shape:
    """A two-element list, decoded as a tuple."""

    def decode(value: Any, field: str) -> tuple[Any, Any]:
        if not isinstance(value, list) or len(value) != 2:
            raise _refuse(field, f"[{first.name}, {second.name}]", value)
        return first.decode(value[0], f"{field}[0]"), second.decode(value[1], f"{field}[1]")

    return Shape(
        f"[{first.name}, {second.name}]",
        lambda v: [first.encode(v[0]), second.encode(v[1])],
        decode,
        _tuple_schema(first.schema, second.schema),
    )


def record(cls: type[Any], **fields: Shape) -> Shape:
    """A dataclass as a JSON object of ``fields`` (each by its shape). A field the object lacks
    takes the dataclass's default, or is refused as missing; other fields are ignored."""
    defaults: dict[str, Callable[[], Any]] = {}
    for f in dataclasses.fields(cls):
        if f.default is not dataclasses.MISSING:
            defaults[f.name] = functools.partial(_identity, f.default)
        elif f.default_factory is not dataclasses.MISSING:
            defaults[f.name] = f.default_factory  # a new list per object, never a shared one
    name = f"a {cls.__name__}"

    def encode(value: Any) -> dict[str, Any]:
        return {k: shape.encode(getattr(value, k)) for k, shape in fields.items()}

    def decode(value: Any, field: str) -> Any:
        if not isinstance(value, dict):
            raise _refuse(field, name, value)
        kwargs = {}
        for key, shape in fields.items():
            if key in value:
                kwargs[key] = shape.decode(value[key], f"{field}.{key}")
            elif key in defaults:
                kwargs[key] = defaults[key]()
            else:
                raise InvalidArgumentError(f"{field}.{key} is missing ({name})")
        return cls(**kwargs)

    required = [key for key in fields if key not in defaults]
    schema: dict[str, Any] = {
        "type": "object",
        "properties": {key: shape.schema for key, shape in fields.items()},
    }
    if required:
        schema["required"] = required
    return Shape(name, encode, decode, schema)


SEND_RESULT = record(
    SendResult,
    status=STR,
    detail=STR,
    topic=STR,
    queue_id=INT,
    queue_offset=INT,
    phys_offsets=list_of(INT),
    store_host=STR,
    store_timestamp=INT,
)
END_TRANSACTION_RESULT = record(
    EndTransactionResult, status=STR, detail=STR, topic=STR, queue_id=INT, queue_offset=INT
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
        owned[_decode_queue(item[:3], where)] = checked_str(item[3], where)
    counts = _object(fields.get("queue_counts", {}), f"{field}.queue_counts")
    return GroupView(
        checked_int(fields.get("generation"), f"{field}.generation"),
        tuple(checked_str(m, f"{field}.members") for m in members),
        {c: _decode_str_map(s, f"{field}.subscriptions.{c}") for c, s in subscriptions.items()},
        owned,
        {t: checked_int(n, f"{field}.queue_counts.{t}", 0, INT32_MAX) for t, n in counts.items()},
    )


def _encode_group_view(view: GroupView) -> dict[str, Any]:
    encoded = {
        "generation": view.generation,
        "members": list(view.members),
        "subscriptions": {c: dict(s) for c, s in view.subscriptions.items()},
        "owners": [[*_encode_queue(q), owner] for q, owner in sorted(view.owners.items())],
    }
    if view.queue_counts:  # a rebalance view's; a plain group view's answer stays as it was
        encoded["queue_counts"] = dict(view.queue_counts)
    return encoded


GROUP_VIEW = Shape(
    "a group view",
    _encode_group_view,
    _decode_group_view,
    {
        "type": "object",
        "required": ["generation"],
        "properties": {
            "generation": _INT_SCHEMA,
            "members": {"type": "array", "items": _STR_SCHEMA},
            "subscriptions": {"type": "object", "additionalProperties": STR_MAP.schema},
            "owners": {
                "type": "array",
                "items": _tuple_schema(_STR_SCHEMA, _STR_SCHEMA, _QUEUE_ID_SCHEMA, _STR_SCHEMA),
            },
            "queue_counts": {"type": "object", "additionalProperties": _QUEUE_ID_SCHEMA},
        },
    },
)


# -- administration (sdk.transport.admin_models) ------------------------------------------------
def _decode_reset_target(value: Any, field: str) -> str:
    if value not in ("earliest", "latest"):
        raise _refuse(field, '"earliest" or "latest"', value)
    return str(value)


TOPIC_INFO = record(
    TopicInfo, name=STR, read_queue_nums=INT, write_queue_nums=INT, perm=INT, system=BOOL
)
QUEUE_LAG = record(
    QueueLag,
    topic=STR,
    queue_id=INT,
    owner=optional(STR),
    committed=OPTIONAL_INT,
    min_offset=INT,
    max_offset=INT,
)
GROUP_INFO = record(
    GroupInfo,
    group=STR,
    live=BOOL,
    as_of_ms=INT,
    generation=INT,
    members=list_of(
        record(
            MemberInfo,
            client_id=STR,
            message_model=STR,
            subscriptions=list_of(pair(STR, STR), as_tuple=True),
            queues=list_of(STR, as_tuple=True),
        ),
        as_tuple=True,
    ),
    queues=list_of(QUEUE_LAG, as_tuple=True),
    system=BOOL,
)
RESET_REQUEST = record(
    ResetRequest,
    to=optional(
        Shape(
            '"earliest" or "latest"',
            _identity,
            _decode_reset_target,
            {"type": "string", "enum": ["earliest", "latest"]},
        )
    ),
    timestamp_ms=OPTIONAL_INT,
    offsets=optional(list_of(pair(INT, INT), as_tuple=True)),
)
OFFSET_RESET = record(OffsetReset, topic=STR, queue_id=INT, previous=OPTIONAL_INT, offset=INT)
