"""``quiver offsets``: a consumer group's committed offsets, lag, and resets.

quiver offsets show (--data DIR | --broker URL) --group G [--topic T]
quiver offsets reset (--data DIR | --broker URL) --group G --topic T
    (--to earliest|latest|TIMESTAMP_MS | --queue-offset Q=OFFSET ...) [--create]

The offsets are the broker's table, ``DIR/config/consumerOffset.json`` (RocketMQ's file and
format; see :mod:`offsetstore.broker_table`), read and changed through :class:`sdk.Admin` on the
store opened as a broker for the run, or on the running broker at URL
(:mod:`sdk.cli.admin_access`). ``show`` prints per queue
the committed offset (``-`` / null when none), the queue's min and max offsets and the lag
(max - committed); on a store another process holds it reads a read-only view of it and the
table's file as last written (no lock, no write; see
:func:`sdk.cli.common.open_store_for_reading`). A reset is persisted atomically; it is refused
for a group the store has no offsets of unless ``--create`` says to make it, and while another
process serves the store (the store's lock refuses a second opener).
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from localstore.errors import StoreLockedError
from sdk.cli.admin_access import admin_for, check_name
from sdk.cli.common import (
    EXIT_OK,
    CliError,
    Subparsers,
    add_json_option,
    add_target_options,
    emit_json,
    existing_queues,
    open_store_for_reading,
    target_name,
)
from sdk.errors import UnknownGroupError
from sdk.transport.admin_models import QueueLag

if TYPE_CHECKING:
    from offsetstore.broker_table import ResetTarget


def add_parser(subparsers: Subparsers) -> None:
    """Add ``offsets`` and its sub-commands."""
    offsets = subparsers.add_parser(
        "offsets",
        help="consumer group offsets: show lag, reset",
        description="The committed offsets of consumer groups (DIR/config/consumerOffset.json).",
    )
    actions = offsets.add_subparsers(dest="action", metavar="ACTION", required=True)

    show = actions.add_parser(
        "show",
        help="committed offset, min, max and lag per queue",
        description="Per queue of the group's topics: committed offset, min, max and lag.",
    )
    add_target_options(show)
    show.add_argument("--group", required=True, metavar="G")
    show.add_argument("--topic", metavar="T", help="only this topic (default: every topic)")
    add_json_option(show)
    show.set_defaults(func=run_show)

    reset = actions.add_parser(
        "reset",
        help="move a group's offsets of a topic",
        description="Set the group's offset of every queue of the topic to the earliest or "
        "latest offset, or to the first offset stored at or after TIMESTAMP_MS; or set given "
        "queues' offsets (--queue-offset). Refused while the group's consumers run.",
    )
    add_target_options(reset)
    reset.add_argument("--group", required=True, metavar="G")
    reset.add_argument("--topic", required=True, metavar="T")
    target = reset.add_mutually_exclusive_group(required=True)
    target.add_argument(
        "--to",
        type=reset_target,
        metavar="earliest|latest|TIMESTAMP_MS",
    )
    target.add_argument(
        "--queue-offset",
        type=queue_offset,
        action="append",
        metavar="Q=OFFSET",
        help="set queue Q's offset (repeatable; other queues keep theirs)",
    )
    reset.add_argument(
        "--create",
        action="store_true",
        help="reset a group the store has no offsets of (creates it)",
    )
    add_json_option(reset)
    reset.set_defaults(func=run_reset)


def reset_target(text: str) -> ResetTarget:
    """``earliest``, ``latest`` or a timestamp in ms, for argparse."""
    if text in ("earliest", "latest"):
        return text  # type: ignore[return-value]  # narrowed by the test above
    if text.isdigit():
        return int(text)
    raise argparse.ArgumentTypeError(
        f"want earliest, latest or a timestamp in ms since the epoch, not {text!r}"
    )


def queue_offset(text: str) -> tuple[int, int]:
    """``Q=OFFSET`` (two ints >= 0), for argparse."""
    queue, _, offset = text.partition("=")
    if not (queue.isdigit() and offset.isdigit()):
        raise argparse.ArgumentTypeError(f"want QUEUE_ID=OFFSET (e.g. 0=42), not {text!r}")
    return int(queue), int(offset)


def run_show(args: argparse.Namespace) -> int:
    """Print the group's queues; exit 1 for a group the store knows nothing of (no --topic)."""
    check_name("group", args.group)
    if args.topic is not None:
        check_name("topic", args.topic)
    read_only = False
    try:
        with admin_for(args) as admin:
            rows = admin.lag(args.group, args.topic)
    except StoreLockedError:  # a running application holds it: read what it has written
        rows, read_only = _lag_of_held_store(args), True
    for row in rows:
        document = {
            "group": args.group,
            "topic": row.topic,
            "queue_id": row.queue_id,
            "committed": row.committed,
            "min_offset": row.min_offset,
            "max_offset": row.max_offset,
            "lag": row.lag,
        }
        if read_only:
            document["read_only"] = True
        if args.json:
            emit_json(document)
        else:
            committed = "-" if row.committed is None else row.committed
            print(
                f"{row.topic}/{row.queue_id}: committed {committed} min {row.min_offset} "
                f"max {row.max_offset} lag {row.lag}"
            )
    if not args.json:
        total = sum(row.lag for row in rows)
        print(f"group {args.group}: {len(rows)} queue(s), total lag {total}")
    return EXIT_OK


def _lag_of_held_store(args: argparse.Namespace) -> list[QueueLag]:
    """The group's lag per queue, read from a store another process holds (a read-only view,
    and the offset table's file as last written: no lock, no write)."""
    from offsetstore.base import OffsetStoreError
    from offsetstore.broker_table import ConsumerOffsetTable
    from sdk.broker.group_report import queue_lags

    with open_store_for_reading(args.data) as store:
        if args.topic is not None:
            existing_queues(store, args.topic, None)  # an unknown topic is an error
        try:
            table = ConsumerOffsetTable(args.data)  # reads the file only: no lock, no write
        except OffsetStoreError as exc:
            raise CliError(str(exc)) from exc
        topics = [args.topic] if args.topic is not None else table.topics(args.group)
        if not topics:
            raise CliError(f"group {args.group} has no committed offsets in {args.data}")
        return [
            row
            for topic in topics
            for row in queue_lags(topic, table.offsets(args.group, topic), store)
        ]


def run_reset(args: argparse.Namespace) -> int:
    """Reset the group's offsets of the topic (persisted when the command's broker closes)."""
    check_name("group", args.group)
    check_name("topic", args.topic)
    to: ResetTarget | None = args.to
    with admin_for(args) as admin:
        try:
            moved = admin.reset_offsets(
                args.group,
                args.topic,
                to=to if isinstance(to, str) else None,
                timestamp_ms=to if isinstance(to, int) else None,
                offsets=dict(args.queue_offset) if args.queue_offset else None,
                create=args.create,
            )
        except UnknownGroupError as exc:
            raise CliError(
                f"group {args.group} has no offsets or members in {target_name(args)} "
                "(add --create to make it with these offsets)"
            ) from exc
    for row in moved:
        document = {
            "group": args.group,
            "topic": args.topic,
            "queue_id": row.queue_id,
            "previous": row.previous,
            "offset": row.offset,
        }
        if args.json:
            emit_json(document)
        else:
            previous = "-" if row.previous is None else row.previous
            print(f"{args.topic}/{row.queue_id}: {previous} -> {row.offset}")
    if not args.json:
        target = to if to is not None else "the given offsets"
        print(f"group {args.group}: reset {len(moved)} queue(s) of {args.topic} to {target}")
    return EXIT_OK
