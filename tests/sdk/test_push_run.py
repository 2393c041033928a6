"""``PushConsumer.run()`` and ``AsyncPushConsumer.run()``: a script's main loop that consumes until
SIGINT or SIGTERM, then closes cleanly. Run in a real subprocess, as a service would be, against a
real embedded broker."""

from __future__ import annotations

import asyncio
import os
import queue
import signal
import subprocess
import sys
import textwrap
import threading
from pathlib import Path
from typing import Any

import pytest

from sdk import (
    AsyncPushConsumer,
    EmbeddedBroker,
    IllegalStateError,
    Message,
    Producer,
    PushConsumer,
    ReceivedMessage,
)

from .brokers import SMALL_GEOMETRY

GEOMETRY = SMALL_GEOMETRY
TOPIC = "orders"
GROUP = "billing"
COUNT = 20
REPO = Path(__file__).resolve().parents[2]

SCRIPT = textwrap.dedent(
    """
    import asyncio
    import logging
    import signal
    import sys
    import threading

    from sdk import AsyncPushConsumer, ConsumeFrom, EmbeddedBroker, PushConsumer

    data, count = sys.argv[1], int(sys.argv[2])
    logging.basicConfig(stream=sys.stdout, level=logging.INFO, format="%(name)s %(message)s")
    consumed = 0
    lock = threading.Lock()

    def listener(messages):
        global consumed
        with lock:
            consumed += len(messages)
            if consumed == count:
                print("consumed all", flush=True)

    async def async_listener(messages):
        listener(messages)

    def handlers():
        return {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}

    def check(before):
        after = handlers()
        print("handlers restored" if after == before else f"handlers left: {after}", flush=True)

    async def run_async(broker):
        before = handlers()  # asyncio.run's own SIGINT handler among them
        await AsyncPushConsumer(
            broker, "billing", {"orders": None}, async_listener, consume_from=FIRST
        ).run()
        check(before)

    FIRST = ConsumeFrom.FIRST_OFFSET
    with EmbeddedBroker(data, **GEOMETRY) as broker:
        if MODE == "async":
            asyncio.run(run_async(broker))
        else:
            before = handlers()
            PushConsumer(broker, "billing", {"orders": None}, listener, consume_from=FIRST).run()
            check(before)
    """
)


def send(data: Path) -> None:
    with EmbeddedBroker(data, **GEOMETRY) as broker, Producer(broker) as producer:
        for i in range(COUNT):
            producer.send(Message(TOPIC, f"m{i}".encode()))


def committed_total(data: Path) -> int:
    with EmbeddedBroker(data, **GEOMETRY) as broker:
        queues = range(broker.service.queue_count(TOPIC))
        return sum(broker.service.query_offset(GROUP, TOPIC, q) or 0 for q in queues)


def read_lines(stream: Any, lines: queue.Queue[str]) -> None:
    for line in stream:
        lines.put(line.rstrip("\n"))


def wait_for(lines: queue.Queue[str], wanted: set[str], seen: list[str]) -> None:
    """Read ``lines`` until every line of ``wanted`` appeared (somewhere in a line)."""
    missing = set(wanted)
    while missing:
        try:
            line = lines.get(timeout=30.0)
        except queue.Empty:
            raise AssertionError(f"never printed {missing}; printed: {seen}") from None
        seen.append(line)
        missing = {w for w in missing if w not in line}


@pytest.mark.parametrize("mode", ["sync", "async"])
@pytest.mark.parametrize("stop", [signal.SIGTERM, signal.SIGINT], ids=lambda s: s.name)
def test_run_consumes_until_a_signal_then_commits_and_exits_cleanly(tmp_path: Path, stop, mode):
    data = tmp_path / "data"
    send(data)
    script = tmp_path / "service.py"
    script.write_text(f"GEOMETRY = {GEOMETRY!r}\nMODE = {mode!r}\n{SCRIPT}")
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    lines: queue.Queue[str] = queue.Queue()
    seen: list[str] = []
    with subprocess.Popen(
        [sys.executable, str(script), str(data), str(COUNT)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
    ) as service:
        reader = threading.Thread(target=read_lines, args=(service.stdout, lines), daemon=True)
        reader.start()
        try:
            wait_for(lines, {"running until SIGINT or SIGTERM", "consumed all"}, seen)
            service.send_signal(stop)
            assert service.wait(timeout=60) == 0, seen
        finally:
            if service.poll() is None:
                service.kill()
                service.wait()
            reader.join(10.0)
    while not lines.empty():
        seen.append(lines.get())
    assert any(f"stopping on {stop.name}" in line for line in seen), seen
    assert "handlers restored" in seen
    assert committed_total(data) == COUNT


async def nothing(messages: list[ReceivedMessage]) -> None:
    return None


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_run_refuses_a_thread_other_than_the_main_one(tmp_path: Path, mode: str):
    failures: list[BaseException] = []
    with EmbeddedBroker(tmp_path / "data", **GEOMETRY) as broker:
        sync = PushConsumer(broker, GROUP, {TOPIC: None}, lambda messages: None)
        asynchronous = AsyncPushConsumer(broker, GROUP, {TOPIC: None}, nothing)

        def run_in_a_thread() -> None:
            try:
                if mode == "sync":
                    sync.run()
                else:
                    asyncio.run(asynchronous.run())
            except BaseException as exc:
                failures.append(exc)

        worker = threading.Thread(target=run_in_a_thread)
        worker.start()
        worker.join(30.0)
        sync.close()
        asyncio.run(asynchronous.close())
    assert len(failures) == 1
    assert isinstance(failures[0], IllegalStateError)
    assert "main thread" in str(failures[0])
