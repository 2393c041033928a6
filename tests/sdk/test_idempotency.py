"""sdk.idempotency: dedup records, both backends (one behaviour suite), the listener wrappers,
a cross-process race on SQLite, and examples/idempotent_consumer.py run as a subprocess."""

from __future__ import annotations

import collections
import os
import sqlite3
import subprocess
import sys
import textwrap
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pytest

import sdk.idempotency as idem
from localstore import MessageStore, NewMessage, StoredMessage
from sdk.idempotency import (
    ClaimStatus,
    ConsumeResult,
    DedupState,
    DedupStore,
    MemoryDedupStore,
    SqliteDedupStore,
    first_key,
    idempotent,
    idempotent_in_transaction,
    property_key,
)

REPO = Path(__file__).resolve().parents[2]
LEASE_S = 30.0
TTL_S = 600.0


class FakeClock:
    """A clock in milliseconds that only moves when told to."""

    def __init__(self) -> None:
        self.now_ms = 1_700_000_000_000

    def __call__(self) -> int:
        return self.now_ms

    def advance(self, seconds: float) -> None:
        self.now_ms += int(seconds * 1000)


@dataclass
class Msg:
    """A minimal received message."""

    msg_id: str | None
    keys: list[str] = field(default_factory=list)
    topic: str = "orders"
    properties: dict[str, str] = field(default_factory=dict)


class Recorder:
    """A listener that records every batch and answers a scripted result."""

    def __init__(self, result: ConsumeResult = ConsumeResult.SUCCESS) -> None:
        self.batches: list[list[str | None]] = []
        self.result = result
        self.error: BaseException | None = None

    def __call__(self, messages: Sequence[Msg]) -> ConsumeResult:
        self.batches.append([m.msg_id for m in messages])
        if self.error is not None:
            raise self.error
        return self.result


StoreFactory = Callable[..., DedupStore]


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture(params=["memory", "sqlite"])
def make_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[StoreFactory]:
    opened: list[DedupStore] = []

    def make(**kwargs: object) -> DedupStore:
        store: DedupStore
        if request.param == "memory":
            store = MemoryDedupStore(**kwargs)  # type: ignore[arg-type]
        else:
            store = SqliteDedupStore(tmp_path / "dedup.db", **kwargs)  # type: ignore[arg-type]
        opened.append(store)
        return store

    yield make
    for store in opened:
        store.close()


@pytest.fixture
def store(make_store: StoreFactory, clock: FakeClock) -> DedupStore:
    return make_store(clock=clock)


# --- records: states and transitions ---------------------------------------------------------


def test_claim_consume_and_expiry_transitions(store: DedupStore, clock: FakeClock):
    assert store.get("k") is None
    assert store.claim(["k"], owner="a", lease_s=LEASE_S) == {"k": ClaimStatus.CLAIMED}
    record = store.get("k")
    assert record is not None
    assert (record.state, record.owner) == (DedupState.CONSUMING, "a")
    assert record.expires_at_ms == clock.now_ms + 30_000

    assert store.claim(["k"], owner="b", lease_s=LEASE_S) == {"k": ClaimStatus.IN_PROGRESS}
    clock.advance(LEASE_S)  # the lease ends at expires_at_ms exactly
    assert store.claim(["k"], owner="b", lease_s=LEASE_S) == {"k": ClaimStatus.TAKEN_OVER}
    assert store.get("k").owner == "b"  # type: ignore[union-attr]

    store.mark_consumed(["k"], ttl_s=TTL_S)
    record = store.get("k")
    assert record is not None
    assert (record.state, record.expires_at_ms) == (DedupState.CONSUMED, clock.now_ms + 600_000)
    assert store.claim(["k"], owner="c", lease_s=LEASE_S) == {"k": ClaimStatus.DUPLICATE}

    clock.advance(TTL_S - 0.001)
    assert store.claim(["k"], owner="c", lease_s=LEASE_S) == {"k": ClaimStatus.DUPLICATE}
    clock.advance(0.001)
    assert store.claim(["k"], owner="c", lease_s=LEASE_S) == {"k": ClaimStatus.CLAIMED}


def test_claim_answers_each_key(store: DedupStore):
    store.claim(["a"], owner="x", lease_s=LEASE_S)
    store.mark_consumed(["b"], ttl_s=TTL_S)
    outcome = store.claim(["a", "b", "c"], owner="y", lease_s=LEASE_S)
    assert outcome == {
        "a": ClaimStatus.IN_PROGRESS,
        "b": ClaimStatus.DUPLICATE,
        "c": ClaimStatus.CLAIMED,
    }


def test_release_deletes_only_the_owners_consuming_records(store: DedupStore, clock: FakeClock):
    store.claim(["a", "b"], owner="x", lease_s=LEASE_S)
    store.release(["a"], owner="someone-else")
    assert store.get("a") is not None
    store.release(["a"], owner="x")
    assert store.get("a") is None

    clock.advance(LEASE_S)
    store.claim(["b"], owner="y", lease_s=LEASE_S)  # taken over from x
    store.release(["b"], owner="x")  # the late original owner cannot delete y's claim
    assert store.get("b").owner == "y"  # type: ignore[union-attr]

    store.mark_consumed(["c"], ttl_s=TTL_S)
    store.release(["c"], owner="")
    assert store.get("c").state is DedupState.CONSUMED  # type: ignore[union-attr]


def test_purge_expired_deletes_only_expired_records(store: DedupStore, clock: FakeClock):
    store.mark_consumed(["old1", "old2"], ttl_s=10)
    store.claim(["stale-lease"], owner="x", lease_s=5)
    store.mark_consumed(["fresh"], ttl_s=100)
    clock.advance(20)
    assert store.purge_expired() == 3
    assert [store.get(k) is None for k in ("old1", "old2", "stale-lease", "fresh")] == [
        True,
        True,
        True,
        False,
    ]
    assert store.purge_expired() == 0


def test_claim_purges_expired_records_periodically(make_store: StoreFactory, clock: FakeClock):
    store = make_store(clock=clock, purge_interval_s=60)
    store.mark_consumed(["old"], ttl_s=1)
    clock.advance(30)
    store.claim(["x"], owner="o", lease_s=LEASE_S)
    assert store.get("old") is not None  # expired, but not purged before the interval
    clock.advance(31)
    store.claim(["y"], owner="o", lease_s=LEASE_S)
    assert store.get("old") is None


def test_concurrent_claims_from_threads_own_each_key_once(make_store: StoreFactory):
    store = make_store()
    keys = [f"k{i}" for i in range(200)]
    owned: list[str] = []
    lock = threading.Lock()
    start = threading.Barrier(4)

    def worker(owner: str) -> None:
        start.wait()
        for i in range(0, len(keys), 2):
            outcome = store.claim(keys[i : i + 2], owner=owner, lease_s=LEASE_S)
            with lock:
                owned.extend(k for k, s in outcome.items() if s.owned)

    threads = [threading.Thread(target=worker, args=(f"t{n}",)) for n in range(4)]
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # the threads' claims interleave, not one GIL slice each
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    finally:
        sys.setswitchinterval(interval)
    assert sorted(owned) == sorted(keys)


# --- the idempotent wrapper --------------------------------------------------------------------


def test_duplicates_are_skipped(store: DedupStore):
    listener = Recorder()
    skipped: list[tuple[str | None, ClaimStatus]] = []
    handle = idempotent(
        listener, store, ttl_s=TTL_S, on_skip=lambda m, s: skipped.append((m.msg_id, s))
    )
    assert handle([Msg("a"), Msg("b"), Msg("a")]) is ConsumeResult.SUCCESS
    assert handle([Msg("a"), Msg("b"), Msg("c")]) is ConsumeResult.SUCCESS
    assert handle([Msg("c")]) is ConsumeResult.SUCCESS  # all duplicates: listener not called
    assert listener.batches == [["a", "b"], ["c"]]
    assert skipped == [
        ("a", ClaimStatus.DUPLICATE),
        ("a", ClaimStatus.DUPLICATE),
        ("b", ClaimStatus.DUPLICATE),
        ("c", ClaimStatus.DUPLICATE),
    ]
    assert {store.get(k).state for k in "abc"} == {DedupState.CONSUMED}  # type: ignore[union-attr]


def test_exception_releases_claims_and_propagates(store: DedupStore):
    listener = Recorder()
    listener.error = ValueError("boom")
    handle = idempotent(listener, store)
    with pytest.raises(ValueError, match="boom"):
        handle([Msg("a"), Msg("b")])
    assert store.get("a") is None and store.get("b") is None
    listener.error = None
    assert handle([Msg("a"), Msg("b")]) is ConsumeResult.SUCCESS
    assert listener.batches == [["a", "b"], ["a", "b"]]


def test_reconsume_later_releases_claims_and_propagates(store: DedupStore):
    listener = Recorder(ConsumeResult.RECONSUME_LATER)
    handle = idempotent(listener, store)
    assert handle([Msg("a")]) is ConsumeResult.RECONSUME_LATER
    assert store.get("a") is None
    listener.result = ConsumeResult.SUCCESS
    assert handle([Msg("a")]) is ConsumeResult.SUCCESS
    assert handle([Msg("a")]) is ConsumeResult.SUCCESS
    assert listener.batches == [["a"], ["a"]]


def test_in_progress_message_is_filtered_and_batch_reconsumed_later(
    store: DedupStore, clock: FakeClock
):
    store.claim(["a"], owner="another-consumer", lease_s=LEASE_S)
    listener = Recorder()
    skipped: list[ClaimStatus] = []
    handle = idempotent(listener, store, lease_s=LEASE_S, on_skip=lambda m, s: skipped.append(s))
    assert handle([Msg("a"), Msg("b")]) is ConsumeResult.RECONSUME_LATER
    assert listener.batches == [["b"]]
    assert skipped == [ClaimStatus.IN_PROGRESS]
    assert store.get("b").state is DedupState.CONSUMED  # type: ignore[union-attr]
    assert store.get("a").owner == "another-consumer"  # type: ignore[union-attr]

    # Only in-progress messages: the listener is not called, the batch comes back later.
    assert handle([Msg("a")]) is ConsumeResult.RECONSUME_LATER
    assert listener.batches == [["b"]]

    # The other consumer crashed: once its lease is over the retry takes "a" over.
    clock.advance(LEASE_S)
    assert handle([Msg("a"), Msg("b")]) is ConsumeResult.SUCCESS
    assert listener.batches == [["b"], ["a"]]
    assert store.get("a").state is DedupState.CONSUMED  # type: ignore[union-attr]


def test_crashed_consumer_lease_expiry_takes_over(store: DedupStore, clock: FakeClock):
    crashed = Recorder()
    crashed.error = KeyboardInterrupt()  # not an Exception: still releases
    with pytest.raises(KeyboardInterrupt):
        idempotent(crashed, store)([Msg("a")])
    assert store.get("a") is None
    # A consumer that dies without running its finally blocks leaves the claim behind:
    store.claim(["a"], owner="killed", lease_s=LEASE_S)
    listener = Recorder()
    handle = idempotent(listener, store)
    clock.advance(LEASE_S - 1)
    assert handle([Msg("a")]) is ConsumeResult.RECONSUME_LATER
    clock.advance(1)
    assert handle([Msg("a")]) is ConsumeResult.SUCCESS
    assert listener.batches == [["a"]]


def test_ttl_expiry_makes_a_redelivery_new(store: DedupStore, clock: FakeClock):
    listener = Recorder()
    handle = idempotent(listener, store, ttl_s=60)
    handle([Msg("a")])
    clock.advance(59)
    handle([Msg("a")])
    clock.advance(1)
    handle([Msg("a")])
    assert listener.batches == [["a"], ["a"]]


def test_business_keys_instead_of_uniq_key(store: DedupStore):
    by_keys = Recorder()
    handle = idempotent(by_keys, store, key=first_key)
    # Two sends of the same order with different producer ids: one effect.
    handle([Msg("u1", keys=["order-1", "user-7"]), Msg("u2", keys=["order-1"])])
    handle([Msg("u3", keys=["order-2"])])
    assert by_keys.batches == [["u1"], ["u3"]]
    assert store.get("order-1") is not None and store.get("u1") is None

    by_property = Recorder()
    handle = idempotent(by_property, store, key=property_key("paymentId"), namespace="pay:")
    handle([Msg("u4", properties={"paymentId": "p1"}), Msg("u5", properties={"paymentId": "p1"})])
    assert by_property.batches == [["u4"]]
    assert store.get("pay:p1") is not None


def test_messages_without_a_key_are_processed_every_time(store: DedupStore):
    listener = Recorder()
    handle = idempotent(listener, store)
    handle([Msg(None), Msg("a")])
    handle([Msg(None), Msg("a")])
    assert listener.batches == [[None, "a"], [None]]


def test_namespaces_keep_groups_apart(store: DedupStore):
    first, second = Recorder(), Recorder()
    idempotent(first, store, namespace="group-1:")([Msg("a")])
    idempotent(second, store, namespace="group-2:")([Msg("a")])
    assert first.batches == second.batches == [["a"]]


def test_real_stored_messages_from_localstore(store: DedupStore, tmp_path: Path):
    with MessageStore(tmp_path / "mq", commitlog_file_size=1 << 16, cq_entries_per_file=50) as mq:
        for n, uniq in enumerate(["U1", "U2", "U1", "U3", "U2"]):
            props = {"UNIQ_KEY": uniq, "KEYS": f"order-{n}"}
            assert mq.put(NewMessage("orders", f"m{n}".encode(), properties=props)).ok
        got = mq.get_messages("orders", 0, 0, max_count=32).messages
    assert len(got) == 5
    bodies: list[bytes] = []

    def listener(messages: list[StoredMessage]) -> ConsumeResult:
        bodies.extend(m.body for m in messages)
        return ConsumeResult.SUCCESS

    handle = idempotent(listener, store)
    assert handle(got[:2]) is ConsumeResult.SUCCESS
    assert handle(got[2:]) is ConsumeResult.SUCCESS
    assert bodies == [b"m0", b"m1", b"m3"]


def test_public_api_is_complete():
    modules = {"annotations", "listener", "memory", "records", "sqlite"}
    public = {n for n in vars(idem) if not n.startswith("_")} - modules
    assert sorted(idem.__all__) == sorted(public)
    assert len(set(idem.__all__)) == len(idem.__all__)


# --- SQLite specifics: transactions ------------------------------------------------------------


@pytest.fixture
def sqlite_store(tmp_path: Path, clock: FakeClock) -> Iterator[SqliteDedupStore]:
    with SqliteDedupStore(tmp_path / "bank.db", clock=clock) as store:
        with store.transaction() as conn:
            conn.execute("CREATE TABLE credits (msg TEXT)")
        yield store


def credits(store: SqliteDedupStore) -> list[str]:
    with store.transaction() as conn:
        return [str(r[0]) for r in conn.execute("SELECT msg FROM credits ORDER BY rowid")]


def crediting(result: ConsumeResult = ConsumeResult.SUCCESS, fail: bool = False):
    def listener(messages: list[Msg], conn: sqlite3.Connection) -> ConsumeResult:
        conn.executemany("INSERT INTO credits VALUES (?)", [(m.msg_id,) for m in messages])
        if fail:
            raise RuntimeError("after the write")
        return result

    return listener


def test_sqlite_is_in_wal_mode(sqlite_store: SqliteDedupStore):
    conn = sqlite3.connect(sqlite_store.path)
    try:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    finally:
        conn.close()


def test_sqlite_rejects_a_table_name_that_is_not_an_identifier(tmp_path: Path):
    with pytest.raises(ValueError, match="identifier"):
        SqliteDedupStore(tmp_path / "x.db", table="x; DROP TABLE y")


def test_transaction_commits_business_write_with_dedup_record(sqlite_store: SqliteDedupStore):
    handle = idempotent_in_transaction(crediting(), sqlite_store)
    assert handle([Msg("a"), Msg("b"), Msg("a")]) is ConsumeResult.SUCCESS
    assert handle([Msg("b"), Msg("c")]) is ConsumeResult.SUCCESS
    assert credits(sqlite_store) == ["a", "b", "c"]
    assert sqlite_store.get("c").state is DedupState.CONSUMED  # type: ignore[union-attr]


def test_transaction_rolls_back_on_exception_and_reconsume_later(sqlite_store: SqliteDedupStore):
    with pytest.raises(RuntimeError):
        idempotent_in_transaction(crediting(fail=True), sqlite_store)([Msg("a")])
    later = idempotent_in_transaction(crediting(ConsumeResult.RECONSUME_LATER), sqlite_store)
    assert later([Msg("a")]) is ConsumeResult.RECONSUME_LATER
    assert credits(sqlite_store) == []
    assert sqlite_store.get("a") is None
    assert idempotent_in_transaction(crediting(), sqlite_store)([Msg("a")]) is ConsumeResult.SUCCESS
    assert credits(sqlite_store) == ["a"]


def test_transaction_skips_a_key_committed_by_the_consumer_that_took_over(
    tmp_path: Path, clock: FakeClock
):
    """Consumer 1's lease expires mid-processing; consumer 2 takes over and commits first;
    consumer 1's transaction finds the CONSUMED record and writes nothing."""
    path = tmp_path / "bank.db"
    with SqliteDedupStore(path, clock=clock) as other, SqliteDedupStore(path, clock=clock) as mine:
        with mine.transaction() as conn:
            conn.execute("CREATE TABLE credits (msg TEXT)")

        skipped: list[ClaimStatus] = []
        original_claim = mine.claim

        def claim_then_lose(keys: Sequence[str], *, owner: str, lease_s: float):
            outcome = original_claim(keys, owner=owner, lease_s=lease_s)
            clock.advance(lease_s)
            idempotent_in_transaction(crediting(), other)([Msg("a")])  # takes over, commits
            return outcome

        mine.claim = claim_then_lose  # type: ignore[method-assign]
        handle = idempotent_in_transaction(
            crediting(), mine, on_skip=lambda m, s: skipped.append(s)
        )
        assert handle([Msg("a")]) is ConsumeResult.SUCCESS
        assert credits(mine) == ["a"]
        assert skipped == [ClaimStatus.DUPLICATE]


# --- across processes --------------------------------------------------------------------------

RACER = textwrap.dedent(
    """
    import random, sys, time
    from pathlib import Path
    from dataclasses import dataclass, field
    from sdk.idempotency import ConsumeResult, SqliteDedupStore, idempotent

    @dataclass
    class Msg:
        msg_id: str
        keys: list = field(default_factory=list)
        topic: str = "t"
        properties: dict = field(default_factory=dict)

    path, barrier, name = sys.argv[1], Path(sys.argv[2]), sys.argv[3]
    store = SqliteDedupStore(path)
    done = []

    def listener(batch):
        time.sleep(0.002)  # some work, so the racers overlap
        done.extend(m.msg_id for m in batch)
        return ConsumeResult.SUCCESS

    handle = idempotent(listener, store, lease_s=60)
    messages = [Msg(f"k{i:03d}") for i in range(500)]
    random.Random(name).shuffle(messages)  # each racer its own order: collisions anywhere
    (barrier / name).touch()
    while len(list(barrier.iterdir())) < 2:
        time.sleep(0.001)
    for i in range(0, len(messages), 5):
        while handle(messages[i : i + 5]) is not ConsumeResult.SUCCESS:
            time.sleep(0.001)
    store.close()
    print("\\n".join(done))
    """
)


@pytest.mark.integration
def test_two_processes_racing_process_every_key_exactly_once(tmp_path: Path):
    path = tmp_path / "race.db"
    SqliteDedupStore(path).close()  # create the table before the race
    barrier = tmp_path / "barrier"
    barrier.mkdir()
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    racers = [
        subprocess.Popen(
            [sys.executable, "-c", RACER, str(path), str(barrier), f"racer-{n}"],
            cwd=REPO,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for n in range(2)
    ]
    outputs = [racer.communicate(timeout=120) for racer in racers]
    for racer, (_, err) in zip(racers, outputs, strict=True):
        assert racer.returncode == 0, err
    processed = collections.Counter(k for out, _ in outputs for k in out.split())
    assert all(out.split() for out, _ in outputs), "one racer processed nothing: no race"
    assert set(processed) == {f"k{i:03d}" for i in range(500)}
    assert [k for k, n in processed.items() if n != 1] == []
    with SqliteDedupStore(path) as store:
        assert all(store.get(f"k{i:03d}").state is DedupState.CONSUMED for i in range(500))  # type: ignore[union-attr]


@pytest.mark.integration
def test_example_script_runs(tmp_path: Path):
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run(
        [sys.executable, "examples/idempotent_consumer.py", str(tmp_path / "demo")],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == "1. produced 6 messages: 4 deposits, 2 re-sent (same UNIQ_KEY)"
    assert any("failed (simulated crash" in line and "rolled back" in line for line in lines)
    assert "3. restart from offset 0: 6 deliveries, 0 credited, 6 skipped as duplicates" in lines
    assert "4. balances: alice=125, bob=50, carol=10" in lines
    assert lines[-1] == "exactly-once: OK (4 deposits credited once each)"
