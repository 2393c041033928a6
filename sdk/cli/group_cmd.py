"""``quiver group show``: a consumer group's members, the queues each owns, offsets and lag.

quiver group show (--data DIR | --broker URL) --group G [--json]

Asks :meth:`sdk.Admin.describe_group` of the running broker at URL (its live members), or of
the store opened as a broker for the run (no other process may be serving it: the store's lock
refuses a second opener): committed offsets from
``config/consumerOffset.json``, queue bounds from the store, and the members and queue owners
the serving broker last recorded in ``config/quiverConsumerGroups.json`` (see
:mod:`sdk.broker.group_report`). A broker that closed cleanly after its consumers records no
member; a crashed one leaves the members it knew.
"""

from __future__ import annotations

import argparse
import time

from sdk.cli.admin_access import admin_for, check_name
from sdk.cli.common import (
    EXIT_OK,
    CliError,
    Subparsers,
    add_json_option,
    add_target_options,
    emit_json,
    target_name,
)


def add_parser(subparsers: Subparsers) -> None:
    """Add ``group`` and its sub-commands."""
    group = subparsers.add_parser(
        "group",
        help="consumer groups: members, queues, offsets and lag",
        description="Consumer groups of a store's broker or of a running broker.",
    )
    actions = group.add_subparsers(dest="action", metavar="ACTION", required=True)
    show = actions.add_parser(
        "show",
        help="members, the queues each owns, committed offsets and lag",
        description="The group's members (as last recorded by the broker), the queues each "
        "owns, and per queue the committed offset, min, max and lag.",
    )
    add_target_options(show)
    show.add_argument("--group", required=True, metavar="G")
    add_json_option(show)
    show.set_defaults(func=run_show)


def run_show(args: argparse.Namespace) -> int:
    """Print the group report; exit 1 for a group the store knows nothing of."""
    check_name("group", args.group)
    from offsetstore.base import OffsetStoreError

    with admin_for(args) as admin:
        try:
            report = admin.describe_group(args.group)
        except OffsetStoreError as exc:  # the recorded group snapshot and its backup are damaged
            raise CliError(f"cannot read the group records of {target_name(args)}: {exc}") from exc
    if args.json:
        emit_json(report.to_json())
        return EXIT_OK
    when = (
        time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(report.as_of_ms / 1000))
        if report.as_of_ms
        else "never"
    )
    seen = "live" if report.live else f"recorded {when}"
    print(f"group {report.group}: {len(report.members)} member(s) ({seen})")
    for member in report.members:
        topics = ", ".join(f"{t} [{e}]" for t, e in sorted(member.subscriptions))
        print(f"  {member.client_id} {member.message_model}: {topics}")
        print(f"    queues: {', '.join(member.queues) or 'none'}")
    for queue in report.queues:
        committed = "-" if queue.committed is None else queue.committed
        print(
            f"{queue.topic}/{queue.queue_id}: owner {queue.owner or '-'} committed {committed} "
            f"min {queue.min_offset} max {queue.max_offset} lag {queue.lag}"
        )
    print(f"group {report.group}: {len(report.queues)} queue(s), total lag {report.total_lag}")
    return EXIT_OK
