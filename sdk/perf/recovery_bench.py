"""``quiver perf recovery``: how fast a crashed store comes back.

A store is filled with ``--bytes`` of commitlog in records of ``--record-size`` bytes (one topic,
four queues, one UNIQ_KEY per message, in batches of 100; untimed), then:

* ``recovery_scan_MB_per_s``: abnormal recovery's walk over the whole log with CRC checks, as
  recovery runs it (split at the offset index's record starts across worker processes when the
  log is long), MB = 10^6 bytes of log.
* ``recovery_redispatch_records_per_s``: re-dispatch of a tail that lacks its consume-queue
  units and index entries: the consume queues and index files are deleted before the open, so
  recovery rebuilds them from every record (compare with the limits peer's
  ``read_crc_records_per_s``).
* ``recovery_open_s``: the whole open in that second case.
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from localstore import MessageStore, NewMessage, StoreOptions, UniqKeyGenerator
from localstore.record.codec import record_overhead
from localstore.recovery.log_scan import scan_valid_end
from localstore.recovery.recover import split_hints
from sdk.perf.report import Figure, Progress

TOPIC = "RecoveryTopic"
QUEUES = 4
FILL_BATCH = 100
PROPERTIES_BYTES = len("UNIQ_KEY\x01" + "0" * 32 + "\x02")


@dataclass(frozen=True, slots=True)
class RecoveryBenchConfig:
    data_dir: Path
    log_bytes: int
    record_size: int
    segment_size: int


def run_recovery_bench(config: RecoveryBenchConfig, progress: Progress) -> Iterator[Figure]:
    root = config.data_dir / "recovery"
    records = _fill(root, config, progress)
    log_bytes = records * config.record_size

    with MessageStore(root) as store:  # a clean open, then time the CRC walk alone
        start = time.perf_counter()
        commitlog = store.commitlog
        end, scanned = scan_valid_end(
            commitlog, commitlog.min_offset, check_crc=True, split_hints=split_hints(commitlog)
        )
        elapsed = time.perf_counter() - start
    progress.done("CRC-checking scan")
    yield Figure("recovery_scan_MB_per_s", end / elapsed / 1e6, scanned, config.record_size, 0)

    shutil.rmtree(root / "consumequeue")
    shutil.rmtree(root / "index")
    shutil.rmtree(root / "timeindex", ignore_errors=True)
    (root / "abort").write_text("0")
    with open(root / "checkpoint", "r+b") as checkpoint:
        checkpoint.write(bytes(24))  # no flush time known: recovery starts at segment 0
    start = time.perf_counter()
    with MessageStore(root) as store:
        elapsed = time.perf_counter() - start
        dispatched = store.recovery.records_dispatched
        if store.recovery.end_offset < log_bytes:
            raise RuntimeError(f"recovery ended at {store.recovery.end_offset} of {log_bytes}")
    progress.done("re-dispatch")
    yield Figure(
        "recovery_redispatch_records_per_s", dispatched / elapsed, dispatched, config.record_size, 0
    )
    yield Figure("recovery_open_s", elapsed, dispatched, config.record_size, 0)


def _fill(root: Path, config: RecoveryBenchConfig, progress: Progress) -> int:
    """Write about ``log_bytes`` of records of exactly ``record_size`` bytes; returns how many."""
    body_size = config.record_size - record_overhead(len(TOPIC) + 1) - PROPERTIES_BYTES
    if body_size < 1:
        raise ValueError(f"--record-size {config.record_size} is too small for this topic")
    body = os.urandom(body_size)
    ids = UniqKeyGenerator()
    total = config.log_bytes // config.record_size
    with MessageStore(
        root, options=StoreOptions(warm_segments=True), commitlog_file_size=config.segment_size
    ) as store:
        index, store.index = store.index, None  # filling is not what is measured
        for start in range(0, total, FILL_BATCH):
            queue_id = (start // FILL_BATCH) % QUEUES
            batch = [
                NewMessage(TOPIC, body, queue_id, {"UNIQ_KEY": ids.next()})
                for _ in range(min(FILL_BATCH, total - start))
            ]
            result = store.put_batch(batch)
            if not result.ok:
                raise RuntimeError(f"fill failed: {result.status.value} {result.detail}")
            if start % 200_000 == 0:
                progress.update("fill", start, total)
        store.index = index
    progress.done("fill")
    return total
