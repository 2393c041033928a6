"""``quiver``: the command line of the Quiver message-queue SDK.

    quiver store init --data DIR [--commitlog-file-size 64M ...]   create a store
    quiver store info --data DIR                    geometry, segments, topics, offsets
    quiver store verify --data DIR [--repair]       check every record and unit
    quiver store clean --data DIR [--force]         delete expired segments
    quiver produce --data DIR --topic T --body TEXT store messages
    quiver read --data DIR --topic T                read them back
    quiver query key|id|time --data DIR ...         find by key, id or time
    quiver offsets show|reset --data DIR --group G  consumer offsets and lag
    quiver group show --data DIR --group G          members, queues, offsets and lag
    quiver topic list|create|update|delete --data DIR ...  topics and their queues
    quiver broker --data DIR [--port 8080]           serve the store to remote clients
    quiver perf ...                                 benchmarks (when sdk/perf/cli.py exists)

Every command takes ``--data DIR`` (the ``store`` commands also take it as a positional DIR),
``--json`` (results as JSON lines on stdout, errors as ``{"error": KIND, "detail": MESSAGE}`` on
stderr) and ``--quiet`` (no progress line on stderr; long commands draw one on a terminal).
Exit status: 0 ok, 1 a failed check or operation, 2 bad usage.
Command modules follow the convention described in :mod:`sdk.cli.common`.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import os
import sys
from collections.abc import Sequence

from sdk.cli import (
    broker_cmd,
    group_cmd,
    offsets_cmd,
    produce_cmd,
    query_cmd,
    read_cmd,
    store_cmd,
    topic_cmd,
)
from sdk.cli.common import (
    EXIT_FAILED,
    EXIT_USAGE,
    CliError,
    QuiverArgumentParser,
    Subparsers,
    UsageError,
    json_line,
    resolve_data_alias,
)

PERF_MODULE = "sdk.perf.cli"


def build_parser(command: str | None = None) -> QuiverArgumentParser:
    """The ``quiver`` parser. ``command`` is the sub-command about to run, if known: the perf
    module is imported only when it is ``perf``."""
    parser = QuiverArgumentParser(
        prog="quiver",
        description="Quiver: a Python message queue with a RocketMQ-compatible embedded store.",
        epilog="Exit status: 0 ok, 1 a failed check or operation, 2 bad usage.",
    )
    parser.add_argument(
        "--version", action=_VersionAction, nargs=0, help="show the version and exit"
    )
    parser.add_argument("--debug", action="store_true", help="show the full traceback of an error")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    store_cmd.add_parser(subparsers)
    produce_cmd.add_parser(subparsers)
    read_cmd.add_parser(subparsers)
    query_cmd.add_parser(subparsers)
    offsets_cmd.add_parser(subparsers)
    group_cmd.add_parser(subparsers)
    topic_cmd.add_parser(subparsers)
    broker_cmd.add_parser(subparsers)
    _add_perf(subparsers, load=command == "perf")
    return parser


def _add_perf(subparsers: Subparsers, *, load: bool) -> None:
    """Wire ``quiver perf`` when :mod:`sdk.perf.cli` exists.

    The module provides ``add_parser(subparsers) -> None``; it is imported only to run a perf
    command. Otherwise a placeholder lists ``perf`` in ``quiver --help``.
    """
    try:
        exists = importlib.util.find_spec(PERF_MODULE) is not None
    except ModuleNotFoundError:
        exists = False
    if not exists:
        return
    if not load:
        subparsers.add_parser("perf", help="benchmarks (see: quiver perf --help)", add_help=False)
        return
    try:
        module = importlib.import_module(PERF_MODULE)
    except ImportError as exc:
        raise CliError(f"cannot load the perf commands: {exc}") from exc
    module.add_parser(subparsers)


class _VersionAction(argparse.Action):
    """``--version``: the version written in ``sdk/_version.py``, the one the build reads."""

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: object,
        option_string: str | None = None,
    ) -> None:
        from sdk._version import __version__

        parser.exit(0, f"quiver {__version__}\n")


def _command_index(argv: Sequence[str]) -> int:
    """Index of the first argument that is not an option: the sub-command (top-level options
    take no values); ``len(argv)`` when there is none."""
    return next((i for i, arg in enumerate(argv) if not arg.startswith("-")), len(argv))


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``quiver`` with ``argv`` (default: ``sys.argv[1:]``); returns the exit status."""
    arguments = list(sys.argv[1:] if argv is None else argv)
    index = _command_index(arguments)
    debug = "--debug" in arguments[:index]
    as_json = "--json" in arguments  # until parsed: argparse's own errors are JSON with it too
    try:
        parser = build_parser(arguments[index] if index < len(arguments) else None)
        args = parser.parse_args(arguments)
        resolve_data_alias(args)
        as_json = bool(getattr(args, "json", False))
        status = args.func(args)
        return 0 if status is None else int(status)
    except BrokenPipeError:  # the reader of our output went away (`quiver read | head`)
        _silence_stdout()
        return EXIT_FAILED
    except KeyboardInterrupt:
        if as_json:
            _report("interrupted", "interrupted", "quiver", as_json)
        else:
            print("quiver: interrupted", file=sys.stderr)
        return 130
    except Exception as exc:
        status = _expected_status(exc)
        if status is None or (debug and not isinstance(exc, UsageError)):
            raise  # a usage error has no traceback worth showing
        message = exc.message if isinstance(exc, CliError) else str(exc) or type(exc).__name__
        prog = exc.prog if isinstance(exc, UsageError) else "quiver"
        _report(_error_kind(exc, status), message, prog, as_json)
        return status


def _report(kind: str, message: str, prog: str, as_json: bool) -> None:
    """One line on stderr: ``PROG: error: MESSAGE``, or ``{"error": KIND, "detail": MESSAGE}``."""
    detail = " ".join(message.split())
    if as_json:
        print(json_line({"error": kind, "detail": detail}), file=sys.stderr)
    else:
        print(f"{prog}: error: {detail}", file=sys.stderr)


def _error_kind(exc: Exception, status: int) -> str:
    """``usage`` for bad usage; else the exception's class (a :class:`CliError`: the class of
    the exception it was raised from, or ``failed``)."""
    if status == EXIT_USAGE:
        return "usage"
    if isinstance(exc, CliError):
        return type(exc.__cause__).__name__ if exc.__cause__ is not None else "failed"
    return type(exc).__name__


def _expected_status(exc: Exception) -> int | None:
    """The exit status of an expected error, None for a bug (which keeps its traceback)."""
    if isinstance(exc, CliError):
        return exc.status
    from localstore.errors import GeometryMismatchError
    from sdk.errors import InvalidArgumentError, QuiverError

    if isinstance(exc, (InvalidArgumentError, GeometryMismatchError)):
        return EXIT_USAGE  # GeometryError is an InvalidArgumentError too
    if isinstance(exc, (QuiverError, OSError)):
        return EXIT_FAILED
    return None


def _silence_stdout() -> None:
    """Point stdout at /dev/null so that the interpreter's final flush does not fail again."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError):
        pass


if __name__ == "__main__":
    sys.exit(main())
