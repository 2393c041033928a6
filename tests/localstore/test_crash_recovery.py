"""Crash recovery with real processes: kill -9 a writer at random moments, then check the promise.

Promise: every message whose put returned PUT_OK is present and intact after the kill, under
both flush modes (a killed process loses nothing that reached the page cache); no corrupt message
is ever returned; a batch is found whole or not at all; verify passes; the store accepts new
writes (the next writer appends to the same store). A kill keeps the page cache, so these tests
cannot tell sync flush from async: that a sync put returns only once its bytes are on disk is
checked against the flushed offset and a stalled disk in ``test_flush.py`` and
``test_sync_process.py``.
"""

from __future__ import annotations

import random
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from localstore import GetStatus, MessageStore
from localstore.recovery.verify import verify_store

TOPIC = "CrashTopic"
QUEUES = 4
KILLS_PER_MODE = 12

WRITER = r"""
import sys
from localstore import MessageStore, NewMessage, StoreOptions
root, mode, start = sys.argv[1], sys.argv[2], int(sys.argv[3])
store = MessageStore(root, flush_mode=mode, commitlog_file_size=256 * 1024,
                     cq_entries_per_file=64, index_slots=64, index_entries=256,
                     options=StoreOptions(flush_interval_ms=20))
print("OPEN", flush=True)
seq = start
while True:
    batch = [NewMessage("CrashTopic", (f"seq-{seq + i}-" * (1 + (seq + i) % 7)).encode(),
                        (seq // 8) % 4, {"KEYS": f"k{seq + i}"}) for i in range(1 + seq % 3)]
    result = store.put_batch(batch)
    assert result.status.value == "PUT_OK", result
    for i in range(len(result.phys_offsets)):
        print("ACK", seq + i, result.queue_id, result.queue_offset + i, flush=True)
    seq += len(batch)
"""


def writer_batches(start: int, stop: int) -> Iterator[range]:
    """The sequence numbers of each batch a writer started at ``start`` puts, those that end
    before ``stop`` (where the next writer starts)."""
    seq = start
    while seq + 1 + seq % 3 <= stop:
        yield range(seq, seq + 1 + seq % 3)
        seq += 1 + seq % 3


def expected_body(seq: int) -> bytes:
    return (f"seq-{seq}-" * (1 + seq % 7)).encode()


def run_writer_and_kill(root: Path, mode: str, start: int, rng: random.Random) -> list[tuple]:
    """Start a writer, let it ack for a random while, SIGKILL it; returns the acks it printed."""
    acks: list[tuple] = []
    opened = threading.Event()
    with subprocess.Popen(
        [sys.executable, "-c", WRITER, str(root), mode, str(start)],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    ) as proc:

        def read() -> None:
            assert proc.stdout is not None
            for line in proc.stdout:
                if line.startswith("OPEN"):
                    opened.set()
                elif line.startswith("ACK") and line.endswith("\n"):  # not cut by the kill
                    _, seq, queue_id, queue_offset = line.split()
                    acks.append((int(seq), int(queue_id), int(queue_offset)))

        reader = threading.Thread(target=read)
        reader.start()
        if opened.wait(30):
            time.sleep(rng.uniform(0.01, 0.3))
        proc.kill()
        proc.wait()
        reader.join()
    assert opened.is_set(), "the writer did not open the store"
    return acks


@pytest.mark.integration
@pytest.mark.slow
@pytest.mark.parametrize("mode", ["sync", "async"])
def test_kill_loop_keeps_every_acknowledged_message(tmp_path: Path, mode: str):
    rng = random.Random(f"kill-loop-{mode}")
    acked: dict[int, tuple[int, int]] = {}
    next_seq = 0
    batches: list[range] = []
    for _ in range(KILLS_PER_MODE):
        acks = run_writer_and_kill(tmp_path, mode, next_seq, rng)
        for seq, queue_id, queue_offset in acks:
            acked[seq] = (queue_id, queue_offset)
        start, next_seq = next_seq, max([next_seq, *(seq + 1 for seq, _, _ in acks)]) + 1000
        batches += writer_batches(start, next_seq)
        with MessageStore(tmp_path) as store:
            assert store.crashed_last_time
            report = verify_store(store)
            assert report.ok, report.problems[:3]
            for seq, (queue_id, queue_offset) in acked.items():
                got = store.get_messages(TOPIC, queue_id, queue_offset, max_count=1)
                assert got.status is GetStatus.FOUND, (seq, got.status)
                assert got.messages[0].body == expected_body(seq)
            found = 0
            found_seqs: set[int] = set()
            for queue_id in range(QUEUES):  # nothing corrupt anywhere
                offset = store.min_offset(TOPIC, queue_id)
                while True:
                    got = store.get_messages(TOPIC, queue_id, offset, max_count=64)
                    if not got.found:
                        break
                    found += len(got.messages)
                    for message in got.messages:
                        seq = int(message.body.split(b"-")[1])
                        assert message.body == expected_body(seq)
                        assert message.keys == [f"k{seq}"]
                        found_seqs.add(seq)
                    offset = got.next_offset
            for batch in batches:  # all or nothing, also the batch a kill cut short
                assert len(found_seqs.intersection(batch)) in (0, len(batch)), batch
    assert len(acked) > KILLS_PER_MODE  # the writers did get work done between kills
    assert found >= len(acked)  # unacknowledged puts may have landed too, never fewer
    print(
        f"\nkill loop ({mode} flush): {KILLS_PER_MODE} kills, {len(acked)} acknowledged, "
        f"{found} found, every acknowledged one intact"
    )
