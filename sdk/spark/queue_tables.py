"""A read option's JSON table of one integer per queue, ``{"orders": {"0": 12, "1": -2}}``
(topic, then queue id as a string, then the value), checked: plain data, no pyspark.

``startingOffsets`` / ``endingOffsets`` (:mod:`sdk.spark.options`) and the ``...ByTimestamp``
options (:mod:`sdk.spark.timestamps`) take this shape; each checks its own values.
"""

from __future__ import annotations

from collections.abc import Callable

from quiver_errors import InvalidArgumentError

QueueTable = dict[str, dict[int, int]]


def queue_table(
    parsed: object,
    name: str,
    is_read_topic: Callable[[str], bool],
    value_of: Callable[[object, str, str], int],
) -> QueueTable:
    """``parsed`` (the option's decoded JSON) as ``{topic: {queue id: value}}``.
    ``value_of(value, name, where)`` checks one value (``where`` names its topic and queue for
    a message); :class:`InvalidArgumentError` naming option ``name`` for anything else than an
    object of topics read, each an object of queue ids."""
    if not isinstance(parsed, dict):
        raise InvalidArgumentError(f"{name}: the JSON must be an object of topics")
    table: QueueTable = {}
    for topic, per_queue in parsed.items():
        if not is_read_topic(topic):
            raise InvalidArgumentError(f"{name}: topic {topic!r} is not among the topics read")
        if not isinstance(per_queue, dict):
            raise InvalidArgumentError(f"{name}: {topic!r} must map queue ids to values")
        table[topic] = {}
        for queue, value in per_queue.items():
            if not queue.isdigit():
                raise InvalidArgumentError(
                    f"{name}: {topic!r} names queue {queue!r}, not a queue id"
                )
            table[topic][int(queue)] = value_of(value, name, f"{topic!r} queue {queue}")
    return table
