"""Closing a producer carries out the background sends it accepted, then refuses new ones.

A send accepted (``send_async``/``send_oneway``) before ``close()`` began is stored, or fails for
its own reason, and its future resolves; a send started after ``close()`` began raises
:class:`ClientClosedError` at once; every ``close()`` returns only once the accepted sends are
done; a broker gone meanwhile fails them with its own error, without a hang.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from sdk import (
    AsyncProducer,
    BrokerUnavailableError,
    ClientClosedError,
    EmbeddedBroker,
    Message,
    Producer,
)
from sdk.transport.in_process import InProcessTransport

TOPIC = "orders"
WAIT_S = 10.0


@pytest.fixture
def broker(tmp_path: Path):
    with EmbeddedBroker(tmp_path / "broker", commitlog_file_size=1 << 20) as embedded:
        yield embedded


class GatedTransport(InProcessTransport):
    """Holds every send until :attr:`gate` is set, so the background sends are still queued or
    running when ``close()`` begins (whatever the machine's speed)."""

    def __init__(self, service) -> None:
        super().__init__(service)
        self.gate = threading.Event()
        self.waiting = threading.Semaphore(0)  # released once per send that reached the gate

    def send(self, messages):
        self.waiting.release()
        assert self.gate.wait(WAIT_S), "the test never opened the gate"
        return super().send(messages)


def _stored_bodies(broker: EmbeddedBroker, topic: str = TOPIC) -> list[bytes]:
    """Every message of ``topic`` the broker stored, read back from its store."""
    store = broker.service.store
    bodies: list[bytes] = []
    for queue_id in store.queue_ids(topic):
        end = store.max_offset(topic, queue_id)
        found = store.get_messages(topic, queue_id, 0, max_count=end + 1).messages
        assert [m.queue_offset for m in found] == list(range(end))
        bodies.extend(m.body for m in found)
    return sorted(bodies)


def _bodies(count: int, prefix: str = "m") -> list[bytes]:
    return sorted(f"{prefix}-{i:03d}".encode() for i in range(count))


def _close_in_thread(producer: Producer) -> threading.Thread:
    """Start ``producer.close()`` on its own thread; return once close has begun."""
    closer = threading.Thread(target=producer.close, name="closer", daemon=True)
    closer.start()
    _wait_until(lambda: producer._closed, "close() to begin")
    return closer


def _wait_until(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + WAIT_S
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.001)


def _wait_for_gate(transport: GatedTransport, sends: int) -> None:
    for _ in range(sends):
        assert transport.waiting.acquire(timeout=WAIT_S), "no send reached the transport"


def test_close_carries_out_every_send_async_accepted_before_it(broker):
    transport = GatedTransport(broker.service)
    producer = Producer(transport, async_workers=4)
    futures = [producer.send_async(Message(TOPIC, body)) for body in _bodies(50)]
    _wait_for_gate(transport, 4)  # 4 sends are in the transport, 46 still queued
    closer = _close_in_thread(producer)
    transport.gate.set()
    closer.join(WAIT_S)
    assert not closer.is_alive(), "close() hung"

    assert all(f.done() for f in futures), "close() returned before its background sends"
    failures = [f.exception() for f in futures if f.exception() is not None]
    assert failures == []
    receipts = [f.result() for f in futures]
    assert {r.status for r in receipts} == {"PUT_OK"}
    assert len({r.msg_id for r in receipts}) == 50
    assert _stored_bodies(broker) == _bodies(50)


def test_close_carries_out_every_send_oneway_accepted_before_it(broker, caplog):
    transport = GatedTransport(broker.service)
    producer = Producer(transport, async_workers=2)
    with caplog.at_level(logging.ERROR, logger="sdk.producer"):
        for body in _bodies(20):
            producer.send_oneway(Message(TOPIC, body))
        _wait_for_gate(transport, 2)
        closer = _close_in_thread(producer)
        transport.gate.set()
        closer.join(WAIT_S)
    assert not closer.is_alive(), "close() hung"
    assert _stored_bodies(broker) == _bodies(20)
    assert not [r for r in caplog.records if "one-way send failed" in r.getMessage()]


def test_an_unblocked_close_stores_every_send_async(broker):
    """The reported reproducer as is: no gate, the broker itself, 50 sends then close()."""
    producer = Producer(broker)
    futures = [producer.send_async(Message(TOPIC, body)) for body in _bodies(50)]
    producer.close()
    assert [f.exception(timeout=0) for f in futures] == [None] * 50
    assert _stored_bodies(broker) == _bodies(50)


def test_async_producer_close_carries_out_every_send_async(broker):
    async def scenario():
        producer = AsyncProducer(broker)
        tasks = [producer.send_async(Message(TOPIC, body)) for body in _bodies(10)]
        producer.send_oneway(Message(TOPIC, b"oneway"))
        await producer.close()
        assert all(task.done() for task in tasks), "close() returned before its sends"
        with pytest.raises(ClientClosedError):
            producer.send_async(Message(TOPIC, b"late"))
        with pytest.raises(ClientClosedError):
            await producer.send(Message(TOPIC, b"late"))
        await producer.close()  # idempotent
        return await asyncio.gather(*tasks, return_exceptions=True)

    results = asyncio.run(scenario())
    assert [r for r in results if isinstance(r, BaseException)] == []
    assert {r.status for r in results} == {"PUT_OK"}
    assert _stored_bodies(broker) == sorted([*_bodies(10), b"oneway"])


def test_async_producer_every_close_waits_for_the_sends(broker):
    async def scenario():
        producer = AsyncProducer(broker)
        tasks = [producer.send_async(Message(TOPIC, body)) for body in _bodies(10)]
        done_at_close: list[bool] = []

        async def close_and_look() -> None:
            await producer.close()
            done_at_close.append(all(task.done() for task in tasks))

        await asyncio.gather(close_and_look(), close_and_look())
        return done_at_close

    assert asyncio.run(scenario()) == [True, True]
    assert _stored_bodies(broker) == _bodies(10)


def test_a_send_after_close_began_is_refused_at_once(broker):
    transport = GatedTransport(broker.service)
    producer = Producer(transport, async_workers=1)
    accepted = [producer.send_async(Message(TOPIC, body)) for body in _bodies(5)]
    _wait_for_gate(transport, 1)
    closer = _close_in_thread(producer)
    safety = threading.Timer(WAIT_S, transport.gate.set)  # a blocked send must not hang the run
    safety.start()
    try:
        started = time.monotonic()
        with pytest.raises(ClientClosedError):
            producer.send_async(Message(TOPIC, b"late"))
        with pytest.raises(ClientClosedError):
            producer.send_oneway(Message(TOPIC, b"late"))
        with pytest.raises(ClientClosedError):
            producer.send(Message(TOPIC, b"late"))
        with pytest.raises(ClientClosedError):
            producer.send_batch([Message(TOPIC, b"late")])
        assert time.monotonic() - started < WAIT_S / 2, "a refused send waited for the drain"

        # A second close(), from another thread, waits for the same sends as the first.
        second = threading.Thread(target=producer.close, name="second-closer", daemon=True)
        second.start()
        second.join(0.2)
        assert second.is_alive(), "a second close() returned before the accepted sends"
        assert not any(f.done() for f in accepted[1:])
    finally:
        transport.gate.set()
        safety.cancel()
    closer.join(WAIT_S)
    second.join(WAIT_S)
    assert not closer.is_alive() and not second.is_alive(), "close() hung"
    assert [f.exception(timeout=0) for f in accepted] == [None] * 5
    assert _stored_bodies(broker) == _bodies(5)  # no "late" message got through
    producer.close()  # idempotent, returns at once
    with pytest.raises(ClientClosedError):
        producer.send_async(Message(TOPIC, b"late"))


def test_close_does_not_hang_when_the_broker_is_gone(broker):
    transport = GatedTransport(broker.service)
    producer = Producer(transport, async_workers=1, retries=1)
    futures = [producer.send_async(Message(TOPIC, body)) for body in _bodies(10)]
    _wait_for_gate(transport, 1)
    closer = _close_in_thread(producer)
    broker.close()
    transport.gate.set()
    closer.join(WAIT_S)
    assert not closer.is_alive(), "close() hung with the broker gone"
    errors = [f.exception(timeout=0) for f in futures]
    assert all(isinstance(e, BrokerUnavailableError) for e in errors), errors
