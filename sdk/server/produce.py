"""What the broker takes from a produce body: the property names a client may set.

A client sets its messages' properties, system ones included: ``TAGS``, ``KEYS``, ``UNIQ_KEY``,
``WAIT``, a delay (``DELAY``, ``__QUIVER_DELIVER_AT``), and for a half message ``TRAN_MSG`` and
``PGROUP``. The others of :data:`sdk.message.RESERVED_PROPERTIES` and Quiver's own
(``__QUIVER_*``) are the broker's: where a retried message came from (``RETRY_TOPIC``,
``ORIGIN_MESSAGE_ID``, ``RECONSUME_TIME``), where a delayed one goes (``REAL_TOPIC``,
``REAL_QID``), a half message's bookkeeping, an idempotent batch's stamp. A message sent with
one of them would pass for what the broker wrote, so a produce body that carries one is refused,
naming it. The check is one regular-expression search over the batch's properties texts
(``name\\x01value\\x02`` pairs), not a parse of each message; a batch the decoder found
``plain`` (its messages hold the indexed properties alone) needs none.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from localstore.record.codec import NewMessage
from localstore.record.properties import encode_properties
from localstore.record.uniform_batch import UniformBatch
from sdk.errors import InvalidMessageError
from sdk.message import PROPERTY_DELIVER_AT, QUIVER_PROPERTY_PREFIX, RESERVED_PROPERTIES

__all__ = ["CLIENT_PROPERTIES", "refuse_broker_properties"]

CLIENT_PROPERTIES = frozenset(
    {"TAGS", "KEYS", "UNIQ_KEY", "WAIT", "DELAY", "TRAN_MSG", "PGROUP", PROPERTY_DELIVER_AT}
)
"""Reserved names a producer sets itself."""

_BROKER_NAMES = sorted(RESERVED_PROPERTIES - CLIENT_PROPERTIES)
# A pair's name follows the text's start or the previous pair's \x02 and ends at \x01.
_BROKER_PROPERTY = re.compile(
    rb"(?:^|\x02)("
    + b"|".join(re.escape(name.encode()) for name in _BROKER_NAMES)
    + rb"|"
    + re.escape(QUIVER_PROPERTY_PREFIX.encode())
    + rb"(?!"
    + re.escape(PROPERTY_DELIVER_AT[len(QUIVER_PROPERTY_PREFIX) :].encode())
    + rb"\x01)[^\x01\x02]*)\x01"
)


def refuse_broker_properties(messages: Sequence[NewMessage]) -> None:
    """Raise :class:`InvalidMessageError` when a message of ``messages`` (a decoded produce
    body) carries a property only the broker may write."""
    if isinstance(messages, UniformBatch):
        if messages.plain:  # its texts hold the indexed properties alone
            return
        texts: Sequence[bytes] = messages.properties
    else:
        texts = [encode_properties(m.properties).encode() for m in messages]
    found = _BROKER_PROPERTY.search(b"\x02".join(texts))
    if found is not None:
        name = found.group(1).decode("utf-8", "replace")
        raise InvalidMessageError(
            f"property {name} is the broker's to set: a producer may not send it"
        )
