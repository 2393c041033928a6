"""The transport's form of the broker's answers to a send: a put's result, or a refusal.

Every answer a send, a send-back or a delayed send gets passes through :func:`send_result` (a
put the store answered) or :func:`rejected` (one the broker refused before the store saw it).

Invariant: an answer names physical offsets only when its messages were stored (``PUT_OK``, or
``FLUSH_DISK_TIMEOUT``: stored, not yet flushed); a refusal names none.
"""

from __future__ import annotations

from localstore import PutResult
from localstore.results import FLUSH_DISK_TIMEOUT, PUT_OK
from sdk.transport.models import SendResult

__all__ = ["rejected", "send_result"]

_HOST_HEX: dict[bytes, str] = {}  # packed store host -> its upper-case hex (one or two a broker)


def send_result(result: PutResult) -> SendResult:
    """The transport's form of a put's answer. Every send passes here: the status's name is
    read as ``_value_`` (``.value`` is a Python-level enum property) and the host's hex is
    kept."""
    status = result.status
    raw = result.store_host_raw
    host = _HOST_HEX.get(raw)
    if host is None:
        host = raw.hex().upper()
        if len(_HOST_HEX) < 64:
            _HOST_HEX[raw] = host
    return SendResult(
        status._value_,
        result.detail,
        result.topic,
        result.queue_id,
        result.queue_offset,
        result.phys_offsets if status is PUT_OK or status is FLUSH_DISK_TIMEOUT else [],
        host,
        result.store_timestamp,
    )


def rejected(status: str, detail: str, topic: str = "", queue_id: int = 0) -> SendResult:
    """A send the broker refused with ``status`` and ``detail`` (nothing was stored)."""
    return SendResult(status=status, detail=detail, topic=topic, queue_id=queue_id)
