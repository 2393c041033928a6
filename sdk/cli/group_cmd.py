"""``quiver group show``: a consumer group's members, the queues each owns, offsets and lag.

quiver group show --data DIR --group G [--json]

Reads the store in ``DIR`` (no broker may be serving it: the store's lock refuses a second
opener): committed offsets from ``config/consumerOffset.json``, queue bounds from the store, and
the members and queue owners the broker last recorded in ``config/quiverConsumerGroups.json``
(see :mod:`sdk.broker.group_report`). A broker that closed cleanly after its consumers records
no member; a crashed one leaves the members it knew.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from sdk.cli.common import (
    EXIT_FAILED,
    EXIT_OK,
    EXIT_USAGE,
    CliError,
    Subparsers,
    add_data_option,
    add_json_option,
    emit_json,
    open_store,
)


def add_parser(subparsers: Subparsers) -> None:
    """Add ``group`` and its sub-commands."""
    group = subparsers.add_parser(
        "group",
        help="consumer groups: members, queues, offsets and lag",
        description="Consumer groups of a store's broker.",
    )
    actions = group.add_subparsers(dest="action", metavar="ACTION", required=True)
    show = actions.add_parser(
        "show",
        help="members, the queues each owns, committed offsets and lag",
        description="The group's members (as last recorded by the broker), the queues each "
        "owns, and per queue the committed offset, min, max and lag.",
    )
    add_data_option(show)
    show.add_argument("--group", required=True, metavar="G")
    add_json_option(show)
    show.set_defaults(func=run_show)


def run_show(args: argparse.Namespace) -> int:
    """Print the group report; exit 1 for a group the store knows nothing of."""
    from offsetstore.base import OffsetStoreError
    from offsetstore.broker_table import ConsumerOffsetTable
    from sdk.broker.group_report import build_report, read_snapshot

    if not args.group or "@" in args.group:
        raise CliError(
            f"bad group name {args.group!r} (must be non-empty, without '@')", EXIT_USAGE
        )
    with open_store(args.data) as store:
        try:
            offsets = ConsumerOffsetTable(args.data)
            view, models, recorded_ms = read_snapshot(Path(args.data), args.group, "broker-a")
        except (OffsetStoreError, ValueError) as exc:
            raise CliError(f"cannot read the group records of {args.data}: {exc}") from exc
        report = build_report(
            args.group, view, models, offsets, store, live=False, as_of_ms=recorded_ms
        )
    if not report.members and not report.queues:
        raise CliError(f"group {args.group} has no members or offsets in {args.data}", EXIT_FAILED)
    if args.json:
        emit_json(report.to_json())
        return EXIT_OK
    when = (
        time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(recorded_ms / 1000))
        if recorded_ms
        else "never"
    )
    print(f"group {report.group}: {len(report.members)} member(s) (recorded {when})")
    for member in report.members:
        topics = ", ".join(f"{t} [{e}]" for t, e in sorted(member.subscriptions.items()))
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
