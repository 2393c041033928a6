"""The ``quiver`` command line, run as a real subprocess, and examples/quickstart.py."""

from __future__ import annotations

import base64
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from localstore import MessageStore

REPO = Path(__file__).resolve().parents[2]
SEGMENT = 65536
GEOMETRY = ["--commitlog-file-size", "64K", "--cq-entries-per-file", "50"]
BODY_AT = 88  # body offset inside a record with IPv4 hosts

pytestmark = pytest.mark.integration


def quiver(*args: Any, stdin: str | bytes | None = None) -> subprocess.CompletedProcess[str]:
    """Run ``python -m sdk.cli.main ARGS`` from the repository root."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    data = stdin.encode() if isinstance(stdin, str) else stdin
    done = subprocess.run(
        [sys.executable, "-m", "sdk.cli.main", *map(str, args)],
        cwd=REPO,
        input=data,
        capture_output=True,
        timeout=120,
        env=env,
        check=False,
    )
    out, err = done.stdout.decode(), done.stderr.decode()
    assert "Traceback" not in err, err
    return subprocess.CompletedProcess(done.args, done.returncode, out, err)


def lines(result: subprocess.CompletedProcess[str]) -> list[dict[str, Any]]:
    assert result.returncode == 0, result.stderr
    return [json.loads(line) for line in result.stdout.splitlines()]


def one_line_error(result: subprocess.CompletedProcess[str], status: int, *words: str) -> str:
    assert result.returncode == status, (result.stdout, result.stderr)
    error = result.stderr.strip()
    assert "\n" not in error and "error" in error, error
    for word in words:
        assert word in error
    return error


@pytest.fixture
def store(tmp_path: Path) -> Path:
    root = tmp_path / "data"
    assert quiver("store", "init", root, *GEOMETRY).returncode == 0
    return root


def test_init_prints_the_geometry_and_is_idempotent(tmp_path):
    root = tmp_path / "new"
    first = quiver("store", "init", root, *GEOMETRY, "--flush", "sync", "--json")
    (created,) = lines(first)
    assert created["created"] is True
    assert created["geometry"]["commitlog_file_size"] == SEGMENT
    assert created["geometry"]["cq_entries_per_file"] == 50
    assert created["geometry"]["flush_mode"] == "sync"
    again = quiver("store", "init", root)
    assert again.returncode == 0 and "store exists" in again.stdout and "65536" in again.stdout
    assert (root / "config" / "store.json").is_file()


def test_init_refuses_a_conflicting_or_invalid_geometry(store):
    one_line_error(
        quiver("store", "init", store, "--commitlog-file-size", "128K"),
        2,
        "commitlog_file_size",
        "65536",
    )
    one_line_error(
        quiver("store", "init", store.parent / "x", "--commitlog-file-size", "100"),
        2,
        "commitlog_file_size=100 is out of range: allowed [4096, 2147483647]",
    )
    one_line_error(
        quiver("store", "init", store, "--cq-entries-per-file", "many"), 2, "not an integer"
    )


def test_produce_a_body_and_read_it_back(store):
    produced = quiver(
        "produce",
        "--data",
        store,
        "--topic",
        "Orders",
        "--tag",
        "paid",
        "--key",
        "order-1",
        "--key",
        "user-7",
        "--property",
        "color=red",
        "--body",
        "hello world",
        "--json",
    )
    (put,) = lines(produced)
    assert put["status"] == "PUT_OK" and len(put["msg_id"]) == 32
    assert (put["queue_id"], put["queue_offset"], put["phys_offset"]) == (0, 0, 0)
    (got,) = lines(quiver("read", "--data", store, "--topic", "Orders", "--json"))
    assert got["msg_id"] == put["msg_id"] and got["offset_msg_id"] == put["offset_msg_id"]
    assert (got["tags"], got["keys"]) == ("paid", ["order-1", "user-7"])
    assert got["properties"]["color"] == "red" and got["properties"]["UNIQ_KEY"] == put["msg_id"]
    assert (got["body"], got["body_encoding"]) == ("hello world", "utf-8")
    assert got["born_timestamp"] <= got["store_timestamp"]
    assert got["store_host"] and got["reconsume_times"] == 0
    human = quiver("read", "--data", store, "--topic", "Orders")
    assert "Orders/0@0" in human.stdout and "tags=paid" in human.stdout
    assert "read 1 message(s)" in human.stdout


def test_produce_count_and_size_round_robin_across_segments(store):
    produced = lines(
        quiver(
            "produce",
            "--data",
            store,
            "--topic",
            "Bulk",
            "--count",
            "400",
            "--size",
            "300",
            "--json",
        )
    )
    assert len(produced) == 400
    assert [p["queue_id"] for p in produced[:8]] == [0, 1, 2, 3, 0, 1, 2, 3]
    assert len({p["msg_id"] for p in produced}) == 400
    assert max(p["phys_offset"] for p in produced) > 2 * SEGMENT  # several segments
    read = lines(quiver("read", "--data", store, "--topic", "Bulk", "--json"))
    assert len(read) == 400
    assert all(len(m["body"]) == 300 for m in read)
    assert {m["msg_id"] for m in read} == {p["msg_id"] for p in produced}
    human = quiver("produce", "--data", store, "--topic", "Bulk", "--count", "5", "--size", "1K")
    assert "produced 5 message(s)" in human.stdout


def test_produce_lines_from_stdin(store):
    produced = lines(
        quiver(
            "produce",
            "--data",
            store,
            "--topic",
            "Lines",
            "--queue",
            "2",
            "--json",
            stdin="first\nsecond\n\nthird\n",
        )
    )
    assert [p["queue_offset"] for p in produced] == [0, 1, 2]
    assert {p["queue_id"] for p in produced} == {2}
    read = lines(quiver("read", "--data", store, "--topic", "Lines", "--queue", "2", "--json"))
    assert [m["body"] for m in read] == ["first", "second", "third"]


def test_read_filters_by_tags(store):
    for tag, count in (("A", 3), ("B", 2), ("C", 1)):
        quiver(
            "produce",
            "--data",
            store,
            "--topic",
            "Tagged",
            "--queue",
            "0",
            "--tag",
            tag,
            "--body",
            tag,
            "--count",
            count,
        )
    only_b = lines(quiver("read", "--data", store, "--topic", "Tagged", "--tags", "B", "--json"))
    assert [m["tags"] for m in only_b] == ["B", "B"]
    some = lines(quiver("read", "--data", store, "--topic", "Tagged", "--tags", "A || C", "--json"))
    assert sorted(m["tags"] for m in some) == ["A", "A", "A", "C"]
    one_line_error(
        quiver("read", "--data", store, "--topic", "Tagged", "--tags", "||"), 2, "--tags"
    )


def test_read_non_utf8_bodies_as_base64(store):
    raw = b"\xff\xfe\x00binary"
    quiver("produce", "--data", store, "--topic", "Bin", "--json", stdin=raw + b"\n")
    lines(
        quiver(
            "produce",
            "--data",
            store,
            "--topic",
            "Bin",
            "--size",
            "64",
            "--random",
            "--count",
            "3",
            "--json",
        )
    )
    read = lines(quiver("read", "--data", store, "--topic", "Bin", "--json"))
    first = min(read, key=lambda m: m["phys_offset"])
    assert first["body_encoding"] == "base64" and base64.b64decode(first["body"]) == raw
    assert all(len(base64.b64decode(m["body"])) == 64 for m in read if m is not first)


def test_read_from_an_offset_and_at_most_max(store):
    quiver(
        "produce",
        "--data",
        store,
        "--topic",
        "Seq",
        "--queue",
        "1",
        "--json",
        stdin="".join(f"m{i}\n" for i in range(10)),
    )
    read = lines(
        quiver(
            "read",
            "--data",
            store,
            "--topic",
            "Seq",
            "--queue",
            "1",
            "--from-offset",
            "4",
            "--max",
            "3",
            "--json",
        )
    )
    assert [m["body"] for m in read] == ["m4", "m5", "m6"]
    assert [m["queue_offset"] for m in read] == [4, 5, 6]
    one_line_error(quiver("read", "--data", store, "--topic", "Nope"), 1, "Nope")
    one_line_error(
        quiver("read", "--data", store, "--topic", "Seq", "--queue", "9"), 1, "no queue 9"
    )


def test_store_info_describes_topics_and_segments(store):
    quiver("produce", "--data", store, "--topic", "Info", "--count", "20", "--size", "5K")
    (info,) = lines(quiver("store", "info", store, "--json"))
    assert info["geometry"]["commitlog_file_size"] == SEGMENT and info["flush_mode"] == "async"
    segments = info["commitlog"]["segments"]
    assert [s["start_offset"] for s in segments] == [i * SEGMENT for i in range(len(segments))]
    assert segments[0]["name"] == "0" * 20 and len(segments) >= 2
    assert info["commitlog"]["min_offset"] == 0 < info["commitlog"]["max_offset"]
    (topic,) = info["topics"]
    assert topic["topic"] == "Info" and topic["messages"] == 20
    assert [
        (q["queue_id"], q["min_offset"], q["max_offset"], q["messages"]) for q in topic["queues"]
    ] == [(q, 0, 5, 5) for q in range(4)]
    assert "Info: 20 message(s)" in quiver("store", "info", store).stdout


def test_store_verify_passes_then_fails_on_a_corrupted_record(store):
    produced = lines(
        quiver(
            "produce", "--data", store, "--topic", "V", "--count", "50", "--size", "200", "--json"
        )
    )
    ok = quiver("store", "verify", store)
    assert ok.returncode == 0 and "50 records" in ok.stdout and "OK" in ok.stdout
    (report,) = lines(quiver("store", "verify", store, "--json"))
    assert (report["ok"], report["records"], report["units"], report["problems"]) == (
        True,
        50,
        50,
        [],
    )
    phys = produced[25]["phys_offset"]
    segment = store / "commitlog" / f"{phys - phys % SEGMENT:020d}"
    raw = bytearray(segment.read_bytes())
    raw[phys % SEGMENT + BODY_AT + 5] ^= 0x55
    segment.write_bytes(bytes(raw))
    failed = quiver("store", "verify", store)
    one_line_error(failed, 1, "CRC", f"commitlog offset {phys}")
    assert "CRC" in failed.stdout
    as_json = quiver("store", "verify", store, "--json")
    assert as_json.returncode == 1
    document = json.loads(as_json.stdout)
    assert document["ok"] is False and document["problems"][0]["phys_offset"] == phys


def test_expected_errors_are_one_line_without_traceback(store, tmp_path):
    one_line_error(
        quiver("produce", "--data", store, "--topic", "bad topic", "--body", "x"),
        1,
        "illegal characters",
    )
    one_line_error(
        quiver("produce", "--data", tmp_path / "none", "--topic", "T", "--body", "x"),
        2,
        "does not exist",
        "quiver store init",
    )
    one_line_error(
        quiver("produce", "--data", store, "--topic", "T", "--property", "nope", "--body", "x"),
        2,
        "NAME=VALUE",
    )
    for flag, value in (("--tag", "A\x02B"), ("--key", "k1\x02EVIL\x01yes")):
        one_line_error(
            quiver("produce", "--data", store, "--topic", "T", flag, value, "--body", "x"),
            2,
            "are separators",
        )
    one_line_error(
        quiver(
            "produce", "--data", store, "--topic", "T", "--property", "UNIQ_KEY=1", "--body", "x"
        ),
        2,
        "UNIQ_KEY: quiver sets it",
    )
    one_line_error(
        quiver("produce", "--data", store, "--topic", "T", "--queue", "7", "--body", "x"),
        1,
        "queue 7 does not exist",
    )
    one_line_error(
        quiver("produce", "--data", store, "--topic", "T", "--count", "3"), 2, "--count needs"
    )
    one_line_error(
        quiver("produce", "--data", store, "--topic", "T", "--body", "x", "--size", "3"),
        2,
        "not allowed with",
    )
    one_line_error(quiver("read", "--topic", "T"), 2, "--data")
    one_line_error(quiver("store"), 2, "ACTION")


def test_a_store_open_elsewhere_is_reported(store):
    # Commands that recover or write need the store's lock; the reading ones fall back to a
    # read-only view instead (tests/sdk/test_cli_held_store.py).
    with MessageStore(store):
        one_line_error(quiver("store", "verify", store), 1, "already open")
        one_line_error(quiver("store", "clean", store), 1, "already open")


def test_perf_group_is_wired_when_present():
    if importlib.util.find_spec("sdk.perf.cli") is None:
        pytest.skip("sdk/perf/cli.py is not there")
    assert "perf" in quiver("--help").stdout
    assert quiver("perf", "--help").returncode == 0


def test_quickstart_runs(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    target = tmp_path / "quickstart-data"
    done = subprocess.run(
        [sys.executable, str(REPO / "examples" / "quickstart.py"), str(target)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "5. consumed 4 of 4 expected (paid || refunded):" in done.stdout
    assert "6. closed the consumer (offsets committed)" in done.stdout
    assert quiver("store", "verify", target).returncode == 0
    shown = quiver("offsets", "show", "--data", target, "--group", "billing")
    assert shown.returncode == 0 and "orders/0: committed 1 " in shown.stdout
