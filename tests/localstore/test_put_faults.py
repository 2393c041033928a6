"""A put is all or nothing under ENOSPC, EMFILE and EIO, wherever they strike.

Each put of a fixed sequence (single puts, batches across commitlog segments and consume-queue
files, a new topic, keys that fill small index files) is tried with a fault injected at its
first OS call, then at its second, and so on until it runs clean (:mod:`.faults`). After every
attempt the store must answer with a status (never a raw ``OSError``), and a put that was
refused must have left nothing: the queue's max offset is the count of acknowledged puts, so no
queue offset is reused. At the end the store reopens, ``verify`` finds nothing wrong, and every
acknowledged message is read back at its queue offset; the key index is whole again.

The same runs on a real full disk: a small tmpfs (root only, as in CI).
"""

from __future__ import annotations

import contextlib
import errno
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from localstore import MessageStore, NewMessage, PutResult, PutStatus, StoredMessage, StoreOptions
from localstore.errors import StoreError
from localstore.files.mapped_file import MappedFile
from localstore.recovery.verify import verify_store

from ..disks import fill, small_tmpfs
from .conftest import StoreFactory, message
from .faults import ERRNOS, OsFaults

GEOMETRY = {
    "commitlog_file_size": 4096,
    "cq_entries_per_file": 4,
    "index_slots": 16,
    "index_entries": 41,
}
REFUSED = {PutStatus.CREATE_MAPPED_FILE_FAILED}
MAX_CALLS_A_PUT = 200

Put = list[NewMessage]  # one message: store.put; more: store.put_batch


def put_sequence() -> list[Put]:
    """Puts that cross every boundary a put can meet in GEOMETRY."""
    puts: list[Put] = []
    number = 0
    for step in range(36):
        topic = "Orders" if step % 9 != 8 else f"New{step}"  # a new topic now and then
        queue_id = step % 3
        count = 1 if step % 2 else 1 + step % 5
        batch = []
        for _ in range(count):
            body = f"m{number}-".encode() * (1 + number % 7)
            batch.append(message(topic, body, queue_id=queue_id, keys=f"key{number}"))
            number += 1
        puts.append(batch)
    return puts


def put(store: MessageStore, batch: Put) -> PutResult:
    return store.put(batch[0]) if len(batch) == 1 else store.put_batch(batch)


def run_with_faults(
    store: MessageStore, faults: OsFaults, code: int
) -> dict[tuple[str, int], list[bytes]]:
    """Every put of the sequence, each failed at each of its OS calls in turn; returns the
    acknowledged bodies by topic-queue, in queue-offset order."""
    acked: dict[tuple[str, int], list[bytes]] = {}
    for batch in put_sequence():
        key = (batch[0].topic, batch[0].queue_id)
        queue = acked.setdefault(key, [])
        for fail_at in range(MAX_CALLS_A_PUT):
            with faults.armed(fail_at, code):
                result = put(store, batch)
            if result.status.stored:
                assert result.queue_offset == len(queue), "a queue offset was reused"
                queue.extend(m.body for m in batch)
                break
            assert faults.fired, f"a put failed without a fault: {result}"
            assert result.status in REFUSED, result
            assert os.strerror(code) in result.detail
            assert store.max_offset(*key) == len(queue), f"a refused put left units: {result}"
        else:
            pytest.fail(f"a put still failed after {MAX_CALLS_A_PUT} faults")
    return acked


def read_all(store: MessageStore, topic: str, queue_id: int) -> list[StoredMessage]:
    messages: list[StoredMessage] = []
    queue_offset = 0
    while True:
        got = store.get_messages(topic, queue_id, queue_offset)
        if not got.messages:
            return messages
        messages += got.messages
        queue_offset = got.next_offset


def assert_all_readable(store: MessageStore, acked: dict[tuple[str, int], list[bytes]]) -> None:
    for (topic, queue_id), bodies in acked.items():
        messages = read_all(store, topic, queue_id)
        assert [m.body for m in messages] == bodies, (topic, queue_id)
        assert [m.queue_offset for m in messages] == list(range(len(bodies)))
        assert store.max_offset(topic, queue_id) == len(bodies)


@pytest.mark.parametrize("flush_mode", ["async", "sync"])
@pytest.mark.parametrize("code", ERRNOS, ids=errno.errorcode.get)
def test_a_fault_at_any_os_call_of_a_put_leaves_nothing_or_everything(
    open_store: StoreFactory,
    store_dir: Path,
    monkeypatch: pytest.MonkeyPatch,
    flush_mode: str,
    code: int,
) -> None:
    store = open_store(flush_mode=flush_mode, **GEOMETRY)
    faults = OsFaults(monkeypatch)
    acked = run_with_faults(store, faults, code)
    assert_all_readable(store, acked)
    store.close()

    reopened = open_store(**GEOMETRY)
    report = verify_store(reopened)
    assert report.ok, report.problems
    assert_all_readable(reopened, acked)
    assert [m.body for m in reopened.query_by_key("Orders", "key0")] == [acked["Orders", 0][0]]
    last = sum(len(b) for b in acked.values()) - 1
    assert len(reopened.query_by_key(put_sequence()[-1][-1].topic, f"key{last}")) == 1


def test_a_new_segment_that_cannot_be_given_blocks_leaves_no_file(
    open_store: StoreFactory, store_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The fault the issue found: the segment roll's new file stayed registered and later puts
    landed at wrong positions. Now the file goes and the log's end stays."""
    store = open_store(**GEOMETRY)
    while store.commitlog.max_offset < 4096 - 600:
        assert store.put(message(body=b"x" * 300)).ok
    before = sorted(os.listdir(store_dir / "commitlog"))
    end = store.commitlog.max_offset
    faults = OsFaults(monkeypatch)
    with faults.armed(0, errno.ENOSPC, only="mmap"):  # the new segment's mapping
        result = store.put_batch([message(body=b"y" * 300) for _ in range(4)])
    assert faults.failed == ["mmap"]
    assert result.status is PutStatus.CREATE_MAPPED_FILE_FAILED
    assert sorted(os.listdir(store_dir / "commitlog")) == before
    assert store.commitlog.max_offset == end
    assert store.put_batch([message(body=b"z" * 300) for _ in range(4)]).ok
    assert verify_store(store).ok


def test_a_refused_batch_holding_a_page_of_zeros_leaves_no_record_behind(
    open_store: StoreFactory, store_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The batch's first run (a zero-filled body, then more records) is copied into the last
    segment before the next segment fails: every byte copied is taken back, so the reopened
    store, which keeps valid records it finds after damage, finds none of the refused ones."""
    geometry = {"commitlog_file_size": 64 * 1024, "index_enabled": False}
    store = open_store(**geometry)
    assert store.put(message(body=b"first")).ok
    batch = [message(body=bytes(9000)), message(body=b"refused")]
    batch += [message(body=b"y" * 8000) for _ in range(7)]  # rolls into a second segment
    faults = OsFaults(monkeypatch)
    with faults.armed(0, errno.ENOSPC, only="mmap"):
        result = store.put_batch(batch)
    assert faults.failed == ["mmap"]
    assert result.status is PutStatus.CREATE_MAPPED_FILE_FAILED
    assert store.put(message(body=b"last")).ok
    store.close()
    reopened = open_store(**geometry)
    assert [m.body for m in read_all(reopened, "TopicTest", 0)] == [b"first", b"last"]
    assert verify_store(reopened).ok


def test_a_key_index_that_cannot_grow_stops_and_the_put_stands(
    open_store: StoreFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = open_store(**GEOMETRY)
    for number in range(40):  # 41 entries a file: the next key needs a new index file
        assert store.put(message(keys=f"key{number}")).ok
    faults = OsFaults(monkeypatch)
    with faults.armed(0, errno.EMFILE, only="open", under="/index/"):  # a new key index file
        result = store.put(message(body=b"keyed", keys="late"))
    assert result.ok and faults.failed == ["open"]
    with pytest.raises(StoreError, match=r"key index .* stopped taking keys"):
        store.query_by_key("TopicTest", "late")
    assert store.get_messages("TopicTest", 0, 40).messages[0].body == b"keyed"
    root = store.root
    store.close()
    reopened = MessageStore(root)
    try:
        assert [m.body for m in reopened.query_by_key("TopicTest", "late")] == [b"keyed"]
    finally:
        reopened.close()


# -- a real full disk ----------------------------------------------------------------------------


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 2 MiB tmpfs: a real disk that fills up (root only)."""
    with small_tmpfs(tmp_path / "disk", "2m") as disk:
        yield disk


@pytest.mark.parametrize("flush_mode", ["async", "sync"])
def test_a_real_full_disk_loses_no_acknowledged_message(small_disk: Path, flush_mode: str) -> None:
    """Three times the disk fills up; each time a put is refused, space comes back. Every put
    answered as stored is read back at its queue offset after a clean close, and under async
    flush before it too. (Under sync flush a put whose flush failed is answered
    FLUSH_DISK_TIMEOUT and its bytes wait for the next flush that succeeds: readers see them
    once one has.)"""
    root = small_disk / "store"
    geometry = {
        "commitlog_file_size": 64 * 1024,
        "cq_entries_per_file": 64,
        "index_slots": 64,
        "index_entries": 256,
        "flush_mode": flush_mode,
    }
    store = MessageStore(root, **geometry)
    stored: dict[tuple[str, int], list[bytes]] = {}
    refused = 0
    hog = small_disk / "hog"
    try:
        for round_number in range(3):
            fill(hog)
            for number in range(400):
                queue_id = number % 3
                batch = [
                    message(body=f"r{round_number}-{number}-{i}-".encode() * 20, queue_id=queue_id)
                    for i in range(1 + number % 4)
                ]
                result = put(store, batch)
                if result.status.stored:
                    queue = stored.setdefault(("TopicTest", queue_id), [])
                    assert result.queue_offset == len(queue), "a queue offset was reused"
                    queue.extend(m.body for m in batch)
                else:
                    assert result.status in REFUSED | {PutStatus.SERVICE_NOT_AVAILABLE}, result
                    refused += 1
                    hog.unlink(missing_ok=True)  # space comes back
        assert refused > 0
        if flush_mode == "async":
            assert_all_readable(store, stored)
    finally:
        hog.unlink(missing_ok=True)
        store.close()
    reopened = MessageStore(root)
    try:
        assert verify_store(reopened).ok
        assert_all_readable(reopened, stored)
    finally:
        reopened.close()


def test_a_warmed_segment_that_cannot_be_mapped_leaves_no_file(
    open_store: StoreFactory, store_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With segments prepared ahead (warmed, renamed into place, then mapped), a mapping that
    fails on every thread leaves no warmed file under the segment's name, and the put that
    needed the segment is refused; once mappings work again the next put rolls."""
    store = open_store(
        options=StoreOptions(warm_segments=True), commitlog_file_size=64 * 1024, index_enabled=False
    )
    assert store.put(message(body=b"first")).ok
    faults = OsFaults(monkeypatch)
    refused = None
    with faults.armed(0, errno.EMFILE, all_threads=True, only="mmap", repeat=True):
        for _ in range(40):
            result = store.put_batch([message(body=b"x" * 1000) for _ in range(4)])
            if not result.ok:
                refused = result
                break
    assert refused is not None and refused.status is PutStatus.CREATE_MAPPED_FILE_FAILED
    assert sorted(os.listdir(store_dir / "commitlog")) == ["0" * 20]
    assert store.put_batch([message(body=b"x" * 1000) for _ in range(4)]).ok
    assert verify_store(store).ok


def test_flushing_a_segment_deleted_meanwhile_is_a_no_op(tmp_path: Path) -> None:
    """The flush thread may reach a segment that a failed write's take-back just deleted."""
    segment = MappedFile.create(tmp_path, 0, 4096)
    segment.append(b"x" * 100)
    segment.destroy()
    assert segment.flush() == 100


# -- close ---------------------------------------------------------------------------------------


def filled_store(root: Path) -> tuple[MessageStore, dict[tuple[str, int], list[bytes]]]:
    """A store holding a few puts of the sequence, on every kind of file, still open."""
    store = MessageStore(root, **GEOMETRY)
    acked: dict[tuple[str, int], list[bytes]] = {}
    for batch in put_sequence()[:12]:
        result = put(store, batch)
        assert result.ok
        acked.setdefault((batch[0].topic, batch[0].queue_id), []).extend(m.body for m in batch)
    return store, acked


@pytest.mark.parametrize("code", ERRNOS, ids=errno.errorcode.get)
def test_a_fault_at_any_os_call_of_close_loses_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, code: int
) -> None:
    """Each OS call of close (on every thread: the flush thread's last flush too) fails in
    turn: close raises only a StoreError, releases the directory all the same, and the next
    open finds every acknowledged message."""
    faults = OsFaults(monkeypatch)
    store, _ = filled_store(tmp_path / "counted")
    with faults.armed(None, all_threads=True):
        store.close()
    assert faults.calls > 10
    for fail_at in range(faults.calls):
        root = tmp_path / f"store-{fail_at}"
        store, acked = filled_store(root)
        with faults.armed(fail_at, code, all_threads=True), contextlib.suppress(StoreError):
            store.close()  # anything but a StoreError fails the test
        reopened = MessageStore(root)  # the lock was released
        try:
            assert verify_store(reopened).ok
            assert_all_readable(reopened, acked)
        finally:
            reopened.close()
