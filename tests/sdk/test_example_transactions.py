"""examples/transactions.py, run as a real subprocess on a fresh data directory."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "examples" / "transactions.py"

pytestmark = pytest.mark.integration


def run_example(*args: str | Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run(
        [sys.executable, str(SCRIPT), *map(str, args)],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=90,
        check=False,
    )


def test_transactions_example_commits_rolls_back_and_resolves_by_check(tmp_path: Path):
    data = tmp_path / "data"
    done = run_example(data, cwd=tmp_path)
    assert done.returncode == 0, f"stdout:\n{done.stdout}\nstderr:\n{done.stderr}"
    lines = done.stdout.splitlines()
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


def test_transactions_example_leaves_a_foreign_directory_alone(tmp_path: Path):
    foreign = tmp_path / "mine"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("keep me")
    done = run_example(foreign, cwd=tmp_path)
    assert done.returncode == 2
    assert (foreign / "notes.txt").read_text() == "keep me"
