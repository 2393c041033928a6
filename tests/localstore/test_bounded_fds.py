"""File descriptors and mappings are bounded (issue 25 item 6).

A store with far more segment files than ``ulimit -n`` opens, takes puts, answers gets, verifies
and cleans in a child process whose RLIMIT_NOFILE is set low; segments are mapped on first touch
and closed by the process's pool (:class:`localstore.files.mapped_file.OpenSegments`); consume-queue
files are sparse until written; a segment whose creation fails leaves no file and no descriptor.
"""

from __future__ import annotations

import errno
import os
import subprocess
import sys
import textwrap
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from localstore import MessageStore, PutStatus
from localstore.errors import SegmentUnavailableError, StoreError
from localstore.files.mapped_file import MappedFile, open_segments
from localstore.files.segments import SegmentQueue
from localstore.record.codec import SYSFLAG_TRANSACTION_PREPARED
from localstore.recovery.verify import verify_store

from ..disks import fill, small_tmpfs
from .conftest import StoreFactory, message
from .faults import OsFaults

REPO = Path(__file__).resolve().parents[2]
SIZE = 8192


def _open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


@pytest.fixture
def pool_limit() -> Iterator[int]:
    """The process's pool bounded at 4 segments for the test."""
    pool = open_segments()
    saved, pool.limit = pool.limit, 4
    yield 4
    pool.limit = saved


def _mapped(segment: MappedFile) -> bool:
    return bool(segment._mapped)


# -- the pool ----------------------------------------------------------------------------------
def test_segments_load_closed_and_map_on_first_touch(tmp_path: Path, pool_limit: int) -> None:
    queue = SegmentQueue(tmp_path, SIZE)
    for start in range(0, 10 * SIZE, SIZE):
        queue.add_segment(start).append(start.to_bytes(8, "big"))
    queue.close()
    before = _open_fds()
    loaded = SegmentQueue(tmp_path, SIZE)
    loaded.load()
    assert len(loaded.segments) == 10
    assert _open_fds() == before  # nothing open until touched
    for segment in loaded.segments:
        assert int.from_bytes(segment.view[:8], "big") == segment.start_offset
    assert sum(_mapped(s) for s in loaded.segments) == pool_limit
    assert _open_fds() <= before + 2 * pool_limit  # two descriptors a mapped segment
    loaded.close()
    assert _open_fds() == before


def test_positions_and_bytes_survive_being_closed_by_the_pool(
    tmp_path: Path, pool_limit: int
) -> None:
    queue = SegmentQueue(tmp_path, SIZE)
    first = queue.add_segment(0)
    first.append(b"abc")
    first.flush()
    first.append(b"defg")
    for start in range(SIZE, 8 * SIZE, SIZE):
        queue.add_segment(start)
    assert not _mapped(first)
    assert (first.wrote_position, first.flushed_position) == (7, 3)
    assert first.reserved > 0
    first.append(b"h")  # written through a fresh mapping, after the one it was written through
    assert bytes(first.view[:8]) == b"abcdefgh"
    assert first.flush() == 8
    queue.close()
    assert (tmp_path / "00000000000000000000").read_bytes()[:8] == b"abcdefgh"


def test_a_slice_held_by_a_reader_outlives_the_pool_closing_its_segment(
    tmp_path: Path, pool_limit: int
) -> None:
    queue = SegmentQueue(tmp_path, SIZE)
    first = queue.add_segment(0)
    first.append(b"payload!")
    held = first.view[:8]  # a reader's slice
    view = first.view  # and a reader that took the view but has not sliced it yet
    for start in range(SIZE, 8 * SIZE, SIZE):
        queue.add_segment(start)
    assert not _mapped(first)
    assert bytes(held) == b"payload!"
    assert bytes(view[:8]) == b"payload!"
    del held, view
    queue.close()


def test_the_commitlogs_last_segment_stays_mapped(tmp_path: Path, pool_limit: int) -> None:
    log = SegmentQueue(tmp_path / "log", SIZE, keep_last_mapped=True)
    last = log.add_segment(0)
    others = SegmentQueue(tmp_path / "cq", SIZE)
    for start in range(0, 8 * SIZE, SIZE):
        others.add_segment(start)
    assert _mapped(last)
    following = log.add_segment(SIZE)
    for start in range(8 * SIZE, 16 * SIZE, SIZE):
        others.add_segment(start)
    assert _mapped(following) and not _mapped(last)  # the pin moved on with the end
    log.close()
    others.close()


def test_a_segment_gone_from_disk_is_a_typed_error(tmp_path: Path, pool_limit: int) -> None:
    queue = SegmentQueue(tmp_path, SIZE)
    for start in range(0, 2 * SIZE, SIZE):
        queue.add_segment(start)
    queue.close()
    loaded = SegmentQueue(tmp_path, SIZE)
    loaded.load()
    loaded.segments[0].path.unlink()  # retention deleted it after the reader found it
    with pytest.raises(SegmentUnavailableError) as caught:
        loaded.segments[0].view  # noqa: B018
    assert isinstance(caught.value, StoreError) and isinstance(caught.value, OSError)
    assert caught.value.errno == errno.ENOENT
    assert "00000000000000000000" in str(caught.value)
    closed = loaded.segments[1]
    loaded.close()
    with pytest.raises(SegmentUnavailableError):
        closed.view  # noqa: B018 (closed for good: never re-created under its name)
    assert not (tmp_path / "00000000000000000000").exists()


# -- sparse consume-queue files ----------------------------------------------------------------
def test_a_one_message_queue_takes_one_small_chunk_of_disk(open_store: StoreFactory) -> None:
    store = open_store()  # default geometry: 300,000 units, 6,000,000-byte files
    assert store.put(message(queue_id=3)).ok
    store.close()
    path = store.root / "consumequeue" / "TopicTest" / "3" / ("0" * 20)
    stat = os.stat(path)
    assert stat.st_size == 300_000 * 20
    assert stat.st_blocks * 512 <= 64 * 1024


# -- failed creation leaves no trace -----------------------------------------------------------
@pytest.mark.parametrize("call", ["ftruncate", "mmap"])
def test_a_failed_creation_leaves_no_file_and_no_descriptor(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, call: str
) -> None:
    def no_space(*args: object, **kwargs: object) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    if call == "mmap":
        monkeypatch.setattr("localstore.files.mapped_file.mmap.mmap", no_space)
    else:
        monkeypatch.setattr("localstore.files.mapped_file.os.ftruncate", no_space)
    before = _open_fds()
    with pytest.raises(OSError) as caught:
        MappedFile.create(tmp_path, 0, SIZE)
    assert caught.value.errno == errno.ENOSPC
    assert os.listdir(tmp_path) == []
    assert _open_fds() == before


def test_a_failed_creation_on_a_full_disk_leaves_no_file(tmp_path: Path) -> None:
    with small_tmpfs(tmp_path / "disk", "1m") as disk:
        fill(disk / "filler")
        before = _open_fds()
        with pytest.raises(OSError) as caught:
            MappedFile.create(disk, 0, 256 * 1024, warm=True)
        assert caught.value.errno == errno.ENOSPC
        assert sorted(os.listdir(disk)) == ["filler"]
        assert _open_fds() == before


# -- a real low RLIMIT_NOFILE -------------------------------------------------------------------
FD_LIMIT = 64
TOPICS = 60
QUEUES = 4
PER_QUEUE = 10  # 3 consume-queue files of 4 units per queue


def _make_big_store(root: Path) -> int:
    """A store of ~TOPICS*QUEUES*3 consume-queue files and ~200 commitlog segments; returns
    how many segment files it has."""
    with MessageStore(root, commitlog_file_size=4096, cq_entries_per_file=4) as store:
        for round_ in range(PER_QUEUE):
            batch = [
                message(f"T{topic}", f"m{round_}".encode(), queue_id=queue_id)
                for topic in range(TOPICS)
                for queue_id in range(QUEUES)
            ]
            for item in batch:
                assert store.put(item).ok
    return sum(len(files) for _, _, files in os.walk(root / "consumequeue")) + len(
        os.listdir(root / "commitlog")
    )


_CHILD = textwrap.dedent(
    """
    import json, os, resource, sys
    from localstore import MessageStore, NewMessage
    from localstore.recovery.verify import verify_store

    root = sys.argv[1]
    with MessageStore(root) as store:
        put = store.put(NewMessage("T7", b"late", queue_id=2))
        assert put.ok, put
        bodies, offset = [], 0
        while offset < store.max_offset("T7", 2):  # a get stops at a consume-queue file's end
            got = store.get_messages("T7", 2, offset, max_count=64)
            bodies += [m.body for m in got.messages]
            offset = got.next_offset
        report = verify_store(store)
        fds = len(os.listdir("/proc/self/fd"))
    print(json.dumps({"bodies": [b.decode() for b in bodies], "ok": report.ok,
                      "summary": report.summary(), "fds": fds,
                      "limit": resource.getrlimit(resource.RLIMIT_NOFILE)[0]}))
    """
)


def _low_limit() -> None:
    import resource

    resource.setrlimit(resource.RLIMIT_NOFILE, (FD_LIMIT, FD_LIMIT))


def _run_low(args: list[str]) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run(
        args,
        check=False,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        preexec_fn=_low_limit,
        cwd=REPO,
    )


def test_a_store_with_far_more_files_than_the_fd_limit_works(tmp_path: Path) -> None:
    import json

    root = tmp_path / "store"
    files = _make_big_store(root)
    assert files > 10 * FD_LIMIT
    result = _run_low([sys.executable, "-c", _CHILD, str(root)])
    assert result.returncode == 0, result.stderr[-3000:]
    answer = json.loads(result.stdout.strip().splitlines()[-1])
    assert answer["limit"] == FD_LIMIT
    assert answer["bodies"] == [f"m{i}" for i in range(PER_QUEUE)] + ["late"]
    assert answer["ok"], answer["summary"]
    assert answer["fds"] < FD_LIMIT
    quiver = [sys.executable, "-m", "sdk.cli.main"]
    verified = _run_low([*quiver, "store", "verify", str(root)])
    assert verified.returncode == 0, verified.stdout + verified.stderr[-3000:]
    cleaned = _run_low([*quiver, "store", "clean", "--force", str(root)])
    assert cleaned.returncode == 0, cleaned.stdout + cleaned.stderr[-3000:]
    assert "deleted" in cleaned.stdout


def test_a_segment_retention_deletes_stays_readable_until_retired(
    open_store: StoreFactory, pool_limit: int
) -> None:
    """A reader that found a segment before retention unlinked it reads it even if the pool
    had closed it: retention maps and pins it before the unlink."""
    from localstore.files.retired import RetiredFiles
    from localstore.retention import RetentionPolicy, delete_expired_segments

    store = open_store(commitlog_file_size=4096, cq_entries_per_file=4)
    for i in range(120):
        assert store.put(message(body=b"body-%d" % i, queue_id=i % 4)).ok
    oldest = store.commitlog.segments.segments[0]  # found by a reader
    for segment in store.commitlog.segments.segments[1:]:
        segment.view  # noqa: B018 (other reads close the oldest)
    assert not _mapped(oldest)
    retired = RetiredFiles(grace_s=60.0)
    policy = RetentionPolicy(delete_when="", delete_batch_max=1)
    deleted = delete_expired_segments(store.commitlog, policy, 0, True, retired)
    assert deleted == [oldest.path] and not oldest.path.exists()
    assert bytes(oldest.view[4:8]) != bytes(4)  # the first record's magic, read after the unlink
    assert retired.close() == []


@pytest.mark.parametrize("batch", [1, 3])
def test_a_closed_consume_queue_file_that_cannot_be_mapped_again_refuses_the_put_whole(
    open_store: StoreFactory, pool_limit: int, monkeypatch: pytest.MonkeyPatch, batch: int
) -> None:
    """The pool closed queue 0's file; mapping it again fails (EMFILE). The put is refused
    before its records are written: no record without its unit, no queue offset reused."""
    store = open_store(commitlog_file_size=1 << 20, cq_entries_per_file=1000)
    assert store.put(message(queue_id=0)).ok
    for number in range(2 * pool_limit):  # later queues' files push queue 0's out
        assert store.put(message(f"Other{number}")).ok
    queue = store.consume_queue("TopicTest", 0)
    assert queue is not None and not _mapped(queue.segments.segments[-1])
    faults = OsFaults(monkeypatch)
    with faults.armed(0, errno.EMFILE, only="open", under="/consumequeue/", repeat=True):
        refused = store.put_batch([message(queue_id=0) for _ in range(batch)])
    assert refused.status is PutStatus.CREATE_MAPPED_FILE_FAILED and faults.fired
    assert store.put(message(body=b"after", queue_id=0)).queue_offset == 1
    assert verify_store(store).ok


def test_a_file_a_put_holds_is_not_closed_by_the_pool(tmp_path: Path, pool_limit: int) -> None:
    pool = open_segments()
    held = MappedFile.create(tmp_path, 0, 4096)
    pool.hold(held)
    others = [MappedFile.create(tmp_path, 4096 * (i + 1), 4096) for i in range(pool_limit * 2)]
    assert _mapped(held) and sum(_mapped(s) for s in others) <= pool_limit
    held.held = False
    MappedFile.create(tmp_path, 4096 * 100, 4096)  # the next admission may close it now
    assert not _mapped(held)
    for segment in [held, *others]:
        segment.close()


def test_a_reader_racing_the_pool_never_finds_a_segment_half_closed(
    tmp_path: Path, pool_limit: int
) -> None:
    """One thread reads every segment's view while another maps them all in turn, so the pool
    closes one on every touch: the reader always gets bytes, never an AttributeError."""
    segments = [MappedFile.create(tmp_path, i * SIZE, SIZE) for i in range(2 * pool_limit)]
    for segment in segments:
        segment.append(b"\x07")
        segment.wrote_position = segment.size  # full: the pool closes these first
    failures: list[BaseException] = []
    done = threading.Event()

    def read() -> None:
        while not done.is_set():
            for segment in segments:
                try:
                    assert segment.view[0] == 7
                except BaseException as exc:
                    failures.append(exc)
                    return

    saved = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # hand the GIL over as often as possible
    reader = threading.Thread(target=read)
    reader.start()
    try:
        for _ in range(2_000):
            for segment in segments:
                segment.view  # noqa: B018 (maps it, closing another)
            if failures:
                break
    finally:
        done.set()
        reader.join()
        sys.setswitchinterval(saved)
    assert failures == []
    for segment in segments:
        segment.close()


def test_prepared_transactions_hold_no_queue_file_open(
    open_store: StoreFactory, pool_limit: int
) -> None:
    """A prepared transaction's record has no unit: its put keeps no consume-queue mapping
    (and its descriptor) past the pool's bound."""
    store = open_store()
    topics = [f"T{number}" for number in range(10 * pool_limit)]
    for topic in topics:
        assert store.put(message(topic)).ok
    mapped_before = _queue_mappings()
    for topic in topics:
        prepared = message(topic, b"half", sys_flag=SYSFLAG_TRANSACTION_PREPARED)
        assert store.put(prepared).ok
    assert _queue_mappings() <= max(mapped_before, pool_limit)


def _queue_mappings() -> int:
    with open("/proc/self/maps") as maps:
        return len({line.split()[-1] for line in maps if "/consumequeue/" in line})
