"""Every method of the transport seam as an HTTP call, for the clients: one table that both HTTP
transports (blocking over httpx, asyncio over aiohttp) read, so that no transport writes an
operation out by hand.

A :class:`WireCall` turns a method's arguments into a :class:`WireRequest` (route, query,
body) and its answer's body back into the method's value. The control plane comes from
:data:`sdk.protocol.operations.CONTROL_OPERATIONS` (JSON both ways), the operations that move
messages from :mod:`sdk.protocol.data_plane` (binary bodies). The broker reads the same two
modules, so a route and its shapes are written once.

``idempotent`` says whether a call may be sent again when its outcome is unknown (the
connection broke or timed out after the request left): reads, commits, membership and leases
may; a send may when it carries a :class:`~sdk.transport.models.ProducerStamp` (the broker
answers a resent stamp with its first answer), which the HTTP transports always give it. A call
that is not idempotent is resent only when the broker certainly did not act on it (the
connection was refused, or it answered 503).

Sends may also travel together: :func:`send_many_request` carries several sends' requests, each
built (and stamped) by this table's ``send`` entry, in one ``POST /v1/send-many``
(:mod:`sdk.protocol.send_many`), whose answer
:func:`~sdk.protocol.send_many.decode_send_many_answer` splits into each send's own outcome.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from localstore.record.codec import NewMessage
from sdk.protocol.data_plane import (
    decode_checks_answer,
    decode_records_answer,
    encode_checks_request,
    encode_pull_request,
    encode_query_by_id_request,
    encode_query_by_key_request,
    send_query,
)
from sdk.protocol.operations import CONTROL_OPERATIONS, Operation, decode_answer, encode_request
from sdk.protocol.produce_body import encode_produce_body
from sdk.protocol.pull_body import decode_pull_answer
from sdk.protocol.send_many import (
    SEND_MANY_PATH,
    encode_send_many_body,
)
from sdk.protocol.shapes import SEND_RESULT, load_json
from sdk.transport.models import NO_END_MS, ProducerStamp

__all__ = [
    "CALLS",
    "NOT_IDEMPOTENT",
    "WireCall",
    "WireRequest",
    "send_many_request",
]


@dataclass(frozen=True, slots=True)
class WireRequest:
    """One HTTP request: ``POST path?query`` with ``body`` (JSON unless ``binary``).
    ``hold_ms``: how long the broker may hold it before answering (a long poll), which the
    client adds to its read timeout."""

    path: str
    body: bytes
    query: Mapping[str, str] = field(default_factory=dict)
    binary: bool = False
    hold_ms: int = 0


StampFor = Callable[[Sequence[NewMessage]], ProducerStamp]
"""What gives a send's messages their stamp (the client's producer id and sequence)."""
Encoder = Callable[[Sequence[Any], Mapping[str, Any], StampFor | None], WireRequest]


@dataclass(frozen=True, slots=True)
class WireCall:
    """A transport method as an HTTP call (see the module docstring). ``stamped``: the client
    gives each call a :class:`ProducerStamp` (sends): its ``request`` asks ``stamp_for`` once
    it has bound the call's messages."""

    name: str
    request: Encoder
    answer: Callable[[bytes], Any]
    idempotent: bool
    stamped: bool = False


NOT_IDEMPOTENT = frozenset({"send_back", "create_topic", "update_topic", "delete_topic"})
"""Control calls that act twice when sent twice (a second retry copy; a create then refused
as existing)."""


def _control(operation: Operation) -> WireCall:
    def request(
        args: Sequence[Any], kwargs: Mapping[str, Any], _stamp_for: StampFor | None
    ) -> WireRequest:
        return WireRequest(operation.path, encode_request(operation, args, kwargs))

    return WireCall(
        operation.name,
        request,
        lambda body: decode_answer(operation, body),
        idempotent=operation.name not in NOT_IDEMPOTENT,
    )


def _send_request(
    args: Sequence[Any], kwargs: Mapping[str, Any], stamp_for: StampFor | None
) -> WireRequest:
    (messages,) = _bound(("messages",), args, kwargs)
    stamp = None if stamp_for is None or not messages else stamp_for(messages)
    return WireRequest(
        "/v1/send", encode_produce_body(messages), send_query(messages, stamp), binary=True
    )


def _send_half_request(
    args: Sequence[Any], kwargs: Mapping[str, Any], stamp_for: StampFor | None
) -> WireRequest:
    group, message = _bound(("group", "message"), args, kwargs)
    stamp = None if stamp_for is None else stamp_for([message])
    return WireRequest(
        "/v1/send-half",
        encode_produce_body([message]),
        send_query([message], stamp, group=group),
        binary=True,
    )


def _pull_request(
    args: Sequence[Any], kwargs: Mapping[str, Any], _stamp_for: StampFor | None
) -> WireRequest:
    (batch,) = _bound(("batch",), args, kwargs)
    return WireRequest("/v1/pull", encode_pull_request(batch), hold_ms=batch.wait_ms)


def _checks_request(
    args: Sequence[Any], kwargs: Mapping[str, Any], _stamp_for: StampFor | None
) -> WireRequest:
    group, client_id, wait_ms = _bound(("group", "client_id", "wait_ms"), args, kwargs)
    body = encode_checks_request(group, client_id, wait_ms)
    return WireRequest("/v1/fetch-transaction-checks", body, hold_ms=wait_ms)


def _query_by_key_request(
    args: Sequence[Any], kwargs: Mapping[str, Any], _stamp_for: StampFor | None
) -> WireRequest:
    topic, key = _bound(("topic", "key"), args, _without(kwargs, _QUERY_OPTIONS))
    options = {**_QUERY_OPTIONS, **{k: v for k, v in kwargs.items() if k in _QUERY_OPTIONS}}
    body = encode_query_by_key_request(
        topic, key, options["begin_ms"], options["end_ms"], options["max_count"]
    )
    return WireRequest("/v1/query-by-key", body)


_QUERY_OPTIONS: Mapping[str, int] = {"begin_ms": 0, "end_ms": NO_END_MS, "max_count": 32}
"""The keyword arguments of ``query_by_key`` and their defaults."""


def _query_by_id_request(
    args: Sequence[Any], kwargs: Mapping[str, Any], _stamp_for: StampFor | None
) -> WireRequest:
    (message_id,) = _bound(("message_id",), args, kwargs)
    return WireRequest("/v1/query-by-id", encode_query_by_id_request(message_id))


def _without(kwargs: Mapping[str, Any], names: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in kwargs.items() if k not in names}


def _bound(names: tuple[str, ...], args: Sequence[Any], kwargs: Mapping[str, Any]) -> list[Any]:
    """``args``/``kwargs`` bound to ``names`` (all required, positional or by name)."""
    if len(args) > len(names):
        raise TypeError(f"takes {len(names)} arguments, got {len(args)}")
    values = list(args)
    for name in names[len(args) :]:
        if name not in kwargs:
            raise TypeError(f"missing argument {name!r}")
        values.append(kwargs[name])
    extra = set(kwargs) - set(names[len(args) :])
    if extra:
        raise TypeError(f"unexpected arguments {sorted(extra)}")
    return values


def _send_answer(body: bytes) -> Any:
    return SEND_RESULT.decode(load_json(body, "send answer"), "send answer")


CALLS: Mapping[str, WireCall] = {
    **{name: _control(operation) for name, operation in CONTROL_OPERATIONS.items()},
    "send": WireCall("send", _send_request, _send_answer, idempotent=True, stamped=True),
    "send_half": WireCall(
        "send_half", _send_half_request, _send_answer, idempotent=True, stamped=True
    ),
    "pull": WireCall("pull", _pull_request, decode_pull_answer, idempotent=True),
    "fetch_transaction_checks": WireCall(
        "fetch_transaction_checks", _checks_request, decode_checks_answer, idempotent=True
    ),
    "query_by_key": WireCall(
        "query_by_key", _query_by_key_request, decode_records_answer, idempotent=True
    ),
    "query_by_id": WireCall(
        "query_by_id", _query_by_id_request, decode_records_answer, idempotent=True
    ),
}
"""Every operation of :class:`~sdk.transport.base.BrokerTransport` but ``close`` (which is the
transport's own), by method name."""


def send_many_request(sends: Sequence[WireRequest]) -> WireRequest:
    """One request carrying ``sends`` (requests of the ``send`` entry, stamps and all)."""
    body = encode_send_many_body([(send.query, send.body) for send in sends])
    return WireRequest(SEND_MANY_PATH, body, binary=True)
