"""sdk.consumer: the building blocks of Quiver's consumers.

* :mod:`sdk.consumer.allocate`: which queues each member of a consumer group consumes (AVG,
  AVG_BY_CIRCLE, CONSISTENT_HASH, CONFIG, STICKY); pure functions of sorted inputs, so every
  member computes the same global answer.
* :mod:`sdk.consumer.process_queue`: the client-side buffer of one consumed queue; its committed
  offset is the smallest offset still in flight.

Both are standard library only, so ``import sdk.consumer`` stays light.
"""

from sdk.consumer.allocate import (
    AllocateAveragely,
    AllocateAveragelyByCircle,
    AllocateByConfig,
    AllocateConsistentHash,
    AllocateSticky,
    AllocateStrategy,
    allocate,
    allocate_all,
)
from sdk.consumer.process_queue import FlowControlLimits, ProcessQueue, QueuedMessage

__all__ = [
    "AllocateAveragely",
    "AllocateAveragelyByCircle",
    "AllocateByConfig",
    "AllocateConsistentHash",
    "AllocateSticky",
    "AllocateStrategy",
    "FlowControlLimits",
    "ProcessQueue",
    "QueuedMessage",
    "allocate",
    "allocate_all",
]
