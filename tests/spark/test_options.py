"""The ``quiver`` source's options and range planning, without Spark: every malformed option
is refused naming it, and the planned ranges cover each queue offset once."""

from __future__ import annotations

import pytest

from quiver_errors import InvalidArgumentError
from sdk.spark.options import parse_read_options
from sdk.spark.ranges import QueueRange, plan_ranges, split_ranges
from tests.spark.queue_bounds import Offsets

BASE = {"path": "/data/store", "topics": "orders"}


STORE = Offsets({("orders", 0): (0, 10), ("orders", 1): (4, 6), ("orders", 2): (0, 0)})


def test_defaults_read_every_queue_from_earliest_to_latest_with_bodies():
    options = parse_read_options({"PATH": "/data/store", "Topics": "orders, audit"})
    assert options.topics == ("orders", "audit")
    assert (options.starting_offsets, options.ending_offsets) == ("earliest", "latest")
    assert (options.include_body, options.include_properties) == (True, False)
    assert options.queues is None and options.min_partitions is None


@pytest.mark.parametrize(
    ("extra", "named"),
    [
        ({"path": ""}, "path"),
        ({"topics": "orders,,audit"}, "topics"),
        ({"queues": "0,x"}, "queues"),
        ({"queues": "-1"}, "queues"),
        ({"startingOffsets": "first"}, "startingOffsets"),
        ({"startingOffsets": '{"orders": {"0": -3}}'}, "startingOffsets"),
        ({"startingOffsets": '{"orders": {"zero": 1}}'}, "startingOffsets"),
        ({"startingOffsets": '{"other": {"0": 1}}'}, "startingOffsets"),
        ({"startingOffsets": "[1]"}, "startingOffsets"),
        ({"endingOffsets": "earliest"}, "endingOffsets"),
        ({"endingOffsets": '{"orders": {"0": -2}}'}, "endingOffsets"),
        ({"endingOffsets": '{"orders": {"0": 1.5}}'}, "endingOffsets"),
        ({"minPartitions": "0"}, "minPartitions"),
        ({"minPartitions": "many"}, "minPartitions"),
        ({"includeBody": "yes"}, "includeBody"),
        ({"includeProperties": "1"}, "includeProperties"),
        ({"startingTimestamp": "-5"}, "startingTimestamp"),
        ({"startingTimestamp": "1", "startingOffsets": "latest"}, "startingOffsets"),
        ({"endingOffsetsByTimestamp": '{"orders": {"0": "x"}}'}, "endingOffsetsByTimestamp"),
        ({"startingOffsetsByTimestamp": "[]"}, "startingOffsetsByTimestamp"),
        ({"topicPattern": "a["}, "topics"),  # with topics: the conflict comes first
        ({"tags": " || "}, "tags"),
        ({"scan": "everything"}, "scan"),
        ({"scan": "commitlog", "queues": "1"}, "queues"),
        ({"scan": "commitlog", "endingTimestamp": "1"}, "endingTimestamp"),
        ({"startingOffset": "1"}, "startingoffset"),  # unknown
    ],
)
def test_a_malformed_option_is_refused_naming_it(extra: dict[str, str], named: str):
    with pytest.raises(InvalidArgumentError, match=rf"^{named}: "):
        parse_read_options({**BASE, **extra})


def test_a_required_option_missing_is_named():
    with pytest.raises(InvalidArgumentError, match=r"^topics: "):
        parse_read_options({"path": "/data/store"})


def test_json_bounds_take_sentinels_and_leave_unnamed_queues_at_the_defaults():
    options = parse_read_options(
        {
            **BASE,
            "startingOffsets": '{"orders": {"0": 2, "1": -2}}',
            "endingOffsets": '{"orders": {"0": 5, "1": -1}}',
        }
    )
    assert plan_ranges(STORE, options) == [
        QueueRange("orders", 0, 2, 5),
        QueueRange("orders", 1, 4, 6),
    ]


@pytest.mark.parametrize(
    ("extra", "named"),
    [
        ({"startingOffsets": '{"orders": {"0": 11}}'}, "startingOffsets"),  # beyond
        ({"endingOffsets": '{"orders": {"0": 11}}'}, "endingOffsets"),
        (
            {"startingOffsets": '{"orders": {"0": 5}}', "endingOffsets": '{"orders": {"0": 4}}'},
            "endingOffsets",
        ),
        ({"endingOffsets": '{"orders": {"7": 1}}'}, "endingOffsets"),  # no such queue
        ({"queues": "0", "startingOffsets": '{"orders": {"1": 4}}'}, "startingOffsets"),
        ({"queues": "3"}, "queues"),
        ({"topics": "orders,audit"}, "topics"),
    ],
)
def test_bounds_the_store_cannot_serve_are_refused_never_clamped(extra: dict[str, str], named: str):
    with pytest.raises(InvalidArgumentError, match=rf"^{named}: "):
        plan_ranges(STORE, parse_read_options({**BASE, **extra}))


def test_a_queues_subset_reads_only_those_queues():
    options = parse_read_options({**BASE, "queues": "1"})
    assert plan_ranges(STORE, options) == [QueueRange("orders", 1, 4, 6)]


def test_min_partitions_cuts_ranges_in_proportion_each_offset_once():
    ranges = [QueueRange("t", 0, 0, 90), QueueRange("t", 1, 5, 15), QueueRange("t", 2, 0, 1)]
    pieces = split_ranges(ranges, 10)
    assert len(pieces) >= 10
    for whole in ranges:
        mine = [p for p in pieces if p.queue_id == whole.queue_id]
        offsets = [o for p in mine for o in range(p.start_offset, p.end_offset)]
        assert offsets == list(range(whole.start_offset, whole.end_offset))
        assert max(p.count for p in mine) - min(p.count for p in mine) <= 1
    assert split_ranges(ranges, 3) == ranges  # already as many ranges as asked
    assert split_ranges(ranges, None) == ranges


def test_time_bounds_resolve_through_the_seek_by_time_clamped_to_the_queue():
    options = parse_read_options(
        {**BASE, "startingTimestamp": "1025", "endingOffsetsByTimestamp": '{"orders": {"0": 1071}}'}
    )
    assert plan_ranges(STORE, options) == [
        QueueRange("orders", 0, 3, 8),  # first stored at or after: 1030 (3) .. 1080 (8)
        QueueRange("orders", 1, 4, 6),  # 1025 is before the earliest readable (4)
    ]
    past = parse_read_options({**BASE, "startingTimestamp": "999999"})
    assert plan_ranges(STORE, past) == []  # past the end: every queue's end


def test_topic_pattern_selects_the_store_topics_it_matches_whole():
    store = Offsets({("orders", 0): (0, 2), ("orders-eu", 0): (0, 1), ("audit", 0): (0, 1)})
    options = parse_read_options({"path": "/data/store", "topicPattern": "orders.*"})
    assert (options.topics, options.topic_pattern) == ((), "orders.*")
    assert plan_ranges(store, options) == [
        QueueRange("orders", 0, 0, 2),
        QueueRange("orders-eu", 0, 0, 1),
    ]
    with pytest.raises(InvalidArgumentError, match=r"^startingOffsets: topic 'audit'"):
        parse_read_options(
            {"path": "/s", "topicPattern": "orders.*", "startingOffsets": '{"audit": {"0": 0}}'}
        )


def test_topic_pattern_leaves_out_the_store_s_own_topics():
    # delayed messages wait in SCHEDULE_TOPIC_XXXX and transactions' halves in
    # RMQ_SYS_TRANS_HALF_TOPIC: a pattern reading them would return copies and uncommitted rows
    store = Offsets(
        {
            ("orders", 0): (0, 2),
            ("SCHEDULE_TOPIC_XXXX", 0): (0, 3),
            ("RMQ_SYS_TRANS_HALF_TOPIC", 0): (0, 1),
        }
    )
    options = parse_read_options({"path": "/data/store", "topicPattern": ".*"})
    assert plan_ranges(store, options) == [QueueRange("orders", 0, 0, 2)]
    named = parse_read_options({"path": "/data/store", "topics": "SCHEDULE_TOPIC_XXXX"})
    assert plan_ranges(store, named) == [QueueRange("SCHEDULE_TOPIC_XXXX", 0, 0, 3)]


def test_tags_and_scan_parse():
    options = parse_read_options({**BASE, "tags": "b || a"})
    assert (options.tags, options.scan) == (("a", "b"), "queues")
    assert parse_read_options({**BASE, "tags": "*"}).tags is None
    whole_log = parse_read_options({"path": "/s", "scan": "CommitLog"})
    assert (whole_log.scan, whole_log.topics, whole_log.topic_pattern) == ("commitlog", (), None)
