"""``quiver produce``: store messages given on the command line, generated, or read from stdin.

quiver produce (--data DIR | --broker URL) --topic T [--body TEXT | --size B --count N | stdin]

Each message gets a producer-side ``UNIQ_KEY`` (its message id), ``TAGS`` from ``--tag``,
``KEYS`` from ``--key`` and the ``--property`` pairs. Without ``--queue`` messages go round-robin
over the topic's write queues: into a store (``--data``) starting at the one holding the fewest
messages, message by message; to a running broker (``--broker``, through :class:`sdk.Producer`)
batch by batch.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING

from sdk.cli.common import (
    EXIT_OK,
    EXIT_USAGE,
    CliError,
    Subparsers,
    add_json_option,
    add_target_options,
    human_size,
    non_negative_int,
    open_store,
    parse_size,
    positive_int,
    remote_broker,
)
from sdk.cli.progress import progress_line

if TYPE_CHECKING:
    from sdk.cli.broker_produce import BrokerProducer
    from sdk.cli.producer import Producer as StoreProducer

RESERVED_PROPERTIES = {"TAGS": "use --tag", "KEYS": "use --key", "UNIQ_KEY": "quiver sets it"}
DEFAULT_BATCH = 64
MAX_BATCH_BYTES = 4 << 20
_FILLER = b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"


def add_parser(subparsers: Subparsers) -> None:
    """Add ``produce``."""
    parser = subparsers.add_parser(
        "produce",
        help="store messages",
        description="Store messages: --body TEXT, --count N --size BYTES (generated bodies), "
        "or one message per line of stdin.",
    )
    add_target_options(parser)
    parser.add_argument("--topic", required=True, metavar="T")
    parser.add_argument("--tag", metavar="X", help="the messages' tag (TAGS)")
    parser.add_argument(
        "--key", action="append", default=[], metavar="K", help="a key (KEYS); repeat for more"
    )
    parser.add_argument(
        "--property",
        action="append",
        default=[],
        metavar="K=V",
        help="a user property; repeat for more",
    )
    parser.add_argument(
        "--queue",
        type=non_negative_int,
        metavar="N",
        help="queue id (default: round-robin over the topic's queues)",
    )
    source = parser.add_mutually_exclusive_group()
    source.add_argument("--body", metavar="TEXT", help="the body (UTF-8)")
    source.add_argument(
        "--size",
        type=parse_size,
        metavar="BYTES",
        help="generated bodies of this size (text filler, see --random)",
    )
    parser.add_argument(
        "--count",
        type=positive_int,
        metavar="N",
        help="how many messages (with --size or --body; default 1)",
    )
    parser.add_argument(
        "--random", action="store_true", help="with --size: random bytes instead of text filler"
    )
    parser.add_argument(
        "--batch",
        type=positive_int,
        metavar="N",
        help=f"messages per put per queue (default {DEFAULT_BATCH}, 1 for stdin)",
    )
    add_json_option(parser)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Produce the messages; exit status 1 on the first put that is not PUT_OK."""
    from sdk.cli.producer import Producer

    properties = _properties(args)
    bodies, total = _bodies(args)
    batch = args.batch or (1 if total is None else DEFAULT_BATCH)
    if args.size:
        batch = max(1, min(batch, MAX_BATCH_BYTES // args.size))
    if args.broker is not None:
        return _run_on_broker(args, properties, bodies, total, batch)
    with open_store(args.data) as store:
        _check_body_size(args, store.geometry.max_message_size)  # before a body is built
        producer = Producer(
            store, args.topic, properties, args.queue, args.json, verbose=args.size is None
        )
        # stdin without --batch: put each line as it comes (a pipe may be interactive)
        chunk_size = 1 if total is None and args.batch is None else (batch * producer.queue_count())
        _feed(args, producer, bodies, total, chunk_size, batch)
    return EXIT_OK


def _run_on_broker(
    args: argparse.Namespace,
    properties: dict[str, str],
    bodies: Iterable[bytes],
    total: int | None,
    batch: int,
) -> int:
    """:func:`run` through :class:`sdk.Producer` on the broker at ``--broker URL`` (the
    broker refuses a message over its maximum size)."""
    from sdk.cli.admin_access import reaching
    from sdk.cli.broker_produce import BrokerProducer
    from sdk.producer import Producer

    with reaching(args.broker), Producer(remote_broker(args.broker)) as client:
        producer = BrokerProducer(
            client, args.topic, properties, args.queue, args.json, verbose=args.size is None
        )
        chunk_size = 1 if total is None and args.batch is None else batch
        _feed(args, producer, bodies, total, chunk_size, batch)
    return EXIT_OK


def _feed(
    args: argparse.Namespace,
    producer: StoreProducer | BrokerProducer,
    bodies: Iterable[bytes],
    total: int | None,
    chunk_size: int,
    batch: int,
) -> None:
    """Send ``bodies`` in chunks of ``chunk_size`` (batches of ``batch``), with the progress
    line, then the summary (text output)."""
    with progress_line(args, results_on_stdout=args.size is None) as progress:
        for chunk in _chunks(bodies, chunk_size):
            producer.send(chunk, batch)
            progress.update("produced", producer.stored, total)
    if not args.json:
        print(producer.summary())


def _check_body_size(args: argparse.Namespace, limit: int) -> None:
    """Refuse a ``--size`` or ``--body`` over the store's maximum message size, ``limit``."""
    if args.size is not None and args.size > limit:
        raise CliError(
            f"--size {human_size(args.size)} is over the store's maximum message size "
            f"of {human_size(limit)}",
            EXIT_USAGE,
        )
    if args.body is not None and len(body := args.body.encode()) > limit:
        raise CliError(
            f"--body is {human_size(len(body))}, over the store's maximum message size "
            f"of {human_size(limit)}",
            EXIT_USAGE,
        )


def _properties(args: argparse.Namespace) -> dict[str, str]:
    from localstore.record.codec import holds_property_separator

    properties: dict[str, str] = {}
    for key in args.key:
        if not key or " " in key:
            raise CliError(f"--key {key!r}: a key is non-empty and has no space", EXIT_USAGE)
        if holds_property_separator(key):
            raise CliError(f"--key {key!r}: \\x01 and \\x02 are separators", EXIT_USAGE)
    if args.key:
        properties["KEYS"] = " ".join(args.key)
    if args.tag is not None:
        if not args.tag.strip():
            raise CliError("--tag is blank", EXIT_USAGE)
        if holds_property_separator(args.tag):
            raise CliError(f"--tag {args.tag!r}: \\x01 and \\x02 are separators", EXIT_USAGE)
        properties["TAGS"] = args.tag
    for item in args.property:
        name, sep, value = item.partition("=")
        if not sep or not name or not value:
            raise CliError(f"--property {item!r}: want NAME=VALUE, both non-empty", EXIT_USAGE)
        if holds_property_separator(item):
            raise CliError(f"--property {item!r}: \\x01 and \\x02 are separators", EXIT_USAGE)
        if name in RESERVED_PROPERTIES:
            raise CliError(f"--property {name}: {RESERVED_PROPERTIES[name]}", EXIT_USAGE)
        properties[name] = value
    return properties


def _bodies(args: argparse.Namespace) -> tuple[Iterable[bytes], int | None]:
    """The bodies to send and how many there are (None: unknown, from stdin)."""
    count = args.count or 1
    if args.random and args.size is None:
        raise CliError("--random needs --size", EXIT_USAGE)
    if args.body is not None:
        if not args.body:
            raise CliError("--body is empty: a message needs a body", EXIT_USAGE)
        body = args.body.encode()
        return (body for _ in range(count)), count
    if args.size is not None:
        return _generated(count, args.size, args.random), count
    if args.count is not None:
        raise CliError(
            "--count needs --size or --body (stdin gives one message a line)", EXIT_USAGE
        )
    if sys.stdin.isatty():
        print(
            "quiver: reading messages from stdin, one per line (end with Ctrl-D)", file=sys.stderr
        )
    return _stdin_lines(), None


def _generated(count: int, size: int, random: bool) -> Iterator[bytes]:
    template = (_FILLER * (size // len(_FILLER) + 1))[:size]
    for index in range(count):
        if random:
            yield os.urandom(size)
        else:
            prefix = f"{index:010d} ".encode()[:size]
            yield prefix + template[len(prefix) :]


def _stdin_lines() -> Iterator[bytes]:
    for line in sys.stdin.buffer:
        body = line.removesuffix(b"\n").removesuffix(b"\r")
        if body:  # an empty line is no message (a message needs a body)
            yield body


def _chunks(items: Iterable[bytes], size: int) -> Iterator[list[bytes]]:
    chunk: list[bytes] = []
    for item in items:
        chunk.append(item)
        if len(chunk) >= size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk
