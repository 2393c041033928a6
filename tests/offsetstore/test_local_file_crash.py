"""kill -9 at random moments while a process persists offsets continuously: after every kill the
offsets file (or its .bak) is readable and holds offsets no older than the last persist the child
reported as finished. Real processes, real SIGKILL, no mocks."""

from __future__ import annotations

import os
import random
import select
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from offsetstore.atomic_file import backup_path
from offsetstore.base import MessageQueue
from offsetstore.local_file import LocalFileOffsetStore, decode_offsets

REPO = Path(__file__).resolve().parents[2]
QUEUES = 8
KILLS = 25

# The child raises every queue's offset to the round number, persists all queues, then prints
# the round: a printed round is a finished persist. It starts from what the file holds, so the
# offsets keep growing across kills.
CHILD = textwrap.dedent(
    """
    import sys
    from offsetstore.base import MessageQueue
    from offsetstore.local_file import LocalFileOffsetStore

    store = LocalFileOffsetStore("host@DEFAULT", "crash", base_dir=sys.argv[1])
    store.load()
    queues = [MessageQueue("T", "broker-a", i) for i in range(int(sys.argv[2]))]
    start = max(store.clone_offset_table("T").values(), default=0) // 100
    print("ready", start, flush=True)
    round_ = start
    while True:
        round_ += 1
        for q in queues:
            store.update_offset(q, round_ * 100 + q.queue_id, increase_only=True)
        store.persist_all(queues)
        print(round_, flush=True)
    """
)


def read_lines_until(
    proc: subprocess.Popen[bytes], deadline_s: float, until_ready: bool = False
) -> list[str]:
    """Lines the child printed until ``deadline_s`` (monotonic), or until its "ready" line."""
    assert proc.stdout is not None
    chunks: list[bytes] = []
    fd = proc.stdout.fileno()
    while (remaining := deadline_s - time.monotonic()) > 0:
        ready, _, _ = select.select([fd], [], [], remaining)
        if ready:
            chunk = os.read(fd, 65536)
            if not chunk:
                break
            chunks.append(chunk)
            if until_ready and b"\n" in b"".join(chunks):
                break
    return b"".join(chunks).decode().splitlines()


@pytest.mark.integration
@pytest.mark.slow
def test_kill_9_while_persisting_never_loses_a_finished_persist(tmp_path: Path) -> None:
    rng = random.Random(20261122)
    path = LocalFileOffsetStore("host@DEFAULT", "crash", base_dir=tmp_path).path
    last_finished = 0
    main_file_unreadable = 0
    for kill in range(KILLS):
        proc = subprocess.Popen(
            [sys.executable, "-c", CHILD, str(tmp_path), str(QUEUES)],
            cwd=REPO,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        try:
            lines = read_lines_until(proc, time.monotonic() + 30, until_ready=True)
            lines += read_lines_until(proc, time.monotonic() + rng.random() * 0.2)
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)
            assert proc.stdout is not None
            lines += proc.stdout.read().decode().splitlines()  # printed before the kill
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            assert proc.stderr is not None
            errors = proc.stderr.read().decode()
            proc.stdout.close() if proc.stdout else None
            proc.stderr.close()
        assert proc.returncode == -signal.SIGKILL, errors
        assert lines and lines[0].startswith("ready"), errors
        start = int(lines[0].split()[1])
        assert start >= last_finished, f"kill {kill}: child started from {start} < {last_finished}"
        rounds = [int(line) for line in lines[1:] if line.strip()]
        if rounds:
            last_finished = rounds[-1]
        # a round may be persisted but not yet printed when the kill lands: at most one past
        # the last printed, or past the start when this child printed none
        newest_possible = (rounds[-1] if rounds else start) + 1

        try:
            decode_offsets(path.read_bytes())
        except (OSError, ValueError):
            main_file_unreadable += 1
            decode_offsets(backup_path(path).read_bytes())  # the .bak must then be good
        store = LocalFileOffsetStore("host@DEFAULT", "crash", base_dir=tmp_path)
        store.load()
        table = store.clone_offset_table("T")
        if last_finished:
            for i in range(QUEUES):
                offset = table[MessageQueue("T", "broker-a", i)]
                assert offset >= last_finished * 100 + i, (
                    f"kill {kill}: queue {i} holds {offset}, older than the finished round "
                    f"{last_finished}"
                )
                assert offset <= newest_possible * 100 + i  # at most the round in progress
    assert last_finished > KILLS, "the child hardly persisted anything between kills"
    # with write-temp-then-rename the main file itself is never torn
    assert main_file_unreadable == 0
    # a kill between creating and renaming a temp file leaves it; the next writer removes it
    leftovers = [p.name for p in path.parent.iterdir() if p.name.endswith("tmp")]
    assert len(leftovers) <= 2, leftovers
