"""``quiver perf spark`` runs end to end on a small store and prints its figures as JSON lines
(small counts: the shape, not the speed)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

pytestmark = [
    pytest.mark.spark,
    pytest.mark.integration,
    pytest.mark.xdist_group("spark"),  # one Spark session at a time under --dist loadgroup
]


def test_perf_spark_prints_every_figure_and_cleans_up(tmp_path: Path):
    data = tmp_path / "bench"
    done = subprocess.run(
        [sys.executable, "-m", "sdk.cli.main", "perf", "spark", "--data", str(data),
         "--count", "2000", "--write", "--json", "--quiet"],
        cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)}, capture_output=True, text=True,
        timeout=600, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr, done.stderr
    lines = [json.loads(line) for line in done.stdout.splitlines()]
    got = {line["figure"]: line["value"] for line in lines}
    assert set(got) == {
        "spark_quiver_p1_rows_per_s", "spark_quiver_p2_rows_per_s",
        "spark_quiver_p4_rows_per_s", "spark_parquet_rows_per_s", "spark_json_rows_per_s",
        "spark_quiver_vs_parquet", "spark_quiver_vs_json", "spark_quiver_p2_vs_p1",
        "spark_write_rows_per_s",
    }  # fmt: skip
    assert all(isinstance(value, float | int) and value > 0 for value in got.values())
    assert all(line["count"] == 2000 and line["size"] == 100 for line in lines)
    assert list(data.iterdir()) == []  # it removes what it wrote
