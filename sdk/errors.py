"""The SDK's exceptions: one tree under :class:`QuiverError`.

``QuiverError`` and the argument and state errors are defined in :mod:`quiver_errors`, below
localstore and offsetstore too, so that ``except QuiverError`` also catches the store's
(:class:`localstore.StoreError`) and the offset store's (:class:`offsetstore.OffsetStoreError`).

Every error says whether retrying the same call may succeed (``retriable``), so retry policies
(tenacity) read one attribute instead of guessing from the class. Expected outcomes (no new
message, an offset that moved) are statuses, not exceptions.
"""

from __future__ import annotations

from quiver_errors import (
    ArgumentTypeError,
    IllegalStateError,
    InvalidArgumentError,
    QuiverError,
)


class InvalidMessageError(QuiverError, ValueError):
    """A message the SDK refuses before sending it (topic rules, empty or oversized body,
    properties too large, a reserved property name). Never retriable."""


RETRIABLE_PUT_STATUSES = frozenset({"SERVICE_NOT_AVAILABLE", "CREATE_MAPPED_FILE_FAILED"})


class SendRejectedError(QuiverError):
    """The broker refused a message; ``status`` is its put status (e.g. ``MESSAGE_ILLEGAL``).

    Retriable when nothing was stored for a passing reason (the store is closing, a segment
    could not be created); a refused message (``MESSAGE_ILLEGAL``, ...) is not."""

    def __init__(self, status: str, detail: str):
        super().__init__(f"{status}: {detail}" if detail else status)
        self.status = status
        self.detail = detail
        self.retriable = status in RETRIABLE_PUT_STATUSES


class MalformedBodyError(InvalidArgumentError):
    """A binary request or answer body of the wire protocol (:mod:`sdk.protocol`) that does not
    follow its layout: truncated, sizes that do not add up, a wrong magic code or a body CRC
    that does not match. ``offset`` is the byte position in the body where the problem was
    found. Never retriable: the same bytes fail the same way."""

    def __init__(self, offset: int, problem: str):
        super().__init__(f"malformed body at byte {offset}: {problem}")
        self.offset = offset
        self.problem = problem

    @classmethod
    def from_message(cls, message: str) -> MalformedBodyError:
        """The error as another process reported it (its whole message; ``offset`` -1)."""
        error = cls(-1, message)
        error.args = (message,)
        return error


class BrokerUnavailableError(QuiverError):
    """The broker could not be reached or is shutting down; retrying may succeed."""

    retriable = True


class ClientClosedError(QuiverError):
    """A producer or consumer was used after ``close()``."""


class UnknownTopicError(QuiverError, LookupError):
    """An administrative call named a topic the broker does not have."""


class UnknownGroupError(QuiverError, LookupError):
    """An administrative call named a consumer group the broker knows nothing of: no committed
    offsets and no members. (A reset may create one when asked: ``create=True``.)"""


class CloseError(QuiverError):
    """Closing failed part-way (a config file that could not be written, a store flush that
    failed, ...). Every other step was still tried: threads stopped, the store closed and its
    directory released. ``errors`` lists every failure as ``(step, exception)``, in order;
    the first is also the ``__cause__``. What failed to be written is lost to this process
    (offsets: their messages are delivered again, at-least-once)."""

    def __init__(self, message: str, errors: list[tuple[str, Exception]]):
        super().__init__(message)
        self.errors = errors


__all__ = [
    "RETRIABLE_PUT_STATUSES",
    "ArgumentTypeError",
    "BrokerUnavailableError",
    "ClientClosedError",
    "CloseError",
    "IllegalStateError",
    "InvalidArgumentError",
    "InvalidMessageError",
    "MalformedBodyError",
    "QuiverError",
    "SendRejectedError",
    "UnknownGroupError",
    "UnknownTopicError",
]
