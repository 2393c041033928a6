"""A sync PushConsumer whose listener never returns: ``close()`` is bounded by its timeout, the
process can exit after it (the listener threads do not hold the interpreter up), the message left
in flight is not committed (a later consumer gets it again) and the WARNING names its queue and
offset."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest

from sdk import ConsumeFrom, EmbeddedBroker, PushConsumer
from sdk.consumer.daemon_pool import DaemonThreadPool

from .waiting import wait_until

REPO = Path(__file__).resolve().parents[2]

# The child: one message, a listener that blocks forever on a pool thread, close(timeout_s=...)
# small, then the broker closed and the interpreter left. "closed" on stdout once close() is back.
CHILD = textwrap.dedent(
    """
    import logging, sys, threading
    from sdk import ConsumeFrom, EmbeddedBroker, Message, Producer, PushConsumer

    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    started = threading.Event()

    def never_returns(messages):
        started.set()
        threading.Event().wait()  # forever

    broker = EmbeddedBroker(sys.argv[1], commitlog_file_size=1 << 20)
    with Producer(broker) as producer:
        producer.send(Message("orders", b"stuck"), queue_id=0)
    consumer = PushConsumer(
        broker, "g", {"orders": None}, never_returns, consume_from=ConsumeFrom.FIRST_OFFSET
    )
    consumer.start()
    if not started.wait(30):
        sys.exit("the listener was never called")
    consumer.close(timeout_s=0.2)
    print("closed", flush=True)
    broker.close()
    """
)


def test_a_listener_that_never_returns_does_not_keep_the_process_alive(tmp_path: Path):
    root = tmp_path / "broker"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run(
        [sys.executable, "-c", CHILD, str(root)],
        capture_output=True,
        text=True,
        timeout=60,  # the old code never exits: the executor joins its worker at exit
        env=env,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["closed"]
    # the WARNING names the queue and the offset left in flight
    assert "left in flight" in done.stderr
    assert "queueId=0" in done.stderr and "offset 0" in done.stderr

    # at-least-once: the message was not committed, the next consumer of the group gets it
    got: list[bytes] = []
    with (
        EmbeddedBroker(root, commitlog_file_size=1 << 20) as broker,
        PushConsumer(
            broker,
            "g",
            {"orders": None},
            lambda messages: got.extend(m.body for m in messages),
            consume_from=ConsumeFrom.FIRST_OFFSET,
        ),
    ):
        wait_until(lambda: b"stuck" in got)
    assert got == [b"stuck"]


def test_the_listener_pool_runs_on_daemon_threads_and_cancels_what_waits_at_shutdown():
    pool = DaemonThreadPool(1, thread_name_prefix="test-pool")
    release = threading.Event()
    running = pool.submit(release.wait)
    waiting = pool.submit(lambda: None)  # behind the only thread
    wait_until(running.running)
    assert [t.daemon for t in threading.enumerate() if t.name.startswith("test-pool")] == [True]
    pool.shutdown(cancel_futures=True)
    assert waiting.cancelled()
    with pytest.raises(RuntimeError):
        pool.submit(lambda: None)
    release.set()
    assert running.result(timeout=10) is True
