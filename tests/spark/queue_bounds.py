"""A stand-in for the store's queue bounds in the planners' tests without Spark or a store."""

from __future__ import annotations


class Offsets:
    """Queue offsets of a store: {(topic, queue id): (min offset, max offset)}; the message at
    offset o is stored at time ``1000 + 10 * o`` (ms)."""

    def __init__(self, bounds: dict[tuple[str, int], tuple[int, int]]) -> None:
        self.bounds = bounds

    def queue_ids(self, topic: str) -> list[int]:
        return sorted(q for t, q in self.bounds if t == topic)

    def min_offset(self, topic: str, queue_id: int) -> int:
        return self.bounds[topic, queue_id][0]

    def max_offset(self, topic: str, queue_id: int) -> int:
        return self.bounds[topic, queue_id][1]

    def topic_names(self) -> list[str]:
        return sorted({t for t, _ in self.bounds})

    def offset_for_timestamp(self, topic: str, queue_id: int, timestamp_ms: int) -> int:
        low, high = self.bounds[topic, queue_id]
        return min(max(low, -(-(timestamp_ms - 1000) // 10)), high)
