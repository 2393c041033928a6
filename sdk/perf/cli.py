"""``quiver perf ...``: benchmarks that print figures (``--json``: one JSON line per figure)."""

from __future__ import annotations

import argparse
import shutil
import tempfile
from pathlib import Path
from typing import Any


def add_parser(subparsers: Any) -> None:
    """Register ``perf`` and its sub-commands on the CLI's sub-parsers."""
    perf = subparsers.add_parser("perf", help="measure throughput and latency")
    commands = perf.add_subparsers(dest="perf_command", required=True)
    store = commands.add_parser(
        "store",
        help="the embedded store: batch and single put, get, sync flush",
        description="Measure the store's put and get paths at steady state.",
    )
    store.add_argument(
        "--data",
        type=Path,
        default=None,
        help="directory for the benchmark stores (default: a temp dir); it must be empty or absent",
    )
    store.add_argument("--count", type=int, default=1_000_000, help="messages per figure")
    store.add_argument("--size", type=int, default=100, help="body size in bytes")
    store.add_argument("--batch", type=int, default=100, help="messages per batch put")
    store.add_argument(
        "--sync-count",
        type=int,
        default=None,
        help="messages for the sync-flush figures (default: min(count, 100000))",
    )
    store.add_argument("--commitlog-file-size", type=int, default=1024 * 1024 * 1024)
    store.add_argument(
        "--no-index",
        dest="index_enabled",
        action="store_false",
        help="stores without index files (RocketMQ's messageIndexEnable=false)",
    )
    store.add_argument("--json", action="store_true", help="one JSON line per figure")
    store.add_argument("--quiet", action="store_true", help="no progress on stderr")
    store.set_defaults(func=_run_store)

    lookup = commands.add_parser(
        "lookup",
        help="key query and seek-by-time latency on a large store",
        description="Fill a store with --count indexed messages, then time random key queries "
        "and seeks by time.",
    )
    lookup.add_argument("--data", type=Path, default=None, help="empty directory (default: temp)")
    lookup.add_argument("--count", type=int, default=1_000_000, help="messages (indexed keys)")
    lookup.add_argument("--size", type=int, default=100, help="body size in bytes")
    lookup.add_argument("--lookups", type=int, default=20_000, help="timed lookups of each kind")
    lookup.add_argument("--json", action="store_true", help="one JSON line per figure")
    lookup.add_argument("--quiet", action="store_true", help="no progress on stderr")
    lookup.set_defaults(func=_run_lookup)

    recovery = commands.add_parser(
        "recovery",
        help="crash recovery: CRC-checking scan and re-dispatch speed",
        description="Fill a commitlog, then time abnormal recovery's CRC walk and the rebuild of "
        "consume queues and index files from it.",
    )
    recovery.add_argument("--data", type=Path, default=None, help="empty directory (default: temp)")
    recovery.add_argument("--bytes", type=int, default=1 << 30, help="commitlog bytes (1 GiB)")
    recovery.add_argument("--record-size", type=int, default=200, help="bytes per record")
    recovery.add_argument("--commitlog-file-size", type=int, default=1 << 30)
    recovery.add_argument("--json", action="store_true", help="one JSON line per figure")
    recovery.add_argument("--quiet", action="store_true", help="no progress on stderr")
    recovery.set_defaults(func=_run_recovery)


def _bench_dir(data: Path | None) -> tuple[Path, bool]:
    """The benchmark's directory (a new temp dir when none is given) and whether we own it."""
    if data is None:
        return Path(tempfile.mkdtemp(prefix="quiver-perf-")), True
    if data.exists() and any(data.iterdir()):
        raise SystemExit(f"quiver perf: {data} is not empty")
    return data, False


def _run_lookup(args: argparse.Namespace) -> int:
    from sdk.perf.lookup_bench import LookupBenchConfig, run_lookup_bench
    from sdk.perf.report import Progress, emit

    data_dir, owned = _bench_dir(args.data)
    config = LookupBenchConfig(data_dir, args.count, args.size, args.lookups)
    try:
        for figure in run_lookup_bench(config, Progress(enabled=not args.quiet)):
            emit(figure, args.json)
    finally:
        shutil.rmtree(data_dir if owned else data_dir / "lookup", ignore_errors=True)
    return 0


def _run_recovery(args: argparse.Namespace) -> int:
    from sdk.perf.recovery_bench import RecoveryBenchConfig, run_recovery_bench
    from sdk.perf.report import Progress, emit

    data_dir, owned = _bench_dir(args.data)
    config = RecoveryBenchConfig(data_dir, args.bytes, args.record_size, args.commitlog_file_size)
    try:
        for figure in run_recovery_bench(config, Progress(enabled=not args.quiet)):
            emit(figure, args.json)
    finally:
        shutil.rmtree(data_dir if owned else data_dir / "recovery", ignore_errors=True)
    return 0


def _run_store(args: argparse.Namespace) -> int:
    from sdk.perf.report import Progress, emit
    from sdk.perf.store_bench import StoreBenchConfig, run_store_bench

    for name in ("count", "size", "batch"):
        if getattr(args, name) <= 0:
            raise SystemExit(f"quiver perf store: --{name} must be positive")
    owned = args.data is None
    data_dir = Path(tempfile.mkdtemp(prefix="quiver-perf-")) if owned else args.data
    if not owned and data_dir.exists() and any(data_dir.iterdir()):
        raise SystemExit(f"quiver perf store: {data_dir} is not empty")
    config = StoreBenchConfig(
        data_dir=data_dir,
        count=args.count,
        size=args.size,
        batch=args.batch,
        sync_count=args.sync_count or min(args.count, 100_000),
        commitlog_file_size=args.commitlog_file_size,
        index_enabled=args.index_enabled,
    )
    try:
        for figure in run_store_bench(config, Progress(enabled=not args.quiet)):
            emit(figure, args.json)
    finally:
        shutil.rmtree(data_dir / "async", ignore_errors=True)
        shutil.rmtree(data_dir / "sync", ignore_errors=True)
        if owned:
            shutil.rmtree(data_dir, ignore_errors=True)
    return 0
