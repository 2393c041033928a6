"""``quiver offsets``: a consumer group's committed offsets, lag, and resets.

quiver offsets show --data DIR --group G [--topic T]
quiver offsets reset --data DIR --group G --topic T --to earliest|latest|TIMESTAMP_MS

The offsets are the broker's table, ``DIR/config/consumerOffset.json`` (RocketMQ's file and
format; see :mod:`offsetstore.broker_table`). ``show`` prints per queue the committed offset
(``-`` / null when none), the queue's min and max offsets and the lag (max - committed). A
reset rewrites the file atomically; run it while no broker serves the store (the store's lock
refuses a second opener). ``show`` on a store another process holds reads a read-only view of it
and the table's file as last written (no lock, no write; see
:func:`sdk.cli.common.open_store_for_reading`).
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from sdk.cli.common import (
    EXIT_FAILED,
    EXIT_OK,
    EXIT_USAGE,
    CliError,
    Subparsers,
    add_data_option,
    add_json_option,
    emit_json,
    existing_queues,
    is_read_only,
    open_store,
    open_store_for_reading,
)

if TYPE_CHECKING:
    from offsetstore.broker_table import ConsumerOffsetTable, ResetTarget


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
    add_data_option(show)
    show.add_argument("--group", required=True, metavar="G")
    show.add_argument("--topic", metavar="T", help="only this topic (default: every topic)")
    add_json_option(show)
    show.set_defaults(func=run_show)

    reset = actions.add_parser(
        "reset",
        help="move a group's offsets of a topic",
        description="Set the group's offset of every queue of the topic to the earliest or "
        "latest offset, or to the first offset stored at or after TIMESTAMP_MS.",
    )
    add_data_option(reset)
    reset.add_argument("--group", required=True, metavar="G")
    reset.add_argument("--topic", required=True, metavar="T")
    reset.add_argument(
        "--to",
        required=True,
        type=reset_target,
        metavar="earliest|latest|TIMESTAMP_MS",
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


def _open_table(directory: str) -> ConsumerOffsetTable:
    from offsetstore.base import OffsetStoreError
    from offsetstore.broker_table import ConsumerOffsetTable

    try:
        return ConsumerOffsetTable(directory)
    except OffsetStoreError as exc:
        raise CliError(str(exc)) from exc


def _check_name(kind: str, name: str) -> None:
    if not name or "@" in name:
        raise CliError(f"bad {kind} name {name!r} (must be non-empty, without '@')", EXIT_USAGE)


def run_show(args: argparse.Namespace) -> int:
    """Print the group's queues; exit 1 when the group has no offsets (and no --topic)."""
    _check_name("group", args.group)
    if args.topic is not None:
        _check_name("topic", args.topic)
    with open_store_for_reading(args.data) as store:
        read_only = is_read_only(store)
        if args.topic is not None:
            existing_queues(store, args.topic, None)  # an unknown topic is an error
        table = _open_table(args.data)  # reads the file only: no lock, no write
        topics = [args.topic] if args.topic is not None else table.topics(args.group)
        if not topics:
            raise CliError(f"group {args.group} has no committed offsets in {args.data}")
        rows = [row for topic in topics for row in table.lag(args.group, topic, store)]
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


def run_reset(args: argparse.Namespace) -> int:
    """Reset the group's offsets of the topic and persist the table."""
    _check_name("group", args.group)
    _check_name("topic", args.topic)
    with open_store(args.data) as store:
        if not store.queue_ids(args.topic):
            raise CliError(f"topic {args.topic} has no queues in {args.data}", EXIT_FAILED)
        table = _open_table(args.data)
        before = table.offsets(args.group, args.topic)
        after = table.reset(args.group, args.topic, args.to, store)
        table.close()
    for queue_id, offset in after.items():
        document = {
            "group": args.group,
            "topic": args.topic,
            "queue_id": queue_id,
            "previous": before.get(queue_id),
            "offset": offset,
        }
        if args.json:
            emit_json(document)
        else:
            previous = before.get(queue_id, "-")
            print(f"{args.topic}/{queue_id}: {previous} -> {offset}")
    if not args.json:
        print(f"group {args.group}: reset {len(after)} queue(s) of {args.topic} to {args.to}")
    return EXIT_OK
