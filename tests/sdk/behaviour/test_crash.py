"""At-least-once across ``kill -9``: a consumer process killed mid-way loses nothing.

Phase 1, this process produces N messages. Phase 2, a child process serves the broker
(in-process mode: it must own the store) and consumes slowly, appending every processed
message to a file (flushed and fsynced before the listener returns); it is killed with SIGKILL
part-way. Phase 3, this process serves the broker again (crash recovery) and consumes to the end
with the same group. Every message must have been processed at least once, and the group's
committed offset must never have passed a message that was not processed.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest

from sdk import ConsumeFrom, Message, Producer
from sdk.message import ReceivedMessage

from .conftest import ConsumerFactory, Harness, wait_until

TOPIC = "transfers"
GROUP = "clearing"
TOTAL = 400
REPO_ROOT = Path(__file__).resolve().parents[3]

CONSUMER_SCRIPT = """
import os
import sys
import threading
import time

from sdk import ConsumeFrom, PushConsumer
from sdk.transport.resolve import resolve

{broker_source}


def main():
    out_path, progress_path, group, topic = sys.argv[1:5]
    target, flush_offsets, close = open_broker()
    out = open(out_path, "a")
    lock = threading.Lock()

    def listener(messages):
        time.sleep(0.01)  # slow work: the parent kills this process part-way
        with lock:
            for m in messages:
                out.write(f"{{m.queue_id}} {{m.queue_offset}} {{m.body.decode()}}\\n")
            out.flush()
            os.fsync(out.fileno())

    consumer = PushConsumer(
        target,
        group,
        {{topic: None}},
        listener,
        consume_from=ConsumeFrom.FIRST_OFFSET,
        consume_threads=2,
    )
    consumer.start()
    transport = resolve(target)
    while True:  # commit often, so the kill lands after some progress became durable
        time.sleep(0.05)
        queues = [q for q in consumer.assignment() if q.topic == topic]
        consumer.persist_offsets()
        committed = sum(
            transport.query_offset(q.broker_name, group, q.topic, q.queue_id) or 0
            for q in queues
        )
        flush_offsets()
        with open(progress_path + ".tmp", "w") as progress:
            progress.write(str(committed))
        os.replace(progress_path + ".tmp", progress_path)


main()
"""


def processed(path: Path) -> list[tuple[int, int, str]]:
    """The complete lines of the child's output: (queue id, queue offset, body)."""
    if not path.exists():
        return []
    lines = path.read_text().split("\n")[:-1]  # a torn last line has no newline yet
    return [(int(q), int(o), body) for q, o, body in (line.split(" ", 2) for line in lines)]


def read_progress(path: Path) -> int:
    try:
        return int(path.read_text() or 0)
    except FileNotFoundError:
        return 0


@pytest.mark.integration
def test_consumer_killed_mid_way_loses_nothing(
    harness: Harness, tmp_path: Path, start_consumer: ConsumerFactory
) -> None:
    with Producer(harness.broker_target) as producer:
        for queue_id in range(4):
            producer.send_batch(
                [Message(TOPIC, f"{queue_id}-{i}".encode()) for i in range(TOTAL // 4)],
                queue_id=queue_id,
            )
    everything = {f"{q}-{i}" for q in range(4) for i in range(TOTAL // 4)}

    out_path, progress_path = tmp_path / "processed.txt", tmp_path / "progress.txt"
    script = tmp_path / "consumer.py"
    log_path = tmp_path / "consumer.log"
    with harness.hand_over() as child_broker:
        script.write_text(
            CONSUMER_SCRIPT.format(broker_source=textwrap.dedent(child_broker.source))
        )
        env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
        with open(log_path, "w") as log:
            child = subprocess.Popen(
                [sys.executable, str(script), str(out_path), str(progress_path), GROUP, TOPIC],
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        try:
            wait_until(
                lambda: (
                    child.poll() is not None
                    or (read_progress(progress_path) > 0 and len(processed(out_path)) >= TOTAL // 4)
                ),
                timeout_s=30,
            )
            assert child.poll() is None, log_path.read_text()
            os.kill(child.pid, signal.SIGKILL)
        finally:
            if child.poll() is None:
                child.kill()
            child.wait(timeout=10)
        assert child.returncode == -signal.SIGKILL

    before = processed(out_path)
    done_before = {(q, o) for q, o, _ in before}
    assert 0 < len({body for _, _, body in before}) < TOTAL  # killed part-way
    committed = {q: harness.service.query_offset(GROUP, TOPIC, q) or 0 for q in range(4)}
    assert sum(committed.values()) > 0
    for queue_id, offset in committed.items():
        # The committed offset never passes a message that was not processed.
        assert {(queue_id, o) for o in range(offset)} <= done_before, (queue_id, offset)

    after: list[tuple[int, int, str]] = []
    lock = threading.Lock()

    def listener(messages: list[ReceivedMessage]) -> None:
        with lock:
            after.extend((m.queue_id, m.queue_offset, m.body.decode()) for m in messages)

    start_consumer(GROUP, {TOPIC: None}, listener, consume_from=ConsumeFrom.FIRST_OFFSET)
    wait_until(lambda: {body for _, _, body in before + after} >= everything, timeout_s=20)
    with lock:
        resumed = {q: min(o for qq, o, _ in after if qq == q) for q in {q for q, _, _ in after}}
    for queue_id, first in resumed.items():
        assert first == committed[queue_id]  # phase 3 resumed exactly at the committed offset
    assert {body for _, _, body in before + after} == everything
