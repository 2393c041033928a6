"""``quiver perf`` prints the figures peers.py reads (small counts: shape, not speed)."""

from __future__ import annotations

import json
import os
import sys

import pytest

from tests.sdk.test_cli import quiver

pytestmark = pytest.mark.integration


def figures(*args: str) -> dict[str, float]:
    done = quiver("perf", *args, "--json", "--quiet")
    assert done.returncode == 0, done.stderr
    lines = [json.loads(line) for line in done.stdout.splitlines()]
    assert all(isinstance(line["value"], int | float) for line in lines)
    return {line["figure"]: line["value"] for line in lines}


def test_perf_store_figures(tmp_path):
    data = tmp_path / "bench"
    got = figures("store", "--data", data, "--count", "3000", "--sync-count", "320",
                  "--commitlog-file-size", "4194304")  # fmt: skip
    assert {
        "batch_append_records_per_s", "batch_append_columns_records_per_s",
        "append_records_per_s", "read_crc_records_per_s",
        "get_raw_records_per_s", "sync_threads_msgs_per_s", "sync_threads_puts_per_fsync",
        "sync_asyncio_msgs_per_s", "sync_asyncio_puts_per_fsync", "rss_anon_growth_kb",
    } == set(got)  # fmt: skip
    assert all(value > 0 for name, value in got.items() if name.endswith("_per_s"))
    assert list(data.iterdir()) == []  # it cleans up what it wrote


def test_perf_store_measures_the_asyncio_producers_on_uvloop_too(tmp_path):
    data = tmp_path / "bench"
    got = figures("store", "--data", data, "--count", "1000", "--sync-count", "320", "--uvloop",
                  "--commitlog-file-size", "4194304")  # fmt: skip
    assert got["sync_uvloop_msgs_per_s"] > 0
    assert got["sync_uvloop_puts_per_fsync"] > 1  # group commit on uvloop's loop as well
    assert "sync_asyncio_msgs_per_s" in got
    assert list(data.iterdir()) == []


def test_perf_store_uvloop_without_uvloop_installed_says_how_to_get_it(monkeypatch, tmp_path):
    from sdk.cli.main import main

    monkeypatch.setitem(sys.modules, "uvloop", None)  # what an import finds when it is absent
    with pytest.raises(SystemExit, match=r"pip install 'quiver\[uvloop\]'"):
        main(["perf", "store", "--data", str(tmp_path / "bench"), "--uvloop"])
    assert not (tmp_path / "bench").exists()  # refused before anything was written


needs_affinity = pytest.mark.skipif(
    not hasattr(os, "sched_setaffinity"), reason="pinning threads to a CPU needs Linux"
)


@needs_affinity
def test_perf_store_and_e2e_measure_pinned_threads_too(tmp_path):
    cpu = str(min(os.sched_getaffinity(0)))
    store = figures("store", "--data", tmp_path / "s", "--count", "1000", "--sync-count", "320",
                    "--commitlog-file-size", "4194304", "--pin-cpu", cpu)  # fmt: skip
    assert store["sync_threads_pinned_msgs_per_s"] > 0
    assert store["sync_threads_pinned_puts_per_fsync"] > 1  # still group commit
    assert "sync_threads_msgs_per_s" in store  # the unpinned figure is measured as well
    e2e = figures("e2e", "--data", tmp_path / "e", "--count", "1000", "--latency-samples", "50",
                  "--commitlog-file-size", "4194304", "--pin-cpu", cpu)  # fmt: skip
    assert 0 < e2e["e2e_pinned_p50_ms"] <= e2e["e2e_pinned_p99_ms"]
    assert e2e["put_pinned_msgs_per_s"] > 0 and e2e["get_pinned_msgs_per_s"] > 0
    assert {"put_msgs_per_s", "get_msgs_per_s", "e2e_p99_ms"} <= set(e2e)


@needs_affinity
@pytest.mark.parametrize("command", ["store", "e2e"])
def test_perf_refuses_a_cpu_the_process_may_not_use(tmp_path, command):
    cpu = max(os.sched_getaffinity(0)) + 1000
    done = quiver("perf", command, "--data", str(tmp_path / "b"), "--pin-cpu", str(cpu))
    assert done.returncode != 0
    assert f"--pin-cpu {cpu}" in done.stderr and "may run on" in done.stderr
    assert not (tmp_path / "b").exists()  # refused before anything was written


def test_perf_lookup_and_recovery_figures():
    lookup = figures("lookup", "--count", "2000", "--lookups", "200")
    assert set(lookup) == {"key_query_p50_us", "key_query_p99_us", "seek_p50_us", "seek_p99_us"}
    recovery = figures("recovery", "--bytes", "400000", "--commitlog-file-size", "131072")
    assert set(recovery) == {
        "recovery_scan_MB_per_s", "recovery_redispatch_records_per_s", "recovery_open_s",
    }  # fmt: skip
    assert recovery["recovery_redispatch_records_per_s"] > 0


@pytest.mark.parametrize("index", [[], ["--in-process-index"]], ids=["index-process", "in-process"])
def test_perf_e2e_figures(tmp_path, index):
    data = tmp_path / "bench"
    got = figures("e2e", "--data", data, "--count", "3000", "--latency-samples", "50",
                  "--commitlog-file-size", "4194304", *index)  # fmt: skip
    assert set(got) == {"put_msgs_per_s", "get_msgs_per_s", "e2e_p50_ms", "e2e_p99_ms"}
    assert all(value > 0 for value in got.values())
    assert got["e2e_p50_ms"] <= got["e2e_p99_ms"]
    assert list(data.iterdir()) == []


def test_perf_e2e_refuses_bad_arguments():
    done = quiver("perf", "e2e", "--count", "0")
    assert done.returncode != 0 and "--count must be positive" in done.stderr


def test_perf_rebalance_figures():
    got = figures("rebalance", "--sizes", "1,2,1", "--queues", "4", "--rate", "400")
    assert set(got) == {
        "rebalance_p50_ms", "rebalance_p99_ms", "rebalance_changes", "rebalance_overlaps",
        "rebalance_lost",
    }  # fmt: skip
    assert got["rebalance_changes"] == 2
    assert got["rebalance_overlaps"] == 0 and got["rebalance_lost"] == 0


def test_perf_rebalance_refuses_bad_sizes():
    done = quiver("perf", "rebalance", "--sizes", "1,x")
    assert done.returncode != 0 and "--sizes" in done.stderr


@pytest.mark.parametrize("loop", ["asyncio", "auto"])
def test_perf_consume_against_a_spawned_broker(tmp_path, loop):
    data = tmp_path / "bench"
    got = figures("consume", "--spawn-broker", "--data", data, "--count", "2000",
                  "--consumers", "2", "--loop", loop)  # fmt: skip
    assert got["consume_msgs_per_s"] > 0
    assert got["broker_rss_mb"] > 0 and got["broker_rss_start_mb"] > 0
    assert 0 < got["broker_rss_anon_mb"] < got["broker_rss_mb"]
    assert 0 < got["broker_rss_anon_half_mb"] < got["broker_rss_mb"]
    assert list(data.iterdir()) == []


@pytest.mark.parametrize("command", [["broker"], ["perf", "produce", "--spawn-broker"]])
def test_loop_uvloop_without_uvloop_installed_is_a_usage_error(monkeypatch, tmp_path, command):
    from sdk.cli.main import main

    monkeypatch.setitem(sys.modules, "uvloop", None)  # what an import finds when it is absent
    monkeypatch.setattr("importlib.util.find_spec", lambda name, *a: None)
    status = main([*command, "--data", str(tmp_path / "b"), "--loop", "uvloop", "--json"])
    assert status == 2
    assert not (tmp_path / "b").exists()  # refused before anything was written
