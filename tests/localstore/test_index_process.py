"""The key index built by a child process (``StoreOptions.index_process``), with real processes:
its files are byte for byte those of the in-process index, whether it builds them from the keys
the puts send or catches up from the commitlog; queries see every message stored before them;
retention deletes its files; a killed child or a killed store loses no key after the next open,
and no child outlives its store."""

from __future__ import annotations

import os
import shutil
import signal
import struct
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import filelock
import pytest

import localstore.index.process as index_process_module
from localstore import MessageStore, NewMessage, StoreOptions
from localstore.errors import IndexProcessError
from localstore.index.process import IndexProcess
from localstore.index.service import IndexService, index_writer_lock
from localstore.index.worker import CommitLogReader, IndexFollower

from .conftest import StoreFactory

TOPICS = ("Orders", "Payments")
# Small files: 4 KiB commitlog segments, index files of 40 keys (20 messages with two keys).
GEOMETRY: dict[str, Any] = {
    "commitlog_file_size": 4096,
    "cq_entries_per_file": 16,
    "index_slots": 16,
    "index_entries": 41,
}
CHILD = StoreOptions(index_process=True)


def keyed(number: int, *, sys_flag: int = 0) -> NewMessage:
    topic = TOPICS[number % 2]
    properties = {"KEYS": f"key{number} shared", "UNIQ_KEY": f"U{number:031d}"}
    return NewMessage(topic, f"m{number}".encode(), number % 4, properties, sys_flag=sys_flag)


def put_mixed(store: MessageStore, start: int, count: int) -> None:
    """Batches of three (of one topic and queue) from every multiple of 5, single puts
    between them, ROLLBACK records (never indexed) among those at multiples of 7."""
    number = start
    while number < start + count:
        if number % 5 == 0:
            batch = [keyed(n) for n in range(number, number + 3)]
            for message in batch:
                message.topic, message.queue_id = batch[0].topic, batch[0].queue_id
            assert store.put_batch(batch).ok
            number += 3
            continue
        flag = 0xC if number % 7 == 0 else 0
        assert store.put(keyed(number, sys_flag=flag)).ok
        number += 1


def index_files(root: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted((root / "index").iterdir())}


def child_pid(store: MessageStore) -> int:
    assert isinstance(store.index, IndexProcess)
    return store.index.pid


def gone(pid: int, within_s: float = 10.0) -> bool:
    """Whether process ``pid`` has exited within ``within_s`` (reaped, or a zombie whose parent
    has not reaped it yet)."""
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except FileNotFoundError:
            return True
        if stat.rpartition(")")[2].split()[0] == "Z":
            return True
        time.sleep(0.02)
    return False


def kill_store_process(script: str, store_dir: Path) -> None:
    """Run ``script`` (given the store directory; it prints its index process's pid once it
    is where it should die), kill -9 it there, and check the index process ends with it (its
    stdin closes with the store's process)."""
    with subprocess.Popen(
        [sys.executable, "-c", script, str(store_dir)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    ) as store_process:
        assert store_process.stdout is not None
        child = int(store_process.stdout.readline())
        store_process.kill()
        store_process.wait()
    assert gone(child)


def found_numbers(store: MessageStore, key: str, topic: str) -> list[int]:
    return sorted(int(m.body[1:]) for m in store.query_by_key(topic, key))


@pytest.mark.parametrize("flush_mode", ["async", "sync"])
def test_files_are_those_of_the_in_process_index(
    open_store: StoreFactory, tmp_path: Path, flush_mode: str
) -> None:
    with_child = tmp_path / "child"
    store = open_store(with_child, options=CHILD, flush_mode=flush_mode, **GEOMETRY)
    put_mixed(store, 0, 120)
    for number in range(120, 150):  # one topic, one put each: runs the catch-up merges
        message = keyed(number)
        message.topic = "Orders"
        if number % 3 == 0:
            message.properties.clear()  # no key at all
        assert store.put(message).ok
    store.close()
    built = index_files(with_child)
    assert len(built) > 3  # several index files rolled

    # The same commitlog indexed in the store's process (recovery rebuilds a missing index).
    rebuilt = tmp_path / "in-process"
    shutil.copytree(with_child, rebuilt)
    shutil.rmtree(rebuilt / "index")
    open_store(rebuilt, flush_mode=flush_mode, **GEOMETRY).close()
    assert index_files(rebuilt) == built

    # And by a child catching up from the commitlog.
    caught_up = tmp_path / "caught-up"
    shutil.copytree(with_child, caught_up)
    shutil.rmtree(caught_up / "index")
    reopened = open_store(caught_up, options=CHILD, flush_mode=flush_mode, **GEOMETRY)
    reopened.wait_indexed()
    reopened.close()
    assert index_files(caught_up) == built


@pytest.mark.parametrize("flush_mode", ["async", "sync"])
def test_queries_see_every_message_stored_before_them(
    open_store: StoreFactory, flush_mode: str
) -> None:
    store = open_store(options=CHILD, flush_mode=flush_mode, **GEOMETRY)
    for number in range(40):
        result = store.put(keyed(number))
        # Right after the put, by its key and by its UNIQ_KEY (no wait in between).
        assert found_numbers(store, f"key{number}", TOPICS[number % 2]) == [number]
        (by_id,) = store.query_by_id(f"U{number:031d}")
        assert by_id.phys_offset == result.phys_offset
    assert found_numbers(store, "shared", "Orders") == list(range(0, 40, 2))
    assert store.query_by_key("Orders", "key1") == []  # key1 is a Payments message


def test_keys_reach_the_child_without_a_query(open_store: StoreFactory, store_dir: Path) -> None:
    """Puts send their keys every few hundred messages: the parent holds no unbounded backlog
    and the files grow while nobody asks (not even the periodic flush)."""
    options = StoreOptions(index_process=True, cq_flush_interval_ms=3_600_000)
    store = open_store(options=options, index_slots=64, index_entries=4096)
    batch = [keyed(n) for n in range(100)]
    for message in batch:
        message.topic, message.queue_id = "Orders", 0
    for _ in range(10):
        assert store.put_batch(batch).ok

    def keys_on_disk() -> int:
        index_dir = store_dir / "index"
        files = list(index_dir.iterdir()) if index_dir.is_dir() else []
        return sum(struct.unpack_from(">i", f.read_bytes(), 36)[0] - 1 for f in files)

    deadline = time.monotonic() + 10
    while keys_on_disk() < 1000 and time.monotonic() < deadline:
        time.sleep(0.02)
    assert keys_on_disk() >= 1000  # of the 1,800 keys put; those not sent yet wait


def test_rollback_records_are_not_indexed(open_store: StoreFactory) -> None:
    store = open_store(options=CHILD, **GEOMETRY)
    put_mixed(store, 0, 30)
    assert found_numbers(store, "key14", TOPICS[0]) == []  # a single put of a ROLLBACK record
    assert found_numbers(store, "key13", TOPICS[1]) == [13]


def test_retention_deletes_index_files_through_the_child(open_store: StoreFactory) -> None:
    store = open_store(options=CHILD, **GEOMETRY)
    put_mixed(store, 0, 120)
    store.wait_indexed()
    before = set(index_files(store.root))
    report = store.clean(force=True, manual=False)
    assert report.commitlog_files and report.index_files
    assert {p.name for p in report.index_files} <= before
    assert not any(p.exists() for p in report.index_files)
    assert found_numbers(store, "key0", TOPICS[0]) == []  # its segment is gone
    assert found_numbers(store, "key118", TOPICS[0]) == [118]


def test_close_ends_the_child(open_store: StoreFactory) -> None:
    store = open_store(options=CHILD, **GEOMETRY)
    pid = child_pid(store)
    put_mixed(store, 0, 10)
    store.close()
    assert gone(pid)
    assert not (store.root / "abort").exists()


def test_a_killed_child_fails_queries_and_the_next_open_rebuilds(
    open_store: StoreFactory, store_dir: Path
) -> None:
    store = open_store(options=CHILD, **GEOMETRY)
    put_mixed(store, 0, 60)
    store.wait_indexed()
    os.kill(child_pid(store), signal.SIGKILL)
    assert gone(child_pid(store))
    put_mixed(store, 60, 1200)  # puts go on, their keys sent to a dead pipe
    with pytest.raises(IndexProcessError, match="key-index process"):
        store.query_by_key(TOPICS[0], "key100")
    with pytest.raises(IndexProcessError):
        store.close()
    assert (store_dir / "abort").exists()  # so the next open treats the index as crashed

    reopened = open_store(options=CHILD, **GEOMETRY)
    assert reopened.crashed_last_time
    for number in (0, 58, 100, 118, 1258):
        assert found_numbers(reopened, f"key{number}", TOPICS[number % 2]) == [number]


WRITER = r"""
import sys
from localstore import MessageStore, NewMessage, StoreOptions
store = MessageStore(sys.argv[1], options=StoreOptions(index_process=True),
                     commitlog_file_size=4096, cq_entries_per_file=16, index_slots=16,
                     index_entries=41)
def put(number):
    message = NewMessage("Orders", f"m{number}".encode(), 0, {"KEYS": f"key{number}"})
    assert store.put(message).ok
for number in range(200):
    put(number)
store.wait_indexed()
for number in range(200, 300):  # keys gathered, not yet sent when the store dies
    put(number)
print(store.index.pid, flush=True)
sys.stdin.read()  # killed while waiting here
"""


@pytest.mark.integration
def test_a_killed_store_takes_its_child_along_and_loses_no_key(
    open_store: StoreFactory, store_dir: Path
) -> None:
    kill_store_process(WRITER, store_dir)
    reopened = open_store(options=CHILD, **GEOMETRY)
    assert reopened.crashed_last_time
    for number in [*range(0, 300, 7), 299]:
        assert found_numbers(reopened, f"key{number}", "Orders") == [number]


def test_the_option_needs_an_index(open_store: StoreFactory) -> None:
    store = open_store(options=CHILD, index_enabled=False, **GEOMETRY)
    assert store.index is None
    store.wait_indexed()  # nothing to wait for
    assert store.put(keyed(0)).ok


def test_a_record_bigger_than_a_read_stretch_is_caught_up(
    open_store: StoreFactory, store_dir: Path
) -> None:
    """The catch-up copies the commitlog 4 MiB at a time; a record of the largest body
    (4 MiB) is bigger than that."""
    geometry = {"commitlog_file_size": 16 << 20, "index_slots": 16, "index_entries": 41}
    store = open_store(**geometry)
    big = NewMessage("Orders", b"b" * (4 << 20), 0, {"KEYS": "big"})
    assert store.put(big).ok
    assert store.put(NewMessage("Orders", b"m1", 0, {"KEYS": "key1"})).ok
    store.close()
    shutil.rmtree(store_dir / "index")
    reopened = open_store(options=CHILD, **geometry)
    assert [len(m.body) for m in reopened.query_by_key("Orders", "big")] == [4 << 20]
    assert found_numbers(reopened, "key1", "Orders") == [1]


def test_a_request_cut_short_fails_the_channel_not_the_next_answer(
    open_store: StoreFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An exception while a query waits (a Ctrl-C) would leave its answer to the next request:
    the channel is marked failed instead, and the flush thread's flush does not raise."""
    store = open_store(options=CHILD, **GEOMETRY)
    put_mixed(store, 0, 30)
    real = index_process_module.read_frame

    def interrupted(fd: int) -> tuple[bytes, bytes] | None:
        monkeypatch.setattr(index_process_module, "read_frame", real)
        raise KeyboardInterrupt

    monkeypatch.setattr(index_process_module, "read_frame", interrupted)
    with pytest.raises(KeyboardInterrupt):
        store.query_by_key(TOPICS[0], "key0")
    with pytest.raises(IndexProcessError, match="cut short"):
        store.query_by_key(TOPICS[1], "key1")
    assert store.index is not None
    store.index.flush()  # the flush thread's call: no exception
    assert store.put(keyed(30)).ok
    with pytest.raises(IndexProcessError):
        store.close()


def test_retention_goes_on_without_the_child(open_store: StoreFactory) -> None:
    store = open_store(options=CHILD, **GEOMETRY)
    put_mixed(store, 0, 120)
    os.kill(child_pid(store), signal.SIGKILL)
    assert gone(child_pid(store))
    report = store.clean(force=True, manual=False)
    assert report.commitlog_files and report.index_files == []
    assert store.get_messages(TOPICS[0], 0, 0).status.value == "OFFSET_TOO_SMALL"
    with pytest.raises(IndexProcessError):
        store.close()


def test_a_child_that_cannot_start_fails_the_open(
    open_store: StoreFactory, store_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sys, "executable", "/bin/false")
    with pytest.raises(IndexProcessError, match="did not start"):
        MessageStore(store_dir, options=CHILD, **GEOMETRY)
    monkeypatch.undo()
    assert open_store(**GEOMETRY).put(keyed(0)).ok  # the directory was released


def test_the_child_imports_this_package_whatever_the_working_directory(
    open_store: StoreFactory, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``python -m`` would import a ``localstore`` from the working directory first."""
    decoy = tmp_path / "app" / "localstore"
    decoy.mkdir(parents=True)
    (decoy / "__init__.py").write_text("raise ImportError('the decoy was imported')\n")
    monkeypatch.chdir(decoy.parent)
    store = open_store(tmp_path / "store", options=CHILD, **GEOMETRY)
    put_mixed(store, 0, 10)
    assert found_numbers(store, "key8", TOPICS[0]) == [8]


OPENER = r"""
import sys
from localstore import MessageStore, StoreOptions
store = MessageStore(sys.argv[1], options=StoreOptions(index_process=True), index_slots=1024,
                     index_entries=8192)
print(store.index.pid, flush=True)
sys.stdin.read()  # killed while its index process catches up
"""


@pytest.mark.integration
def test_a_store_killed_while_its_child_catches_up_loses_no_key(
    open_store: StoreFactory, store_dir: Path
) -> None:
    geometry = {"index_slots": 1024, "index_entries": 8192}
    store = open_store(**geometry)
    for start in range(0, 60_000, 1000):
        batch = [
            NewMessage("Orders", f"m{n}".encode(), 0, {"KEYS": f"key{n}"})
            for n in range(start, start + 1000)
        ]
        assert store.put_batch(batch).ok
    store.close()
    shutil.rmtree(store_dir / "index")  # the next child has 60,000 messages to catch up
    kill_store_process(OPENER, store_dir)
    reopened = open_store(options=CHILD, **geometry)
    assert reopened.crashed_last_time
    for number in (0, 29_999, 59_999):
        assert found_numbers(reopened, f"key{number}", "Orders") == [number]


def test_catch_up_passes_a_segment_retention_deleted(
    open_store: StoreFactory, store_dir: Path
) -> None:
    """Retention may delete segments the catch-up has not reached yet: it goes on after them."""
    store = open_store(**GEOMETRY)
    put_mixed(store, 0, 120)
    end = store.commitlog.max_offset
    store.close()
    segments = sorted((store_dir / "commitlog").iterdir())
    assert len(segments) > 4
    segments[2].unlink()
    shutil.rmtree(store_dir / "index")
    index = IndexService(store_dir / "index", GEOMETRY["index_slots"], GEOMETRY["index_entries"])
    index.load(crashed=False, checkpoint_timestamp=0)
    follower = IndexFollower(index, CommitLogReader(store_dir / "commitlog", 4096), 0, end)
    while follower.catching_up:
        follower.catch_up_step()
    assert follower.failure == "" and follower.position == end
    found = follower.query(TOPICS[0], "key118", 64, 0, 2**62)
    assert len(found) == 1 and found[0] > int(segments[2].name)
    index.close()
    follower.reader.close()


@pytest.mark.parametrize("options", [StoreOptions(), CHILD], ids=["in-process", "index-process"])
def test_whoever_writes_the_index_holds_its_lock(
    open_store: StoreFactory, store_dir: Path, options: StoreOptions
) -> None:
    store = open_store(options=options, **GEOMETRY)
    with pytest.raises(filelock.Timeout):
        index_writer_lock(store_dir, timeout_s=0).acquire()
    store.close()
    with index_writer_lock(store_dir, timeout_s=0):
        pass
