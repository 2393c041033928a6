"""What crosses the transport seam for transactional messages (see :mod:`sdk.broker.transactions`).

Three operations, each a method of :class:`sdk.transport.base.BrokerTransport`:

* ``send_half(group, message)``: store ``message`` as a half message (invisible) for producer
  group ``group``; answers a :class:`sdk.transport.models.SendResult` for the half message.
* ``end_transaction(group, half_phys_offset, transaction_id, verdict, from_check=...)``: commit
  or roll back the half message stored at commitlog offset ``half_phys_offset``; answers an
  :class:`EndTransactionResult`. Idempotent: only the first commit or rollback of a half message
  does anything. ``from_check`` says the verdict answers a check (for the broker's logs).
* ``fetch_transaction_checks(group, client_id, wait_ms)``: a producer of ``group`` collects the
  half messages the broker wants a verdict on (long polling, up to ``wait_ms``); answers
  :class:`TransactionChecks`, the half messages' stored records, as a pull answers them.

Verdicts are strings (:data:`COMMIT`, :data:`ROLLBACK`, :data:`UNKNOWN`), so the seam needs no
client enum; :class:`sdk.transaction.TransactionState` has the same values.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = [
    "ALREADY_RESOLVED",
    "COMMIT",
    "COMMITTED",
    "LEFT_UNKNOWN",
    "NOT_FOUND",
    "PROPERTY_PRODUCER_GROUP",
    "PROPERTY_TRANSACTION_ID",
    "ROLLBACK",
    "ROLLED_BACK",
    "UNKNOWN",
    "VERDICTS",
    "EndTransactionResult",
    "TransactionChecks",
]

PROPERTY_PRODUCER_GROUP = "PGROUP"
"""The producer group of a half message (who is asked about it)."""
PROPERTY_TRANSACTION_ID = "__transactionId__"
"""A half (and committed) message's transaction id: its ``UNIQ_KEY``."""

# Verdicts a producer gives for a half message.
COMMIT = "COMMIT"
ROLLBACK = "ROLLBACK"
UNKNOWN = "UNKNOWN"
VERDICTS = frozenset({COMMIT, ROLLBACK, UNKNOWN})

# Statuses of an end-transaction answer (besides a failed put's status, e.g.
# ``SERVICE_NOT_AVAILABLE``, and ``MESSAGE_ILLEGAL`` for a malformed request).
COMMITTED = "COMMITTED"
"""This call committed the half message: its message is now in its real topic."""
ROLLED_BACK = "ROLLED_BACK"
"""This call rolled the half message back: it will never be delivered."""
ALREADY_RESOLVED = "ALREADY_RESOLVED"
"""An earlier call (or the check-back) committed or rolled it back; nothing was done."""
LEFT_UNKNOWN = "UNKNOWN"
"""The verdict was UNKNOWN: nothing was done, the check-back will ask again."""
NOT_FOUND = "NOT_FOUND"
"""No half message of this transaction and group at that offset (or retention deleted it)."""

_DONE = frozenset({COMMITTED, ROLLED_BACK, ALREADY_RESOLVED, LEFT_UNKNOWN})


@dataclass(slots=True)
class EndTransactionResult:
    """The broker's answer to an end-transaction. For :data:`COMMITTED`, ``topic``,
    ``queue_id`` and ``queue_offset`` say where the committed message was stored."""

    status: str
    detail: str = ""
    topic: str = ""
    queue_id: int = 0
    queue_offset: int = -1

    @property
    def settled(self) -> bool:
        """The request was understood and needs no retry (whatever it changed)."""
        return self.status in _DONE


@dataclass(slots=True)
class TransactionChecks:
    """Half messages a producer group is asked about: their stored records laid end to end
    (decode with :func:`sdk.transport.models.decode_records`; each record's ``phys_offset`` is
    what to answer with), ``count`` of them. Empty when nothing was asked within the wait."""

    raw: bytes = b""
    count: int = 0
