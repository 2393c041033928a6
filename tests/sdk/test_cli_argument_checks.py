"""Bad arguments to ``quiver perf`` and ``quiver produce``: one line on stderr, exit status 2.

Each is refused before anything is measured, written or allocated: no traceback, no figures.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.sdk.test_cli import quiver

pytestmark = pytest.mark.integration

EXIT_USAGE = 2


def refused(done: subprocess.CompletedProcess[str], *words: str) -> str:
    """``done`` exited 2 with one line on stderr holding ``words``, and printed nothing."""
    error = done.stderr.strip()
    assert done.returncode == EXIT_USAGE, (done.returncode, done.stderr)
    assert "Traceback" not in done.stderr, done.stderr
    assert error and "\n" not in error, error
    assert error.startswith("quiver"), error
    assert "error:" in error, error
    for word in words:
        assert word in error, error
    assert done.stdout == "", done.stdout  # no figures, nothing produced
    return error


SMALL = "--commitlog-file-size 1048576"  # small stores, should a check be missing
SEG = "--commitlog-file-size 65536"


@pytest.mark.parametrize(
    ("args", "named"),
    [
        ("lookup --count 0 --lookups 5", "--count"),
        ("lookup --count 200 --lookups 0", "--lookups"),
        ("lookup --count 200 --lookups 5 --size -1", "--size"),
        ("lookup --count 200 --lookups 5 --size 5000000", "--size"),
        (f"recovery --bytes 100000 --record-size 10 {SEG}", "--record-size"),
        (f"recovery --bytes 10000000 --record-size 5000000 {SEG}", "--record-size"),
        (f"recovery --bytes 100000 --record-size 70000 {SEG}", "--record-size"),
        (f"recovery --bytes 100 {SEG}", "--bytes"),
        (f"recovery --bytes 0 {SEG}", "--bytes"),
        ("recovery --bytes 100000 --commitlog-file-size 0", "--commitlog-file-size"),
        ("store --count 200 --commitlog-file-size 0", "--commitlog-file-size"),
        ("store --count 200 --commitlog-file-size 100", "--commitlog-file-size"),
        (f"store --count 200 --sync-count -5 {SMALL}", "--sync-count"),
        ("store --count 0", "--count"),
        ("store --count 200 --batch 0", "--batch"),
        (f"store --count 200 --size 5000000 {SMALL}", "--size"),
        ("store --count 200 --size 5000 --commitlog-file-size 4096", "--size"),
        (f"e2e --count 200 --latency-samples 5 --consume-threads 0 {SMALL}", "--consume-threads"),
        ("e2e --count 0", "--count"),
        ("e2e --count 200 --pull-batch -1", "--pull-batch"),
        ("e2e --count 200 --commitlog-file-size 0", "--commitlog-file-size"),
        (f"e2e --count 200 --size 5000000 {SMALL}", "--size"),
        ("rebalance --sizes a,b", "--sizes"),
        ("rebalance --sizes 1,0,2", "--sizes"),
        ("rebalance --sizes 1,2 --queues 0", "--queues"),
        ("rebalance --sizes 1,2 --rate 0", "--rate"),
    ],
)
def test_perf_refuses_a_bad_number_before_it_writes_anything(tmp_path, args, named):
    data = tmp_path / "bench"
    refused(quiver("perf", *args.split(), "--data", data, "--quiet"), named)
    assert not data.exists()  # refused before the benchmark's store was made


def test_perf_refuses_a_data_directory_that_is_not_empty_or_not_a_directory(tmp_path):
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "mine").write_text("keep")
    refused(quiver("perf", "lookup", "--count", "200", "--data", tmp_path / "full"), "--data")
    assert (tmp_path / "full" / "mine").read_text() == "keep"
    (tmp_path / "file").write_text("keep")
    refused(quiver("perf", "store", "--count", "200", "--data", tmp_path / "file"), "--data")


def test_perf_refuses_a_cpu_that_does_not_exist(tmp_path):
    refused(
        quiver("perf", "store", "--count", "200", "--pin-cpu", "-1", "--data", tmp_path / "b"),
        "--pin-cpu -1",
    )
    assert not (tmp_path / "b").exists()


def test_perf_without_a_benchmark_names_the_argument_for_what_it_is():
    error = refused(quiver("perf"), "BENCHMARK")
    assert "perf_command" not in error
    assert "BENCHMARK" in quiver("perf", "--help").stdout


@pytest.fixture
def small_store(tmp_path: Path) -> Path:
    root = tmp_path / "data"
    made = quiver("store", "init", root, "--commitlog-file-size", "64K", "--max-message-size", "1K")
    assert made.returncode == 0, made.stderr
    return root


@pytest.fixture
def default_store(tmp_path: Path) -> Path:
    root = tmp_path / "default"
    assert quiver("store", "init", root, "--commitlog-file-size", "64K").returncode == 0
    return root


@pytest.mark.parametrize("size", ["1T", "1G"])
def test_produce_refuses_a_size_over_the_default_maximum_message_size(default_store, size):
    refused(quiver("produce", "--data", default_store, "--topic", "T", "--size", size), "--size")
    read = quiver("read", "--data", default_store, "--topic", "T")
    assert read.returncode != 0 or read.stdout.strip() == ""  # nothing was stored


def test_produce_reads_the_maximum_message_size_from_the_store(small_store):
    error = refused(
        quiver("produce", "--data", small_store, "--topic", "T", "--size", "2K", "--random"),
        "--size",
    )
    assert "1 KiB" in error  # the store's own limit, not the default 4 MiB
    refused(
        quiver("produce", "--data", small_store, "--topic", "T", "--body", "x" * 1025), "--body"
    )
    stored = quiver("produce", "--data", small_store, "--topic", "T", "--size", "1K")
    assert stored.returncode == 0, stored.stderr  # the limit itself is allowed
