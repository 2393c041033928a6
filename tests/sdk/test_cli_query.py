"""``quiver query key|id|time`` and ``quiver store clean``, run as real subprocesses."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from tests.sdk.test_cli import lines, one_line_error, quiver

pytestmark = pytest.mark.integration

SMALL = [
    "--commitlog-file-size", "4096", "--cq-entries-per-file", "8",
    "--index-slots", "16", "--index-entries", "64",
]  # fmt: skip


@pytest.fixture
def store(tmp_path: Path) -> Path:
    root = tmp_path / "data"
    assert quiver("store", "init", root, *SMALL).returncode == 0
    return root


def produce(store: Path, *args: str, body: str) -> dict:
    [receipt] = lines(
        quiver(
            "produce",
            "--data",
            store,
            "--topic",
            "Orders",
            "--queue",
            "0",
            *args,
            "--body",
            body,
            "--json",
        )
    )
    return receipt


def test_query_by_key_finds_newest_first_and_only_that_key(store: Path):
    produce(store, "--key", "order-1", body="created")
    produce(store, "--key", "order-2", body="other")
    produce(store, "--key", "order-1", "--key", "user-9", body="paid")
    found = lines(
        quiver("query", "key", "--data", store, "--topic", "Orders", "--key", "order-1", "--json")
    )
    assert [m["body"] for m in found] == ["paid", "created"]
    assert all("order-1" in m["keys"] for m in found)
    missing = quiver("query", "key", "--data", store, "--topic", "Orders", "--key", "nope")
    assert missing.returncode == 1 and "found 0 message(s)" in missing.stdout


def test_query_by_key_respects_the_time_range(store: Path):
    first = produce(store, "--key", "k", body="early")
    time.sleep(0.05)
    second = produce(store, "--key", "k", body="late")
    found = lines(
        quiver(
            "query",
            "key",
            "--data",
            store,
            "--topic",
            "Orders",
            "--key",
            "k",
            "--begin",
            second["store_timestamp"],
            "--json",
        )
    )
    assert [m["body"] for m in found] == ["late"]
    found = lines(
        quiver(
            "query",
            "key",
            "--data",
            store,
            "--topic",
            "Orders",
            "--key",
            "k",
            "--end",
            first["store_timestamp"],
            "--json",
        )
    )
    assert [m["body"] for m in found] == ["early"]
    one_line_error(
        quiver(
            "query",
            "key",
            "--data",
            store,
            "--topic",
            "Orders",
            "--key",
            "k",
            "--begin",
            "10",
            "--end",
            "5",
        ),
        2,
        "--begin",
    )


def test_query_by_id_accepts_offset_msg_id_and_uniq_key(store: Path):
    receipt = produce(store, body="by id")
    for message_id in (receipt["offset_msg_id"], receipt["msg_id"]):
        [found] = lines(quiver("query", "id", "--data", store, message_id, "--json"))
        assert found["body"] == "by id"
        assert found["phys_offset"] == receipt["phys_offset"]
    assert quiver("query", "id", "--data", store, "0" * 32).returncode == 1


def test_query_time_gives_the_first_offset_at_or_after(store: Path):
    receipts = []
    for i in range(5):
        receipts.append(produce(store, body=f"m{i}"))
        time.sleep(0.01)
    for i, receipt in enumerate(receipts):
        [answer] = lines(
            quiver(
                "query",
                "time",
                "--data",
                store,
                "--topic",
                "Orders",
                "--queue",
                "0",
                "--timestamp",
                receipt["store_timestamp"],
                "--json",
            )
        )
        assert answer["queue_offset"] == i  # stored at least 10 ms apart: each its own time
        assert answer["max_offset"] == 5
    [late] = lines(
        quiver(
            "query",
            "time",
            "--data",
            store,
            "--topic",
            "Orders",
            "--queue",
            "0",
            "--timestamp",
            receipts[-1]["store_timestamp"] + 10_000,
            "--json",
        )
    )
    assert late["queue_offset"] == 5  # everything is older: the end of the queue


def test_store_clean_deletes_old_segments_and_moves_min_offsets(store: Path):
    assert (
        quiver(
            "produce",
            "--data",
            store,
            "--topic",
            "Orders",
            "--queue",
            "0",
            "--count",
            "120",
            "--size",
            "100",
        ).returncode
        == 0
    )
    segments = sorted((store / "commitlog").iterdir())
    assert len(segments) > 3
    old = time.time() - 100 * 3600
    for path in segments[:2]:
        os.utime(path, (old, old))
    [report] = lines(quiver("store", "clean", store, "--json"))
    assert report["deleted"][:2] == [str(p) for p in segments[:2]]
    assert report["commitlog_min_offset"] == int(segments[2].name)
    assert report["queue_min_offsets"]["Orders/0"] > 0
    read = quiver("read", "--data", store, "--topic", "Orders", "--queue", "0", "--json")
    assert lines(read)[0]["queue_offset"] == report["queue_min_offsets"]["Orders/0"]
    [forced] = lines(quiver("store", "clean", store, "--force", "--json"))
    assert len(list((store / "commitlog").iterdir())) == 1  # never the last segment
    assert forced["commitlog_min_offset"] == int(segments[-1].name)
    assert quiver("store", "verify", store).returncode == 0
