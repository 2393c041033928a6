"""The ``quiver`` source's streaming offsets and data-loss rules without a Spark session: the
offset object, the ``maxOffsetsPerTrigger`` share, micro-batch ends and ranges, the stream
options, and offsets removed by retention in planning and while a task reads (a real store)."""

from __future__ import annotations

import inspect
import logging
from collections import Counter
from pathlib import Path

import pytest

from localstore.read_only import ReadOnlyStore
from quiver_errors import IllegalStateError, InvalidArgumentError
from sdk.spark.dataloss import DataLossError
from sdk.spark.offsets import (
    QueueKey,
    cap_offsets,
    from_json,
    initial_offsets,
    micro_batch_ranges,
    next_end,
    to_json,
)
from sdk.spark.options import parse_read_options
from sdk.spark.pyspark_api import PYSPARK_VERSION
from sdk.spark.ranges import QueueRange, plan_ranges
from sdk.spark.source import QuiverBatchReader, read_range
from sdk.spark.store_access import StoreBounds
from sdk.spark.stream import QuiverStreamReader
from tests.spark.pyspark_versions import with_admission_control, without_admission_control
from tests.spark.queue_bounds import Offsets
from tests.spark.store_writer import TOPIC
from tests.spark.stores import Store

BASE = {"path": "/data/store", "topics": "orders,audit"}


STORE = Offsets({("orders", 0): (0, 10), ("orders", 1): (4, 6), ("orders", 2): (0, 0)})


def stream_options(**extra: str):  # type: ignore[no-untyped-def]
    return parse_read_options({**BASE, **extra}, streaming=True)


def test_offsets_are_topic_slash_queue_keys_and_foreign_ones_are_refused():
    offsets = {("orders", 1): 7, ("orders", 0): 5, ("audit", 12): 0}
    assert to_json(offsets) == {"audit/12": 0, "orders/0": 5, "orders/1": 7}
    assert from_json(to_json(offsets)) == offsets
    for foreign in ({"0": 4}, {"orders/x": 1}, {"orders/0": -1}, {"orders/0": True}):
        with pytest.raises(IllegalStateError, match="not a quiver stream offset"):
            from_json(foreign)


@pytest.mark.parametrize(
    ("backlogs", "most"),
    [
        ((90, 10, 0), 40),
        ((5, 5, 5), 4),
        ((1, 1, 1, 1), 2),
        ((1000, 1, 1), 10),
        ((7, 3), 100),
        ((33, 33, 34), 99),
    ],
)
def test_the_cap_shares_the_budget_in_proportion_never_above_it(
    backlogs: tuple[int, ...], most: int
):
    begins = {("t", q): 100 * q for q in range(len(backlogs))}
    latest = {key: begins[key] + backlog for key, backlog in zip(begins, backlogs, strict=True)}
    ends = cap_offsets(begins, latest, most)
    moved = {key: ends[key] - begins[key] for key in begins}
    assert sum(moved.values()) == min(most, sum(backlogs))
    total = sum(backlogs)
    for key, backlog in zip(begins, backlogs, strict=True):
        assert 0 <= moved[key] <= backlog
        if total > most:  # each share within one of its exact proportion
            assert abs(moved[key] - backlog * most / total) < 1
    assert cap_offsets(begins, latest, None) == latest


def test_a_budget_below_the_queue_count_serves_every_queue_in_turn():
    begins = {("t", q): 0 for q in range(3)}
    latest = {key: 100 for key in begins}
    served: Counter[QueueKey] = Counter()
    for _ in range(6):
        ends = cap_offsets(begins, latest, 1)
        served.update(key for key in begins if ends[key] > begins[key])
        begins = ends
    assert served == Counter(dict.fromkeys(latest, 2))


def test_the_next_end_adds_queues_with_records_keeps_the_start_and_honours_a_target():
    store = Offsets({("orders", 0): (0, 10), ("orders", 1): (4, 6), ("audit", 0): (2, 2)})
    options = stream_options()
    start = {("orders", 0): 3, ("gone", 0): 9}  # a queue the store no longer has stays
    assert next_end(store, options, start, None) == {
        ("orders", 0): 10,
        ("orders", 1): 6,  # new, with records: joins (read from its earliest, 4)
        ("gone", 0): 9,
    }  # audit 0, new and empty, waits
    assert next_end(store, options, start, 3) == {
        ("orders", 0): 5,
        ("orders", 1): 5,
        ("gone", 0): 9,
    }
    target = {("orders", 0): 8}  # AvailableNow's: orders 1 came later
    assert next_end(store, options, start, None, target) == {("orders", 0): 8, ("gone", 0): 9}
    caught_up = {("orders", 0): 8, ("gone", 0): 9}
    assert next_end(store, options, caught_up, None, target) == caught_up  # nothing new
    assert next_end(store, stream_options(queues="1"), {}, None) == {("orders", 1): 6}


def test_initial_offsets_follow_starting_offsets_and_a_topic_may_not_exist_yet():
    assert initial_offsets(STORE, stream_options()) == {
        ("orders", 0): 10,
        ("orders", 1): 6,
        ("orders", 2): 0,
    }
    assert initial_offsets(STORE, stream_options(startingOffsets="earliest")) == {
        ("orders", 0): 0,
        ("orders", 1): 4,
        ("orders", 2): 0,
    }
    chosen = stream_options(startingOffsets='{"orders": {"0": 7, "1": -1}}')
    assert initial_offsets(STORE, chosen) == {("orders", 0): 7, ("orders", 1): 6, ("orders", 2): 0}
    for bad in ('{"orders": {"0": 11}}', '{"orders": {"5": 0}}'):
        with pytest.raises(InvalidArgumentError, match=r"^startingOffsets: "):
            initial_offsets(STORE, stream_options(startingOffsets=bad))


def test_micro_batch_ranges_start_new_queues_at_their_earliest_and_split():
    options = stream_options(minPartitions="4")
    start = {("orders", 0): 2}
    end = {("orders", 0): 10, ("orders", 1): 6, ("orders", 2): 0}
    ranges = micro_batch_ranges(STORE, options, start, end)
    assert len(ranges) >= 4
    covered = Counter((r.queue_id, o) for r in ranges for o in range(r.start_offset, r.end_offset))
    assert covered == Counter([(0, o) for o in range(2, 10)] + [(1, 4), (1, 5)])
    assert micro_batch_ranges(STORE, options, end, end) == []


def test_micro_batch_ranges_from_removed_offsets_fail_or_warn(caplog: pytest.LogCaptureFixture):
    start, end = {("orders", 1): 1}, {("orders", 1): 6}
    with pytest.raises(DataLossError, match=r"'orders' queue 1 offsets \[1, 4\) were removed"):
        micro_batch_ranges(STORE, stream_options(), start, end)
    lenient = stream_options(failOnDataLoss="false")
    with caplog.at_level(logging.WARNING, logger="sdk.spark.dataloss"):
        assert micro_batch_ranges(STORE, lenient, start, end) == [QueueRange("orders", 1, 4, 6)]
    assert "'orders' queue 1 offsets [1, 4) were removed" in caplog.text


def test_batch_plans_from_removed_offsets_fail_or_start_at_the_earliest():
    removed = {"topics": "orders", "startingOffsets": '{"orders": {"1": 3}}'}
    with pytest.raises(DataLossError) as raised:
        plan_ranges(STORE, parse_read_options({**BASE, **removed}))
    assert (raised.value.topic, raised.value.queue_id) == ("orders", 1)
    assert (raised.value.requested_offset, raised.value.earliest_offset) == (3, 4)
    lenient = parse_read_options({**BASE, **removed, "failOnDataLoss": "false"})
    assert plan_ranges(STORE, lenient) == [
        QueueRange("orders", 0, 0, 10),
        QueueRange("orders", 1, 4, 6),
    ]
    within = {"endingOffsets": '{"orders": {"1": 4}}', "failOnDataLoss": "false"}
    assert plan_ranges(STORE, parse_read_options({**BASE, **removed, **within})) == [
        QueueRange("orders", 0, 0, 10)  # the end was among the removed: nothing left there
    ]


@pytest.mark.parametrize(
    ("extra", "named"),
    [
        ({"endingOffsets": "latest"}, "endingOffsets"),
        ({"maxOffsetsPerTrigger": "0"}, "maxOffsetsPerTrigger"),
        ({"maxOffsetsPerTrigger": "many"}, "maxOffsetsPerTrigger"),
        ({"failOnDataLoss": "maybe"}, "failOnDataLoss"),
    ],
)
def test_a_bad_stream_option_is_refused_naming_it(extra: dict[str, str], named: str):
    with pytest.raises(InvalidArgumentError, match=rf"^{named}: "):
        stream_options(**extra)


def test_stream_options_default_to_latest_and_to_failing_on_data_loss():
    options = stream_options(maxOffsetsPerTrigger="500")
    assert (options.starting_offsets, options.max_offsets_per_trigger) == ("latest", 500)
    assert options.fail_on_data_loss
    assert parse_read_options(BASE).starting_offsets == "earliest"  # batch


def store_stream_reader(root: Path, **extra: str) -> QuiverStreamReader:
    options = parse_read_options({"path": str(root), "topics": TOPIC, **extra}, streaming=True)
    return QuiverStreamReader(options, QuiverBatchReader(options), StoreBounds(str(root)))


@with_admission_control
def test_the_stream_reader_caps_at_the_limit_spark_passes_and_answers_the_old_style(
    tmp_path: Path,
):
    """pyspark 4.2+ calls ``latestOffset(start, limit)`` (it sees parameters); ``latestOffset()``
    (4.0, 4.1) answers every queue's latest."""
    assert len(inspect.signature(QuiverStreamReader.latestOffset).parameters) == 3
    with Store(tmp_path / "store") as store:
        store.write(40)
        reader = store_stream_reader(store.root, maxOffsetsPerTrigger="9")
        assert reader.latestOffset() == {"orders/0": 20, "orders/1": 10, "orders/2": 10}
        begin = {"orders/0": 0, "orders/1": 0, "orders/2": 0}
        limit = reader.getDefaultReadLimit()
        assert reader.latestOffset(begin, limit) == {"orders/0": 5, "orders/1": 2, "orders/2": 2}


@without_admission_control
def test_without_admission_control_the_reader_refuses_a_cap_and_reads_to_the_latest(
    tmp_path: Path,
):
    """pyspark 4.0 and 4.1 call ``latestOffset()`` and pass no limit: a cap could only be
    ignored, so it is refused, naming the option and the version."""
    with Store(tmp_path / "store") as store:
        store.write(40)
        with pytest.raises(
            InvalidArgumentError,
            match=rf"^maxOffsetsPerTrigger: needs pyspark 4.2 or later.* {PYSPARK_VERSION},",
        ):
            store_stream_reader(store.root, maxOffsetsPerTrigger="9")
        reader = store_stream_reader(store.root)
        assert reader.latestOffset() == {"orders/0": 20, "orders/1": 10, "orders/2": 10}


@pytest.mark.parametrize("fail_on_data_loss", [True, False])
def test_a_task_meeting_offsets_removed_since_planning_fails_or_reads_on(
    tmp_path: Path, fail_on_data_loss: bool, caplog: pytest.LogCaptureFixture
):
    with Store(tmp_path / "store") as store:
        store.write(900)
        with ReadOnlyStore(store.root) as before:  # what a planner saw
            planned = QueueRange(TOPIC, 0, 0, before.max_offset(TOPIC, 0))
        earliest = store.remove_old_segments()[0]
        with ReadOnlyStore(store.root) as task_view:
            batches = read_range(task_view, planned, False, False, fail_on_data_loss)
            if fail_on_data_loss:
                with pytest.raises(DataLossError, match=rf"queue 0 offsets \[0, {earliest}\)"):
                    next(batches)
                return
            with caplog.at_level(logging.WARNING, logger="sdk.spark.dataloss"):
                offsets = [o for batch in batches for o in batch["queue_offset"].to_pylist()]
    assert offsets == list(range(earliest, planned.end_offset))
    assert f"queue 0 offsets [0, {earliest}) were removed" in caplog.text
