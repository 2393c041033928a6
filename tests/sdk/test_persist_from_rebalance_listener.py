"""A rebalance listener may call ``persist_offsets()`` (Kafka users commit in
``onPartitionsRevoked``): the push consumer runs its listener inside a membership sequence,
under its control lock, so persisting there must run in that sequence, not wait for the lock
its own thread holds (the pull thread would hang, the queues would never be handed over and
``close()`` would never return). ``close()`` cannot run there (the rebalance would wait for
itself): it is refused with IllegalStateError instead of hanging the consumer."""

from __future__ import annotations

import threading
from pathlib import Path

from offsetstore import MessageQueue
from sdk import EmbeddedBroker, PushConsumer
from sdk.errors import IllegalStateError

TOPIC = "Revoked"
GROUP = "g"


class PersistsOnRevoke:
    def __init__(self) -> None:
        self.consumer: PushConsumer | None = None
        self.persisted = threading.Event()

    def on_assigned(self, queues: list[MessageQueue]) -> None:
        pass

    def on_revoked(self, queues: list[MessageQueue]) -> None:
        assert self.consumer is not None
        self.consumer.persist_offsets()
        self.persisted.set()


def hand_over(
    tmp_path: Path, listener: PersistsOnRevoke | ClosesOnRevoke, seen: threading.Event
) -> threading.Event:
    """A first member (with ``listener``) lets half its queues go to a second one, then both
    close; on a daemon thread, so a hung close cannot hang the suite. Answers an event set once
    both closed."""
    closed = threading.Event()

    def scenario() -> None:
        with EmbeddedBroker(tmp_path / "b", commitlog_file_size=1 << 20) as broker:
            first = PushConsumer(
                broker, GROUP, {TOPIC: None}, lambda messages: None, rebalance_listener=listener
            )
            listener.consumer = first
            with first, PushConsumer(broker, GROUP, {TOPIC: None}, lambda messages: None):
                seen.wait(30)
        closed.set()

    threading.Thread(target=scenario, daemon=True).start()
    return closed


def test_a_rebalance_listener_can_persist_offsets(tmp_path: Path) -> None:
    listener = PersistsOnRevoke()
    closed = hand_over(tmp_path, listener, listener.persisted)
    assert listener.persisted.wait(30), "persist_offsets() in on_revoked never returned"
    assert closed.wait(30), "the consumers never closed"


class ClosesOnRevoke:
    def __init__(self) -> None:
        self.consumer: PushConsumer | None = None
        self.refused: list[Exception] = []
        self.answered = threading.Event()

    def on_assigned(self, queues: list[MessageQueue]) -> None:
        pass

    def on_revoked(self, queues: list[MessageQueue]) -> None:
        assert self.consumer is not None
        try:
            self.consumer.close()
        except Exception as exc:
            self.refused.append(exc)
        self.answered.set()


def test_close_from_a_rebalance_listener_is_refused_not_a_deadlock(tmp_path: Path) -> None:
    listener = ClosesOnRevoke()
    closed = hand_over(tmp_path, listener, listener.answered)
    assert listener.answered.wait(30), "close() in on_revoked never returned"
    assert closed.wait(30), "the consumers never closed"
    assert listener.refused  # once per queue let go, and at the real close
    assert all(isinstance(exc, IllegalStateError) for exc in listener.refused)
    assert "rebalance listener" in str(listener.refused[0])
