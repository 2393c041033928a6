"""What every ``quiver`` command shares: the parser class, errors, sizes, output, opening a store.

Conventions (the ``perf`` group follows them too); a new command that keeps them gets ``--data``,
``--json``, ``--quiet``, JSON errors and progress with nothing else to wire:

* a command group module has ``add_parser(subparsers) -> None``, which adds its parser(s) and
  sets ``func`` on each leaf with ``parser.set_defaults(func=handler)``;
* every leaf takes the store directory as ``--data DIR``: call :func:`add_data_option` (the
  ``store`` commands pass ``positional_alias=True``, which also accepts ``quiver store info DIR``;
  giving both or neither is a usage error), and reads it as ``args.data``. A command that works
  on a running broker too (produce, read, query, offsets, group, topic) calls
  :func:`add_target_options` instead: ``--data DIR`` or ``--broker URL``, exactly one;
* every leaf calls :func:`add_json_option`: ``--json`` puts one JSON object per line on stdout
  (:func:`emit_json`) and ``--quiet`` (implied by ``--json``) hides the progress line;
* ``handler(args: argparse.Namespace) -> int`` returns the exit status (0 ok, 1 a failed check or
  operation, 2 bad usage) and raises :class:`CliError` for an expected failure; ``main`` turns
  that (and localstore's ``StoreError``, ``QuiverError``, ``OSError``) into one line on stderr,
  never a traceback. With ``--json`` the line is ``{"error": KIND, "detail": MESSAGE}``: KIND is
  ``usage`` for exit status 2 (argparse's own errors included), else the class of the exception
  (for a :class:`CliError`, the class of the exception it was raised from, or ``failed``);
* a step that can run long draws on a :func:`sdk.cli.progress.progress_line` (stderr, terminal
  only, never with ``--json``/``--quiet``).

Nothing here imports localstore at module level: a command imports what it needs when it runs.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn, TypeAlias

from sdk.errors import QuiverError

if TYPE_CHECKING:
    from localstore.read_only import ReadOnlyStore
    from localstore.store import MessageStore
    from sdk.transport.remote_broker import RemoteBroker

    # What the reading commands read: the store, or a read-only view of one another process holds.
    ReadableStore: TypeAlias = MessageStore | ReadOnlyStore

Subparsers: TypeAlias = "argparse._SubParsersAction[QuiverArgumentParser]"

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2

_SIZE_UNITS = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}


class CliError(QuiverError):
    """An expected failure: ``main`` prints ``message`` on one line and exits with ``status``."""

    def __init__(self, message: str, status: int = EXIT_FAILED):
        super().__init__(message)
        self.message = message
        self.status = status


class UsageError(CliError):
    """Bad usage found while parsing: reported as ``PROG: error: MESSAGE (see: PROG --help)``."""

    def __init__(self, message: str, prog: str):
        super().__init__(f"{message} (see: {prog} --help)", EXIT_USAGE)
        self.prog = prog


class QuiverArgumentParser(argparse.ArgumentParser):
    """An ArgumentParser whose usage errors raise :class:`UsageError` (exit status 2), so that
    ``main`` reports them as it reports every error: one line, or JSON with ``--json``."""

    def error(self, message: str) -> NoReturn:
        """Report a usage error (``main`` prints it on one line and exits with status 2)."""
        raise UsageError(message, self.prog)


_DATA_ALIAS = "data_positional"  # dest of the positional DIR of the store commands
_DATA_ALIAS_PROG = "data_alias_prog"  # the prog named by a both/neither usage error


def add_data_option(parser: argparse.ArgumentParser, *, positional_alias: bool = False) -> None:
    """``--data DIR``, the store directory, read as ``args.data``. ``positional_alias``: DIR
    may be given as a positional argument instead (``quiver store info DIR``); exactly one of
    the two is required (:func:`resolve_data_alias` checks it after parsing)."""
    if not positional_alias:
        parser.add_argument("--data", required=True, metavar="DIR", help="the store directory")
        return
    parser.add_argument(
        _DATA_ALIAS, nargs="?", metavar="DIR", help="the store directory (or --data DIR)"
    )
    parser.add_argument("--data", metavar="DIR", help="the store directory (or DIR)")
    parser.set_defaults(**{_DATA_ALIAS_PROG: parser.prog})


def add_target_options(parser: argparse.ArgumentParser) -> None:
    """``--data DIR`` (the store directory, opened for the command's run) or ``--broker URL``
    (a running broker, reached over HTTP): exactly one, read as ``args.data`` / ``args.broker``
    (the other is None). Both or neither is a usage error naming both options."""
    target = parser.add_mutually_exclusive_group(required=True)
    target.add_argument("--data", metavar="DIR", help="the store directory (or --broker URL)")
    target.add_argument(
        "--broker",
        type=broker_url,
        metavar="URL",
        help="a running broker, e.g. http://127.0.0.1:8080 (or --data DIR)",
    )


CLI_RETRY_DEADLINE_S = 5.0
"""How long a command keeps retrying a broker that does not answer (a shell user waits)."""


def remote_broker(url: str) -> RemoteBroker:
    """The broker at ``url`` as the CLI reaches it: calls give up after
    :data:`CLI_RETRY_DEADLINE_S`."""
    from sdk.transport.remote_broker import RemoteBroker

    return RemoteBroker(url, retry_deadline_s=CLI_RETRY_DEADLINE_S)


def broker_url(text: str) -> str:
    """A broker URL as the HTTP transports take it (:func:`sdk.transport.http_common.broker_url`:
    ``http`` or ``https``, a host, a reachable port; trailing ``/`` dropped), for argparse."""
    from sdk.errors import InvalidArgumentError
    from sdk.transport.http_common import broker_url as checked_url

    try:
        return checked_url(text)
    except InvalidArgumentError as exc:
        raise argparse.ArgumentTypeError(
            f"not a broker URL: {exc} (want http://HOST:PORT, e.g. http://127.0.0.1:8080)"
        ) from None


def target_name(args: argparse.Namespace) -> str:
    """What a command acts on, for its messages: ``store DIR`` or ``the broker at URL``."""
    broker = getattr(args, "broker", None)
    return f"the broker at {broker}" if broker is not None else f"store {args.data}"


def resolve_data_alias(args: argparse.Namespace) -> None:
    """Fold a positional DIR into ``args.data``; both or neither is a :class:`UsageError`."""
    if not hasattr(args, _DATA_ALIAS):
        return
    positional = getattr(args, _DATA_ALIAS)
    prog = getattr(args, _DATA_ALIAS_PROG)
    delattr(args, _DATA_ALIAS)
    delattr(args, _DATA_ALIAS_PROG)
    if positional is not None and args.data is not None:
        raise UsageError(
            f"the store directory is given twice (DIR {positional} and --data {args.data}): "
            "give one",
            prog,
        )
    if positional is None and args.data is None:
        raise UsageError("the store directory is missing: give --data DIR (or DIR)", prog)
    if positional is not None:
        args.data = positional


def add_json_option(parser: argparse.ArgumentParser) -> None:
    """The output options every command takes: ``--json`` (machine output, one JSON object per
    line on stdout; errors as JSON on stderr) and ``--quiet`` (no progress line on stderr)."""
    parser.add_argument(
        "--json",
        action="store_true",
        help="machine output: one JSON object per line on stdout, errors as JSON on stderr",
    )
    parser.add_argument("--quiet", action="store_true", help="no progress line on stderr")


def json_line(document: Mapping[str, Any]) -> str:
    """One JSON object as one line of text (no newline)."""
    import orjson

    return orjson.dumps(document, option=orjson.OPT_NON_STR_KEYS).decode()


def emit_json(document: Mapping[str, Any]) -> None:
    """Write one JSON object as one line on stdout."""
    print(json_line(document))


def warn(message: str) -> None:
    """A one-line note on stderr that does not change the exit status."""
    print(f"quiver: {message}", file=sys.stderr)


def parse_size(text: str) -> int:
    """``"4096"``, ``"64K"``, ``"1MiB"``, ``"1g"`` -> bytes (binary units). For argparse."""
    raw = text.strip().lower().removesuffix("ib").removesuffix("b")
    number = raw.rstrip("kmgt")
    unit = raw[len(number) :]
    if not number.isdigit() or unit not in _SIZE_UNITS:
        raise argparse.ArgumentTypeError(f"not a size: {text!r} (want e.g. 4096, 64K, 1M, 1G)")
    value = int(number) * _SIZE_UNITS[unit]
    if value <= 0:
        raise argparse.ArgumentTypeError(f"a size must be positive, got {text!r}")
    return value


def positive_int(text: str) -> int:
    """An int > 0, for argparse."""
    value = _int(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be positive, got {text!r}")
    return value


def non_negative_int(text: str) -> int:
    """An int >= 0, for argparse."""
    value = _int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must not be negative, got {text!r}")
    return value


def _int(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None


def human_size(size: int) -> str:
    """``65536`` -> ``"64 KiB"`` (exact binary units only, else plain bytes)."""
    for unit, factor in (("TiB", 1 << 40), ("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if size >= factor and size % factor == 0:
            return f"{size // factor} {unit}"
    return f"{size} bytes"


def is_store(path: Path) -> bool:
    """Whether ``path`` holds a store (Quiver's recorded geometry or RocketMQ's commitlog)."""
    return (path / "config" / "store.json").is_file() or (path / "commitlog").is_dir()


def existing_store_path(directory: str) -> Path:
    """``directory`` as a path, when it holds a store; otherwise a usage error saying what is
    there instead (a command that reads or administers a store never creates one)."""
    path = Path(directory)
    if path.exists() and not path.is_dir():
        raise CliError(f"{path} is a file, not a store directory", EXIT_USAGE)
    if not is_store(path):
        what = "does not exist" if not path.exists() else "holds no store"
        hint = f"create a store with: quiver store init --data {path}"
        raise CliError(f"{path} {what} ({hint})", EXIT_USAGE)
    return path


def open_store(directory: str, **geometry: Any) -> MessageStore:
    """Open the existing store at ``directory``; a missing store is a usage error."""
    from localstore.store import MessageStore

    path = existing_store_path(directory)
    try:
        return MessageStore(path, **geometry)
    except ValueError as exc:  # a damaged file the store refuses (wrong length, bad JSON)
        raise CliError(f"cannot open store {path}: {exc}") from exc


def open_store_for_reading(directory: str) -> ReadableStore:
    """:func:`open_store`, or, when another process holds the store (a running application),
    a read-only view of what it has written (:class:`~localstore.read_only.ReadOnlyStore`: no
    lock, no write, only whole records), said in one line on stderr. Commands that only read
    (``store info``, ``read``, ``query``, ``offsets show``) open stores so; :func:`is_read_only`
    tells which they got (``--json`` output then carries ``"read_only": true``)."""
    from localstore.errors import StoreLockedError
    from localstore.read_only import ReadOnlyStore

    try:
        return open_store(directory)
    except StoreLockedError as exc:
        holder = f"pid {exc.holder_pid}" if exc.holder_pid else "pid not known"
        warn(f"store held by another process ({holder}): read-only view of what it has written")
        return ReadOnlyStore(directory)


def is_read_only(store: ReadableStore) -> bool:
    """Whether ``store`` is a read-only view (see :func:`open_store_for_reading`)."""
    from localstore.read_only import ReadOnlyStore

    return isinstance(store, ReadOnlyStore)


def existing_queues(store: ReadableStore, topic: str, queue: int | None) -> list[int]:
    """The queues of ``topic`` a command reads (``queue``, or all when None); an unknown topic
    or queue is an error (exit 1)."""
    known = store.queue_ids(topic)
    config = store.topics.get(topic)
    if not known and config is None:
        raise CliError(f"topic {topic} does not exist in store {store.root}", EXIT_FAILED)
    if queue is None:
        return known
    if queue not in known and (config is None or queue >= config.read_queue_nums):
        count = config.read_queue_nums if config else len(known)
        raise CliError(
            f"topic {topic} has no queue {queue} (it has {count} read queues)", EXIT_FAILED
        )
    return [queue]
