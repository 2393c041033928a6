"""``quiver store init | info | verify``: create a store, describe it, check its files."""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sdk.cli.common import (
    EXIT_FAILED,
    EXIT_OK,
    EXIT_USAGE,
    CliError,
    Subparsers,
    add_data_option,
    add_json_option,
    emit_json,
    human_size,
    is_store,
    open_store,
    open_store_for_reading,
    parse_size,
    positive_int,
)
from sdk.cli.progress import ProgressLine, progress_line

if TYPE_CHECKING:
    from localstore.recovery.recover import RecoveryReport
    from localstore.recovery.verify import VerifyReport
    from localstore.store import MessageStore
    from sdk.cli.common import ReadableStore

_GEOMETRY_OPTIONS = (  # (option, StoreGeometry field, argparse type, help)
    (
        "--commitlog-file-size",
        "commitlog_file_size",
        parse_size,
        "bytes per commitlog segment, e.g. 64M (default 1G)",
    ),
    (
        "--cq-entries-per-file",
        "cq_entries_per_file",
        positive_int,
        "units per consume-queue file (default 300000)",
    ),
    ("--index-slots", "index_slots", positive_int, "hash slots per index file (default 5000000)"),
    ("--index-entries", "index_entries", positive_int, "entries per index file (default 20000000)"),
    (
        "--max-message-size",
        "max_message_size",
        parse_size,
        "largest body accepted, e.g. 4M (default 4M)",
    ),
)


def add_parser(subparsers: Subparsers) -> None:
    """Add ``store`` and its sub-commands."""
    store = subparsers.add_parser(
        "store",
        help="create, describe and check a store",
        description="Create, describe and check a store directory.",
    )
    actions = store.add_subparsers(dest="action", metavar="ACTION", required=True)
    _add_init(actions)
    _add_info(actions)
    _add_verify(actions)
    _add_clean(actions)


def _add_init(actions: Subparsers) -> None:
    init = actions.add_parser(
        "init",
        help="create a store",
        description="Create a store (or check an existing one's geometry).",
    )
    add_data_option(init, positional_alias=True)
    for option, dest, kind, text in _GEOMETRY_OPTIONS:
        init.add_argument(option, dest=dest, type=kind, metavar="N", help=text)
    init.add_argument(
        "--flush",
        dest="flush_mode",
        choices=("sync", "async"),
        help="sync: a put returns once on disk; async (default): flushed every 500 ms",
    )
    init.add_argument(
        "--no-index",
        dest="index_enabled",
        action="store_const",
        const=False,
        help="build no index files (no query by key; RocketMQ's messageIndexEnable=false)",
    )
    add_json_option(init)
    init.set_defaults(func=run_init)


def _add_info(actions: Subparsers) -> None:
    info = actions.add_parser(
        "info",
        help="geometry, segments, topics and offsets",
        description="Describe a store: geometry, commitlog segments, "
        "topics and their queues' offsets.",
    )
    add_data_option(info, positional_alias=True)
    add_json_option(info)
    info.set_defaults(func=run_info)


def _add_verify(actions: Subparsers) -> None:
    verify = actions.add_parser(
        "verify",
        help="check every record and consume-queue unit",
        description="Check every commitlog record (frame, offset, CRC) "
        "and every consume-queue unit. Exit status 1 when "
        "something is wrong.",
    )
    add_data_option(verify, positional_alias=True)
    verify.add_argument(
        "--max-problems",
        type=positive_int,
        default=100,
        metavar="N",
        help="list at most N problems (default 100; all are counted)",
    )
    verify.add_argument(
        "--repair",
        action="store_true",
        help="rebuild from the commitlog each consume-queue unit found wrong, then verify again",
    )
    add_json_option(verify)
    verify.set_defaults(func=run_verify)


def _add_clean(actions: Subparsers) -> None:
    clean = actions.add_parser(
        "clean",
        help="delete expired segments (retention)",
        description="Delete commitlog segments older than the retention time (72 h), oldest "
        "first, never the last one, and the consume-queue and index files that only point into "
        "them. --force deletes segments whatever their age.",
    )
    add_data_option(clean, positional_alias=True)
    clean.add_argument(
        "--force", action="store_true", help="delete old segments whatever their age"
    )
    add_json_option(clean)
    clean.set_defaults(func=run_clean)


def run_init(args: argparse.Namespace) -> int:
    """Create the store at DIR with the requested geometry; print the geometry."""
    from localstore.errors import GeometryError
    from localstore.geometry import new_geometry
    from localstore.store import MessageStore

    requested = {
        name: getattr(args, name) for name in _geometry_fields() if getattr(args, name) is not None
    }
    try:
        new_geometry(requested)  # refused before anything is created
    except GeometryError as exc:
        raise CliError(str(exc), EXIT_USAGE) from exc
    path = Path(args.data)
    if path.exists() and not path.is_dir():
        raise CliError(f"{path} exists and is not a directory", EXIT_USAGE)
    existed = is_store(path)
    with MessageStore(path, **requested) as store:
        geometry = dataclasses.asdict(store.geometry)
    if args.json:
        emit_json({"path": str(path), "created": not existed, "geometry": geometry})
        return EXIT_OK
    print(f"{'store exists' if existed else 'created store'} {path}")
    _print_geometry(geometry)
    return EXIT_OK


def _geometry_fields() -> list[str]:
    return [dest for _, dest, _, _ in _GEOMETRY_OPTIONS] + ["flush_mode", "index_enabled"]


def _print_geometry(geometry: dict[str, Any]) -> None:
    for name, value in geometry.items():
        size = f" ({human_size(value)})" if name.endswith("_size") else ""
        print(f"  {name:<20} {value}{size}")


def run_info(args: argparse.Namespace) -> int:
    """Describe the store at DIR (a read-only view of it when another process holds it)."""
    with progress_line(args) as progress:
        progress.status(f"opening store {args.data}")
        with open_store_for_reading(args.data) as store:
            document = describe(store, progress)
            recovery = getattr(store, "recovery", None)  # none for a read-only view
    if args.json:
        emit_json(document)
        return EXIT_OK
    commitlog = document["commitlog"]
    print(f"store {document['path']}")
    print("geometry")
    _print_geometry(document["geometry"])
    if document["crashed_last_time"]:
        print("the last run did not close the store cleanly (recovered at open)")
    if recovery is not None and (cut := _recovery_cut(recovery)) is not None:
        print(cut)
    print(
        f"commitlog [{commitlog['min_offset']}, {commitlog['max_offset']}) in "
        f"{len(commitlog['segments'])} segment(s)"
    )
    for segment in commitlog["segments"]:
        print(f"  {segment['name']}  start {segment['start_offset']}")
    print(f"topics: {len(document['topics'])}")
    for topic in document["topics"]:
        print(
            f"  {topic['topic']}: {topic['messages']} message(s), "
            f"{topic['write_queue_nums']} write / {topic['read_queue_nums']} read queues"
        )
        for queue in topic["queues"]:
            print(
                f"    queue {queue['queue_id']:<3} offsets [{queue['min_offset']}, "
                f"{queue['max_offset']})  {queue['messages']} message(s)"
            )
    return EXIT_OK


def describe(store: ReadableStore, progress: ProgressLine | None = None) -> dict[str, Any]:
    """What ``store info`` shows, as a JSON-ready dict. A read-only view of a held store
    (:class:`~localstore.read_only.ReadOnlyStore`) recovered nothing: ``crashed_last_time``
    and ``recovery`` are null, ``read_only`` is true and ``visible_end`` is where the records
    it serves end."""
    from localstore.store import MessageStore

    commitlog = store.commitlog
    names = sorted(set(store.topics.topics) | {topic for topic, _ in store.queues.queues})
    topics = []
    for done, name in enumerate(names):
        if progress is not None:
            progress.update("describing topics", done, len(names))
        config = store.topics.get(name)
        queues = []
        for queue_id in store.queue_ids(name):
            low, high = store.min_offset(name, queue_id), store.max_offset(name, queue_id)
            queues.append(
                {
                    "queue_id": queue_id,
                    "min_offset": low,
                    "max_offset": high,
                    "messages": max(high - low, 0),
                }
            )
        topics.append(
            {
                "topic": name,
                "read_queue_nums": config.read_queue_nums if config else len(queues),
                "write_queue_nums": config.write_queue_nums if config else len(queues),
                "messages": sum(queue["messages"] for queue in queues),
                "queues": queues,
            }
        )
    return {
        "path": str(store.root),
        "geometry": dataclasses.asdict(store.geometry),
        "flush_mode": store.geometry.flush_mode,
        "crashed_last_time": (store.crashed_last_time if isinstance(store, MessageStore) else None),
        "recovery": _recovery_json(store) if isinstance(store, MessageStore) else None,
        "commitlog": {
            "min_offset": commitlog.min_offset,
            "max_offset": commitlog.max_offset,
            "segments": [
                {
                    "name": segment.path.name,
                    "start_offset": segment.start_offset,
                    "size": segment.size,
                }
                for segment in commitlog.segments.segments
            ],
        },
        "topics": topics,
        **(
            {}
            if isinstance(store, MessageStore)
            else {"read_only": True, "visible_end": store.visible_end}
        ),
    }


def _recovery_json(store: MessageStore) -> dict[str, Any]:
    """What recovery did when ``store`` opened, as ``info`` and ``verify`` print it."""
    recovery = store.recovery
    return {
        "crashed_last_time": store.crashed_last_time,
        "abnormal": recovery.abnormal,
        "start_offset": recovery.start_offset,
        "end_offset": recovery.end_offset,
        "records_scanned": recovery.records_scanned,
        "records_dispatched": recovery.records_dispatched,
        "units_truncated": recovery.units_truncated,
        "rebuilt_queues": recovery.rebuilt_queues,
        "damaged": [
            {"file": d.file, "phys_offset": d.phys_offset, "length": d.length}
            for d in recovery.damaged
        ],
        "cut_tail": list(recovery.cut_tail) if recovery.cut_tail else None,
        "unfinished_put": dataclasses.asdict(recovery.unfinished_put)
        if recovery.unfinished_put
        else None,
    }


def _recovery_cut(recovery: RecoveryReport) -> str | None:
    """A line on what recovery at open removed from the queues, or None when it removed
    nothing: verify checks the files as recovery left them, so this is said beside it."""
    if not (
        recovery.units_truncated or recovery.rebuilt_queues or recovery.damaged or recovery.cut_tail
    ):
        return None
    parts = []
    if recovery.damaged:
        ranges = ", ".join(str(d) for d in recovery.damaged)
        parts.append(
            f"kept {len(recovery.damaged)} damaged range(s) that valid records follow: {ranges}"
        )
    if recovery.unfinished_put:
        parts.append(f"cut an unfinished put: {recovery.unfinished_put}, never acknowledged")
    if recovery.cut_tail:
        start, end = recovery.cut_tail
        parts.append(f"cut the torn tail [{start}, {end}) of the commitlog")
    if recovery.units_truncated:
        parts.append(
            f"cut {recovery.units_truncated} consume-queue unit(s) pointing past the "
            f"commitlog's valid end {recovery.end_offset} (messages lost with a damaged or torn "
            f"record, or never fully written)"
        )
    if recovery.rebuilt_queues:
        parts.append(f"rebuilt queue(s) {', '.join(recovery.rebuilt_queues)} from the commitlog")
    return "recovery at open " + "; ".join(parts)


def run_verify(args: argparse.Namespace) -> int:
    """Verify the store at DIR; exit status 1 when a problem is found. What recovery at open
    removed (the store is checked as recovery left it) is reported beside the checks."""
    from localstore.recovery.verify import repair_units, verify_store

    repaired: list[str] = []
    with progress_line(args) as progress:
        progress.status(f"opening store {args.data}")
        with open_store(args.data) as store:

            def verify() -> VerifyReport:
                return verify_store(
                    store,
                    max_problems=args.max_problems,
                    on_progress=lambda what, done, total: progress.update(
                        f"verifying {what}", done, total
                    ),
                )

            report = verify()
            if args.repair and not report.ok:
                repaired = repair_units(store, report)
                if repaired:
                    report = verify()
            recovery = _recovery_json(store)
            cut = _recovery_cut(store.recovery)
    if args.json:
        emit_json({**report.to_json(), "recovery": recovery, "repaired": repaired})
    else:
        if cut is not None:
            print(f"store {args.data}: {cut}")
        for line in repaired:
            print(f"store {args.data}: {line}")
        print(f"store {args.data}: {report.summary()}")
        for problem in report.problems:
            print(f"  {problem}")
        if report.problem_count > len(report.problems):
            print(f"  ... and {report.problem_count - len(report.problems)} more")
    if report.ok:
        return EXIT_OK
    raise CliError(
        f"store {args.data} failed verification: {report.problem_count} "
        f"problem(s), the first: {report.problems[0]}",
        EXIT_FAILED,
    )


def run_clean(args: argparse.Namespace) -> int:
    """Run retention on the store at DIR now and print what it deleted."""
    with open_store(args.data) as store:
        report = store.clean(force=args.force, manual=True)
        queues = {
            f"{topic}/{queue_id}": store.min_offset(topic, queue_id)
            for topic, queue_id in sorted(store.queues.queues)
        }
    if args.json:
        emit_json(
            {
                "deleted": [str(path) for path in report.deleted],
                "commitlog_min_offset": report.commitlog_min_offset,
                "queue_min_offsets": queues,
                "reason": report.trigger.reason,
            }
        )
        return EXIT_OK
    for path in report.deleted:
        print(f"deleted {path}")
    print(
        f"store {args.data}: {len(report.commitlog_files)} commitlog segment(s), "
        f"{len(report.queue_files)} consume-queue file(s), {len(report.index_files)} index "
        f"file(s) deleted; commitlog min offset {report.commitlog_min_offset}"
    )
    return EXIT_OK
