"""``quiver perf ...``: benchmarks that print figures (``--json``: one JSON line per figure)."""

from __future__ import annotations

import argparse
import dataclasses
import importlib.util
import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sdk.errors import InvalidArgumentError
from sdk.perf.defaults import DEFAULT_SIZES, REMOTE_PULL_BATCH
from sdk.server import event_loop

# A benchmark record's header, topic and properties take less than this beside its body.
RECORD_ALLOWANCE = 1024

if TYPE_CHECKING:
    from localstore.geometry import StoreGeometry
    from sdk.perf.report import Figure, Progress


def add_parser(subparsers: Any) -> None:
    """Register ``perf`` and its sub-commands on the CLI's sub-parsers."""
    perf = subparsers.add_parser("perf", help="measure throughput and latency")
    commands = perf.add_subparsers(dest="perf_command", metavar="BENCHMARK", required=True)
    _add_store(commands)
    _add_lookup(commands)
    _add_recovery(commands)
    _add_e2e(commands)
    _add_rebalance(commands)
    _add_spark(commands)
    for name in ("produce", "consume"):
        _add_remote(commands, name)


def _add_store(commands: Any) -> None:
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
    store.add_argument(
        "--uvloop",
        action="store_true",
        help="also measure the 64 asyncio producers on uvloop (pip install 'quiver[uvloop]')",
    )
    store.add_argument(
        "--pin-cpu",
        type=int,
        default=None,
        metavar="CPU",
        help="also measure the 16 producer threads held on this CPU (Linux)",
    )
    store.add_argument("--json", action="store_true", help="one JSON line per figure")
    store.add_argument("--quiet", action="store_true", help="no progress on stderr")
    store.set_defaults(func=_run_store)


def _add_lookup(commands: Any) -> None:
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


def _add_recovery(commands: Any) -> None:
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


def _add_e2e(commands: Any) -> None:
    e2e = commands.add_parser(
        "e2e",
        help="the SDK end to end on an embedded broker: produce, consume, latency",
        description="Producer batch throughput, push-consumer drain throughput and end-to-end "
        "latency with one message in flight, on an embedded broker (every message indexed).",
    )
    e2e.add_argument("--data", type=Path, default=None, help="empty directory (default: temp)")
    e2e.add_argument("--count", type=int, default=1_000_000, help="messages produced and consumed")
    e2e.add_argument("--size", type=int, default=100, help="body size in bytes")
    e2e.add_argument("--batch", type=int, default=100, help="messages per send_batch")
    e2e.add_argument("--latency-samples", type=int, default=2000, help="timed e2e samples")
    e2e.add_argument("--consume-batch", type=int, default=32, help="messages per listener call")
    e2e.add_argument("--pull-batch", type=int, default=64, help="messages per queue per pull")
    e2e.add_argument("--consume-threads", type=int, default=2, help="listener threads")
    e2e.add_argument("--commitlog-file-size", type=int, default=1 << 30)
    e2e.add_argument(
        "--in-process-index",
        action="store_true",
        help="build the key index in the put path, not in a child process "
        "(StoreOptions.index_process=False)",
    )
    e2e.add_argument(
        "--pin-cpu",
        type=int,
        default=None,
        metavar="CPU",
        help="also measure put, get and latency with the threads held on this CPU (Linux)",
    )
    e2e.add_argument("--json", action="store_true", help="one JSON line per figure")
    e2e.add_argument("--quiet", action="store_true", help="no progress on stderr")
    _add_broker_options(e2e)
    e2e.set_defaults(func=_run_e2e)


_REMOTE_HELP = {
    "produce": "producers against a broker over HTTP: produce_msgs_per_s",
    "consume": "pull consumers of one group against a broker over HTTP: consume_msgs_per_s",
}


def _add_remote(commands: Any, name: str) -> None:
    remote = commands.add_parser(
        name,
        help=_REMOTE_HELP[name],
        description=f"{_REMOTE_HELP[name]} (give --broker URL or --spawn-broker).",
    )
    remote.add_argument("--count", type=int, default=1_000_000, help="messages")
    remote.add_argument("--size", type=int, default=100, help="body size in bytes")
    remote.add_argument("--batch", type=int, default=100, help="messages per send and per poll")
    remote.add_argument(
        "--pull-batch",
        type=int,
        default=REMOTE_PULL_BATCH,
        help="messages per queue per pull (the consumers' prefetch; a poll hands out --batch)",
    )
    remote.add_argument("--json", action="store_true", help="one JSON line per figure")
    remote.add_argument("--quiet", action="store_true", help="no progress on stderr")
    _add_broker_options(remote)
    remote.set_defaults(func=_run_remote, figures=(name,))


def _add_broker_options(parser: argparse.ArgumentParser) -> None:
    """The remote-mode options: where the broker is, and how many clients."""
    where = parser.add_argument_group("remote mode (a broker over HTTP)")
    where.add_argument("--broker", metavar="URL", help="a running broker's URL")
    where.add_argument(
        "--spawn-broker",
        action="store_true",
        help="start a broker process over --data (or a temp dir) on a free loopback port",
    )
    where.add_argument(
        "--flush", choices=("async", "sync"), default="async", help="the spawned broker's flush"
    )
    event_loop.add_loop_option(where)
    where.add_argument("--producers", type=int, default=4, help="concurrent producers")
    where.add_argument("--consumers", type=int, default=4, help="consumers in the group")
    if not any(action.dest == "data" for action in parser._actions):
        parser.add_argument("--data", type=Path, default=None, help="--spawn-broker's directory")
    if not any(action.dest == "latency_samples" for action in parser._actions):
        parser.set_defaults(latency_samples=2000)


def _add_rebalance(commands: Any) -> None:
    rebalance = commands.add_parser(
        "rebalance",
        help="consumer-group rebalance time and ownership overlaps under load",
        description="Members of one group join and leave (1-8 members, 16 queues, continuous "
        "load); time until every queue is owned again and consumed, overlapping ownership, and "
        "messages left behind.",
    )
    rebalance.add_argument(
        "--data", type=Path, default=None, help="empty directory (default: temp)"
    )
    rebalance.add_argument("--queues", type=int, default=16, help="queues of the topic")
    rebalance.add_argument(
        "--sizes",
        default=",".join(map(str, DEFAULT_SIZES)),
        help="group sizes to go through, one member joining or leaving at a time",
    )
    rebalance.add_argument("--rate", type=int, default=2000, help="messages produced per second")
    rebalance.add_argument("--json", action="store_true", help="one JSON line per figure")
    rebalance.add_argument("--quiet", action="store_true", help="no progress on stderr")
    rebalance.set_defaults(func=_run_rebalance)


def _add_spark(commands: Any) -> None:
    spark = commands.add_parser(
        "spark",
        help="the quiver Spark source's reads beside Parquet and JSON lines (pyspark, Java)",
        description="Fill a store, then on local[2] read it through the quiver source with 1, 2 "
        "and 4 partitions and the same rows as Parquet and as JSON lines, with a query touching "
        "every column: rows/s and ratios (needs the spark extra and Java 17+).",
    )
    spark.add_argument("--data", type=Path, default=None, help="empty directory (default: temp)")
    spark.add_argument("--count", type=int, default=1_000_000, help="messages")
    spark.add_argument("--size", type=int, default=100, help="body size in bytes")
    spark.add_argument(
        "--write",
        action="store_true",
        help="also time a Spark write of --count rows through a broker it spawns",
    )
    spark.add_argument("--json", action="store_true", help="one JSON line per figure")
    spark.add_argument("--quiet", action="store_true", help="no progress on stderr")
    spark.set_defaults(func=_run_spark)


def _run_bench(
    args: argparse.Namespace,
    make_figures: Callable[[Path, Progress], Iterator[Figure]],
    subdirs: tuple[str, ...],
) -> int:
    """Run one benchmark in ``--data`` (which must be empty) or a new temp dir, print its
    figures, and remove what it wrote (``subdirs`` of ``--data``, or the whole temp dir)."""
    from sdk.perf.report import Progress, emit

    owned = args.data is None
    if not owned and args.data.exists():
        if not args.data.is_dir():
            raise _usage(f"--data {args.data} is not a directory")
        if any(args.data.iterdir()):
            raise _usage(f"--data {args.data} is not empty")
    data_dir = Path(tempfile.mkdtemp(prefix="quiver-perf-")) if owned else args.data
    try:
        for figure in make_figures(data_dir, Progress(enabled=not args.quiet)):
            emit(figure, args.json)
    finally:
        for path in [data_dir] if owned else [data_dir / name for name in subdirs]:
            shutil.rmtree(path, ignore_errors=True)
    return 0


def _usage(message: str) -> InvalidArgumentError:
    """A usage error: the CLI reports it as it reports every one (one line on stderr, or JSON
    with ``--json``) with exit status 2 (bad usage)."""
    return InvalidArgumentError(message)


def _check_positive(args: argparse.Namespace, *names: str) -> None:
    """Each of the ``names`` arguments is > 0 (or not given, None)."""
    for name in names:
        value = getattr(args, name)
        if value is not None and value <= 0:
            raise _usage(f"--{name.replace('_', '-')} must be positive, got {value}")


def _geometry(commitlog_file_size: int | None = None) -> StoreGeometry:
    """The geometry of the benchmark's stores (the store's defaults but the segment size), as
    the store checks it."""
    from localstore.geometry import StoreGeometry

    if commitlog_file_size is None:
        return StoreGeometry()
    try:
        return StoreGeometry(commitlog_file_size=commitlog_file_size)
    except ValueError as exc:
        raise _usage(f"--commitlog-file-size {commitlog_file_size}: {exc}") from None


def _check_body_size(size: int, geometry: StoreGeometry) -> None:
    """A ``--size`` body is one the store takes and its record fits a commitlog segment."""
    if size > geometry.max_message_size:
        raise _usage(
            f"--size {size} is over the store's maximum message size "
            f"({geometry.max_message_size} bytes)"
        )
    if size + RECORD_ALLOWANCE > geometry.commitlog_file_size:
        raise _usage(
            f"--size {size} does not fit a commitlog segment of {geometry.commitlog_file_size} "
            f"bytes (--commitlog-file-size): a record takes its body and up to "
            f"{RECORD_ALLOWANCE} bytes more"
        )


def _run_spark(args: argparse.Namespace) -> int:
    if importlib.util.find_spec("pyspark") is None:
        raise _usage("quiver perf spark needs pyspark: pip install 'quiver[spark]'")
    from sdk.perf.spark_bench import SparkBenchConfig, run_spark_bench
    from sdk.perf.spark_write_bench import SparkWriteBenchConfig, run_spark_write_bench

    _check_positive(args, "count", "size")
    _check_body_size(args.size, _geometry())

    def figures(data: Path, progress: Progress) -> Iterator[Figure]:
        yield from run_spark_bench(SparkBenchConfig(data, args.count, args.size), progress)
        if args.write:
            yield from run_spark_write_bench(SparkWriteBenchConfig(args.count, args.size))
            progress.done("a Spark write through a spawned broker")

    return _run_bench(args, figures, ("store", "copies"))


def _run_lookup(args: argparse.Namespace) -> int:
    from sdk.perf.lookup_bench import LookupBenchConfig, run_lookup_bench

    _check_positive(args, "count", "size", "lookups")
    _check_body_size(args.size, _geometry())
    return _run_bench(
        args,
        lambda data, progress: run_lookup_bench(
            LookupBenchConfig(data, args.count, args.size, args.lookups), progress
        ),
        ("lookup",),
    )


def _run_recovery(args: argparse.Namespace) -> int:
    from localstore.record.codec import BLANK_RECORD_SIZE, record_overhead
    from sdk.perf.recovery_bench import (
        PROPERTIES_BYTES,
        TOPIC,
        RecoveryBenchConfig,
        run_recovery_bench,
    )

    _check_positive(args, "bytes", "record_size", "commitlog_file_size")
    geometry = _geometry(args.commitlog_file_size)
    record_size = args.record_size
    beside_body = record_overhead(len(TOPIC) + 1) + PROPERTIES_BYTES  # as recovery_bench fills
    if record_size <= beside_body:
        raise _usage(
            f"--record-size {record_size} is too small for this topic: a record takes "
            f"{beside_body} bytes beside its body (want at least {beside_body + 1})"
        )
    if record_size - beside_body > geometry.max_message_size:
        raise _usage(
            f"--record-size {record_size} is too large: its body of {record_size - beside_body} "
            f"bytes is over the store's maximum message size ({geometry.max_message_size} bytes)"
        )
    if record_size + BLANK_RECORD_SIZE > geometry.commitlog_file_size:
        raise _usage(
            f"--record-size {record_size} does not fit a commitlog segment of "
            f"{geometry.commitlog_file_size} bytes (--commitlog-file-size)"
        )
    if args.bytes < record_size:
        raise _usage(f"--bytes {args.bytes} is less than one record (--record-size {record_size})")
    return _run_bench(
        args,
        lambda data, progress: run_recovery_bench(
            RecoveryBenchConfig(data, args.bytes, record_size, args.commitlog_file_size),
            progress,
        ),
        ("recovery",),
    )


def _run_store(args: argparse.Namespace) -> int:
    from sdk.perf.store_bench import StoreBenchConfig, run_store_bench

    _check_positive(args, "count", "size", "batch", "sync_count", "commitlog_file_size")
    _check_body_size(args.size, _geometry(args.commitlog_file_size))
    _check_pin_cpu(args.pin_cpu)
    if args.uvloop and importlib.util.find_spec("uvloop") is None:
        raise SystemExit(
            "quiver perf store: --uvloop needs uvloop, which is not installed "
            "(pip install 'quiver[uvloop]')"
        )
    sync_count = min(args.count, 100_000) if args.sync_count is None else args.sync_count

    def figures(data: Path, progress: Progress) -> Iterator[Figure]:
        config = StoreBenchConfig(
            data_dir=data,
            count=args.count,
            size=args.size,
            batch=args.batch,
            sync_count=sync_count,
            commitlog_file_size=args.commitlog_file_size,
            index_enabled=args.index_enabled,
            uvloop=args.uvloop,
            pin_cpu=args.pin_cpu,
        )
        return run_store_bench(config, progress)

    return _run_bench(args, figures, ("async", "sync"))


def _run_e2e(args: argparse.Namespace) -> int:
    from sdk.perf.e2e_bench import E2EBenchConfig, run_e2e_bench

    if args.broker is not None or args.spawn_broker:
        args.figures = ("e2e",)
        return _run_remote(args)
    _check_positive(
        args,
        "count",
        "size",
        "batch",
        "latency_samples",
        "consume_batch",
        "pull_batch",
        "consume_threads",
        "commitlog_file_size",
    )
    _check_body_size(args.size, _geometry(args.commitlog_file_size))
    _check_pin_cpu(args.pin_cpu)
    config = E2EBenchConfig(
        data_dir=args.data,
        count=args.count,
        size=args.size,
        batch=args.batch,
        latency_samples=args.latency_samples,
        consume_batch=args.consume_batch,
        pull_batch=args.pull_batch,
        consume_threads=args.consume_threads,
        commitlog_file_size=args.commitlog_file_size,
        index_process=not args.in_process_index,
        pin_cpu=args.pin_cpu,
    )
    return _run_bench(
        args,
        lambda data, progress: run_e2e_bench(dataclasses.replace(config, data_dir=data), progress),
        ("e2e",),
    )


def _check_pin_cpu(cpu: int | None) -> None:
    """Stop before measuring anything when ``--pin-cpu`` names a CPU that cannot be used."""
    from sdk.perf.affinity import pin_problem

    problem = None if cpu is None else pin_problem(cpu)
    if problem is not None:
        raise _usage(f"--pin-cpu {cpu}: {problem}")


def _run_rebalance(args: argparse.Namespace) -> int:
    from sdk.perf.rebalance_bench import RebalanceBenchConfig, run_rebalance_bench

    try:
        sizes = tuple(int(size) for size in args.sizes.split(","))
    except ValueError:
        raise _usage(f"--sizes wants numbers like 1,3,2, got {args.sizes!r}") from None
    if min(sizes) < 1:
        raise _usage(f"--sizes wants group sizes of 1 or more, got {args.sizes!r}")
    _check_positive(args, "queues", "rate")
    return _run_bench(
        args,
        lambda data, progress: run_rebalance_bench(
            RebalanceBenchConfig(data, args.queues, sizes, args.rate), progress
        ),
        ("rebalance",),
    )


def _run_remote(args: argparse.Namespace) -> int:
    """A remote-mode benchmark against ``--broker URL``, or a broker it spawns."""
    from sdk.perf.remote_bench import RemoteBenchConfig, run_remote_bench
    from sdk.perf.spawn import spawned_broker

    _check_positive(
        args, "count", "size", "batch", "pull_batch", "producers", "consumers", "latency_samples"
    )
    if (args.broker is None) == (not args.spawn_broker):
        raise _usage("give --broker URL or --spawn-broker (one of them)")
    config = RemoteBenchConfig(
        url=args.broker or "",
        count=args.count,
        size=args.size,
        batch=args.batch,
        producers=args.producers,
        consumers=args.consumers,
        pull_batch=args.pull_batch,
        latency_samples=args.latency_samples,
        loop=args.loop,
    )
    event_loop.loop_factory(args.loop)  # a usage error before any broker starts
    if args.broker is not None:
        from sdk.perf.report import Progress, emit

        for figure in run_remote_bench(config, args.figures, Progress(enabled=not args.quiet)):
            emit(figure, args.json)
        return 0

    def figures(data: Path, progress: Progress) -> Iterator[Figure]:
        with spawned_broker(data / "broker", flush=args.flush, loop=args.loop) as broker:
            spawned = dataclasses.replace(config, url=broker.url, broker_pid=broker.pid)
            yield from run_remote_bench(spawned, args.figures, progress)

    return _run_bench(args, figures, ("broker",))
