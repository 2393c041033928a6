"""``examples/spark_pipeline.py`` run as a real subprocess: it starts a broker, sends orders,
and its Spark job (``local[*]``) reads them over HTTP, writes per-customer-minute totals to a
topic and to Parquet, and finds both equal to the totals it computed without Spark."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

pytestmark = [
    pytest.mark.spark,
    pytest.mark.xdist_group("spark"),  # one Spark at a time under --dist loadgroup
]


def test_the_pipeline_writes_totals_that_match(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, str(REPO / "examples" / "spark_pipeline.py"), str(tmp_path / "data")],
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO), "PYSPARK_PYTHON": sys.executable},
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, f"stdout:\n{done.stdout}\nstderr:\n{done.stderr[-4000:]}"
    lines = done.stdout.splitlines()
    assert "2. Spark read 600 orders from the broker and made 350 totals" in lines
    assert any("holds 350 totals, the Parquet files 350; they match" in line for line in lines)
    assert (tmp_path / "data" / "totals.parquet").is_dir()
