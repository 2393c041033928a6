"""RemoteBrokerOffsetStore over the in-process TableBackend, and with failing backends."""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping
from pathlib import Path

from offsetstore.base import NOT_FOUND, READ_FAILED, MessageQueue, ReadOffsetType
from offsetstore.broker_table import ConsumerOffsetTable
from offsetstore.remote_broker import (
    RemoteBrokerOffsetStore,
    RetryPolicy,
    TableBackend,
    is_retriable,
)

FAST = RetryPolicy(attempts=3, initial_wait_s=0.001, max_wait_s=0.002)
A0 = MessageQueue("T", "broker-a", 0)
A1 = MessageQueue("T", "broker-a", 1)
B0 = MessageQueue("T", "broker-b", 0)
OTHER = MessageQueue("U", "broker-a", 0)


class UnavailableError(Exception):
    """A transport error that says it may pass."""

    retriable = True


class RefusedError(Exception):
    retriable = False


class MultiBroker:
    """One table per broker name, counting calls; fails the first ``failures`` calls with
    ``error`` (fault injection through a real backend class, not a mock)."""

    def __init__(self, tmp_path: Path, failures: int = 0, error: Exception | None = None):
        self.tables = {
            name: ConsumerOffsetTable(tmp_path / name) for name in ("broker-a", "broker-b")
        }
        self.failures = failures
        self.error = error or UnavailableError("broker away")
        self.commit_calls: list[tuple[str, dict[MessageQueue, int]]] = []
        self.query_calls = 0
        self.gate: threading.Event | None = None

    def _maybe_fail(self) -> None:
        if self.failures != 0:
            self.failures -= 1
            raise self.error

    def query_offset(self, broker_name: str, group: str, topic: str, queue_id: int) -> int | None:
        self.query_calls += 1
        self._maybe_fail()
        return TableBackend(self.tables[broker_name]).query_offset(
            broker_name, group, topic, queue_id
        )

    def commit_offsets(
        self, broker_name: str, group: str, offsets: Mapping[MessageQueue, int]
    ) -> None:
        if self.gate is not None:
            self.gate.wait(5)
        self.commit_calls.append((broker_name, dict(offsets)))
        self._maybe_fail()
        TableBackend(self.tables[broker_name]).commit_offsets(broker_name, group, offsets)


def test_memory_updates_freeze_and_clone(tmp_path: Path) -> None:
    store = RemoteBrokerOffsetStore("g", TableBackend(ConsumerOffsetTable(tmp_path)))
    assert store.read_offset(A0, ReadOffsetType.MEMORY) is NOT_FOUND
    store.update_offset(A0, 5, increase_only=True)
    store.update_offset(A0, 3, increase_only=True)
    assert store.read_offset(A0, ReadOffsetType.MEMORY) == 5
    store.update_offset(A0, 3, increase_only=False)
    assert store.read_offset(A0, ReadOffsetType.MEMORY_FIRST_THEN_STORE) == 3
    store.update_and_freeze_offset(A1, 9)
    store.update_offset(A1, 20, increase_only=True)
    store.update_offset(OTHER, 1, increase_only=False)
    assert store.clone_offset_table("T") == {A0: 3, A1: 9}
    store.remove_offset(A1)
    store.update_offset(A1, 20, increase_only=True)
    assert store.clone_offset_table("T") == {A0: 3, A1: 20}


def test_persisted_offsets_are_seen_by_a_fresh_store(tmp_path: Path) -> None:
    table = ConsumerOffsetTable(tmp_path)
    first = RemoteBrokerOffsetStore("g", TableBackend(table, "broker-a"), retry=FAST)
    first.update_offset(A0, 42, increase_only=True)
    first.persist(A0)
    fresh = RemoteBrokerOffsetStore("g", TableBackend(table, "broker-a"), retry=FAST)
    assert fresh.read_offset(A1, ReadOffsetType.STORE) is NOT_FOUND
    assert fresh.read_offset(A0, ReadOffsetType.MEMORY_FIRST_THEN_STORE) == 42
    assert fresh.read_offset(A0, ReadOffsetType.MEMORY) == 42  # the answer went to memory
    assert table.offsets("g", "T") == {0: 42}
    # the wrong broker is a failure to read, not "not found"
    assert fresh.read_offset(B0, ReadOffsetType.STORE) is READ_FAILED


def test_persist_all_sends_one_call_per_broker_and_drops_revoked_queues(
    tmp_path: Path,
) -> None:
    backend = MultiBroker(tmp_path)
    store = RemoteBrokerOffsetStore("g", backend, retry=FAST)
    for queue, offset in ((A0, 1), (A1, 2), (B0, 3), (OTHER, 4)):
        store.update_offset(queue, offset, increase_only=True)
    store.persist_all([A0, A1, B0])
    assert sorted(backend.commit_calls) == [
        ("broker-a", {A0: 1, A1: 2}),
        ("broker-b", {B0: 3}),
    ]
    assert store.clone_offset_table("U") == {}  # not in the given queues: dropped
    assert backend.tables["broker-b"].offsets("g", "T") == {0: 3}


def test_transient_failures_are_retried_then_succeed(tmp_path: Path) -> None:
    backend = MultiBroker(tmp_path, failures=2)
    store = RemoteBrokerOffsetStore("g", backend, retry=FAST)
    store.update_offset(A0, 7, increase_only=True)
    store.persist_all([A0])
    assert len(backend.commit_calls) == 3
    assert store.pending() == {}
    assert backend.tables["broker-a"].offsets("g", "T") == {0: 7}
    backend.failures = 2
    assert store.read_offset(A1, ReadOffsetType.STORE) is NOT_FOUND  # retried, then answered
    assert backend.query_calls == 3


def test_a_commit_that_keeps_failing_is_kept_for_the_next_persist(tmp_path: Path) -> None:
    backend = MultiBroker(tmp_path, failures=-1)  # fails until told otherwise
    store = RemoteBrokerOffsetStore("g", backend, retry=FAST)
    store.update_offset(A0, 7, increase_only=True)
    store.persist(A0)
    assert len(backend.commit_calls) == 3  # bounded attempts
    assert store.pending() == {A0: 7}
    store.remove_offset(A0)  # revoked by a rebalance: the failed commit still is not lost
    backend.failures = 0
    store.persist_all([])
    assert store.pending() == {}
    assert backend.tables["broker-a"].offsets("g", "T") == {0: 7}


def test_a_newer_memory_offset_supersedes_a_pending_one(tmp_path: Path) -> None:
    backend = MultiBroker(tmp_path, failures=1, error=RefusedError("no"))
    store = RemoteBrokerOffsetStore("g", backend, retry=FAST)
    store.update_offset(A0, 7, increase_only=True)
    store.persist(A0)
    assert len(backend.commit_calls) == 1  # not retriable: no retry
    assert store.pending() == {A0: 7}
    store.update_offset(A0, 9, increase_only=True)
    store.close()
    assert backend.commit_calls[-1] == ("broker-a", {A0: 9})
    assert backend.tables["broker-a"].offsets("g", "T") == {0: 9}


def test_reading_from_the_broker_keeps_a_newer_pending_commit(tmp_path: Path) -> None:
    backend = MultiBroker(tmp_path)
    store = RemoteBrokerOffsetStore("g", backend, retry=FAST)
    store.update_offset(A0, 5, increase_only=True)
    store.persist(A0)  # the broker has 5
    store.update_offset(A0, 9, increase_only=True)
    backend.failures = 1
    backend.error = RefusedError("no")
    store.persist(A0)  # 9 waits for the next persist
    assert store.read_offset(A0, ReadOffsetType.STORE) == 9  # not the broker's older 5
    store.close()
    assert backend.tables["broker-a"].offsets("g", "T") == {0: 9}


def test_query_failure_is_read_failed_and_keeps_memory(tmp_path: Path) -> None:
    backend = MultiBroker(tmp_path, failures=-1, error=ConnectionResetError("reset"))
    store = RemoteBrokerOffsetStore("g", backend, retry=FAST)
    assert store.read_offset(A0, ReadOffsetType.STORE) is READ_FAILED
    assert backend.query_calls == 3
    store.update_offset(A0, 4, increase_only=True)
    assert store.read_offset(A0, ReadOffsetType.STORE) is READ_FAILED
    assert store.read_offset(A0, ReadOffsetType.MEMORY) == 4


def test_persisting_never_blocks_consumption(tmp_path: Path) -> None:
    backend = MultiBroker(tmp_path)
    backend.gate = threading.Event()  # the broker hangs
    store = RemoteBrokerOffsetStore("g", backend, retry=FAST)
    store.update_offset(A0, 1, increase_only=True)
    persisting = threading.Thread(target=store.persist_all, args=([A0],))
    persisting.start()
    while not persisting.is_alive():
        time.sleep(0.001)
    started = time.monotonic()
    for offset in range(2, 1000):
        store.update_offset(A0, offset, increase_only=True)
    assert store.read_offset(A0, ReadOffsetType.MEMORY) == 999
    assert time.monotonic() - started < 1
    backend.gate.set()
    persisting.join()


def test_periodic_persist_and_close(tmp_path: Path) -> None:
    backend = MultiBroker(tmp_path)
    store = RemoteBrokerOffsetStore("g", backend, retry=FAST)
    store.start_auto_persist(interval_s=0.01, queues=lambda: [A0])
    store.update_offset(A0, 5, increase_only=True)
    deadline = time.monotonic() + 5
    while backend.tables["broker-a"].offsets("g", "T") != {0: 5}:
        assert time.monotonic() < deadline
        time.sleep(0.01)
    store.update_offset(A0, 6, increase_only=True)
    store.close()
    assert backend.tables["broker-a"].offsets("g", "T") == {0: 6}


def test_is_retriable() -> None:
    assert is_retriable(UnavailableError()) and is_retriable(TimeoutError())
    assert is_retriable(ConnectionRefusedError())
    assert not is_retriable(RefusedError()) and not is_retriable(ValueError())


def test_the_offset_store_contract_with_rocketmqs_drop_rule(tmp_path: Path) -> None:
    from offsetstore.contract import check_offset_store

    table = ConsumerOffsetTable(tmp_path)
    check_offset_store(lambda: RemoteBrokerOffsetStore("g", TableBackend(table), retry=FAST))


def test_the_offset_store_contract(tmp_path: Path) -> None:
    from offsetstore.contract import check_offset_store

    table = ConsumerOffsetTable(tmp_path)
    check_offset_store(
        lambda: RemoteBrokerOffsetStore("g", TableBackend(table), retry=FAST, drop_unlisted=False)
    )


def test_the_contract_with_a_young_queue_rule_and_a_flaky_broker(tmp_path: Path) -> None:
    from offsetstore.contract import check_offset_store

    class Young:
        def min_offset(self, topic: str, queue_id: int) -> int:
            return 0

    table = ConsumerOffsetTable(tmp_path, min_offsets=Young())

    class Flaky(TableBackend):
        calls = 0

        def commit_offsets(
            self, broker_name: str, group: str, offsets: Mapping[MessageQueue, int]
        ) -> None:
            Flaky.calls += 1
            if Flaky.calls % 2:
                raise UnavailableError("every other call")
            super().commit_offsets(broker_name, group, offsets)

    check_offset_store(
        lambda: RemoteBrokerOffsetStore("g", Flaky(table), retry=FAST, drop_unlisted=False),
        zero_if_not_found=True,
    )


def test_discard_forgets_a_failed_commit_of_a_lost_queue(tmp_path: Path) -> None:
    backend = MultiBroker(tmp_path, failures=1, error=RefusedError("no"))
    store = RemoteBrokerOffsetStore("g", backend, retry=FAST)
    store.update_offset(A0, 7, increase_only=True)
    store.persist(A0)  # fails: 7 waits for the next persist
    assert store.pending() == {A0: 7}
    backend.tables["broker-a"].commit("g", "T", 0, 25)  # meanwhile the new owner committed 25
    store.discard(A0)  # we lost the queue
    store.close()
    assert backend.tables["broker-a"].offsets("g", "T") == {0: 25}
