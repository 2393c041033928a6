"""``quiver broker``: serve a store to remote clients over HTTP.

quiver broker --data DIR [--host 127.0.0.1] [--port 8080] [--name broker-a]
              [--max-request-size 8M] [--flush async|sync] [--create]
              [--loop auto|uvloop|asyncio] [--in-process-index]

Clients reach it with a URL where they would take an embedded broker
(``Producer("http://127.0.0.1:8080")``); the CLI with ``--broker URL``. The first line on
stdout is ``listening on http://HOST:PORT`` (``{"listening": URL}`` with ``--json``;
``--port 0`` takes a free port), logs go to stderr (none with ``--quiet``). SIGTERM or
SIGINT (Ctrl-C) stop it cleanly (:mod:`sdk.server.run`): in-flight requests finish, the store
is flushed and closed, and the next start recovers nothing. It serves on uvloop when that is
installed (``--loop``, :mod:`sdk.server.event_loop`) and builds the key index in a child process
(``StoreOptions.index_process``: on another core, off the writer thread), unless told
``--in-process-index``. Its process hands large freed buffers back to the system
(:mod:`sdk.server.allocator`) rather than keeping them in a growing heap.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import sys

from sdk.cli.common import (
    EXIT_OK,
    Subparsers,
    add_data_option,
    add_json_option,
    json_line,
    parse_size,
)
from sdk.server import event_loop
from sdk.server.allocator import keep_large_buffers_mapped

log = logging.getLogger(__name__)

__all__ = ["add_parser"]


def add_parser(subparsers: Subparsers) -> None:
    """Add ``broker``."""
    parser = subparsers.add_parser(
        "broker",
        help="serve a store to remote clients over HTTP",
        description="Run a broker over DIR: producers and consumers connect with its URL.",
    )
    add_data_option(parser)
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on")
    parser.add_argument(
        "--port", type=_port, default=8080, help="port to listen on (0: a free one)"
    )
    parser.add_argument("--name", default="broker-a", help="the broker's name (broker-a)")
    parser.add_argument(
        "--max-request-size",
        type=parse_size,
        default=None,
        metavar="SIZE",
        help="largest request body taken (default: the largest message plus 4M)",
    )
    parser.add_argument(
        "--flush",
        choices=("async", "sync"),
        default=None,
        help="for a new store: fsync in the background (async) or before answering (sync)",
    )
    parser.add_argument(
        "--create", action="store_true", help="make a store in a directory holding other files"
    )
    parser.add_argument(
        "--in-process-index",
        dest="index_process",
        action="store_false",
        help="build the key index on the writer thread, not in a child process",
    )
    event_loop.add_loop_option(parser)
    add_json_option(parser)
    parser.set_defaults(func=run)


def _port(text: str) -> int:
    value = int(text)
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"want a port in [0, 65535], got {value}")
    return value


def run(args: argparse.Namespace) -> int:
    from localstore import StoreOptions
    from sdk.broker.service import BrokerOptions
    from sdk.server.run import ServerOptions, serve

    if not args.quiet:
        logging.basicConfig(
            level=logging.INFO, stream=sys.stderr, format="%(asctime)s %(levelname)s %(message)s"
        )
    geometry = {} if args.flush is None else {"flush_mode": args.flush}
    options = ServerOptions(
        data=args.data,
        host=args.host,
        port=args.port,
        broker=BrokerOptions(
            broker_name=args.name, store=StoreOptions(index_process=args.index_process)
        ),
        max_request_bytes=args.max_request_size,
        create=args.create,
        geometry=geometry,
    )

    def listening(url: str) -> None:
        line = json_line({"listening": url}) if args.json else f"listening on {url}"
        print(line, flush=True)

    if keep_large_buffers_mapped():  # this process is the broker's own
        log.debug("large buffers are mapped on their own (sdk.server.allocator)")

    async def main() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, stop.set)
        await serve(options, stop, on_listening=listening)

    event_loop.run(main, args.loop)
    return EXIT_OK
