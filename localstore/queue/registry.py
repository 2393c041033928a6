"""Every consume queue of a store, by (topic, queue id): loaded from ``consumequeue/`` on open,
created on demand by puts and by recovery's dispatch."""

from __future__ import annotations

import logging
import os
from pathlib import Path

from localstore.errors import CorruptStoreError
from localstore.queue.consume_queue import ConsumeQueue
from localstore.runtime.closing import close_all

log = logging.getLogger(__name__)


class QueueRegistry:
    """Every consume queue of the store, by (topic, queue id), created on demand."""

    def __init__(self, directory: Path, entries_per_file: int):
        self.directory = directory
        self.entries_per_file = entries_per_file
        self.queues: dict[tuple[str, int], ConsumeQueue] = {}
        # "topic/queue" of queues whose files did not load (recovery rebuilds them)
        self.unloadable: list[str] = []

    def load(self) -> None:
        if not self.directory.is_dir():
            return
        for topic in sorted(os.listdir(self.directory)):
            topic_dir = self.directory / topic
            if not topic_dir.is_dir():
                continue
            for name in sorted(os.listdir(topic_dir)):
                if name.isdigit():
                    self._load_queue(topic, int(name))

    def _load_queue(self, topic: str, queue_id: int) -> None:
        """Load one queue; one whose files are damaged (a missing file, a wrong length) is
        kept empty and named in ``unloadable``, for recovery to rebuild from the commitlog."""
        queue = self._make(topic, queue_id)
        try:
            queue.load()
        except CorruptStoreError as exc:
            log.warning(
                "consume queue %s/%d cannot be loaded (%s): rebuilding it from the commitlog",
                topic,
                queue_id,
                exc,
            )
            queue.close()
            queue.segments.segments.clear()
            queue.min_logic_offset = queue.max_phys_offset = 0
            self.unloadable.append(f"{topic}/{queue_id}")

    def _make(self, topic: str, queue_id: int) -> ConsumeQueue:
        queue = ConsumeQueue(
            self.directory / topic / str(queue_id), topic, queue_id, self.entries_per_file
        )
        self.queues[(topic, queue_id)] = queue
        return queue

    def get(self, topic: str, queue_id: int) -> ConsumeQueue | None:
        return self.queues.get((topic, queue_id))

    def get_or_create(self, topic: str, queue_id: int) -> ConsumeQueue:
        queue = self.queues.get((topic, queue_id))
        return queue if queue is not None else self._make(topic, queue_id)

    def dispatch_from(self) -> int:
        """Commitlog offset up to which every record was dispatched."""
        return max((q.max_phys_offset for q in self.queues.values()), default=0)

    def flush(self) -> None:
        for queue in list(self.queues.values()):
            queue.flush()

    def close(self) -> None:
        """Close every queue, whatever one of them raised (then raised)."""
        close_all(queue.close for queue in self.queues.values())  # each close may run again
        self.queues.clear()
