"""The operations of the transport seam as HTTP requests: one table, read by both sides.

Each :class:`Operation` is one method of :class:`~sdk.transport.base.BrokerTransport` (the same
name, the same parameters): its route, each parameter's :mod:`~sdk.protocol.shapes` shape, and
its answer's. A client encodes a call with :func:`encode_request` (what a
:class:`~sdk.transport.steps.Call` names is enough: the method and its arguments) and reads the
answer with :func:`decode_answer`; the broker decodes the request with :func:`decode_request`,
calls its service, and encodes the answer with :func:`encode_answer`. An operation is therefore
written once, here, not once per transport.

On the wire, the control plane is RPC over HTTP: ``POST /v1/<operation>`` (underscores as
dashes) with a JSON object of the parameters, by name, and the answer as a JSON value (``null``
for none); errors are :mod:`sdk.protocol.errors` answers. A request missing a required
parameter, or carrying one of the wrong kind, is refused with
:class:`~sdk.errors.InvalidArgumentError` naming it; parameters a peer does not know are
ignored. The operations that move messages (send, pull, half messages, transaction checks)
carry binary bodies and are not in this table.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import orjson

from sdk.errors import ArgumentTypeError, InvalidArgumentError
from sdk.protocol.shapes import (
    BOOL,
    END_TRANSACTION_RESULT,
    GROUP_INFO,
    GROUP_VIEW,
    INT,
    INT32,
    NOTHING,
    OFFSET_RESET,
    OFFSETS,
    OPTIONAL_INT,
    QUEUE_LAG,
    QUEUE_SET,
    QUEUE_STARTS,
    QUEUES,
    RESET_REQUEST,
    SEND_RESULT,
    STR,
    STR_MAP,
    TOPIC_INFO,
    Shape,
    list_of,
    load_json,
    load_object,
    optional,
)

__all__ = [
    "CONTROL_OPERATIONS",
    "Operation",
    "Param",
    "decode_answer",
    "decode_request",
    "encode_answer",
    "encode_request",
]

_REQUIRED: Any = object()


@dataclass(frozen=True, slots=True)
class Param:
    """A parameter: its name (as the transport method names it), its shape, and its default
    (``keyword`` parameters follow the method's ``*``)."""

    name: str
    shape: Shape
    default: Any = _REQUIRED
    keyword: bool = False

    @property
    def required(self) -> bool:
        return self.default is _REQUIRED


@dataclass(frozen=True, slots=True)
class Operation:
    """One transport method as an HTTP request (see the module docstring)."""

    name: str
    params: tuple[Param, ...]
    answer: Shape

    @property
    def path(self) -> str:
        return "/v1/" + self.name.replace("_", "-")


def _op(name: str, answer: Shape, *params: Param) -> Operation:
    return Operation(name, params, answer)


def _p(name: str, shape: Shape) -> Param:
    return Param(name, shape)


def _kw(name: str, shape: Shape, default: Any) -> Param:
    return Param(name, shape, default, keyword=True)


_GROUP = _p("group", STR)
_CLIENT = _p("client_id", STR)
_TOPIC = _p("topic", STR)
_QUEUE_ID = _p("queue_id", INT)

CONTROL_OPERATIONS: Mapping[str, Operation] = {
    op.name: op
    for op in (
        _op("queue_count", INT, _TOPIC),
        _op("min_offset", INT, _TOPIC, _QUEUE_ID),
        _op("max_offset", INT, _TOPIC, _QUEUE_ID),
        _op("offset_for_timestamp", INT, _TOPIC, _QUEUE_ID, _p("timestamp_ms", INT)),
        _op(
            "query_offset",
            OPTIONAL_INT,
            _p("broker_name", STR),
            _GROUP,
            _TOPIC,
            _QUEUE_ID,
        ),
        _op("commit_offsets", NOTHING, _p("broker_name", STR), _GROUP, _p("offsets", OFFSETS)),
        _op(
            "start_offsets",
            QUEUE_STARTS,
            _p("broker_name", STR),
            _GROUP,
            _p("queues", QUEUES),
            _p("consume_from", STR),
            _p("timestamp_ms", INT),
        ),
        _op(
            "heartbeat",
            INT,
            _GROUP,
            _CLIENT,
            _p("subscriptions", STR_MAP),
            _p("message_model", STR),
        ),
        _op("unregister", NOTHING, _GROUP, _CLIENT),
        _op("lock_queues", QUEUE_SET, _GROUP, _CLIENT, _p("queues", QUEUES)),
        _op("unlock_queues", NOTHING, _GROUP, _CLIENT, _p("queues", QUEUES)),
        _op("group_view", GROUP_VIEW, _GROUP),
        _op("rebalance_view", GROUP_VIEW, _GROUP, _p("topics", list_of(STR))),
        _op(
            "send_back",
            SEND_RESULT,
            _GROUP,
            _p("phys_offset", INT),
            _kw("delay_level", INT32, 0),
            _kw("max_reconsume_times", INT32, -1),
            _kw("reconsume_times", INT32, -1),
        ),
        # -- administration
        _op("list_topics", list_of(TOPIC_INFO)),
        _op("create_topic", TOPIC_INFO, _p("name", STR), _p("queue_count", INT), _p("perm", INT)),
        _op(
            "update_topic",
            TOPIC_INFO,
            _p("name", STR),
            _kw("queue_count", OPTIONAL_INT, _REQUIRED),
            _kw("perm", OPTIONAL_INT, _REQUIRED),
        ),
        _op("delete_topic", list_of(INT), _p("name", STR)),
        _op("list_groups", list_of(GROUP_INFO)),
        _op("describe_group", GROUP_INFO, _GROUP),
        _op("group_lag", list_of(QUEUE_LAG), _GROUP, _p("topic", optional(STR))),
        _op(
            "reset_offsets",
            list_of(OFFSET_RESET),
            _GROUP,
            _TOPIC,
            _p("request", RESET_REQUEST),
            _kw("create", BOOL, _REQUIRED),
        ),
        _op(
            "end_transaction",
            END_TRANSACTION_RESULT,
            _GROUP,
            _p("half_phys_offset", INT),
            _p("transaction_id", STR),
            _p("verdict", STR),
            _kw("from_check", BOOL, False),
        ),
    )
}
"""Every control-plane method of the transport seam, by name (administration included)."""


def encode_request(
    operation: Operation, args: Sequence[Any] = (), kwargs: Mapping[str, Any] | None = None
) -> bytes:
    """The JSON body of a call to ``operation`` with ``args`` and ``kwargs`` (bound as the
    transport method binds them; TypeError-like :class:`~sdk.errors.ArgumentTypeError` for a
    call the method would refuse)."""
    kwargs = dict(kwargs or {})
    positional = [p for p in operation.params if not p.keyword]
    if len(args) > len(positional):
        raise ArgumentTypeError(
            f"{operation.name} takes {len(positional)} positional argument(s), got {len(args)}"
        )
    fields: dict[str, Any] = {}
    for param, value in zip(positional, args, strict=False):
        fields[param.name] = param.shape.encode(value)
    for param in operation.params:
        if param.name in kwargs:
            if param.name in fields:
                raise ArgumentTypeError(f"{operation.name} got {param.name} twice")
            fields[param.name] = param.shape.encode(kwargs.pop(param.name))
        elif param.name not in fields and param.default is _REQUIRED:
            raise ArgumentTypeError(f"{operation.name} is missing {param.name}")
    if kwargs:
        raise ArgumentTypeError(f"{operation.name} takes no {', '.join(sorted(kwargs))}")
    return orjson.dumps(fields)


def decode_request(operation: Operation, body: bytes) -> tuple[list[Any], dict[str, Any]]:
    """A request body back into the method's ``(args, kwargs)``; a body that is not a JSON
    object, a missing required parameter, or one of the wrong kind is refused, naming it."""
    fields = load_object(body, operation.name)
    args: list[Any] = []
    kwargs: dict[str, Any] = {}
    for param in operation.params:
        if param.name in fields:
            value = param.shape.decode(fields[param.name], param.name)
        elif param.default is _REQUIRED:
            raise InvalidArgumentError(f"{operation.name}: {param.name} is missing")
        else:
            value = param.default
        if param.keyword:
            kwargs[param.name] = value
        else:
            args.append(value)
    return args, kwargs


def encode_answer(operation: Operation, value: Any) -> bytes:
    """The JSON body of ``operation``'s answer."""
    return orjson.dumps(operation.answer.encode(value))


def decode_answer(operation: Operation, body: bytes) -> Any:
    """``operation``'s answer from its JSON body; a malformed one is refused, naming it."""
    value = load_json(body, f"{operation.name}: the answer")
    return operation.answer.decode(value, f"{operation.name} answer")
