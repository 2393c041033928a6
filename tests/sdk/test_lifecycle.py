"""Lifecycle (sdk.lifecycle, sdk.broker.embedded): a client or broker collected without
``close()`` emits a ResourceWarning, a closed or half-built one does not, and a broker still
open at interpreter exit is closed by the atexit hook (offsets persisted, abort marker removed).
"""

from __future__ import annotations

import asyncio
import gc
import json
import os
import subprocess
import sys
import warnings
import weakref
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from localstore.errors import StoreDirectoryError
from sdk import (
    AsyncProducer,
    AsyncPullConsumer,
    AsyncPushConsumer,
    AsyncTransactionalProducer,
    ConsumeResult,
    EmbeddedBroker,
    Message,
    Producer,
    PullConsumer,
    PushConsumer,
    TransactionalProducer,
    TransactionState,
)
from sdk.errors import InvalidArgumentError
from tests.sdk.brokers import SMALL_GEOMETRY
from tests.sdk.waiting import wait_until

REPO = Path(__file__).resolve().parents[2]
GEOMETRY = SMALL_GEOMETRY
TOPIC = "orders"
GROUP = "billing"


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[EmbeddedBroker]:
    with EmbeddedBroker(tmp_path / "data", **GEOMETRY) as embedded:
        yield embedded


def _check(message: Any) -> TransactionState:
    return TransactionState.COMMIT


async def _acheck(message: Any) -> TransactionState:
    return TransactionState.COMMIT


def _listen(messages: Any) -> ConsumeResult:
    return ConsumeResult.SUCCESS


async def _alisten(messages: Any) -> ConsumeResult:
    return ConsumeResult.SUCCESS


def _used_producer(broker: EmbeddedBroker) -> Producer:
    """A producer whose background send threads exist (they must not keep it alive)."""
    producer = Producer(broker)
    producer.send_async(Message(TOPIC, b"x")).result(timeout=30)
    return producer


# name -> (make it over the broker, close it)
CLIENTS: dict[str, tuple[Callable[[EmbeddedBroker], Any], Callable[[Any], None]]] = {
    "Producer": (Producer, lambda c: c.close()),
    "Producer-after-send_async": (_used_producer, lambda c: c.close()),
    "AsyncProducer": (AsyncProducer, lambda c: asyncio.run(c.close())),
    "TransactionalProducer": (
        lambda b: TransactionalProducer(b, "tx-group", _check, check_wait_ms=50),
        lambda c: c.close(),
    ),
    "AsyncTransactionalProducer": (
        lambda b: AsyncTransactionalProducer(b, "tx-group", _acheck, check_wait_ms=50),
        lambda c: asyncio.run(c.close()),
    ),
    "PullConsumer": (lambda b: PullConsumer(b, GROUP), lambda c: c.close()),
    "AsyncPullConsumer": (lambda b: AsyncPullConsumer(b, GROUP), lambda c: asyncio.run(c.close())),
    "PushConsumer": (
        lambda b: PushConsumer(b, GROUP, {TOPIC: None}, _listen),
        lambda c: c.close(),
    ),
    "AsyncPushConsumer": (
        lambda b: AsyncPushConsumer(b, GROUP, {TOPIC: None}, _alisten),
        lambda c: asyncio.run(c.close()),
    ),
}


def _collected(ref: weakref.ref[Any]) -> bool:
    gc.collect()
    return ref() is None


def _warned(caught: Any) -> bool:
    gc.collect()
    return any(issubclass(w.category, ResourceWarning) for w in caught)


@pytest.fixture
def unraisable(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """What ``__del__`` methods raised (sys.unraisablehook), instead of pytest's report."""
    seen: list[Any] = []
    monkeypatch.setattr(sys, "unraisablehook", seen.append)
    return seen


# A transactional producer's check thread holds it until close(): checks must be answered as
# long as the process runs (a forgotten producer that stopped answering would let the broker
# roll back transactions whose local part committed), so it cannot be collected and warn.
HELD_BY_THEIR_THREADS = {"TransactionalProducer"}


@pytest.mark.parametrize("name", sorted(set(CLIENTS) - HELD_BY_THEIR_THREADS))
def test_a_client_collected_unclosed_warns(broker: EmbeddedBroker, name: str) -> None:
    make, _ = CLIENTS[name]
    client = make(broker)
    kind = type(client).__name__
    with pytest.warns(ResourceWarning, match=f"unclosed {kind}") as caught:
        del client
        # The warning's source keeps the object alive: wait for the warning, not a weakref.
        wait_until(lambda: _warned(caught), timeout_s=30)


@pytest.mark.parametrize("name", CLIENTS)
def test_a_closed_client_does_not_warn(
    broker: EmbeddedBroker, name: str, unraisable: list[Any]
) -> None:
    make, close = CLIENTS[name]
    client = make(broker)
    close(client)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        ref = weakref.ref(client)
        del client
        wait_until(lambda: _collected(ref), timeout_s=30)
    assert [w for w in caught if issubclass(w.category, ResourceWarning)] == []
    assert unraisable == []


def test_a_broker_collected_unclosed_warns_and_is_still_closed_at_exit(tmp_path: Path) -> None:
    from sdk.broker import embedded

    broker = EmbeddedBroker(tmp_path / "data", **GEOMETRY)
    service = broker.service
    try:
        with pytest.warns(ResourceWarning, match="unclosed EmbeddedBroker") as caught:
            del broker
            wait_until(lambda: _warned(caught), timeout_s=30)
        # Its service still runs (clients may hold it): the atexit hook still knows it.
        assert service in embedded._open_services
    finally:
        service.close()


def test_a_closed_broker_does_not_warn_and_leaves_the_exit_set(
    tmp_path: Path, unraisable: list[Any]
) -> None:
    from sdk.broker import embedded

    broker = EmbeddedBroker(tmp_path / "data", **GEOMETRY)
    service = broker.service
    broker.close()
    assert service not in embedded._open_services
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        ref = weakref.ref(broker)
        del broker
        wait_until(lambda: _collected(ref), timeout_s=30)
    assert [w for w in caught if issubclass(w.category, ResourceWarning)] == []
    assert unraisable == []


def test_half_built_objects_never_warn(tmp_path: Path, unraisable: list[Any]) -> None:
    """A constructor that raised leaves an object that was never open: its ``__del__`` says
    nothing and raises nothing."""
    occupied = tmp_path / "occupied"
    occupied.mkdir()
    (occupied / "notes.txt").write_text("not a store")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with pytest.raises(StoreDirectoryError):
            EmbeddedBroker(occupied)
        with EmbeddedBroker(tmp_path / "data", **GEOMETRY) as broker:
            with pytest.raises(InvalidArgumentError):
                Producer(broker, retries=-1)
            with pytest.raises(InvalidArgumentError):
                PushConsumer(broker, GROUP, {TOPIC: None}, _listen, consume_threads=0)
            with pytest.raises(InvalidArgumentError):
                AsyncPushConsumer(broker, GROUP, {TOPIC: None}, _alisten, max_concurrency=0)
        gc.collect()
    assert [w for w in caught if issubclass(w.category, ResourceWarning)] == []
    assert unraisable == []


# -- the atexit hook, in a real interpreter -------------------------------------------------------

EXIT_SCRIPT = """
import sys
from sdk import ConsumeFrom, EmbeddedBroker, Message, Producer, PullConsumer, PushConsumer

root, keep_broker = sys.argv[1], sys.argv[2] == "keep"
broker = EmbeddedBroker(root, commitlog_file_size=1 << 20, cq_entries_per_file=1024,
                        index_slots=1024, index_entries=4096)
producer = Producer(broker)
receipt = producer.send(Message("orders", b"hello"), queue_id=0)
consumer = PullConsumer(broker, "billing", consume_from=ConsumeFrom.FIRST_OFFSET)
consumer.subscribe(["orders"])
got = []
for _ in range(100):
    got += consumer.poll(0.2)
    if got:
        break
assert [m.body for m in got] == [b"hello"], got
consumer.commit()
# A push consumer still running at exit, parked on the broker: closing the broker must not hang.
pusher = PushConsumer(broker, "audit", {"orders": None}, lambda messages: None)
pusher.start()
if not keep_broker:
    del broker  # the clients still hold its service: the hook must still close it
print("exiting without closing", flush=True)
"""


@pytest.mark.integration
@pytest.mark.parametrize("keep_broker", ["keep", "drop"])
def test_a_broker_open_at_exit_is_closed_cleanly(tmp_path: Path, keep_broker: str) -> None:
    root = tmp_path / "data"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run(
        # -W always: every unclosed client's __del__ warns during shutdown, which must work
        [
            sys.executable,
            "-W",
            "always::ResourceWarning",
            "-c",
            EXIT_SCRIPT,
            str(root),
            keep_broker,
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "exiting without closing" in done.stdout
    assert "Traceback" not in done.stderr, done.stderr
    assert "Exception ignored" not in done.stderr, done.stderr
    assert not (root / "abort").exists()
    offsets = json.loads((root / "config" / "consumerOffset.json").read_text())
    assert offsets["offsetTable"]["orders@billing"]["0"] == 1
    with EmbeddedBroker(root) as reopened:  # and the broker reopens on the same offset
        assert reopened.service.offsets.query("billing", "orders", 0) == 1
