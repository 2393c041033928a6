"""examples/pull_consumer.py, run as a real subprocess on a fresh data directory."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "examples" / "pull_consumer.py"

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


def test_pull_consumer_example_polls_commits_and_seeks_by_time(tmp_path: Path):
    data = tmp_path / "data"
    done = run_example(data, cwd=tmp_path)
    assert done.returncode == 0, f"stdout:\n{done.stdout}\nstderr:\n{done.stderr}"
    lines = done.stdout.splitlines()
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

    again = run_example(data, cwd=tmp_path)  # a store from an earlier run is replaced
    assert again.returncode == 0, again.stderr
    assert again.stdout.splitlines()[-1] == "pull consumer: OK"


def test_pull_consumer_example_defaults_to_a_temporary_directory(tmp_path: Path):
    done = run_example(cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[-1] == "pull consumer: OK"
    assert list(tmp_path.iterdir()) == []  # nothing left behind in the working directory


def test_pull_consumer_example_leaves_a_foreign_directory_alone(tmp_path: Path):
    (tmp_path / "keep.txt").write_text("mine")
    done = run_example(tmp_path, cwd=tmp_path)
    assert done.returncode == 2
    assert "not deleting it" in done.stdout
    assert (tmp_path / "keep.txt").read_text() == "mine"
