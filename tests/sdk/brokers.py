"""What many SDK tests open a broker with: a small geometry, so a store costs little disk."""

from __future__ import annotations

from typing import Any

SMALL_GEOMETRY: dict[str, Any] = {
    "commitlog_file_size": 1 << 20,
    "cq_entries_per_file": 1024,
    "index_slots": 1024,
    "index_entries": 4096,
}
