"""Run-time settings of a store (not recorded in it; they may differ between opens)."""

from __future__ import annotations

from dataclasses import dataclass, field

from localstore.record.tags import DEFAULT_DELAY_LEVELS
from localstore.retention import RetentionPolicy


@dataclass(slots=True)
class StoreOptions:
    """Run-time settings (not recorded in the store; may differ between opens)."""

    default_queue_count: int = 4
    flush_interval_ms: int = 500
    cq_flush_interval_ms: int = 1000
    sync_flush_timeout_ms: int = 5000
    store_host: str = "127.0.0.1:10911"
    warm_segments: bool = False
    # Build the key index in a child process, on another core (localstore.index.process):
    # puts skip the indexing work; queries wait for it to catch up.
    index_process: bool = False
    delay_levels: str = DEFAULT_DELAY_LEVELS
    retention: RetentionPolicy = field(default_factory=RetentionPolicy)
    clean_interval_ms: int = 10_000  # periodic retention check (0: only on request)
    # Check every record's body CRC on gets (RocketMQ never does): a mismatch is a damaged
    # record (localstore.errors.DamagedRecordError), as one that does not decode. Off, gets
    # never read the CRC; on, a get decodes every record it answers, the raw get included.
    check_crc_on_read: bool = False
