"""Open, close, reopen: recorded geometry, abort and checkpoint files, the directory lock, and
the two flush modes."""

from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from localstore import (
    GeometryMismatchError,
    MessageStore,
    PutStatus,
    StoredMessage,
    StoreGeometry,
    StoreLockedError,
)
from localstore.record.codec import decode_record

from .conftest import TINY_GEOMETRY, StoreFactory, message

REPO_ROOT = Path(__file__).resolve().parents[2]


def read_queue(store: MessageStore, topic: str, queue_id: int) -> list[StoredMessage]:
    messages: list[StoredMessage] = []
    offset = store.min_offset(topic, queue_id)
    while offset < store.max_offset(topic, queue_id):
        result = store.get_messages(topic, queue_id, offset)
        messages.extend(result.messages)
        offset = result.next_offset
    return messages


def decode_all(raw: bytes) -> list[StoredMessage]:
    records, pos = [], 0
    while pos < len(raw):
        records.append(decode_record(raw, pos))
        pos += records[-1].store_size
    return records


def fill(store: MessageStore, count: int) -> None:
    for i in range(count):
        msg = message(body=bytes([i % 256]) * (20 + 13 * i), queue_id=i % 3, tags=f"t{i % 4}")
        assert store.put(msg).ok


# -- reopen and geometry ---------------------------------------------------------------------


@pytest.mark.parametrize("flush_mode", ["async", "sync"])
def test_reopen_reads_every_message(
    open_store: StoreFactory, store_dir: Path, flush_mode: str
) -> None:
    store = open_store(**TINY_GEOMETRY, flush_mode=flush_mode)
    fill(store, 60)
    before = {q: read_queue(store, "TopicTest", q) for q in range(3)}
    end = store.commitlog.max_offset
    store.close()

    reopened = open_store()
    # max_message_size: the largest body a 4 KiB segment holds (4096 - 92 - 8), not 4 MiB
    expected = StoreGeometry(**TINY_GEOMETRY, flush_mode=flush_mode, max_message_size=3996)
    assert reopened.geometry == expected
    assert not reopened.crashed_last_time
    assert reopened.commitlog.max_offset == end
    assert {q: read_queue(reopened, "TopicTest", q) for q in range(3)} == before
    assert sum(len(v) for v in before.values()) == 60
    # writing continues where it stopped
    result = reopened.put(message(queue_id=1))
    assert result.queue_offset == 20
    assert result.phys_offset >= end


def test_geometry_is_recorded_and_reused(open_store: StoreFactory, store_dir: Path) -> None:
    open_store(commitlog_file_size=8192, cq_entries_per_file=10, max_message_size=2048).close()
    recorded = json.loads((store_dir / "config" / "store.json").read_text())
    assert recorded["commitlog_file_size"] == 8192
    assert recorded["cq_entries_per_file"] == 10
    assert recorded["max_message_size"] == 2048
    assert recorded["flush_mode"] == "async"

    again = open_store()
    assert again.geometry.commitlog_file_size == 8192
    assert again.geometry.max_message_size == 2048
    again.close()
    same = open_store(commitlog_file_size=8192, flush_mode="async")
    assert same.geometry.cq_entries_per_file == 10


@pytest.mark.parametrize(
    "conflict",
    [
        {"commitlog_file_size": 4096},
        {"cq_entries_per_file": 11},
        {"max_message_size": 4096},
        {"flush_mode": "sync"},
    ],
)
def test_conflicting_geometry_is_refused(
    open_store: StoreFactory, conflict: dict[str, object]
) -> None:
    open_store(commitlog_file_size=8192, cq_entries_per_file=10, max_message_size=2048).close()
    with pytest.raises(GeometryMismatchError):
        open_store(**conflict)
    open_store().close()  # the failed open released the directory


# -- abort, checkpoint -----------------------------------------------------------------------


def test_abort_file_marks_an_open_store(open_store: StoreFactory, store_dir: Path) -> None:
    store = open_store()
    assert (store_dir / "abort").exists()
    store.put(message())
    store.close()
    assert not (store_dir / "abort").exists()
    store.close()  # idempotent
    assert store.closed
    assert not open_store().crashed_last_time


@pytest.mark.parametrize("flush_mode", ["async", "sync"])
def test_checkpoint_timestamps_after_close(
    open_store: StoreFactory, store_dir: Path, flush_mode: str
) -> None:
    store = open_store(flush_mode=flush_mode)
    results = [store.put(message(queue_id=i % 2)) for i in range(5)]
    store.close()
    data = (store_dir / "checkpoint").read_bytes()
    assert len(data) == 4096
    physic, logics = struct.unpack_from(">qq", data, 0)
    assert physic == results[-1].store_timestamp
    assert logics == results[-1].store_timestamp


def test_put_after_close(open_store: StoreFactory) -> None:
    store = open_store()
    store.close()
    assert store.put(message()).status is PutStatus.SERVICE_NOT_AVAILABLE


# -- the directory lock ----------------------------------------------------------------------


def test_second_instance_in_the_same_process_is_refused(
    open_store: StoreFactory, store_dir: Path
) -> None:
    store = open_store()
    with pytest.raises(StoreLockedError) as refused:
        MessageStore(store_dir)
    assert str(store_dir) in str(refused.value)
    assert str(os.getpid()) in str(refused.value)
    assert refused.value.holder_pid == os.getpid()
    # the refused open did not disturb the holder
    assert store.put(message()).ok
    store.close()
    other = open_store()
    assert other.max_offset("TopicTest", 0) == 1


@pytest.mark.integration
def test_another_process_holding_the_store(open_store: StoreFactory, store_dir: Path) -> None:
    code = (
        "import sys, time\n"
        "from localstore import MessageStore\n"
        "store = MessageStore(sys.argv[1])\n"
        "print('ready', flush=True)\n"
        "time.sleep(120)\n"
    )
    with subprocess.Popen(
        [sys.executable, "-c", code, str(store_dir)],
        cwd=REPO_ROOT,
        stdout=subprocess.PIPE,
        text=True,
    ) as child:
        try:
            assert child.stdout is not None
            assert child.stdout.readline().strip() == "ready"
            with pytest.raises(StoreLockedError) as refused:
                MessageStore(store_dir)
            assert refused.value.holder_pid == child.pid
            assert str(child.pid) in str(refused.value)
            assert str(store_dir) in str(refused.value)
        finally:
            child.kill()
            child.wait()
    store = open_store()  # the lock died with its holder
    assert store.crashed_last_time  # which never closed the store


# -- flush modes -----------------------------------------------------------------------------


def test_sync_flush_group_commit(open_store: StoreFactory) -> None:
    store = open_store(flush_mode="sync")
    threads_count, per_thread = 8, 25
    failures: list[str] = []

    def producer(queue_id: int) -> None:
        for i in range(per_thread):
            result = store.put(message(body=f"{queue_id}-{i}".encode(), queue_id=queue_id % 4))
            if not result.ok:
                failures.append(f"{result.status}: {result.detail}")
                continue
            # durable and therefore visible as soon as the put returns
            if store.message_at(result.phys_offset).body != f"{queue_id}-{i}".encode():
                failures.append(f"message {queue_id}-{i} not readable after its put")

    threads = [threading.Thread(target=producer, args=(n,)) for n in range(threads_count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert failures == []
    total = threads_count * per_thread
    assert sum(store.max_offset("TopicTest", q) for q in range(4)) == total
    assert 0 < store.flusher.fsync_count < total
    assert store.commitlog.flushed_offset == store.commitlog.max_offset


@pytest.mark.skipif(not hasattr(os, "RWF_DSYNC"), reason="pwritev's RWF_DSYNC is Linux's")
def test_sync_flush_writes_and_syncs_a_one_page_group_in_one_call(
    open_store: StoreFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = open_store(flush_mode="sync")
    store.put(message(body=b"first"))  # the topic's queue and the segment exist
    durable: list[tuple[int, int, int]] = []
    real = os.pwritev

    def recording(fd: int, buffers: list[bytes], position: int, flags: int = 0) -> int:
        durable.append((position, sum(map(len, buffers)), flags))
        return real(fd, buffers, position, flags)

    monkeypatch.setattr(os, "pwritev", recording)
    result = store.put(message(body=b"second"))
    assert result.ok and store.commitlog.flushed_offset == store.commitlog.max_offset
    assert durable == [
        (result.phys_offset, store.commitlog.max_offset - result.phys_offset, os.RWF_DSYNC)
    ]


def test_sync_flush_readers_see_only_flushed_records(open_store: StoreFactory) -> None:
    store = open_store(flush_mode="sync")
    waiters = []
    for i in range(200):
        result, waiter = store.append([message(body=bytes(100 + i))])
        assert result.ok
        waiters.append(waiter)
        got = store.get_messages("TopicTest", 0, 0, max_count=1000)
        flushed = store.commitlog.flushed_offset  # only grows: read after the get
        assert all(m.phys_offset + m.store_size <= flushed for m in got.messages)
    for waiter in waiters:
        assert waiter is not None and waiter.wait(5)
    assert store.max_offset("TopicTest", 0) == 200


def test_async_flush_data_is_visible_at_once(open_store: StoreFactory) -> None:
    store = open_store(flush_mode="async")
    for i in range(20):
        result = store.put(message(body=bytes([i])))
        assert result.ok
        assert store.max_offset("TopicTest", 0) == i + 1
        assert store.message_at(result.phys_offset).body == bytes([i])
        assert store.get_messages("TopicTest", 0, i).messages[0].body == bytes([i])


# -- random puts, read back before and after a reopen ----------------------------------------

TOPICS = ["A", "B", "%RETRY%" + "g" * 150]  # the last one needs v2 records
TAG_CHOICES = [None, "x", "y", "Aa", "BB"]
batches = st.lists(
    st.tuples(
        st.sampled_from(TOPICS),
        st.integers(0, 3),
        st.lists(
            st.tuples(st.integers(1, 1200), st.sampled_from(TAG_CHOICES)), min_size=1, max_size=4
        ),
    ),
    min_size=1,
    max_size=25,
)


@settings(max_examples=40, deadline=None)
@given(batches, st.sampled_from(["async", "sync"]), st.sampled_from(["*", "x", "Aa", "x || BB"]))
def test_random_puts_read_back_before_and_after_reopen(
    plan: list[tuple[str, int, list[tuple[int, str | None]]]], flush_mode: str, expression: str
) -> None:
    model: dict[tuple[str, int], list[tuple[bytes, str | None]]] = {}
    with tempfile.TemporaryDirectory() as root:
        with MessageStore(root, **TINY_GEOMETRY, flush_mode=flush_mode) as store:
            for n, (topic, queue_id, entries) in enumerate(plan):
                msgs = [
                    message(topic, bytes([n % 256]) * size, queue_id=queue_id, tags=tag)
                    for size, tag in entries
                ]
                queue = model.setdefault((topic, queue_id), [])
                result = store.put_batch(msgs)
                assert result.ok, result.detail
                assert result.queue_offset == len(queue)
                queue.extend((m.body, m.properties.get("TAGS")) for m in msgs)
            snapshot = check_against_model(store, model, expression)
        with MessageStore(root) as reopened:
            assert check_against_model(reopened, model, expression) == snapshot
            assert reopened.put(message("A", b"more")).queue_offset == len(model.get(("A", 0), []))


def check_against_model(
    store: MessageStore,
    model: dict[tuple[str, int], list[tuple[bytes, str | None]]],
    expression: str,
) -> list[StoredMessage]:
    wanted = None if expression == "*" else {t.strip() for t in expression.split("||")}
    everything = []
    for (topic, queue_id), entries in model.items():
        assert store.max_offset(topic, queue_id) == len(entries)
        got = read_queue(store, topic, queue_id)
        assert [(m.body, m.tags) for m in got] == entries
        assert [m.queue_offset for m in got] == list(range(len(entries)))
        everything.extend(got)
        filtered, offset = [], 0
        while offset < len(entries):
            result = store.get_messages(topic, queue_id, offset, tags=expression)
            raw = store.get_message_bytes(topic, queue_id, offset, tags=expression)
            assert decode_all(raw.raw) == result.messages
            filtered.extend((m.body, m.tags) for m in result.messages)
            assert result.next_offset > offset
            offset = result.next_offset
        assert filtered == [e for e in entries if wanted is None or e[1] in wanted]
    return everything
