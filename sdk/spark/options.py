"""The ``quiver`` data source's read options, parsed and checked: plain data, no pyspark.

Option names follow Spark's Kafka source:

* ``path``: the store directory, opened read-only by the planner and every task; or
* ``broker``: comma-separated broker URLs (``http://h:8080,http://h2:8080``), each a broker
  of its own whose queues the read covers (:mod:`sdk.spark.broker_source`); one of the two.
* ``consumerGroup`` (with ``broker``): a group whose broker offsets a streaming read advances
  at each commit, for lag monitoring (the read's own offsets stay in Spark's checkpoint).
* ``topics`` (required, or ``topicPattern``): comma-separated topic names.
* ``topicPattern``: a regular expression over the store's topic names, instead of ``topics``
  (:mod:`sdk.spark.selection`).
* ``queues``: comma-separated queue ids to read (default: every queue of each topic).
* ``startingOffsets``: ``earliest`` (default; ``latest`` for streaming), ``latest``, or JSON
  ``{"orders": {"0": 12, "1": -2}}`` (queue offsets, inclusive; -2 earliest, -1 latest; a
  queue not named starts at earliest).
* ``endingOffsets``: ``latest`` (default) or JSON (exclusive; -1 latest; a queue not named
  ends at latest).
* ``startingTimestamp``, ``startingOffsetsByTimestamp``, ``endingTimestamp``,
  ``endingOffsetsByTimestamp``: bounds by store time instead of offsets
  (:mod:`sdk.spark.timestamps`).
* ``tags``: a tag expression (``"a || b"``); only rows with one of its tags are read.
* ``minPartitions``: cut the queue ranges into at least this many Spark tasks.
* ``scan``: ``queues`` (default) reads the topics' queues; ``commitlog`` reads every record of
  the store's log in order, in ranges cut at record boundaries (a full-log export; see
  :mod:`sdk.spark.commitlog_scan`): offsets, times and ``queues`` do not apply to it, and
  ``topics``, ``topicPattern`` and ``tags`` become row filters.
* ``includeBody`` (``true``): with ``false`` the ``body`` column is left out.
* ``includeProperties`` (``false``): with ``true`` a ``properties`` column holds the user's
  properties.
* ``failOnDataLoss`` (``true``): a requested start below a queue's earliest readable offset
  (retention removed it) fails the read with :class:`~sdk.spark.dataloss.DataLossError`; with
  ``false`` it logs a warning and starts at the earliest offset.
* ``maxOffsetsPerTrigger`` (streaming): at most this many records per micro-batch, shared
  across the queues in proportion to their backlog.

A streaming read (``streaming=True``) starts at ``latest`` unless ``startingOffsets`` says
otherwise, as Kafka's source does, and takes no ``endingOffsets``.

Spark hands options over as strings with lower-cased keys; every lookup here is
case-insensitive, so a mapping with the user's spelling reads the same. An option that cannot
be used (unknown, missing, malformed) raises :class:`InvalidArgumentError` whose message starts
with the option's name: nothing is read with an option half understood.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

import orjson

from quiver_errors import InvalidArgumentError
from sdk.spark.queue_tables import queue_table
from sdk.spark.selection import parse_tags, parse_topic_selection
from sdk.spark.timestamps import (
    NO_TIMESTAMPS,
    TIMESTAMP_OPTIONS,
    TimestampOptions,
    parse_timestamp_options,
)

EARLIEST = "earliest"
LATEST = "latest"
SCAN_QUEUES = "queues"
SCAN_COMMITLOG = "commitlog"
# In the JSON form, as Kafka's: -2 is the queue's earliest offset, -1 its latest.
EARLIEST_SENTINEL = -2
LATEST_SENTINEL = -1

# An offset bound: "earliest", "latest", or {topic: {queue id: queue offset or sentinel}}.
OffsetSpec = str | dict[str, dict[int, int]]

_KNOWN = (
    "path",
    "topics",
    "queues",
    "startingoffsets",
    "endingoffsets",
    "minpartitions",
    "includebody",
    "includeproperties",
    # the data-loss and streaming options
    "failondataloss",
    "maxoffsetspertrigger",
    "broker",
    "consumergroup",
    "topicpattern",
    *(name.lower() for name in TIMESTAMP_OPTIONS),
    "tags",
    "scan",
)
# What a commitlog scan refuses: it reads the whole log, not queue ranges.
_NOT_FOR_COMMITLOG = ("queues", "startingOffsets", "endingOffsets", *TIMESTAMP_OPTIONS)


@dataclass(frozen=True)
class ReadOptions:
    """What a batch read asks for: the store directory, the topics (and optionally a subset of
    their queue ids), the offset bounds, the least number of partitions, and which of the
    optional columns to fill; then the topic pattern (``topics`` is empty with one: the store's
    topics decide, :func:`sdk.spark.ranges.read_topics`), the bounds by time, the tags kept
    (None: every message) and the scan (:data:`SCAN_QUEUES` or :data:`SCAN_COMMITLOG`)."""

    path: str
    topics: tuple[str, ...]
    queues: tuple[int, ...] | None
    starting_offsets: OffsetSpec
    ending_offsets: OffsetSpec
    min_partitions: int | None
    include_body: bool
    include_properties: bool
    # the data-loss and streaming options
    fail_on_data_loss: bool = True
    max_offsets_per_trigger: int | None = None
    brokers: tuple[str, ...] = ()
    consumer_group: str | None = None
    topic_pattern: str | None = None
    timestamps: TimestampOptions = NO_TIMESTAMPS
    tags: tuple[str, ...] | None = None
    scan: str = SCAN_QUEUES


def parse_read_options(options: Mapping[str, str], *, streaming: bool = False) -> ReadOptions:
    """``options`` (Spark's, any key case) checked and parsed, for a batch read or, with
    ``streaming``, a streaming one; :class:`InvalidArgumentError` naming the option for a
    missing, unknown or malformed one."""
    lowered = {key.lower(): value for key, value in options.items()}
    unknown = sorted(key for key in lowered if key not in _KNOWN)
    if unknown:
        raise InvalidArgumentError(
            f"{unknown[0]}: unknown option of the quiver source (known: {', '.join(_KNOWN)})"
        )
    scan = _scan(lowered)
    selection = parse_topic_selection(lowered, required=scan == SCAN_QUEUES)
    if streaming:
        for name in ("endingOffsets", "endingTimestamp", "endingOffsetsByTimestamp"):
            if name.lower() in lowered:
                raise InvalidArgumentError(
                    f"{name}: a streaming read has no end (batch reads only)"
                )
    brokers, path, consumer_group = _source(lowered)
    if brokers and scan == SCAN_COMMITLOG:
        raise InvalidArgumentError("scan: commitlog reads a store directory (path), not brokers")
    return ReadOptions(
        path=path,
        topics=selection.names,
        queues=_queues(lowered.get("queues")),
        starting_offsets=_offsets(
            lowered, "startingOffsets", selection.covers, LATEST if streaming else EARLIEST
        ),
        ending_offsets=_offsets(lowered, "endingOffsets", selection.covers, LATEST),
        min_partitions=positive_option(lowered, "minPartitions"),
        include_body=_flag(lowered, "includeBody", default=True),
        include_properties=_flag(lowered, "includeProperties", default=False),
        fail_on_data_loss=_flag(lowered, "failOnDataLoss", default=True),
        max_offsets_per_trigger=positive_option(lowered, "maxOffsetsPerTrigger"),
        brokers=brokers,
        consumer_group=consumer_group,
        topic_pattern=selection.pattern,
        timestamps=parse_timestamp_options(lowered, selection.covers),
        tags=parse_tags(lowered.get("tags")),
        scan=scan,
    )


def _source(options: Mapping[str, str]) -> tuple[tuple[str, ...], str, str | None]:
    """``(broker URLs, path, consumer group)``: a store directory or brokers, not both."""
    broker_text = options.get("broker", "").strip()
    group = options.get("consumergroup", "").strip() or None
    if not broker_text:
        if group is not None:
            raise InvalidArgumentError("consumerGroup: is an option of a broker read only")
        return (), _required(options, "path"), None
    if options.get("path", "").strip():
        raise InvalidArgumentError("path: give path (a store directory) or broker, not both")
    urls = tuple(dict.fromkeys(url.strip() for url in broker_text.split(",")))
    if not all(urls):
        raise InvalidArgumentError(f"broker: an empty URL in {broker_text!r}")
    return urls, "", group


def _scan(options: Mapping[str, str]) -> str:
    scan = options.get("scan", SCAN_QUEUES).strip().lower()
    if scan not in (SCAN_QUEUES, SCAN_COMMITLOG):
        raise InvalidArgumentError(f"scan: expected queues or commitlog, got {scan!r}")
    if scan == SCAN_COMMITLOG:
        for name in _NOT_FOR_COMMITLOG:
            if name.lower() in options:
                raise InvalidArgumentError(
                    f"{name}: does not apply to scan=commitlog (it reads the whole log)"
                )
    return scan


def _required(options: Mapping[str, str], name: str) -> str:
    value = options.get(name.lower(), "").strip()
    if not value:
        raise InvalidArgumentError(f"{name}: the option is required")
    return value


def _queues(text: str | None) -> tuple[int, ...] | None:
    if text is None:
        return None
    try:
        queue_ids = [int(part) for part in text.split(",")]
    except ValueError:
        raise InvalidArgumentError(
            f"queues: expected comma-separated queue ids, got {text!r}"
        ) from None
    if any(queue_id < 0 for queue_id in queue_ids):
        raise InvalidArgumentError(f"queues: a queue id is never negative, got {text!r}")
    return tuple(sorted(set(queue_ids)))


def _offsets(
    options: Mapping[str, str], name: str, is_read_topic: Callable[[str], bool], default: str
) -> OffsetSpec:
    text = options.get(name.lower(), default).strip()
    if text.lower() in (EARLIEST, LATEST):
        if name == "endingOffsets" and text.lower() == EARLIEST:
            raise InvalidArgumentError(f"{name}: 'earliest' is not an end (use latest or JSON)")
        return text.lower()
    try:
        parsed = orjson.loads(text)
    except orjson.JSONDecodeError:
        raise InvalidArgumentError(
            f"{name}: expected 'earliest', 'latest' or JSON such as "
            f'{{"topic": {{"0": 12}}}}, got {text!r}'
        ) from None
    return queue_table(parsed, name, is_read_topic, _offset)


def _offset(value: object, name: str, where: str) -> int:
    lowest = EARLIEST_SENTINEL if name == "startingOffsets" else LATEST_SENTINEL
    if type(value) is not int or value < lowest:
        raise InvalidArgumentError(
            f"{name}: {where} has offset {value!r}; a queue offset is an integer >= 0 "
            f"(or -1 for latest{', -2 for earliest' if lowest == EARLIEST_SENTINEL else ''})"
        )
    return value


def positive_option(options: Mapping[str, str], name: str) -> int | None:
    """Option ``name`` (``options`` keyed in lower case) as an integer >= 1, None when absent.
    Never 0, so ``positive_option(...) or default`` gives a default."""
    text = options.get(name.lower())
    if text is None:
        return None
    try:
        count = int(text)
    except ValueError:
        count = 0
    if count < 1:
        raise InvalidArgumentError(f"{name}: expected an integer >= 1, got {text!r}")
    return count


def _flag(options: Mapping[str, str], name: str, *, default: bool) -> bool:
    text = options.get(name.lower())
    if text is None:
        return default
    lowered = text.strip().lower()
    if lowered not in ("true", "false"):
        raise InvalidArgumentError(f"{name}: expected true or false, got {text!r}")
    return lowered == "true"
