"""UNIQ_KEY: RocketMQ's layout (prefix, ms since the month began, counter), batches of ids."""

from __future__ import annotations

import struct
import time

import pytest

from localstore.record.message_id import UniqKeyGenerator


def test_layout_and_uniqueness():
    generator = UniqKeyGenerator("10.0.0.7")
    ids = [generator.next() for _ in range(100)] + generator.next_many(100)
    assert len(set(ids)) == 200
    assert all(len(i) == 32 and i == i.upper() for i in ids)
    assert {i[:8] for i in ids} == {"0A000007"}  # the client address
    counters = [int(i[-4:], 16) for i in ids]
    assert counters == [(counters[0] + n) & 0xFFFF for n in range(200)]


def test_late_in_a_month_the_millis_wrap_as_a_java_int_does(monkeypatch: pytest.MonkeyPatch):
    generator = UniqKeyGenerator()
    generator._month_start_ms = 0
    generator._next_month_ms = 1 << 62
    late = 30 * 86_400_000 + 5  # day 30: more than 2**31 ms after the month began
    monkeypatch.setattr(time, "time_ns", lambda: late * 1_000_000)
    single = generator.next()
    batch = generator.next_many(2)
    java_int = struct.unpack(">i", struct.pack(">I", late & 0xFFFFFFFF))[0]
    expected = struct.pack(">i", java_int).hex().upper()
    assert single[20:28] == expected
    assert [b[20:28] for b in batch] == [expected, expected]


def test_ids_stay_unique_across_threads_mixing_single_and_batch_calls():
    import threading

    generator = UniqKeyGenerator()
    made: list[list[str]] = []

    def work(batch: bool) -> None:
        ids: list[str] = []
        for _ in range(300):
            ids += generator.next_many(7) if batch else [generator.next()]
        made.append(ids)

    threads = [threading.Thread(target=work, args=(n % 2 == 0,)) for n in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    counters = [int(i[-4:], 16) for ids in made for i in ids]
    assert len(counters) == 2 * 300 * 7 + 2 * 300
    assert len(set(counters)) == len(counters)  # under 65,536 ids: no counter value twice
