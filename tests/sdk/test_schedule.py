"""sdk.broker.schedule: delayed messages under SCHEDULE_TOPIC_XXXX and the schedule service, on a
real MessageStore in tmp_path with the real background thread (short ms delay tables)."""

from __future__ import annotations

import json
import re
import shutil
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from localstore import MessageStore, NewMessage, StoredMessage, pack_host
from localstore.record.tags import SCHEDULE_TOPIC
from offsetstore.fastjson import loads
from sdk.broker.schedule import (
    PROPERTY_DELIVER_AT,
    ScheduleService,
    delay_levels,
    delayed_message,
)
from sdk.clock import ManualClock
from tests.sdk.waiting import wait_until

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
TOPIC = "orders"
LEVELS = (200, 400)  # ms


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def advance_to(clock: ManualClock, at_ms: int) -> None:
    """Move ``clock``'s wall time to ``at_ms`` (epoch ms, not before its time now)."""
    clock.advance((at_ms - clock.time_ms()) / 1000)


def open_store(root: Path) -> MessageStore:
    return MessageStore(root, commitlog_file_size=1 << 20, cq_entries_per_file=64)


@pytest.fixture
def root(tmp_path: Path) -> Path:
    return tmp_path / "store"


@pytest.fixture
def store(root: Path) -> Iterator[MessageStore]:
    with open_store(root) as opened:
        yield opened


def message(body: bytes, key: str = "k", queue_id: int = 1) -> NewMessage:
    return NewMessage(
        TOPIC,
        body,
        queue_id=queue_id,
        properties={"TAGS": "tagA", "KEYS": key, "UNIQ_KEY": f"UNIQ-{key}", "custom": "x"},
        flag=7,
        born_timestamp=1_700_000_000_123,
        born_host=pack_host("10.1.2.3", 4567),
        reconsume_times=2,
    )


def schedule(store: MessageStore, msg: NewMessage, level: int) -> StoredMessage:
    """Put ``msg`` delayed at ``level``; returns the stored schedule-topic message."""
    result = store.put(delayed_message(msg, level, levels=LEVELS), system=True)
    assert result.ok, result
    got = store.get_messages(SCHEDULE_TOPIC, level - 1, result.queue_offset, max_count=1)
    return got.messages[0]


def real_messages(store: MessageStore, queue_id: int = 1) -> list[StoredMessage]:
    return store.get_messages(TOPIC, queue_id, 0, max_count=100).messages


# -- delayed_message ---------------------------------------------------------------------------
def test_delayed_message_shape() -> None:
    original = message(b"hello")
    delayed = delayed_message(original, 3)  # default table: 18 levels
    assert delayed.topic == SCHEDULE_TOPIC
    assert delayed.queue_id == 2
    assert delayed.properties == {
        **original.properties,
        "REAL_TOPIC": TOPIC,
        "REAL_QID": "1",
        "DELAY": "3",
    }
    assert original.properties.get("DELAY") is None  # the original is untouched
    for field in ("body", "flag", "sys_flag", "born_timestamp", "born_host", "reconsume_times"):
        assert getattr(delayed, field) == getattr(original, field)


def test_delayed_message_clamps_and_validates() -> None:
    original = message(b"x")
    top = delayed_message(original, 99)
    assert (top.queue_id, top.properties["DELAY"]) == (17, "18")
    short = delayed_message(original, 5, levels=LEVELS)
    assert (short.queue_id, short.properties["DELAY"]) == (1, "2")
    seconds = delayed_message(original, 3, levels="1s 2s")
    assert seconds.queue_id == 1
    with pytest.raises(ValueError):
        delayed_message(original, 0)
    with pytest.raises(ValueError):
        delayed_message(original)
    with pytest.raises(ValueError):
        delayed_message(original, 1, deliver_at_ms=1)
    with pytest.raises(ValueError):
        delayed_message(delayed_message(original, 1), 1)
    assert delay_levels("1s 2m") == (1000, 120_000)
    assert delay_levels([50, 100]) == (50, 100)
    with pytest.raises(ValueError):
        delay_levels([])
    with pytest.raises(ValueError):
        delay_levels([0])


def test_delayed_message_absolute_time_picks_the_largest_fitting_level() -> None:
    original = message(b"x")
    levels = (100, 1000, 5000)
    cases = {50: 1, 100: 1, 999: 1, 1000: 2, 4999: 2, 5000: 3, 10**9: 3, -5: 1}
    for remaining, level in cases.items():
        delayed = delayed_message(
            original, deliver_at_ms=10_000 + remaining, levels=levels, now_ms=10_000
        )
        assert delayed.properties["DELAY"] == str(level), remaining
        assert delayed.queue_id == level - 1
        assert delayed.properties[PROPERTY_DELIVER_AT] == str(10_000 + remaining)
        assert delayed.properties["REAL_TOPIC"] == TOPIC


# -- delivery ----------------------------------------------------------------------------------
def test_run_once_delivers_exactly_at_the_delay(store: MessageStore, root: Path) -> None:
    service = ScheduleService(store, root, levels=(10_000, 20_000))
    result = store.put(delayed_message(message(b"a"), 1, levels=(10_000,)), system=True)
    assert result.ok
    stored_at = store.store_timestamp(SCHEDULE_TOPIC, 0, 0)
    assert service.run_once(stored_at + 9_999) == 0
    assert real_messages(store) == []
    assert service.run_once(stored_at + 10_000) == 1
    assert [m.body for m in real_messages(store)] == [b"a"]
    assert service.run_once(stored_at + 50_000) == 0  # not twice
    assert service.offsets == {1: 1, 2: 0}


def test_delivered_after_the_delay_not_before_and_unchanged(
    store: MessageStore, root: Path
) -> None:
    clock = ManualClock()
    with ScheduleService(store, root, levels=LEVELS, clock=clock) as service:
        first = schedule(store, message(b"one", "k1"), 1)
        second = schedule(store, message(b"two", "k2"), 2)
        for delivered, (sched, delay) in enumerate(((first, LEVELS[0]), (second, LEVELS[1]))):
            advance_to(clock, sched.store_timestamp + delay - 1)
            assert service.run_once() == 0  # 1 ms before it is due
            assert len(real_messages(store)) == delivered
            clock.advance(service.poll_interval_s)  # due, and a round comes
            wait_until(lambda n=delivered: len(real_messages(store)) == n + 1)  # type: ignore[misc]
    out = {m.body: m for m in real_messages(store)}[b"one"]
    assert out.topic == TOPIC and out.queue_id == 1
    assert out.properties == {"TAGS": "tagA", "KEYS": "k1", "UNIQ_KEY": "UNIQ-k1", "custom": "x"}
    assert (out.flag, out.born_timestamp, out.born_host, out.reconsume_times) == (
        7,
        1_700_000_000_123,
        "10.1.2.3:4567",
        2,
    )
    assert service.delivered == 2
    assert service.offsets[1] == 1 and service.offsets[2] == 1


def test_order_within_a_level(store: MessageStore, root: Path) -> None:
    bodies = [f"m{i}".encode() for i in range(10)]
    clock = ManualClock()
    with ScheduleService(store, root, levels=LEVELS, clock=clock):
        last = [schedule(store, message(body), 1) for body in bodies][-1]
        advance_to(clock, last.store_timestamp + LEVELS[0] + 100)  # due, and a round comes
        wait_until(lambda: len(real_messages(store)) == len(bodies))
    assert [m.body for m in real_messages(store)] == bodies


def test_retry_topic_is_a_system_topic(store: MessageStore, root: Path) -> None:
    retry = NewMessage("%RETRY%group", b"again", queue_id=0, reconsume_times=1)
    assert store.put(delayed_message(retry, 1, levels=LEVELS), system=True).ok
    clock = ManualClock(start_ms=store.store_timestamp(SCHEDULE_TOPIC, 0, 0))
    with ScheduleService(store, root, levels=LEVELS, clock=clock):
        clock.advance(LEVELS[0] / 1000 + 0.1)  # due, and a round comes
        wait_until(lambda: bool(store.get_messages("%RETRY%group", 0, 0).messages))
    assert store.get_messages("%RETRY%group", 0, 0).messages[0].reconsume_times == 1


def test_absolute_time_never_early(store: MessageStore, root: Path) -> None:
    clock = ManualClock()
    deliver_at = clock.time_ms() + 5_000
    delayed = delayed_message(
        message(b"at"), deliver_at_ms=deliver_at, levels=LEVELS, now_ms=clock.time_ms()
    )
    assert delayed.properties["DELAY"] == "2"
    with ScheduleService(store, root, levels=LEVELS, clock=clock) as service:
        assert store.put(delayed, system=True).ok
        advance_to(clock, store.store_timestamp(SCHEDULE_TOPIC, 1, 0) + LEVELS[1] + 100)
        wait_until(lambda: service.rescheduled == 1)  # its level fired, its time had not come
        advance_to(clock, deliver_at - 1)
        wait_until(lambda: service.rescheduled == 2)  # again, now at level 1
        assert real_messages(store) == []
        advance_to(clock, deliver_at + 100)
        wait_until(lambda: len(real_messages(store)) == 1)
    out = real_messages(store)[0]
    assert PROPERTY_DELIVER_AT not in out.properties
    assert "DELAY" not in out.properties and "REAL_TOPIC" not in out.properties
    assert service.rescheduled == 2 and service.delivered == 1


def test_absolute_time_already_past(store: MessageStore, root: Path) -> None:
    past = delayed_message(message(b"late"), deliver_at_ms=now_ms() - 10_000, levels=LEVELS)
    assert store.put(past, system=True).ok
    fired = ManualClock(start_ms=store.store_timestamp(SCHEDULE_TOPIC, 0, 0) + LEVELS[0])
    with ScheduleService(store, root, levels=LEVELS, clock=fired) as service:
        wait_until(lambda: len(real_messages(store)) == 1)
    assert service.rescheduled == 0


def test_message_without_real_topic_is_skipped(store: MessageStore, root: Path) -> None:
    bad = NewMessage(SCHEDULE_TOPIC, b"lost", queue_id=0, properties={"DELAY": "1"})
    assert store.put(bad, system=True).ok
    schedule(store, message(b"fine"), 1)
    service = ScheduleService(store, root, levels=LEVELS)
    assert service.run_once(now_ms() + 10_000) == 2
    assert service.skipped == 1 and service.delivered == 1
    assert [m.body for m in real_messages(store)] == [b"fine"]


# -- restarts and the progress file ------------------------------------------------------------
def test_restart_before_due_delivers_once(root: Path) -> None:
    levels = (600,)
    with open_store(root) as store:
        assert store.put(delayed_message(message(b"r"), 1, levels=levels), system=True).ok
        stored_at = store.store_timestamp(SCHEDULE_TOPIC, 0, 0)
        clock = ManualClock(start_ms=stored_at)
        service = ScheduleService(store, root, levels=levels, clock=clock)
        service.start()
        advance_to(clock, stored_at + levels[0] - 1)
        assert service.run_once() == 0
        service.stop()  # before it was due
        assert real_messages(store) == []
    with open_store(root) as store:
        clock = ManualClock(start_ms=stored_at + levels[0] - 1)
        with ScheduleService(store, root, levels=levels, clock=clock) as service:
            assert service.run_once() == 0 and real_messages(store) == []
            clock.advance(service.poll_interval_s)  # due, and the next round comes
            wait_until(lambda: len(real_messages(store)) == 1)
            clock.advance(10)
            assert service.run_once() == 0  # more rounds: still one
        assert len(real_messages(store)) == 1
    with open_store(root) as store:  # a clean restart after delivery: no duplicate
        clock = ManualClock(start_ms=stored_at + 10_000)
        with ScheduleService(store, root, levels=levels, clock=clock) as service:
            assert service.run_once() == 0
        assert len(real_messages(store)) == 1
        assert service.delivered == 0


def test_due_during_downtime_is_delivered_at_restart(root: Path) -> None:
    with open_store(root) as store:
        ScheduleService(store, root, levels=LEVELS).stop()  # never started: writes progress
        stored_at = schedule(store, message(b"while-down"), 1).store_timestamp
    with open_store(root) as store:
        # Restarted once it was due: delivered by the first round, the clock standing still
        # (a message made to wait again from the restart would need the clock to move).
        clock = ManualClock(start_ms=stored_at + LEVELS[0])
        with ScheduleService(store, root, levels=LEVELS, clock=clock):
            wait_until(lambda: len(real_messages(store)) == 1)


def test_progress_file_has_rocketmq_shape(store: MessageStore, root: Path) -> None:
    schedule(store, message(b"a"), 1)
    schedule(store, message(b"b"), 1)
    service = ScheduleService(store, root, levels=LEVELS)
    assert service.run_once(now_ms() + 10_000) == 2
    path = root / "config" / "delayOffset.json"
    text = path.read_text()
    assert re.search(r"^\s*1:2,$", text, re.MULTILINE), text  # fastjson: bare integer keys
    assert re.search(r"^\s*2:0$", text, re.MULTILINE), text
    document = loads(text)
    assert dict(document["offsetTable"]) == {1: 2, 2: 0}
    assert document["dataVersion"]["counter"] >= 1
    # plain JSON with quoted keys (another writer) loads too
    path.write_text(json.dumps({"offsetTable": {"1": 1, "2": 0}}))
    assert ScheduleService(store, root, levels=LEVELS).offsets == {1: 1, 2: 0}
    # a damaged file falls back to the backup kept by the atomic write
    service.persist()
    service.persist()
    path.write_text("{not json")
    assert ScheduleService(store, root, levels=LEVELS).offsets == {1: 2, 2: 0}


def test_offsets_are_corrected_into_the_queue(store: MessageStore, root: Path) -> None:
    schedule(store, message(b"a"), 1)
    path = root / "config" / "delayOffset.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text('{"offsetTable":{1:99,2:-3}}')
    assert ScheduleService(store, root, levels=LEVELS).offsets == {1: 1, 2: 0}


def test_rocketmq_written_progress_file_loads_and_resumes(tmp_path: Path) -> None:
    root = tmp_path / "reference"
    shutil.copytree(FIXTURES / "reference-encoder" / "store", root)
    (root / "lock").unlink(missing_ok=True)
    geometry = json.loads((FIXTURES / "reference-encoder" / "geometry.json").read_text())
    with MessageStore(root, **geometry) as store:
        before = {q: store.max_offset("TopicTest", q) for q in store.queue_ids("TopicTest")}
        service = ScheduleService(store, root)  # RocketMQ's default 18 levels
        assert service.offsets[1] == 1 and service.offsets[3] == 1  # from RocketMQ's file
        assert service.offsets[5] == 0 and service.offsets[18] == 0
        assert service.run_once() == 4  # the ones RocketMQ had not delivered yet (2023)
        keys = sorted(
            m.properties["KEYS"]
            for q, offset in before.items()
            for m in store.get_messages("TopicTest", q, offset).messages
        )
        assert keys == ["delay-2", "delay-3", "delay-4", "delay-5"]
        assert service.run_once() == 0
        document = loads((root / "config" / "delayOffset.json").read_text())
        table = dict(document["offsetTable"])
        assert (table[1], table[3], table[5], table[18]) == (1, 2, 1, 2)
        assert document["dataVersion"]["counter"] > 2  # RocketMQ's counter continues
