"""Several sends in one request: ``POST /v1/send-many``. An HTTP transport carries in one such
request the sends issued while its previous request was in flight
(:mod:`sdk.transport.coalesce`), so that concurrent senders pay one request, not one each.

Body (every integer big-endian)::

    off  size  field
      0     4  HEAD_BYTES  H, the length of the head (a signed int32)
      4     H  HEAD        a JSON list with one object per part: the part's ``/v1/send`` query
                           fields as strings (topic, queue_id, count, born_timestamp,
                           born_host; producer and sequence for an idempotent part) and
                           ``bytes``, the length of its produce body (an integer)
    4+H   ...  the parts' produce bodies (:mod:`sdk.protocol.produce_body`) end to end, in
               the head's order, nothing after them

Answer (JSON): a list with one item per part, in order: ``{"result": SendResult}`` for a part
the broker took (stored, or refused with a status, as ``/v1/send`` answers 200), or
``{"error": {code, message, retriable}, "http_status": S}`` for a part ``/v1/send`` would have
refused with that error answer of status S (:mod:`sdk.protocol.errors`). A part's error fails
that part alone; each part keeps ``/v1/send``'s idempotence (its stamp is checked against the
producer windows on its own). A body that does not follow the layout, or names more than
:data:`MAX_PARTS` parts, is refused whole (400, naming the problem).
"""

from __future__ import annotations

import struct
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import orjson

from sdk.errors import InvalidArgumentError, MalformedBodyError
from sdk.protocol.shapes import SEND_RESULT, load_json
from sdk.transport.models import SendResult

__all__ = [
    "MAX_PARTS",
    "SEND_MANY_PATH",
    "PartError",
    "decode_send_many_answer",
    "decode_send_many_body",
    "encode_send_many_answer",
    "encode_send_many_body",
]

SEND_MANY_PATH = "/v1/send-many"
MAX_PARTS = 1024
"""The most parts one request may carry."""

_HEAD_BYTES = struct.Struct(">i")
_BYTES = "bytes"


@dataclass(frozen=True, slots=True)
class PartError:
    """A part refused as ``/v1/send`` refuses with an error answer: its HTTP status and its
    ``{code, message, retriable}`` object."""

    http_status: int
    error: Mapping[str, Any]


def encode_send_many_body(parts: Sequence[tuple[Mapping[str, str], bytes]]) -> bytes:
    """The body of a send-many of ``parts``: each a send's query and its produce body."""
    head = orjson.dumps([{**query, _BYTES: len(body)} for query, body in parts])
    return b"".join([_HEAD_BYTES.pack(len(head)), head, *(body for _query, body in parts)])


def decode_send_many_body(body: bytes) -> list[tuple[dict[str, str], memoryview]]:
    """Each part's query fields and produce body (a view of ``body``), the framing checked."""
    if len(body) < _HEAD_BYTES.size:
        raise MalformedBodyError(len(body), "a send-many body starts with its head's length")
    (head_bytes,) = _HEAD_BYTES.unpack_from(body)
    start = _HEAD_BYTES.size + head_bytes
    if head_bytes < 2 or start > len(body):
        raise MalformedBodyError(0, f"head length {head_bytes} does not fit {len(body)} bytes")
    head = load_json(body[_HEAD_BYTES.size : start], "the send-many head")
    if not isinstance(head, list) or not head:
        raise InvalidArgumentError("the send-many head: want a non-empty list of parts")
    if len(head) > MAX_PARTS:
        raise InvalidArgumentError(
            f"the send-many head: at most {MAX_PARTS} parts, got {len(head)}"
        )
    view = memoryview(body)
    parts: list[tuple[dict[str, str], memoryview]] = []
    for index, fields in enumerate(head):
        query, size = _part_head(fields, index)
        if start + size > len(body):
            raise MalformedBodyError(start, f"part {index}: {size} bytes run past the body's end")
        parts.append((query, view[start : start + size]))
        start += size
    if start != len(body):
        raise MalformedBodyError(start, f"{len(body) - start} bytes follow the last part")
    return parts


def _part_head(fields: Any, index: int) -> tuple[dict[str, str], int]:
    where = f"the send-many head, part {index}"
    if not isinstance(fields, dict):
        raise InvalidArgumentError(f"{where}: want an object of the send's query fields")
    query = dict(fields)
    size = query.pop(_BYTES, None)
    if type(size) is not int or size < 0:
        raise InvalidArgumentError(f"{where}: bytes: want the length of its produce body")
    for name, value in query.items():
        if not isinstance(value, str):
            raise InvalidArgumentError(f"{where}: {name}: want a string, as in a send's query")
    return query, size


def encode_send_many_answer(outcomes: Sequence[SendResult | PartError]) -> bytes:
    """The answer of a send-many: one item per part, in order."""
    return orjson.dumps(
        [
            {"error": dict(o.error), "http_status": o.http_status}
            if isinstance(o, PartError)
            else {"result": SEND_RESULT.encode(o)}
            for o in outcomes
        ]
    )


def decode_send_many_answer(body: bytes, parts: int) -> list[SendResult | PartError]:
    """:func:`encode_send_many_answer`'s items back, checked to be one per part."""
    items = load_json(body, "the send-many answer")
    if not isinstance(items, list) or len(items) != parts:
        raise InvalidArgumentError(f"the send-many answer: want a list of {parts} items")
    outcomes: list[SendResult | PartError] = []
    for index, item in enumerate(items):
        where = f"the send-many answer, part {index}"
        if isinstance(item, dict) and "result" in item:
            outcomes.append(SEND_RESULT.decode(item["result"], where))
        elif isinstance(item, dict) and type(item.get("http_status")) is int:
            outcomes.append(PartError(item["http_status"], item.get("error") or {}))
        else:
            raise InvalidArgumentError(f"{where}: want a result or an error")
    return outcomes
