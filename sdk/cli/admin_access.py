"""Open the store in ``--data DIR`` as a broker for the admin commands (topic, offsets, group).

The commands act through :class:`sdk.Admin`, as an application would, on an
:class:`sdk.EmbeddedBroker` opened over the directory for the command's run: a store another
process holds is refused by the store's lock (the error says which process). Closing the broker
persists what the command changed (offsets, topic configs) and keeps the last recorded consumer
group snapshot as it was.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

from sdk.cli.common import existing_store_path

if TYPE_CHECKING:
    from sdk.admin import Admin

__all__ = ["check_name", "open_admin"]


@contextmanager
def open_admin(directory: str) -> Iterator[Admin]:
    """An :class:`sdk.Admin` over the existing store at ``directory`` (a usage error when
    there is none: an admin command never creates a store)."""
    from sdk.admin import Admin
    from sdk.broker.embedded import EmbeddedBroker

    with EmbeddedBroker(existing_store_path(directory)) as broker, Admin(broker) as admin:
        yield admin


def check_name(kind: str, name: str) -> None:
    """A group or topic name the offset table can hold, checked before the store is opened
    (a held store is read without the broker, whose check this is): a usage error."""
    from sdk.broker.administration import check_name

    check_name(kind, name)
