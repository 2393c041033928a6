"""Allocation strategies: the reference's worked examples, RocketMQ's edge rules, and properties
every strategy keeps (a partition of the queues, independent of input order)."""

from __future__ import annotations

import itertools
import random
from collections.abc import Callable, Sequence
from typing import TypeVar

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from offsetstore.base import MessageQueue
from sdk.consumer import (
    AllocateAveragely,
    AllocateAveragelyByCircle,
    AllocateByConfig,
    AllocateConsistentHash,
    AllocateSticky,
    AllocateStrategy,
    allocate,
    allocate_all,
)
from sdk.consumer.allocate import md5_position

GROUP = "G"
T = TypeVar("T")


def queues(n: int, topic: str = "T", broker: str = "broker-a") -> list[MessageQueue]:
    return [MessageQueue(topic, broker, i) for i in range(n)]


def cids(c: int) -> list[str]:
    return [f"C{i}" for i in range(c)]


def ids(assignment: dict[str, list[MessageQueue]]) -> dict[str, list[int]]:
    return {cid: [q.queue_id for q in share] for cid, share in assignment.items()}


# -- worked examples (reference section 10.2) ----------------------------------------------------


def test_avg_ten_queues_four_consumers():
    got = ids(allocate_all(AllocateAveragely(), GROUP, queues(10), cids(4)))
    assert got == {"C0": [0, 1, 2], "C1": [3, 4, 5], "C2": [6, 7], "C3": [8, 9]}


def test_avg_three_queues_five_consumers():
    got = ids(allocate_all(AllocateAveragely(), GROUP, queues(3), cids(5)))
    assert got == {"C0": [0], "C1": [1], "C2": [2], "C3": [], "C4": []}


def test_avg_by_circle_ten_queues_four_consumers():
    got = ids(allocate_all(AllocateAveragelyByCircle(), GROUP, queues(10), cids(4)))
    assert got == {"C0": [0, 4, 8], "C1": [1, 5, 9], "C2": [2, 6], "C3": [3, 7]}


def test_consistent_hash_worked_example_and_member_leaving():
    mqs = queues(8, topic="TopicTest", broker="broker-a")
    strategy = AllocateConsistentHash()
    got = ids(allocate_all(strategy, GROUP, mqs, ["CID-0", "CID-1", "CID-2"]))
    assert got == {"CID-0": [3, 5, 6], "CID-1": [2, 4, 7], "CID-2": [0, 1]}
    after = ids(allocate_all(strategy, GROUP, mqs, ["CID-0", "CID-2"]))
    assert after == {"CID-0": [2, 3, 5, 6], "CID-2": [0, 1, 4, 7]}


def test_md5_position_is_the_first_four_bytes_big_endian():
    # MD5("") = d41d8cd98f00b204e9800998ecf8427e
    assert md5_position("") == 0xD41D8CD9


def test_a_queue_prints_as_java_s_to_string():
    """What the consistent-hash strategy hashes for a queue (its placement is checked against
    RocketMQ's worked example above)."""
    assert str(MessageQueue("TopicTest", "broker-a", 3)) == (
        "MessageQueue [topic=TopicTest, brokerName=broker-a, queueId=3]"
    )


def test_consistent_hash_rejects_non_positive_virtual_nodes():
    with pytest.raises(ValueError, match="virtual_nodes"):
        AllocateConsistentHash(0)


def test_by_config_returns_the_configured_queues_present_in_the_route():
    mqs = queues(4)
    strategy = AllocateByConfig([mqs[3], mqs[1], MessageQueue("T", "gone", 0)])
    assert strategy.allocate(GROUP, "C0", mqs, cids(2)) == [mqs[1], mqs[3]]


def test_allocate_function_delegates_to_the_strategy():
    assert allocate(AllocateAveragely(), GROUP, "C1", queues(10), cids(4)) == queues(10)[3:6]


# -- RocketMQ's edge rules -----------------------------------------------------------------------

ALL_STRATEGIES: list[Callable[[], AllocateStrategy]] = [
    AllocateAveragely,
    AllocateAveragelyByCircle,
    AllocateConsistentHash,
    lambda: AllocateByConfig(queues(2)),
    AllocateSticky,
]


@pytest.mark.parametrize("make", ALL_STRATEGIES)
def test_unknown_current_cid_gets_nothing(make: Callable[[], AllocateStrategy]):
    assert make().allocate(GROUP, "stranger", queues(4), cids(2)) == []


@pytest.mark.parametrize("make", ALL_STRATEGIES)
def test_empty_inputs_raise_with_a_clear_message(make: Callable[[], AllocateStrategy]):
    strategy = make()
    with pytest.raises(ValueError, match="current_cid is empty"):
        strategy.allocate(GROUP, "", queues(4), cids(2))
    with pytest.raises(ValueError, match="all_queues is empty"):
        strategy.allocate(GROUP, "C0", [], cids(2))
    with pytest.raises(ValueError, match="all_cids is empty"):
        strategy.allocate(GROUP, "C0", queues(4), [])


@pytest.mark.parametrize("make", ALL_STRATEGIES)
def test_strategies_have_names(make: Callable[[], AllocateStrategy]):
    assert make().name in {"AVG", "AVG_BY_CIRCLE", "CONSISTENT_HASH", "CONFIG", "STICKY"}


# -- properties ----------------------------------------------------------------------------------

queue_lists = st.lists(
    st.builds(
        MessageQueue,
        st.sampled_from(["T", "U"]),
        st.sampled_from(["broker-a", "broker-b"]),
        st.integers(0, 15),
    ),
    min_size=1,
    max_size=40,
    unique=True,
)
cid_lists = st.lists(
    st.text(alphabet="abcXYZ-0123", min_size=1, max_size=6), min_size=1, max_size=8, unique=True
)


def assert_partition(assignment: dict[str, list[MessageQueue]], mqs: list[MessageQueue]) -> None:
    shares = [q for share in assignment.values() for q in share]
    assert len(shares) == len(set(shares)), "a queue is assigned twice"
    assert set(shares) == set(mqs), "the union is not all queues"
    for share in assignment.values():
        assert share == sorted(share)


def shuffled(items: Sequence[T], seed: int) -> list[T]:
    copy = list(items)
    random.Random(seed).shuffle(copy)
    return copy


def by_config_members(mqs: list[MessageQueue], members: list[str]) -> dict[str, AllocateByConfig]:
    """Each member configured with the queues of index i (mod members): a partition."""
    ordered = sorted(mqs)
    return {
        cid: AllocateByConfig(ordered[i :: len(members)]) for i, cid in enumerate(sorted(members))
    }


@settings(max_examples=150, deadline=None)
@given(mqs=queue_lists, members=cid_lists, seed=st.integers(0, 2**16))
def test_every_strategy_partitions_the_queues_independent_of_order(
    mqs: list[MessageQueue], members: list[str], seed: int
):
    previous = allocate_all(AllocateAveragely(), GROUP, mqs, members[: max(1, len(members) - 1)])
    for strategy in (
        AllocateAveragely(),
        AllocateAveragelyByCircle(),
        AllocateConsistentHash(),
        AllocateConsistentHash(virtual_nodes=3),
        AllocateSticky(),
        AllocateSticky(previous),
    ):
        assignment = allocate_all(strategy, GROUP, mqs, members)
        assert_partition(assignment, mqs)
        for cid in members:
            again = strategy.allocate(GROUP, cid, shuffled(mqs, seed), shuffled(members, seed + 1))
            assert again == assignment[cid], strategy.name
    configured = by_config_members(mqs, members)
    assignment = {
        cid: configured[cid].allocate(GROUP, cid, shuffled(mqs, seed), shuffled(members, seed))
        for cid in members
    }
    assert_partition(assignment, mqs)


@settings(max_examples=100, deadline=None)
@given(mqs=queue_lists, members=cid_lists)
def test_avg_and_circle_loads_differ_by_at_most_one(mqs: list[MessageQueue], members: list[str]):
    for strategy in (AllocateAveragely(), AllocateAveragelyByCircle()):
        loads = [len(s) for s in allocate_all(strategy, GROUP, mqs, members).values()]
        assert max(loads) - min(loads) <= 1


@settings(max_examples=100, deadline=None)
@given(mqs=queue_lists, members=cid_lists.filter(lambda m: len(m) >= 2), data=st.data())
def test_consistent_hash_moves_only_the_departed_members_queues(
    mqs: list[MessageQueue], members: list[str], data: st.DataObject
):
    strategy = AllocateConsistentHash()
    before = allocate_all(strategy, GROUP, mqs, members)
    gone = data.draw(st.sampled_from(members))
    after = allocate_all(strategy, GROUP, mqs, [m for m in members if m != gone])
    for cid, share in after.items():
        assert set(before[cid]) <= set(share)


# -- sticky --------------------------------------------------------------------------------------


def owner_of(assignment: dict[str, list[MessageQueue]]) -> dict[MessageQueue, str]:
    return {q: cid for cid, share in assignment.items() for q in share}


def minimal_moves(kept_counts: list[int], n: int) -> int:
    """Brute force: the fewest kept queues that any balanced outcome must move, over every
    choice of which members get the ceil(n/c) quota."""
    c = len(kept_counts)
    base, extra = divmod(n, c)
    best = None
    for bigger in itertools.combinations(range(c), extra):
        moves = sum(
            max(0, kept - (base + (1 if i in bigger else 0))) for i, kept in enumerate(kept_counts)
        )
        best = moves if best is None else min(best, moves)
    assert best is not None
    return best


def test_sticky_fresh_start_is_balanced_blocks():
    got = ids(allocate_all(AllocateSticky(), GROUP, queues(10), cids(4)))
    assert got == {"C0": [0, 4, 8], "C1": [1, 5, 9], "C2": [2, 6], "C3": [3, 7]}


def test_sticky_member_joining_takes_only_the_excess():
    mqs = queues(9)
    previous = allocate_all(AllocateAveragely(), GROUP, mqs, cids(3))  # 3 each
    after = allocate_all(AllocateSticky(previous), GROUP, mqs, cids(4))
    assert ids(after) == {"C0": [0, 1, 2], "C1": [3, 4], "C2": [6, 7], "C3": [5, 8]}
    moved = [q for q, cid in owner_of(after).items() if owner_of(previous)[q] != cid]
    assert len(moved) == 2


def test_sticky_member_leaving_moves_only_its_queues():
    mqs = queues(9)
    previous = allocate_all(AllocateAveragely(), GROUP, mqs, cids(3))
    after = allocate_all(AllocateSticky(previous), GROUP, mqs, ["C0", "C2"])
    for cid in ("C0", "C2"):
        assert set(previous[cid]) <= set(after[cid])
    assert sorted(len(s) for s in after.values()) == [4, 5]


def test_sticky_ignores_queues_gone_from_the_route_and_double_claims():
    mqs = queues(4)
    previous = {"C0": [mqs[0], mqs[1], MessageQueue("T", "gone", 9)], "C1": [mqs[1], mqs[2]]}
    after = allocate_all(AllocateSticky(previous), GROUP, mqs, cids(2))
    assert ids(after) == {"C0": [0, 1], "C1": [2, 3]}


@settings(max_examples=200, deadline=None)
@given(
    mqs=queue_lists,
    old=cid_lists,
    new=cid_lists,
    removed=st.lists(st.integers(0, 39), max_size=5),
    added=st.integers(0, 5),
)
def test_sticky_moves_the_minimum_and_stays_balanced(
    mqs: list[MessageQueue], old: list[str], new: list[str], removed: list[int], added: int
):
    previous = allocate_all(AllocateSticky(), GROUP, mqs, old)
    # The route may change too: some queues vanish, new ones appear.
    route = [q for i, q in enumerate(sorted(mqs)) if i not in removed] or sorted(mqs)[:1]
    route += [MessageQueue("NEW", "broker-n", i) for i in range(added)]
    members = sorted(set(new) | set(old[: len(old) // 2]))
    after = allocate_all(AllocateSticky(previous), GROUP, route, members)
    assert_partition(after, route)
    loads = [len(share) for share in after.values()]
    assert max(loads) - min(loads) <= 1

    before_owner, after_owner = owner_of(previous), owner_of(after)
    survivors_moved = sum(
        1
        for q, cid in before_owner.items()
        if cid in members and q in after_owner and after_owner[q] != cid
    )
    kept_counts = [sum(1 for q in previous.get(m, []) if q in after_owner) for m in members]
    assert survivors_moved == minimal_moves(kept_counts, len(route))
    departed = sum(1 for q, cid in before_owner.items() if cid not in members and q in after_owner)
    all_moved = sum(
        1 for q, cid in before_owner.items() if q in after_owner and after_owner[q] != cid
    )
    assert all_moved <= departed + minimal_moves(kept_counts, len(route))


@settings(max_examples=50, deadline=None)
@given(mqs=queue_lists, members=cid_lists)
def test_sticky_is_stable_when_nothing_changes(mqs: list[MessageQueue], members: list[str]):
    first = allocate_all(AllocateSticky(), GROUP, mqs, members)
    assert allocate_all(AllocateSticky(first), GROUP, mqs, members) == first
