"""The SDK's exceptions: one tree under :class:`QuiverError`.

Every error says whether retrying the same call may succeed (``retriable``), so retry policies
(tenacity) read one attribute instead of guessing from the class. Expected outcomes (no new
message, an offset that moved) are statuses, not exceptions.
"""

from __future__ import annotations


class QuiverError(Exception):
    """Base class of every SDK error."""

    retriable: bool = False


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


class BrokerUnavailableError(QuiverError):
    """The broker could not be reached or is shutting down; retrying may succeed."""

    retriable = True


class ClientClosedError(QuiverError):
    """A producer or consumer was used after ``close()``."""
