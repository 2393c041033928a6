"""``quiver query``: find messages by key, by id, and queue offsets by time.

quiver query key (--data DIR | --broker URL) --topic T --key K [--begin MS --end MS] [--max N]
quiver query id (--data DIR | --broker URL) ID      (an offsetMsgId or a UNIQ_KEY)
quiver query time (--data DIR | --broker URL) --topic T --queue N --timestamp MS

On a store (read-only view when another process holds it), or through a running broker's
queries (:meth:`sdk.Admin.query_by_key`, :meth:`sdk.Admin.view_message`, and the transport's
queue offsets by time); the output is the same.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from sdk.cli.admin_access import admin_for
from sdk.cli.common import (
    EXIT_FAILED,
    EXIT_OK,
    EXIT_USAGE,
    CliError,
    Subparsers,
    add_json_option,
    add_target_options,
    emit_json,
    existing_queues,
    is_read_only,
    non_negative_int,
    open_store_for_reading,
    positive_int,
    warn,
)
from sdk.cli.progress import progress_line
from sdk.cli.read_cmd import print_message

if TYPE_CHECKING:
    from localstore.record.codec import StoredMessage

MAX_QUERY_RESULTS = 64


def add_parser(subparsers: Subparsers) -> None:
    """Add ``query`` and its sub-commands."""
    query = subparsers.add_parser(
        "query",
        help="find messages by key or id, offsets by time",
        description="Find messages through the index files (key, id) or a queue offset by "
        "store time.",
    )
    kinds = query.add_subparsers(dest="kind", metavar="KIND", required=True)

    key = kinds.add_parser(
        "key",
        help="messages whose KEYS hold K (or whose UNIQ_KEY is K), newest first",
        description="Messages of a topic with a key, newest first (at most 64).",
    )
    add_target_options(key)
    key.add_argument("--topic", required=True, metavar="T")
    key.add_argument("--key", required=True, metavar="K")
    key.add_argument(
        "--begin",
        type=non_negative_int,
        default=0,
        metavar="MS",
        help="stored at or after this time (ms since the epoch)",
    )
    key.add_argument(
        "--end",
        type=non_negative_int,
        default=2**63 - 1,
        metavar="MS",
        help="stored at or before this time (ms since the epoch)",
    )
    key.add_argument(
        "--max",
        type=positive_int,
        default=MAX_QUERY_RESULTS,
        metavar="N",
        help="at most N messages (default and cap: 64)",
    )
    add_json_option(key)
    key.set_defaults(func=run_key)

    by_id = kinds.add_parser(
        "id",
        help="a message by offsetMsgId or UNIQ_KEY",
        description="Look a message up by its offsetMsgId (host, port, commitlog offset) or "
        "its UNIQ_KEY (the id producers show).",
    )
    add_target_options(by_id)
    by_id.add_argument("id", metavar="ID")
    add_json_option(by_id)
    by_id.set_defaults(func=run_id)

    by_time = kinds.add_parser(
        "time",
        help="the first queue offset stored at or after a time",
        description="The first queue offset whose store time is >= TIMESTAMP (clamped to the "
        "queue's min and max offsets).",
    )
    add_target_options(by_time)
    by_time.add_argument("--topic", required=True, metavar="T")
    by_time.add_argument("--queue", required=True, type=non_negative_int, metavar="N")
    by_time.add_argument("--timestamp", required=True, type=non_negative_int, metavar="MS")
    add_json_option(by_time)
    by_time.set_defaults(func=run_time)


def run_key(args: argparse.Namespace) -> int:
    """Print the messages found by key; exit 1 when there is none."""
    if args.begin > args.end:
        raise CliError("--begin is after --end", EXIT_USAGE)
    if args.broker is not None:
        with admin_for(args) as admin:
            found = admin.query_by_key(
                args.topic, args.key, begin_ms=args.begin, end_ms=args.end, max_count=args.max
            )
        for message in found:
            print_message(message, args.json)
    else:
        found = _key_in_store(args)
    if not args.json:
        print(f"found {len(found)} message(s) of {args.topic} with key {args.key}")
    elif not found:
        warn(f"found no message of {args.topic} with key {args.key}")  # stdout stays JSON
    return EXIT_OK if found else EXIT_FAILED


def _key_in_store(args: argparse.Namespace) -> list[StoredMessage]:
    """The messages found by key in the store, printed."""
    with open_store_for_reading(args.data) as store:
        found = store.query_by_key(
            args.topic, args.key, max_count=args.max, begin_ms=args.begin, end_ms=args.end
        )
        read_only = is_read_only(store)
        for message in found:
            print_message(message, args.json, read_only=read_only)
    return found


def run_id(args: argparse.Namespace) -> int:
    """Print the message with this id; exit 1 when there is none."""
    if args.broker is not None:
        with admin_for(args) as admin:
            found = admin.view_message(args.id)
        for message in found:
            print_message(message, args.json)
    else:
        with open_store_for_reading(args.data) as store:
            found = store.query_by_id(args.id)
            read_only = is_read_only(store)
            for message in found:
                print_message(message, args.json, read_only=read_only)
    if not found:
        if args.json:
            warn(f"no message has the id {args.id}")  # stdout stays JSON
        else:
            print(f"no message has the id {args.id}")
    return EXIT_OK if found else EXIT_FAILED


def run_time(args: argparse.Namespace) -> int:
    """Print the queue offset for the timestamp."""
    read_only = False
    with progress_line(args) as progress:
        if args.broker is not None:
            progress.status(f"asking the broker at {args.broker}")
            queue_offset, min_offset, max_offset = _time_on_broker(args)
        else:
            progress.status(f"opening store {args.data}")
            with open_store_for_reading(args.data) as store:
                read_only = is_read_only(store)
                existing_queues(store, args.topic, args.queue)
                progress.status(f"searching {args.topic}/{args.queue} for {args.timestamp}")
                queue_offset = store.offset_for_timestamp(args.topic, args.queue, args.timestamp)
                min_offset = store.min_offset(args.topic, args.queue)
                max_offset = store.max_offset(args.topic, args.queue)
    document = {
        "topic": args.topic,
        "queue_id": args.queue,
        "timestamp": args.timestamp,
        "queue_offset": queue_offset,
        "min_offset": min_offset,
        "max_offset": max_offset,
    }
    if read_only:
        document["read_only"] = True
    if args.json:
        emit_json(document)
    else:
        print(
            f"{args.topic}/{args.queue}: queue offset {queue_offset} is the first stored at or "
            f"after {args.timestamp} (queue holds [{min_offset}, {max_offset}))"
        )
    return EXIT_OK


def _time_on_broker(args: argparse.Namespace) -> tuple[int, int, int]:
    """The queue offset for the timestamp, and the queue's min and max, from the broker."""
    from sdk.cli.broker_read import broker_queue_ids

    with admin_for(args) as admin:
        broker_queue_ids(admin, args.broker, args.topic, args.queue)
        transport = admin.transport
        return (
            transport.offset_for_timestamp(args.topic, args.queue, args.timestamp),
            transport.min_offset(args.topic, args.queue),
            transport.max_offset(args.topic, args.queue),
        )
