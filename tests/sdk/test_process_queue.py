"""ProcessQueue: the committed offset is the smallest in-flight offset (reference section 11.1),
accounting, flow control, orderly take/commit, expiry, and thread safety."""

from __future__ import annotations

import queue
import random
import threading
from dataclasses import dataclass

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from localstore import StoredMessage
from sdk.consumer import FlowControlLimits, ProcessQueue


@dataclass(frozen=True)
class Msg:
    queue_offset: int
    store_size: int = 10


def msgs(*offsets: int, size: int = 10) -> list[Msg]:
    return [Msg(o, size) for o in offsets]


class FakeClock:
    """A settable millisecond clock (a real object, not a mock)."""

    def __init__(self, now_ms: int = 1_000) -> None:
        self.now_ms = now_ms

    def __call__(self) -> int:
        return self.now_ms


# -- concurrent mode: the committed offset ---------------------------------------------------


def test_reference_worked_example():
    pq: ProcessQueue[Msg] = ProcessQueue()
    pq.put_messages(msgs(100, 101, 102, 103, 104))
    assert pq.remove_messages(msgs(101, 102)) == 100
    assert pq.remove_messages(msgs(100)) == 103
    assert pq.remove_messages(msgs(103, 104)) == 105


def test_remove_from_an_empty_queue_answers_none():
    pq: ProcessQueue[Msg] = ProcessQueue()
    assert pq.remove_messages(msgs(5)) is None
    pq.put_messages(msgs(5))
    assert pq.remove_messages(msgs(5)) == 6
    assert pq.remove_messages(msgs(5)) is None


def test_removing_unknown_offsets_changes_nothing():
    pq: ProcessQueue[Msg] = ProcessQueue()
    pq.put_messages(msgs(7, 8))
    assert pq.remove_messages(msgs(99)) == 7
    assert pq.cached_count == 2


def test_put_counts_only_new_offsets_and_tracks_the_max():
    pq: ProcessQueue[Msg] = ProcessQueue()
    assert pq.queue_offset_max == -1
    assert pq.put_messages(msgs(3, 4, size=100)) == 2
    assert pq.put_messages(msgs(4, 5, size=100)) == 1
    assert (pq.cached_count, pq.cached_bytes, pq.queue_offset_max) == (3, 300, 5)
    pq.remove_messages(msgs(3, 4, 5))
    assert (pq.cached_count, pq.cached_bytes) == (0, 0)


def test_committed_offset_follows_the_max_even_when_put_out_of_order():
    pq: ProcessQueue[Msg] = ProcessQueue()
    pq.put_messages(msgs(9, 2, 5))
    assert pq.remove_messages(msgs(2)) == 5
    assert pq.remove_messages(msgs(9, 5)) == 10


def test_accepts_stored_messages_from_localstore():
    stored = StoredMessage(
        topic="T",
        queue_id=0,
        queue_offset=42,
        phys_offset=0,
        store_size=123,
        body_crc=0,
        flag=0,
        sys_flag=0,
        born_timestamp=0,
        born_host="127.0.0.1:1",
        store_timestamp=0,
        store_host="127.0.0.1:2",
        reconsume_times=0,
        prepared_transaction_offset=0,
        body=b"x",
        properties={},
    )
    pq: ProcessQueue[StoredMessage] = ProcessQueue()
    pq.put_messages([stored])
    assert pq.cached_bytes == 123
    assert pq.remove_messages([stored]) == 43


@settings(max_examples=200, deadline=None)
@given(
    offsets=st.lists(st.integers(0, 200), min_size=1, max_size=60, unique=True),
    data=st.data(),
)
def test_committed_offset_is_the_smallest_in_flight(offsets: list[int], data: st.DataObject):
    pq: ProcessQueue[Msg] = ProcessQueue()
    pq.put_messages(msgs(*offsets))
    in_flight = set(offsets)
    while in_flight:
        done = data.draw(st.lists(st.sampled_from(sorted(in_flight)), min_size=1, max_size=5))
        committed = pq.remove_messages(msgs(*done))
        in_flight -= set(done)
        expected = min(in_flight) if in_flight else max(offsets) + 1
        assert committed == expected
        assert pq.cached_count == len(in_flight)
        assert pq.offset_span == (max(in_flight) - min(in_flight) if in_flight else 0)


@settings(max_examples=300, deadline=None)
@given(data=st.data())
def test_batched_puts_and_removals_agree_with_a_model(data: st.DataObject):
    """Pull answers (ascending, past every held offset) and removals of the oldest held take
    batch shortcuts; arbitrary puts and removals take the general path. Both keep the same
    books as a plain model: which offsets are held, their bytes, the offset to commit."""
    pq: ProcessQueue[Msg] = ProcessQueue()
    held: dict[int, int] = {}  # offset -> size
    top = -1  # the largest offset ever buffered
    for _ in range(data.draw(st.integers(1, 25))):
        op = data.draw(st.sampled_from(["pull", "put", "remove oldest", "remove any"]))
        if op == "pull":
            start = top + 1 + data.draw(st.integers(0, 3))
            step = data.draw(st.integers(1, 3))
            offsets = list(range(start, start + step * data.draw(st.integers(1, 8)), step))
        else:
            offsets = data.draw(st.lists(st.integers(0, max(top, 0) + 5), max_size=8))
        batch = [Msg(o, o + 1) for o in offsets]
        if op in ("pull", "put"):
            new = list(dict.fromkeys(o for o in offsets if o not in held))
            assert pq.put_messages(batch) == len(new)
            held.update((o, o + 1) for o in new)
            top = max([top, *new])
        else:
            if op == "remove oldest":
                batch = [Msg(o, o + 1) for o in sorted(held)[: len(offsets)]]
            was_empty = not held
            committed = pq.remove_messages(batch)
            for message in batch:
                held.pop(message.queue_offset, None)
            assert committed == (None if was_empty else min(held, default=top + 1))
        assert pq.cached_count == len(held)
        assert pq.cached_bytes == sum(held.values())
        assert pq.queue_offset_max == top


# -- flow control ---------------------------------------------------------------------------------


def test_default_limits_are_rocketmqs():
    limits = FlowControlLimits()
    assert (limits.max_cached_messages, limits.max_cached_bytes, limits.max_offset_span) == (
        1000,
        100 * 1024 * 1024,
        2000,
    )


def test_throttle_on_count_size_and_span():
    limits = FlowControlLimits(max_cached_messages=3, max_cached_bytes=1000, max_offset_span=50)
    pq: ProcessQueue[Msg] = ProcessQueue()
    pq.put_messages(msgs(0, 1, 2))
    assert not pq.should_throttle(limits)  # 3 is not more than 3
    pq.put_messages(msgs(3))
    assert pq.should_throttle(limits)

    big: ProcessQueue[Msg] = ProcessQueue()
    big.put_messages(msgs(0, size=1001))
    assert big.should_throttle(limits)

    wide: ProcessQueue[Msg] = ProcessQueue()
    wide.put_messages(msgs(0, 51))
    assert wide.offset_span == 51
    assert wide.should_throttle(limits)
    assert not wide.should_throttle(limits, orderly=True)  # the span is a concurrent-mode rule


def test_default_limits_apply_when_none_given():
    pq: ProcessQueue[Msg] = ProcessQueue()
    pq.put_messages(msgs(*range(1000)))
    assert not pq.should_throttle()
    pq.put_messages(msgs(1000))
    assert pq.should_throttle()
    wide: ProcessQueue[Msg] = ProcessQueue()
    wide.put_messages(msgs(0, 2001))
    assert wide.should_throttle()


# -- orderly mode ---------------------------------------------------------------------------------


def test_take_and_commit():
    pq: ProcessQueue[Msg] = ProcessQueue()
    pq.put_messages(msgs(14, 10, 11, 12, 13))
    taken = pq.take_messages(3)
    assert [m.queue_offset for m in taken] == [10, 11, 12]
    assert pq.cached_count == 5  # taken messages stay counted until committed
    assert pq.commit() == 13
    assert (pq.cached_count, pq.cached_bytes) == (2, 20)
    assert pq.commit() is None  # nothing taken
    assert [m.queue_offset for m in pq.take_messages(10)] == [13, 14]
    assert pq.take_messages(1) == []
    assert pq.commit() == 15


def test_consume_again_puts_taken_messages_back_in_order():
    pq: ProcessQueue[Msg] = ProcessQueue()
    pq.put_messages(msgs(1, 2, 3, 4))
    taken = pq.take_messages(2)
    pq.make_messages_consume_again(taken)
    assert pq.commit() is None
    assert [m.queue_offset for m in pq.take_messages(3)] == [1, 2, 3]
    assert pq.commit() == 4


def test_put_does_not_duplicate_a_taken_offset():
    pq: ProcessQueue[Msg] = ProcessQueue()
    pq.put_messages(msgs(1, 2))
    pq.take_messages(1)
    assert pq.put_messages(msgs(1)) == 0
    assert pq.cached_count == 2


def test_take_with_non_positive_n_takes_nothing():
    pq: ProcessQueue[Msg] = ProcessQueue()
    pq.put_messages(msgs(1))
    assert pq.take_messages(0) == []
    assert pq.take_messages(-3) == []


# -- expiry ---------------------------------------------------------------------------------------


def test_expired_messages_are_the_expired_head():
    pq: ProcessQueue[Msg] = ProcessQueue()
    pq.put_messages(msgs(*range(10)))
    pq.mark_consume_started(msgs(0, 1, 2, 4), now_ms=1_000)
    pq.mark_consume_started(msgs(3), now_ms=50_000)
    timeout = 15 * 60 * 1000
    assert pq.expired_messages(1_000 + timeout, timeout) == []  # not older than the timeout
    got = pq.expired_messages(1_001 + timeout, timeout)
    assert [m.queue_offset for m in got] == [0, 1, 2]  # 3 started later: stop there
    assert pq.cached_count == 10  # the caller removes them after sending them back
    assert pq.remove_messages(got) == 3


def test_expired_messages_stop_at_max_count_and_unstarted_heads():
    pq: ProcessQueue[Msg] = ProcessQueue()
    pq.put_messages(msgs(*range(40)))
    pq.mark_consume_started(msgs(*range(1, 40)), now_ms=0)
    assert pq.expired_messages(10_000, 100) == []  # offset 0 never started
    pq.mark_consume_started(msgs(0), now_ms=0)
    assert len(pq.expired_messages(10_000, 100)) == 16
    assert [m.queue_offset for m in pq.expired_messages(10_000, 100, max_count=2)] == [0, 1]


def test_mark_consume_started_ignores_messages_not_held():
    pq: ProcessQueue[Msg] = ProcessQueue()
    pq.mark_consume_started(msgs(1), now_ms=0)
    pq.put_messages(msgs(1))
    assert pq.expired_messages(10_000, 100) == []


# -- flags and timestamps -------------------------------------------------------------------------


def test_dropped_flag_and_timestamps():
    clock = FakeClock(5_000)
    pq: ProcessQueue[Msg] = ProcessQueue(clock_ms=clock)
    assert not pq.dropped
    pq.dropped = True
    assert pq.dropped
    assert (pq.last_pull_ms, pq.last_consume_ms) == (5_000, 5_000)
    clock.now_ms = 6_000
    pq.put_messages(msgs(1, 2))
    pq.remove_messages(msgs(1))
    assert pq.last_consume_ms == 6_000
    clock.now_ms = 7_000
    pq.take_messages(1)
    assert pq.last_consume_ms == 7_000
    pq.last_pull_ms = 7_500
    pq.last_consume_ms = 7_600
    assert (pq.last_pull_ms, pq.last_consume_ms) == (7_500, 7_600)
    assert not pq.is_pull_expired(7_500 + 120_000)
    assert pq.is_pull_expired(7_501 + 120_000)


def test_wall_clock_by_default():
    pq: ProcessQueue[Msg] = ProcessQueue()
    assert pq.last_pull_ms > 1_600_000_000_000


# -- threads --------------------------------------------------------------------------------------


@pytest.mark.timeout(60)
def test_concurrent_put_and_remove_never_commit_past_an_in_flight_offset():
    """A puller thread puts ascending batches; workers finish messages in random order. Each
    committed offset must be <= every offset not yet finished (offsets put later are larger)."""
    total, workers = 5_000, 4
    pq: ProcessQueue[Msg] = ProcessQueue()
    work: queue.Queue[Msg | None] = queue.Queue()
    book = threading.Lock()
    put_offsets: set[int] = set()
    finished: set[int] = set()
    violations: list[str] = []
    commits: list[int] = []

    def puller() -> None:
        rng = random.Random(1)
        offset = 0
        while offset < total:
            batch = msgs(*range(offset, min(total, offset + rng.randint(1, 32))))
            offset += len(batch)
            pq.put_messages(batch)
            with book:
                put_offsets.update(m.queue_offset for m in batch)
            shuffled = list(batch)
            rng.shuffle(shuffled)
            for message in shuffled:
                work.put(message)
        for _ in range(workers):
            work.put(None)

    def worker() -> None:
        while (message := work.get()) is not None:
            with book:
                finished.add(message.queue_offset)  # before removing: never a false alarm
            committed = pq.remove_messages([message])
            with book:
                unfinished = put_offsets - finished
                if committed is not None:
                    commits.append(committed)
                    if unfinished and committed > min(unfinished):
                        violations.append(f"committed {committed} > in flight {min(unfinished)}")

    threads = [threading.Thread(target=puller)] + [
        threading.Thread(target=worker) for _ in range(workers)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert violations == []
    assert max(commits) == total
    assert (pq.cached_count, pq.cached_bytes, pq.offset_span) == (0, 0, 0)
    assert pq.remove_messages(msgs(0)) is None
