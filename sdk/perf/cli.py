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
