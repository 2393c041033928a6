"""The one table of wire errors, used by both sides of the HTTP API.

The broker answers a refused request with an HTTP status and a JSON body::

    {"code": "UNKNOWN_TOPIC", "message": "topic orders does not exist ...", "retriable": false}

:func:`error_answer` turns an exception into that answer (the most specific class the table
knows, walking the exception's class hierarchy); :func:`error_from_answer` turns an answer back
into the SDK's exception, so ``except UnknownTopicError`` and ``exc.retriable`` mean over HTTP
what they mean in process. A code this client does not know (a newer broker's), and a body that
is not the JSON above (a proxy's error page), are read by their HTTP status: 429, 502, 503 and
504 are a :class:`~sdk.errors.BrokerUnavailableError` (retriable), anything else a plain
:class:`~sdk.errors.QuiverError` (not retriable). Decoders ignore fields they do not know.

Expected outcomes (no new message, an offset that moved, a refused put) are statuses inside
successful answers, never errors here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson

from sdk.errors import (
    ArgumentTypeError,
    BrokerUnavailableError,
    ClientClosedError,
    IllegalStateError,
    InvalidArgumentError,
    InvalidMessageError,
    MalformedBodyError,
    QuiverError,
    UnknownGroupError,
    UnknownTopicError,
)

__all__ = [
    "WIRE_ERRORS",
    "WireError",
    "error_answer",
    "error_document",
    "error_from_answer",
    "error_from_document",
]


@dataclass(frozen=True, slots=True)
class WireError:
    """One row: the ``code`` on the wire, the HTTP status it travels with, the SDK class it
    stands for, and whether that class is retriable by default (an answer's own ``retriable``
    field decides for the one error it carries). A client rebuilds the error with
    :meth:`~sdk.errors.QuiverError.from_message`."""

    code: str
    http_status: int
    error: type[QuiverError]
    retriable: bool


WIRE_ERRORS: tuple[WireError, ...] = (
    WireError("ARGUMENT_TYPE", 400, ArgumentTypeError, False),
    WireError("INVALID_MESSAGE", 400, InvalidMessageError, False),
    WireError("MALFORMED_BODY", 400, MalformedBodyError, False),
    WireError("INVALID_ARGUMENT", 400, InvalidArgumentError, False),
    WireError("UNKNOWN_TOPIC", 404, UnknownTopicError, False),
    WireError("UNKNOWN_GROUP", 404, UnknownGroupError, False),
    WireError("ILLEGAL_STATE", 409, IllegalStateError, False),
    WireError("CLIENT_CLOSED", 409, ClientClosedError, False),
    WireError("BROKER_UNAVAILABLE", 503, BrokerUnavailableError, True),
    # any other Quiver error (a store that cannot write, say): the broker is not serving
    WireError("BROKER_ERROR", 503, QuiverError, False),
)
"""Most specific classes first within a family; :func:`error_answer` picks by class hierarchy,
not by order."""

_BY_CODE = {row.code: row for row in WIRE_ERRORS}
_BY_CLASS = {row.error: row for row in WIRE_ERRORS}
_INTERNAL = WireError("INTERNAL", 500, QuiverError, False)  # a bug: an error no row covers


def _row_for(exc: BaseException) -> WireError:
    for cls in type(exc).__mro__:
        row = _BY_CLASS.get(cls)
        if row is not None:
            return row
    return _INTERNAL


def error_document(exc: BaseException) -> tuple[int, dict[str, Any]]:
    """The HTTP status and the JSON object (``{code, message, retriable}``) of ``exc``'s
    answer."""
    row = _row_for(exc)
    retriable = bool(getattr(exc, "retriable", row.retriable))
    body = {"code": row.code, "message": str(exc) or type(exc).__name__, "retriable": retriable}
    return row.http_status, body


def error_answer(exc: BaseException) -> tuple[int, bytes]:
    """The HTTP status and JSON body the broker answers for ``exc``."""
    status, document = error_document(exc)
    return status, orjson.dumps(document)


def error_from_answer(http_status: int, body: bytes) -> QuiverError:
    """The SDK exception an error answer stands for (see the module docstring)."""
    try:
        document = orjson.loads(body)
    except orjson.JSONDecodeError:
        document = None
    if not isinstance(document, dict) or not isinstance(document.get("code"), str):
        return _by_status(http_status, f"HTTP {http_status}: {_excerpt(body)}")
    return error_from_document(http_status, document)


def error_from_document(http_status: int, document: Any) -> QuiverError:
    """:func:`error_from_answer` for an answer already parsed (a part of a send-many answer)."""
    if not isinstance(document, dict) or not isinstance(document.get("code"), str):
        return _by_status(http_status, f"HTTP {http_status}: {str(document)[:200]}")
    message = str(document.get("message", ""))
    row = _BY_CODE.get(document["code"])
    if row is None or row is _INTERNAL:
        return _by_status(http_status, f"{document['code']}: {message}")
    error = row.error.from_message(message)
    retriable = document.get("retriable")
    if isinstance(retriable, bool) and retriable != row.retriable:
        error.retriable = retriable
    return error


# what a gateway or an overloaded server answers: the broker may serve the same call later
_RETRIABLE_STATUSES = frozenset({429, 502, 503, 504})


def _by_status(http_status: int, message: str) -> QuiverError:
    if http_status in _RETRIABLE_STATUSES:
        return BrokerUnavailableError(message)
    return QuiverError(message)


def _excerpt(body: bytes, limit: int = 200) -> str:
    text = body[:limit].decode("utf-8", "replace").strip()
    return text + ("..." if len(body) > limit else "")
