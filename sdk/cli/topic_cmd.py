"""``quiver topic``: a store's topics: list, create, update, delete.

quiver topic list (--data DIR | --broker URL) [--all] [--json]
quiver topic create (--data DIR | --broker URL) --topic T [--queues N] [--perm 6|4|2] [--json]
quiver topic update (--data DIR | --broker URL) --topic T [--queues N] [--perm 6|4|2] [--json]
quiver topic delete (--data DIR | --broker URL) --topic T [--json]

Through :class:`sdk.Admin` on the store opened as a broker for the run, or on the running
broker at URL (:mod:`sdk.cli.admin_access`); the configs are ``DIR/config/topics.json`` (RocketMQ's
``readQueueNums``/``writeQueueNums``/``perm``). The rules are the broker's
(:mod:`sdk.broker.administration`): one queue count per topic; fewer queues are refused while a
queue that would go holds unconsumed messages; delete removes the topic's config, queues and
offsets (its records stay in the commitlog until retention) and never a broker's own topic.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from sdk.cli.admin_access import admin_for, check_name
from sdk.cli.common import (
    EXIT_OK,
    EXIT_USAGE,
    CliError,
    Subparsers,
    add_json_option,
    add_target_options,
    emit_json,
    positive_int,
)

if TYPE_CHECKING:
    from sdk.transport.admin_models import TopicInfo

_PERM_NAMES = {6: "read-write", 4: "read-only", 2: "write-only"}


def add_parser(subparsers: Subparsers) -> None:
    """Add ``topic`` and its sub-commands."""
    topic = subparsers.add_parser(
        "topic",
        help="topics: list, create, update, delete",
        description="The topics of a store (DIR/config/topics.json) or of a running broker.",
    )
    actions = topic.add_subparsers(dest="action", metavar="ACTION", required=True)

    listing = actions.add_parser("list", help="every topic with its queues and permission")
    _add_data(listing)
    listing.add_argument(
        "--all", action="store_true", help="also the broker's own (retry, dead-letter, ...)"
    )
    listing.set_defaults(func=run_list)

    create = actions.add_parser("create", help="create a topic")
    _add_data(create)
    create.add_argument("--topic", required=True, metavar="T")
    create.add_argument("--queues", type=positive_int, default=4, metavar="N", help="default 4")
    create.add_argument("--perm", type=_perm, default=6, metavar="6|4|2", help="default 6")
    create.set_defaults(func=run_create)

    update = actions.add_parser(
        "update",
        help="change a topic's queue count or permission",
        description="Change the queue count (refused while a queue that would go holds "
        "unconsumed messages) and/or the permission (6 read-write, 4 read-only, 2 write-only).",
    )
    _add_data(update)
    update.add_argument("--topic", required=True, metavar="T")
    update.add_argument("--queues", type=positive_int, metavar="N")
    update.add_argument("--perm", type=_perm, metavar="6|4|2")
    update.set_defaults(func=run_update)

    delete = actions.add_parser(
        "delete",
        help="delete a topic",
        description="Remove the topic's config, queues and every group's offsets of it; its "
        "records stay in the commitlog until retention removes them.",
    )
    _add_data(delete)
    delete.add_argument("--topic", required=True, metavar="T")
    delete.set_defaults(func=run_delete)


def _add_data(parser: argparse.ArgumentParser) -> None:
    add_target_options(parser)
    add_json_option(parser)


def _perm(text: str) -> int:
    if text not in ("2", "4", "6"):
        raise argparse.ArgumentTypeError(
            f"want 6 (read-write), 4 (read-only) or 2 (write-only), not {text!r}"
        )
    return int(text)


def _show(topic: TopicInfo, as_json: bool) -> None:
    if as_json:
        emit_json(topic.to_json())
        return
    queues = (
        f"{topic.read_queue_nums} queues"
        if topic.read_queue_nums == topic.write_queue_nums
        else f"{topic.read_queue_nums} read / {topic.write_queue_nums} write queues"
    )
    perm = _PERM_NAMES.get(topic.perm, f"perm {topic.perm}")
    own = " (broker's own)" if topic.system else ""
    print(f"{topic.name}: {queues}, {perm}{own}")


def run_list(args: argparse.Namespace) -> int:
    """Print every topic, one a line."""
    with admin_for(args) as admin:
        topics = admin.list_topics(include_system=args.all)
    for topic in topics:
        _show(topic, args.json)
    if not args.json:
        print(f"{len(topics)} topic(s)")
    return EXIT_OK


def run_create(args: argparse.Namespace) -> int:
    """Create the topic and print it."""
    check_name("topic", args.topic)
    with admin_for(args) as admin:
        _show(admin.create_topic(args.topic, args.queues, perm=args.perm), args.json)
    return EXIT_OK


def run_update(args: argparse.Namespace) -> int:
    """Change the topic and print it."""
    check_name("topic", args.topic)
    if args.queues is None and args.perm is None:
        raise CliError("nothing to change: give --queues and/or --perm", EXIT_USAGE)
    with admin_for(args) as admin:
        _show(admin.update_topic(args.topic, queue_count=args.queues, perm=args.perm), args.json)
    return EXIT_OK


def run_delete(args: argparse.Namespace) -> int:
    """Delete the topic and say what went."""
    check_name("topic", args.topic)
    with admin_for(args) as admin:
        queue_ids = admin.delete_topic(args.topic)
    if args.json:
        emit_json({"topic": args.topic, "deleted": True, "queue_ids": queue_ids})
    else:
        print(f"deleted topic {args.topic} ({len(queue_ids)} queue(s) removed)")
    return EXIT_OK
