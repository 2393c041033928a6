"""The SDK's example scripts, each run as a real subprocess on a fresh data directory.

Each test asserts on what the script printed about real behaviour: how many messages were
consumed, that the poison message reached the DLQ, that no delayed message arrived early, that
every broadcasting consumer saw every message, that each deposit was credited once.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples"
SCRIPTS = [
    "quickstart", "retry_and_dlq", "delayed", "broadcast", "idempotent_consumer", "ordered",
    "pull_consumer", "transactions", "remote",
]  # fmt: skip

pytestmark = pytest.mark.integration


def run_example(name: str, *args: str | Path, cwd: Path = REPO) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run(
        [sys.executable, str(EXAMPLES / f"{name}.py"), *map(str, args)],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=90,
        check=False,
    )


def succeeded(name: str, data: Path, cwd: Path = REPO) -> list[str]:
    """Run an example that must succeed; its output lines."""
    done = run_example(name, data, cwd=cwd)
    assert done.returncode == 0, f"stdout:\n{done.stdout}\nstderr:\n{done.stderr}"
    return done.stdout.splitlines()


def test_quickstart_consumes_the_paid_and_refunded_orders(tmp_path: Path):
    lines = succeeded("quickstart", tmp_path / "data")
    receipts = [line for line in lines if re.search(r"msg_id \w{32} -> orders/\d offset \d", line)]
    assert len(receipts) == 6  # one message, then a batch of five
    assert lines.index("5. consumed 4 of 4 expected (paid || refunded):")
    consumed = [line for line in lines if line.startswith("     orders/") and "body=" in line]
    assert len(consumed) == 4
    assert sorted(re.search(r"tags=(\w+)", line)[1] for line in consumed) == [  # type: ignore[index]
        "paid",
        "paid",
        "paid",
        "refunded",
    ]
    assert lines[-2].startswith("6. closed the consumer (offsets committed)")


def test_quickstart_without_an_argument_uses_quickstart_data(tmp_path: Path):
    done = run_example("quickstart", cwd=tmp_path)  # what `make demo` runs
    assert done.returncode == 0, done.stderr
    assert "5. consumed 4 of 4 expected" in done.stdout
    assert (tmp_path / "quickstart-data" / "config" / "store.json").exists()


def test_retry_then_dead_letter(tmp_path: Path):
    lines = succeeded("retry_and_dlq", tmp_path / "data")
    text = "\n".join(lines)
    assert "got order-2 (orders, reconsume_times=0): fails" in text
    assert "got order-2 (orders, reconsume_times=1): SUCCESS" in text
    for times in range(3):
        assert f"got order-3 (orders, reconsume_times={times}): fails" in text
    assert "reconsume_times=3)" not in text  # no fourth delivery to the failing listener
    assert (
        "3. order-3 was delivered 3 times (reconsume_times [0, 1, 2]), then dead-lettered" in text
    )
    dlq = next(line for line in lines if line.startswith("4. "))
    assert "read 1 message(s) from %DLQ%billing: keys=('order-3',)" in dlq
    assert "original topic orders" in dlq and "(the one sent)" in dlq
    assert lines[-1] == "retry and DLQ: OK"


def test_delayed_messages_are_never_early(tmp_path: Path):
    lines = succeeded("delayed", tmp_path / "data")
    timed = [re.match(r"\s+(.+?)\s+after\s+(\d+) ms, asked\s+(\d+) ms", line) for line in lines]
    found = {m[1]: (int(m[2]), int(m[3])) for m in timed if m is not None}
    assert set(found) == {"no delay", "delay_level=1", "delay_level=3", "deliver_at_ms=now+1500"}
    assert found["delay_level=1"][1] == 250 and found["delay_level=3"][1] == 1000
    for label, (waited, asked) in found.items():
        assert waited >= asked, f"{label} arrived after {waited} ms, asked {asked} ms"
    assert sum(" queue offset -1 " in line for line in lines) == 3  # held for later
    assert lines[-1] == "delays: OK (4 of 4 on time)"


def test_ordered_events_arrive_in_order_across_two_members(tmp_path: Path):
    lines = succeeded("ordered", tmp_path / "data")
    owned = [line for line in lines if "owns queues" in line]
    assert len(owned) == 2 and all("owns queues []" not in line for line in owned)
    journeys = [line for line in lines if line.strip().startswith("order-") and "->" in line]
    assert len(journeys) == 6
    assert all(line.endswith("created -> paid -> shipped -> delivered") for line in journeys)
    assert any("failed once; retried in place" in line for line in lines)
    assert lines[-1] == "order: OK (0 event(s) out of order)"


def test_broadcast_delivers_everything_to_every_consumer(tmp_path: Path):
    data = tmp_path / "data"
    lines = succeeded("broadcast", data)
    for node in ("node-a", "node-b"):
        assert any(line.startswith(f"     {node}: 6 of 6: ") for line in lines), node
        files = list((data / "offsets").glob(f"*@{node}/cache-invalidator/offsets.json"))
        assert len(files) == 1
        assert any(f"{files[0].relative_to(data / 'offsets')} (queue->offset:" in x for x in lines)
    assert lines[-1] == "broadcasting: OK (every consumer got every message once)"


def test_idempotent_consumer_credits_each_deposit_once(tmp_path: Path):
    lines = succeeded("idempotent_consumer", tmp_path / "data")
    assert lines[0] == "1. produced 6 messages: 4 deposits, 2 re-sent (same UNIQ_KEY)"
    assert any("failed (simulated crash" in line and "rolled back" in line for line in lines)
    assert any(line.startswith("2. first pass:") and ", 4 credited, " in line for line in lines)
    assert any("6 deliveries, 4 notifications, 2 skipped" in line for line in lines)
    assert "3. restart from offset 0: 6 deliveries, 0 credited, 6 skipped as duplicates" in lines
    assert "4. balances: alice=125, bob=50, carol=10" in lines
    assert lines[-1] == "exactly-once: OK (4 deposits credited once each)"


def test_remote_clients_consume_through_a_broker_process(tmp_path: Path):
    lines = succeeded("remote", tmp_path / "data")
    assert sum(line.startswith("   billing got order-") for line in lines) >= 5
    assert "3. the group billing has consumed everything: lag 0" in lines
    assert lines[-1] == "4. the broker stopped cleanly (exit status 0)"
    assert not (tmp_path / "data" / "store" / "abort").exists()


@pytest.mark.parametrize("name", SCRIPTS)
def test_a_foreign_directory_is_not_deleted(tmp_path: Path, name: str):
    data = tmp_path / "precious"
    data.mkdir()
    (data / "notes.txt").write_text("keep me")
    done = run_example(name, data)
    assert done.returncode == 2, done.stdout + done.stderr
    assert "not deleting it" in done.stdout
    assert (data / "notes.txt").read_text() == "keep me"


@pytest.mark.parametrize("name", ["quickstart", "broadcast"])  # a store in DIR, in DIR/store
def test_a_second_run_replaces_the_first(tmp_path: Path, name: str):
    data = tmp_path / "data"
    first = succeeded(name, data)
    assert succeeded(name, data)[-1] == first[-1]


@pytest.mark.parametrize("name", [s for s in SCRIPTS if s != "quickstart"])
def test_the_default_directory_is_temporary(tmp_path: Path, name: str):
    done = run_example(name, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert list(tmp_path.iterdir()) == []  # nothing left behind


def test_pull_consumer_example_polls_commits_and_seeks_by_time(tmp_path: Path):
    data = tmp_path / "data"
    lines = succeeded("pull_consumer", data, cwd=tmp_path)
    assert lines[-1] == "pull consumer: OK"
    assert "4. polled 6 messages:" in lines
    polled = [line for line in lines if re.fullmatch(r" +readings/\d offset \d+ +body=.*", line)]
    assert len(polled) == 6 + 3  # the first round, then the three found by time
    assert "5. committed (queue -> next offset): {0: 2, 1: 2, 2: 1, 3: 1}" in lines
    assert any(line.startswith("7. polled 3 more (not committed)") for line in lines)
    assert any(
        re.fullmatch(r"8\. seek by time to \d+: offsets \{0: 2, 1: 2, 2: 1, 3: 1\}; .*", line)
        for line in lines
    )
    resumed = lines[lines.index(next(line for line in lines if line.startswith("9. "))) + 1]
    assert resumed.strip() == "['reading 7: 20.7 C', 'reading 8: 20.8 C', 'reading 9: 20.9 C']"
    assert (data / "store" / "config" / "store.json").exists()

    again = succeeded("pull_consumer", data, cwd=tmp_path)  # an earlier run's store is replaced
    assert again[-1] == "pull consumer: OK"


def test_transactions_example_commits_rolls_back_and_resolves_by_check(tmp_path: Path):
    data = tmp_path / "data"
    lines = succeeded("transactions", data, cwd=tmp_path)
    assert lines[-1] == "transactions: OK (order-2 rolled back, never delivered)"
    text = "\n".join(lines)
    assert "order-1: local transaction succeeds -> COMMIT   broker: COMMITTED" in text
    assert "order-2: local transaction fails    -> ROLLBACK broker: ROLLED_BACK" in text
    assert "order-3: local transaction in doubt -> UNKNOWN  broker: UNKNOWN" in text
    checks = [line for line in lines if line.startswith("3. checker asked about")]
    assert checks and re.fullmatch(
        r"3\. checker asked about order-3 \(transaction \w{32}\): COMMIT", checks[-1]
    )
    received = [line.strip() for line in lines if line.startswith("     ledger received")]
    assert received == [
        "ledger received order-1: order-1 paid",
        "ledger received order-3: order-3 paid",
    ]
    assert "4. the ledger received order-1, order-3" in lines
    assert (data / "config" / "store.json").exists()
