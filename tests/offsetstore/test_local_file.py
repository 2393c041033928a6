"""LocalFileOffsetStore and atomic_file on real files: the contract suite, the file formats
(its own and RocketMQ's Java client's), .bak fallback, unreadable files, two real processes
persisting one group, periodic persistence, and write failures leaving the last good file."""

from __future__ import annotations

import contextlib
import errno
import json
import logging
import os
import shutil
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from offsetstore.atomic_file import backup_path, write_atomically
from offsetstore.base import (
    NOT_FOUND,
    READ_FAILED,
    MessageQueue,
    OffsetFileError,
    OffsetStoreError,
    OffsetWriteError,
    ReadOffsetType,
)
from offsetstore.contract import check_offset_store
from offsetstore.local_file import LocalFileOffsetStore, decode_offsets, encode_offsets

REPO = Path(__file__).resolve().parents[2]
CLIENT = "192.168.17.0@DEFAULT"
GROUP = "group1"
Q3 = MessageQueue("TopicTest", "broker-a", 3)
Q2 = MessageQueue("TopicTest", "broker-a", 2)
STORE = ReadOffsetType.STORE
MEMORY = ReadOffsetType.MEMORY

# rocketmq-store.md section 9.2: what RocketMQ's Java client writes (pretty and compact).
JAVA_PRETTY = (
    "{\n"
    '\t"offsetTable":{{\n'
    '\t\t\t"brokerName":"broker-a",\n'
    '\t\t\t"queueId":3,\n'
    '\t\t\t"topic":"TopicTest"\n'
    "\t\t}:1470,{\n"
    '\t\t\t"brokerName":"broker-a",\n'
    '\t\t\t"queueId":2,\n'
    '\t\t\t"topic":"TopicTest"\n'
    "\t\t}:1471\n"
    "\t}\n"
    "}"
)
JAVA_COMPACT = '{"offsetTable":{{"brokerName":"broker-a","queueId":3,"topic":"TopicTest"}:1470}}'


@pytest.fixture
def store(tmp_path: Path) -> LocalFileOffsetStore:
    return LocalFileOffsetStore(CLIENT, GROUP, base_dir=tmp_path)


def persisted(store: LocalFileOffsetStore, offsets: dict[MessageQueue, int]) -> None:
    for queue, offset in offsets.items():
        store.update_offset(queue, offset, increase_only=False)
    store.persist_all(offsets)


# --- contract and layout ----------------------------------------------------------------------


def test_contract(tmp_path: Path) -> None:
    check_offset_store(lambda: LocalFileOffsetStore(CLIENT, GROUP, base_dir=tmp_path))


def test_contract_on_a_non_fresh_file(tmp_path: Path) -> None:
    def factory() -> LocalFileOffsetStore:
        store = LocalFileOffsetStore(CLIENT, GROUP, base_dir=tmp_path)
        store.load()
        return store

    check_offset_store(factory)
    check_offset_store(factory)  # the second run finds the first run's queues in the file


def test_path_layout_and_default_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    store = LocalFileOffsetStore(CLIENT, GROUP)
    assert store.path == tmp_path / "home" / ".quiver_offsets" / CLIENT / GROUP / "offsets.json"
    persisted(store, {Q3: 1})
    assert store.path.is_file()
    assert (store.path.parent / "offsets.json.lock").exists()


@pytest.mark.parametrize("bad", ["", ".", "..", "a/b", "a\\b", "a\0b"])
def test_names_that_are_not_folder_names_are_refused(bad: str, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="cannot be used as a folder name"):
        LocalFileOffsetStore(bad, GROUP, base_dir=tmp_path)
    with pytest.raises(ValueError, match="cannot be used as a folder name"):
        LocalFileOffsetStore(CLIENT, bad, base_dir=tmp_path)


# --- formats ----------------------------------------------------------------------------------


def test_writes_standard_json(store: LocalFileOffsetStore) -> None:
    persisted(store, {Q3: 1470, Q2: 1471})
    document = json.loads(store.path.read_text())
    assert document == {
        "version": 1,
        "offsetTable": [
            {"topic": "TopicTest", "brokerName": "broker-a", "queueId": 2, "offset": 1471},
            {"topic": "TopicTest", "brokerName": "broker-a", "queueId": 3, "offset": 1470},
        ],
    }
    assert decode_offsets(store.path.read_bytes()) == {Q3: 1470, Q2: 1471}


@pytest.mark.parametrize("content", [JAVA_PRETTY, JAVA_COMPACT], ids=["pretty", "compact"])
def test_reads_rocketmq_java_client_offsets(store: LocalFileOffsetStore, content: str) -> None:
    store.path.parent.mkdir(parents=True)
    store.path.write_text(content)
    store.load()
    assert store.read_offset(Q3, MEMORY) == 1470
    assert store.read_offset(Q2, MEMORY) == (1471 if content == JAVA_PRETTY else NOT_FOUND)
    fresh = LocalFileOffsetStore(CLIENT, GROUP, base_dir=store.path.parents[2])
    assert fresh.read_offset(Q3, STORE) == 1470
    # persisting converts the file to Quiver's format and keeps RocketMQ's queues
    other = MessageQueue("TopicTest", "broker-b", 0)
    persisted(fresh, {other: 5})
    assert decode_offsets(store.path.read_bytes()) == {
        **({Q2: 1471} if content == JAVA_PRETTY else {}),
        Q3: 1470,
        other: 5,
    }
    assert backup_path(store.path).read_text() == content


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        (b"", "empty file"),
        (b"  \n", "empty file"),
        (b"[]", "not an object with an offsetTable"),
        (b'{"offsetTable": 3}', "neither an array nor an object"),
        (b'{"offsetTable": [3]}', r"offsetTable\[0\] is not an object"),
        (b'{"offsetTable": {1: 2}}', "offsetTable key 1 is not an object"),
        (b'{"offsetTable": [{"topic": "T", "brokerName": "b", "offset": 1}]}', "queueId is not"),
        (b'{"offsetTable": [{"topic":"T","brokerName":"b","queueId":true,"offset":1}]}', "not an"),
        (b'{"offsetTable": [{"topic":"T","brokerName":"b","queueId":0,"offset":-1}]}', "offset is"),
        (
            b'{"offsetTable": [{"topic":"T","brokerName":"b","queueId":0,"offset":1.5}]}',
            "offset is",
        ),
        (b'{"offsetTable":{{"brokerName":"b","queueId":0,"topic":"T"}:14', "end of input"),
    ],
)
def test_decode_refuses_unusable_content(content: bytes, problem: str) -> None:
    with pytest.raises(ValueError, match=problem):
        decode_offsets(content)


def test_encode_decode_round_trip() -> None:
    table = {MessageQueue(f"t{i % 3}", f"b{i % 2}", i): i * 1000 for i in range(20)}
    assert decode_offsets(encode_offsets(table)) == table
    assert decode_offsets(encode_offsets({})) == {}


# --- .bak and unreadable files ----------------------------------------------------------------


def test_each_write_keeps_the_previous_file_as_bak(store: LocalFileOffsetStore) -> None:
    persisted(store, {Q3: 1})
    assert not backup_path(store.path).exists()
    first = store.path.read_bytes()
    persisted(store, {Q3: 2})
    assert backup_path(store.path).read_bytes() == first
    assert decode_offsets(store.path.read_bytes()) == {Q3: 2}
    assert sorted(p.name for p in store.path.parent.iterdir()) == [
        "offsets.json",
        "offsets.json.bak",
        "offsets.json.lock",
    ]  # no temporary file left behind


@pytest.mark.parametrize("garbage", [b"", b"\x00" * 64, b'{"offsetTable":[{"topic":"Topi'])
def test_garbage_main_file_falls_back_to_bak(
    store: LocalFileOffsetStore, garbage: bytes, caplog: pytest.LogCaptureFixture
) -> None:
    persisted(store, {Q3: 10, Q2: 20})
    persisted(store, {Q3: 11})  # .bak now holds {Q3: 10, Q2: 20}
    store.path.write_bytes(garbage)
    fresh = LocalFileOffsetStore(CLIENT, GROUP, base_dir=store.path.parents[2])
    with caplog.at_level(logging.WARNING, logger="offsetstore.local_file"):
        fresh.load()
    assert fresh.read_offset(Q3, MEMORY) == 10
    assert fresh.read_offset(Q2, MEMORY) == 20
    assert any(
        "offsets.json.bak" in r.getMessage() and r.levelno == logging.WARNING
        for r in caplog.records
    )


def test_missing_main_file_falls_back_to_bak(store: LocalFileOffsetStore) -> None:
    persisted(store, {Q3: 10})
    persisted(store, {Q3: 11})
    store.path.unlink()
    assert store.read_offset(Q3, STORE) == 10


def test_both_files_garbage_raise_naming_both(store: LocalFileOffsetStore) -> None:
    persisted(store, {Q3: 10})
    persisted(store, {Q3: 11})
    store.path.write_bytes(b"{garbage")
    backup_path(store.path).write_bytes(b"")
    fresh = LocalFileOffsetStore(CLIENT, GROUP, base_dir=store.path.parents[2])
    with pytest.raises(OffsetFileError) as info:
        fresh.load()
    message = str(info.value)
    assert str(store.path) + ":" in message and str(backup_path(store.path)) + ":" in message
    assert "empty file" in message and "unexpected character 'g'" in message
    assert fresh.read_offset(Q3, MEMORY) is NOT_FOUND  # nothing loaded, nothing guessed
    assert fresh.read_offset(Q3, STORE) is READ_FAILED
    fresh.update_offset(Q3, 12, increase_only=True)
    with pytest.raises(OffsetFileError):  # persisting would erase the other queues: refuse
        fresh.persist(Q3)
    assert store.path.read_bytes() == b"{garbage"


def test_garbage_main_file_without_bak_raises(store: LocalFileOffsetStore) -> None:
    store.path.parent.mkdir(parents=True)
    store.path.write_bytes(b"\x00\x00")
    with pytest.raises(OffsetFileError, match=r"offsets\.json\.bak: missing"):
        store.load()


def test_main_file_that_is_a_folder_falls_back_to_bak(store: LocalFileOffsetStore) -> None:
    store.path.mkdir(parents=True)
    backup_path(store.path).write_text(JAVA_COMPACT)
    store.load()
    assert store.read_offset(Q3, MEMORY) == 1470


def test_no_files_is_an_empty_table(store: LocalFileOffsetStore) -> None:
    store.load()
    assert store.clone_offset_table("TopicTest") == {}
    assert store.read_offset(Q3, STORE) is NOT_FOUND
    assert store.read_offset(Q3, ReadOffsetType.MEMORY_FIRST_THEN_STORE) is NOT_FOUND


# --- memory semantics beyond the contract -------------------------------------------------------


def test_frozen_entry_ignores_load_and_store_reads(store: LocalFileOffsetStore) -> None:
    persisted(store, {Q3: 100})
    store.update_and_freeze_offset(Q3, 7)
    store.load()
    assert store.read_offset(Q3, MEMORY) == 7
    assert store.read_offset(Q3, STORE) == 100  # the store's answer ...
    assert store.read_offset(Q3, MEMORY) == 7  # ... does not move a frozen entry
    store.persist(Q3)
    assert decode_offsets(store.path.read_bytes()) == {Q3: 7}


def test_load_overwrites_memory_and_store_read_replaces_entry(store: LocalFileOffsetStore) -> None:
    persisted(store, {Q3: 100})
    store.update_offset(Q3, 500, increase_only=True)
    store.load()
    assert store.read_offset(Q3, MEMORY) == 100
    store.update_offset(Q3, 500, increase_only=True)
    assert store.read_offset(Q3, STORE) == 100
    assert store.read_offset(Q3, MEMORY) == 100


def test_persist_of_unknown_queues_leaves_the_file_alone(store: LocalFileOffsetStore) -> None:
    store.persist(Q3)
    store.persist_all([])
    assert not store.path.exists()


def test_persist_all_merges_with_another_instance(tmp_path: Path) -> None:
    a = LocalFileOffsetStore(CLIENT, GROUP, base_dir=tmp_path)
    b = LocalFileOffsetStore(CLIENT, GROUP, base_dir=tmp_path)
    persisted(a, {Q3: 1})
    persisted(b, {Q2: 2})
    persisted(a, {Q3: 3})
    assert decode_offsets(a.path.read_bytes()) == {Q3: 3, Q2: 2}


# --- periodic persistence ---------------------------------------------------------------------


def wait_for(predicate: object, timeout_s: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if callable(predicate) and predicate():
            return True
        time.sleep(0.01)
    return False


def file_offsets(store: LocalFileOffsetStore) -> dict[MessageQueue, int]:
    try:
        return decode_offsets(store.path.read_bytes())
    except (OSError, ValueError):
        return {}


def test_auto_persist_and_close(store: LocalFileOffsetStore) -> None:
    store.start_auto_persist(interval_s=0.02)
    with pytest.raises(RuntimeError, match="already running"):
        store.start_auto_persist()
    store.update_offset(Q3, 5, increase_only=True)
    assert wait_for(lambda: file_offsets(store) == {Q3: 5})
    store.update_offset(Q3, 6, increase_only=True)
    store.update_offset(Q2, 1, increase_only=True)
    store.close()
    assert file_offsets(store) == {Q3: 6, Q2: 1}
    assert not [t for t in threading.enumerate() if t.name.startswith("offsets-")]


def test_context_manager_persists_on_exit(tmp_path: Path) -> None:
    with LocalFileOffsetStore(CLIENT, GROUP, base_dir=tmp_path) as store:
        store.update_offset(Q3, 9, increase_only=True)
    assert file_offsets(store) == {Q3: 9}


def test_auto_persist_survives_a_failing_tick(
    store: LocalFileOffsetStore, caplog: pytest.LogCaptureFixture
) -> None:
    store.path.parent.mkdir(parents=True)
    store.path.write_bytes(b"garbage")  # no .bak: every merge fails with OffsetFileError
    store.update_offset(Q3, 5, increase_only=True)
    with caplog.at_level(logging.ERROR, logger="offsetstore.local_file"):
        store.start_auto_persist(interval_s=0.02)
        assert wait_for(lambda: any("periodic persist" in r.getMessage() for r in caplog.records))
        store.path.write_bytes(encode_offsets({Q2: 1}))  # repaired: the next tick succeeds
        assert wait_for(lambda: file_offsets(store) == {Q3: 5, Q2: 1})
    store.close()


def test_auto_persist_interval_must_be_positive(store: LocalFileOffsetStore) -> None:
    with pytest.raises(ValueError, match="positive"):
        store.start_auto_persist(interval_s=0)


# --- two real processes -------------------------------------------------------------------------

WRITER = textwrap.dedent(
    """
    import sys
    from offsetstore.base import MessageQueue
    from offsetstore.local_file import LocalFileOffsetStore

    base, first, rounds = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    store = LocalFileOffsetStore("host@DEFAULT", "g", base_dir=base)
    queues = [MessageQueue("T", "broker-a", first + i) for i in range(4)]
    for r in range(1, rounds + 1):
        for q in queues:
            store.update_offset(q, r * 10 + q.queue_id, increase_only=True)
        store.persist_all(queues)
    print("done", flush=True)
    """
)


@pytest.mark.integration
def test_two_processes_persisting_different_queues_lose_nothing(tmp_path: Path) -> None:
    rounds = 300
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", WRITER, str(tmp_path), str(first), str(rounds)],
            cwd=REPO,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for first in (0, 4)
    ]
    for proc in procs:
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err
        assert out.strip() == "done"
    store = LocalFileOffsetStore("host@DEFAULT", "g", base_dir=tmp_path)
    store.load()
    final = {MessageQueue("T", "broker-a", i): rounds * 10 + i for i in range(8)}
    assert store.clone_offset_table("T") == final


# --- atomic_file: write failures leave the last good file ---------------------------------------


@contextlib.contextmanager
def read_only(folder: Path) -> Iterator[Path]:
    """Make ``folder`` a folder nobody may create files in: chmod for ordinary users; root
    ignores modes, so for root the immutable attribute (chattr +i, honoured even for root)."""
    if os.geteuid() != 0:
        folder.chmod(0o555)
        try:
            yield folder
        finally:
            folder.chmod(0o755)
        return
    chattr = shutil.which("chattr")
    if chattr is None or subprocess.run([chattr, "+i", str(folder)], check=False).returncode:
        pytest.skip("running as root without chattr +i support: cannot make a read-only folder")
    try:
        yield folder
    finally:
        subprocess.run([chattr, "-i", str(folder)], check=True)


def test_read_only_folder_raises_naming_the_file(tmp_path: Path) -> None:
    target = tmp_path / "offsets.json"
    target.write_bytes(b"last good")
    with read_only(tmp_path), pytest.raises(OffsetWriteError) as info:
        write_atomically(target, b"new")
    assert isinstance(info.value, OSError) and isinstance(info.value, OffsetStoreError)
    assert info.value.errno in (errno.EACCES, errno.EPERM)
    assert info.value.filename == str(target)
    assert f"cannot write offsets file {target}" in str(info.value)
    assert target.read_bytes() == b"last good"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["offsets.json"]


def test_store_in_read_only_folder_keeps_file_and_memory(store: LocalFileOffsetStore) -> None:
    persisted(store, {Q3: 5, Q2: 6})
    persisted(store, {Q3: 7})
    before = {p.name: p.read_bytes() for p in store.path.parent.iterdir()}
    store.update_offset(Q3, 8, increase_only=True)
    with read_only(store.path.parent), pytest.raises(OffsetWriteError, match=r"offsets\.json"):
        store.persist(Q3)
    assert {p.name: p.read_bytes() for p in store.path.parent.iterdir()} == before
    assert store.read_offset(Q3, MEMORY) == 8  # kept for the next attempt
    store.persist(Q3)  # writable again: the next attempt succeeds
    assert decode_offsets(store.path.read_bytes()) == {Q3: 8, Q2: 6}


def test_parent_that_is_a_file_raises(tmp_path: Path) -> None:
    (tmp_path / "file").write_bytes(b"x")
    with pytest.raises(OffsetWriteError, match="Not a directory") as info:
        write_atomically(tmp_path / "file" / "offsets.json", b"new")
    assert info.value.errno == errno.ENOTDIR


FILE_TOO_LARGE = textwrap.dedent(
    """
    import resource, signal, sys
    from offsetstore.atomic_file import write_atomically
    from offsetstore.base import OffsetWriteError

    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)      # get EFBIG instead of being killed
    resource.setrlimit(resource.RLIMIT_FSIZE, (4096, 4096))
    try:
        write_atomically(sys.argv[1], b"x" * 100_000)
    except OffsetWriteError as exc:
        print(exc.errno, exc, flush=True)
    """
)


@pytest.mark.integration
def test_real_write_failure_file_too_large_keeps_last_good_file(tmp_path: Path) -> None:
    """A real kernel refusal mid-write (RLIMIT_FSIZE -> EFBIG), the nearest honest stand-in for
    a full disk without a tiny file system."""
    target = tmp_path / "offsets.json"
    write_atomically(target, b"last good 1")
    write_atomically(target, b"last good 2")
    result = subprocess.run(
        [sys.executable, "-c", FILE_TOO_LARGE, str(target)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert result.stdout.startswith(f"{errno.EFBIG} [Errno {errno.EFBIG}] cannot write offsets")
    assert f"cannot write offsets file {target}: File too large" in result.stdout
    assert target.read_bytes() == b"last good 2"
    assert backup_path(target).read_bytes() == b"last good 1"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["offsets.json", "offsets.json.bak"]


def test_disk_full_on_fsync_keeps_last_good_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The one injected fault: ENOSPC reported by fsync (delayed allocation), which no test here
    can provoke for real without a tiny file system."""
    target = tmp_path / "offsets.json"
    write_atomically(target, b"last good")

    def no_space(fd: int) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "fsync", no_space)
    with pytest.raises(OffsetWriteError, match="No space left on device") as info:
        write_atomically(target, b"new content")
    assert info.value.errno == errno.ENOSPC
    monkeypatch.undo()
    assert target.read_bytes() == b"last good"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["offsets.json"]


def test_write_atomically_creates_then_replaces(tmp_path: Path) -> None:
    target = tmp_path / "f.json"
    write_atomically(target, b"")
    assert target.read_bytes() == b"" and not backup_path(target).exists()
    write_atomically(str(target), b"one")
    write_atomically(target, b"two")
    assert target.read_bytes() == b"two"
    assert backup_path(target).read_bytes() == b"one"
    assert target.stat().st_ino != backup_path(target).stat().st_ino


# --- the contract suite catches broken stores --------------------------------------------------


class IgnoresIncreaseOnly(LocalFileOffsetStore):
    def update_offset(self, queue: MessageQueue, offset: int, increase_only: bool) -> None:
        super().update_offset(queue, offset, increase_only=False)


class ForgetsFreeze(LocalFileOffsetStore):
    def update_and_freeze_offset(self, queue: MessageQueue, offset: int) -> None:
        self.update_offset(queue, offset, increase_only=False)


class PersistsNothing(LocalFileOffsetStore):
    def persist_all(self, queues: object) -> None:
        pass


@pytest.mark.parametrize(
    ("broken", "message"),
    [
        (IgnoresIncreaseOnly, "increase_only keeps the maximum"),
        (ForgetsFreeze, "a frozen entry ignores updates"),
        (PersistsNothing, "persist then READ_FROM_STORE in a new instance"),
    ],
)
def test_contract_reports_a_broken_store(
    tmp_path: Path, broken: type[LocalFileOffsetStore], message: str
) -> None:
    with pytest.raises(AssertionError, match=message):
        check_offset_store(lambda: broken(CLIENT, GROUP, base_dir=tmp_path))


def test_contract_may_accept_zero_for_never_stored_queues(tmp_path: Path) -> None:
    class ZeroIfNotFound(LocalFileOffsetStore):
        def read_offset(self, queue: MessageQueue, read_type: ReadOffsetType) -> object:  # type: ignore[override]
            answer = super().read_offset(queue, read_type)
            return 0 if answer is NOT_FOUND and read_type is not MEMORY else answer

    def factory() -> LocalFileOffsetStore:
        return ZeroIfNotFound(CLIENT, GROUP, base_dir=tmp_path)

    with pytest.raises(AssertionError, match="unknown queue"):
        check_offset_store(factory)
    check_offset_store(factory, zero_if_not_found=True)


@pytest.mark.parametrize("bad", [-1, 2**63, True, 1.0])
def test_offsets_outside_a_java_long_are_refused(store: LocalFileOffsetStore, bad: int) -> None:
    with pytest.raises(ValueError, match="an offset is an int"):
        store.update_offset(Q3, bad, increase_only=False)
    with pytest.raises(ValueError, match="an offset is an int"):
        store.update_and_freeze_offset(Q3, bad)
    assert store.read_offset(Q3, MEMORY) is NOT_FOUND


def test_temp_files_left_by_a_killed_writer_are_removed_by_the_next_persist(
    store: LocalFileOffsetStore,
) -> None:
    persisted(store, {Q3: 1})
    folder = store.path.parent
    (folder / ".offsets.json.0123456789ab.tmp").write_bytes(b'{"offsetTable": [')
    (folder / ".offsets.json.0123456789ab.baktmp").write_bytes(b"")
    (folder / ".other.json.0123456789ab.tmp").write_bytes(b"not ours")
    persisted(store, {Q3: 2})
    assert sorted(p.name for p in folder.iterdir()) == [
        ".other.json.0123456789ab.tmp",
        "offsets.json",
        "offsets.json.bak",
        "offsets.json.lock",
    ]
