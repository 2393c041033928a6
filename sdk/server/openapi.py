"""``GET /openapi.json``: the broker's HTTP API as an OpenAPI 3.0 document, built from the
protocol's tables (:data:`sdk.protocol.operations.CONTROL_OPERATIONS` and their shapes'
schemas, and the data plane of :mod:`sdk.protocol.data_plane`), so it cannot drift from what
the broker serves. Clients, fuzzers (schemathesis) and people read it.
"""

from __future__ import annotations

from typing import Any

from sdk._version import __version__
from sdk.protocol.data_plane import MAX_PULL_QUEUES
from sdk.protocol.operations import CONTROL_OPERATIONS, Operation
from sdk.protocol.send_many import SEND_MANY_PATH
from sdk.protocol.shapes import INT32_MAX, INT64_MAX, SEND_RESULT
from sdk.transport.models import MAX_QUERY_COUNT

__all__ = ["openapi_document"]

_ERROR = {
    "type": "object",
    "required": ["code", "message", "retriable"],
    "properties": {
        "code": {"type": "string"},
        "message": {"type": "string"},
        "retriable": {"type": "boolean"},
    },
}
_ERRORS = {
    status: {
        "description": text,
        "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}},
    }
    for status, text in (
        ("400", "Bad input (the message names the problem)"),
        ("404", "Unknown topic or group"),
        ("409", "Refused in the broker's present state"),
        ("413", "Request body over the broker's limit"),
        ("503", "The broker is closing or cannot serve now (retriable)"),
    )
}
_BINARY = {"application/octet-stream": {"schema": {"type": "string", "format": "binary"}}}


def _json_body(schema: dict[str, Any]) -> dict[str, Any]:
    return {"required": True, "content": {"application/json": {"schema": schema}}}


def _answer(description: str, content: dict[str, Any]) -> dict[str, Any]:
    return {"200": {"description": description, "content": content}, **_ERRORS}


def _control(operation: Operation) -> dict[str, Any]:
    properties = {p.name: dict(p.shape.schema) for p in operation.params}
    schema: dict[str, Any] = {"type": "object", "properties": properties}
    required = [p.name for p in operation.params if p.required]
    if required:
        schema["required"] = required
    return {
        "post": {
            "operationId": operation.name,
            "requestBody": _json_body(schema),
            "responses": _answer(
                "The answer", {"application/json": {"schema": dict(operation.answer.schema)}}
            ),
        }
    }


def _query(name: str, schema: dict[str, Any], required: bool = True) -> dict[str, Any]:
    return {"name": name, "in": "query", "required": required, "schema": schema}


_INT = {"type": "integer", "minimum": 0, "maximum": INT64_MAX}
_SEND_QUERY = [
    _query("topic", {"type": "string", "minLength": 1}),
    _query("queue_id", {"type": "integer", "minimum": 0, "maximum": INT32_MAX}),
    _query("count", {"type": "integer", "minimum": 1, "maximum": INT32_MAX}),
    _query("born_timestamp", _INT),
    _query("born_host", {"type": "string", "pattern": "^([0-9a-fA-F]{16}|[0-9a-fA-F]{40})$"}),
    _query("producer", {"type": "string", "pattern": "^[A-Za-z0-9_.:-]{1,128}$"}, False),
    _query("sequence", _INT, False),
]
_PRODUCE_BODY = {
    "required": True,
    "description": "Messages in RocketMQ's MessageBatch encoding (see sdk.protocol.produce_body)",
    "content": _BINARY,
}
_SEND_ANSWER = {"application/json": {"schema": dict(SEND_RESULT.schema)}}
_SEND_MANY_ANSWER = {
    "application/json": {
        "schema": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {
                    "result": dict(SEND_RESULT.schema),
                    "error": {"$ref": "#/components/schemas/Error"},
                    "http_status": {"type": "integer"},
                },
            },
        }
    }
}
_PULL_REQUEST = {
    "type": "object",
    "required": ["group", "pulls"],
    "properties": {
        "group": {"type": "string"},
        "pulls": {
            "type": "array",
            "maxItems": MAX_PULL_QUEUES,
            "items": {
                "type": "array",
                "minItems": 5,
                "maxItems": 5,
                "description": "[topic, queue_id, queue_offset, tags or null, check]",
                "items": {},
            },
        },
        "max_count": {"type": "integer", "minimum": 1, "maximum": INT32_MAX},
        "max_bytes": {"type": "integer", "minimum": 1, "maximum": INT32_MAX},
        "wait_ms": {"type": "integer", "minimum": 0, "maximum": INT32_MAX},
        "generation": {"type": "integer", "minimum": -1, "maximum": INT64_MAX},
    },
}
_CHECKS_REQUEST = {
    "type": "object",
    "required": ["group", "client_id"],
    "properties": {
        "group": {"type": "string"},
        "client_id": {"type": "string"},
        "wait_ms": {"type": "integer", "minimum": 0, "maximum": INT32_MAX},
    },
}

_QUERY_BY_KEY_REQUEST = {
    "type": "object",
    "required": ["topic", "key"],
    "properties": {
        "topic": {"type": "string"},
        "key": {"type": "string"},
        "begin_ms": _INT,
        "end_ms": _INT,
        "max_count": {
            "type": "integer",
            "minimum": 1,
            "maximum": INT32_MAX,
            "description": f"at most this many messages (capped at {MAX_QUERY_COUNT})",
        },
    },
}
_QUERY_BY_ID_REQUEST = {
    "type": "object",
    "required": ["message_id"],
    "properties": {"message_id": {"type": "string", "description": "an offsetMsgId or a UNIQ_KEY"}},
}
_RECORDS_ANSWER = "COUNT (int32) then the found messages' stored records"


def _query_route(operation_id: str, schema: dict[str, Any]) -> dict[str, Any]:
    return {
        "post": {
            "operationId": operation_id,
            "requestBody": _json_body(schema),
            "responses": _answer(_RECORDS_ANSWER, _BINARY),
        }
    }


def _data_plane() -> dict[str, Any]:
    return {
        "/v1/send": {
            "post": {
                "operationId": "send",
                "parameters": _SEND_QUERY,
                "requestBody": _PRODUCE_BODY,
                "responses": _answer("Where the messages were stored", _SEND_ANSWER),
            }
        },
        SEND_MANY_PATH: {
            "post": {
                "operationId": "send_many",
                "requestBody": {
                    "required": True,
                    "description": "Several sends' query fields and produce bodies "
                    "(see sdk.protocol.send_many)",
                    "content": _BINARY,
                },
                "responses": _answer(
                    "One answer per part: a send's result or its error", _SEND_MANY_ANSWER
                ),
            }
        },
        "/v1/send-half": {
            "post": {
                "operationId": "send_half",
                "parameters": [_query("group", {"type": "string"}), *_SEND_QUERY],
                "requestBody": _PRODUCE_BODY,
                "responses": _answer("Where the half message was stored", _SEND_ANSWER),
            }
        },
        "/v1/pull": {
            "post": {
                "operationId": "pull",
                "requestBody": _json_body(_PULL_REQUEST),
                "responses": _answer(
                    "Each queue's answer and records (see sdk.protocol.pull_body)", _BINARY
                ),
            }
        },
        "/v1/fetch-transaction-checks": {
            "post": {
                "operationId": "fetch_transaction_checks",
                "requestBody": _json_body(_CHECKS_REQUEST),
                "responses": _answer("COUNT (int32) then the half messages' records", _BINARY),
            }
        },
        "/v1/query-by-key": _query_route("query_by_key", _QUERY_BY_KEY_REQUEST),
        "/v1/query-by-id": _query_route("query_by_id", _QUERY_BY_ID_REQUEST),
    }


def _plain_get(operation_id: str, description: str, content_type: str) -> dict[str, Any]:
    return {
        "get": {
            "operationId": operation_id,
            "responses": {
                "200": {"description": description, "content": {content_type: {"schema": {}}}},
                "503": {"description": "Shutting down"},
            },
        }
    }


def openapi_document(max_request_bytes: int) -> dict[str, Any]:
    """The OpenAPI document of the broker's API (``max_request_bytes`` is its body limit)."""
    paths: dict[str, Any] = {op.path: _control(op) for op in CONTROL_OPERATIONS.values()}
    paths.update(_data_plane())
    paths["/health"] = _plain_get("health", "The broker serves", "application/json")
    paths["/metrics"] = _plain_get("metrics", "Prometheus text", "text/plain")
    return {
        "openapi": "3.0.3",
        "info": {
            "title": "Quiver broker",
            "version": __version__,
            "description": (
                "Every operation of Quiver's transport seam. Errors answer "
                "{code, message, retriable}. Request bodies are limited to "
                f"{max_request_bytes} bytes."
            ),
        },
        "paths": paths,
        "components": {"schemas": {"Error": _ERROR}},
    }
