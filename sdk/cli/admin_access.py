"""Reach the broker the admin commands (topic, offsets, group, query) act on.

With ``--data DIR`` the commands act through :class:`sdk.Admin`, as an application would, on
an :class:`sdk.EmbeddedBroker` opened over the directory for the command's run: a store another
process holds is refused by the store's lock (the error says which process). Closing the broker
persists what the command changed (offsets, topic configs) and keeps the last recorded consumer
group snapshot as it was. With ``--broker URL`` they act through ``sdk.Admin(URL)`` on the
running broker; a broker that cannot be reached is one error line (exit status 1) naming the
URL (:func:`reaching`).
"""

from __future__ import annotations

import argparse
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

from sdk.cli.common import CliError, existing_store_path, remote_broker
from sdk.errors import BrokerUnavailableError

if TYPE_CHECKING:
    from sdk.admin import Admin

__all__ = ["admin_for", "check_name", "open_admin", "reaching"]


@contextmanager
def admin_for(args: argparse.Namespace) -> Iterator[Admin]:
    """An :class:`sdk.Admin` of what the command names: ``--broker URL`` or ``--data DIR``."""
    if args.broker is None:
        with open_admin(args.data) as admin:
            yield admin
        return
    from sdk.admin import Admin

    with reaching(args.broker), Admin(remote_broker(args.broker)) as admin:
        yield admin


@contextmanager
def open_admin(directory: str) -> Iterator[Admin]:
    """An :class:`sdk.Admin` over the existing store at ``directory`` (a usage error when
    there is none: an admin command never creates a store)."""
    from sdk.admin import Admin
    from sdk.broker.embedded import EmbeddedBroker

    with EmbeddedBroker(existing_store_path(directory)) as broker, Admin(broker) as admin:
        yield admin


@contextmanager
def reaching(url: str) -> Iterator[None]:
    """Turn the broker at ``url`` being unreachable (or shutting down) into one error line
    naming it (exit status 1; with ``--json`` the error kind is ``BrokerUnavailableError``)."""
    try:
        yield
    except BrokerUnavailableError as exc:
        raise CliError(f"cannot reach the broker at {url}: {exc}") from exc


def check_name(kind: str, name: str) -> None:
    """A group or topic name the offset table can hold, checked before the store is opened
    (a held store is read without the broker, whose check this is): a usage error."""
    from sdk.broker.administration import check_name

    check_name(kind, name)
