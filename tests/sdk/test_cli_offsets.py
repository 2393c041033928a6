"""``quiver offsets show`` and ``quiver offsets reset``, run as real subprocesses."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from localstore import MessageStore, NewMessage
from offsetstore.broker_table import ConsumerOffsetTable
from tests.sdk.test_cli import GEOMETRY, lines, one_line_error, quiver

pytestmark = pytest.mark.integration


@pytest.fixture
def data(tmp_path: Path) -> tuple[Path, int]:
    """A store with T/0 holding 5 + 3 messages, T/1 holding 2, and the time between them;
    group g committed 4 on T/0."""
    root = tmp_path / "data"
    assert quiver("store", "init", root, *GEOMETRY).returncode == 0
    with MessageStore(root) as store:
        for i in range(5):
            store.put(NewMessage(topic="T", body=b"a%d" % i, queue_id=0))
        for i in range(2):
            store.put(NewMessage(topic="T", body=b"b%d" % i, queue_id=1))
        time.sleep(0.02)
        cut_ms = int(time.time() * 1000)
        time.sleep(0.02)
        for i in range(3):
            store.put(NewMessage(topic="T", body=b"c%d" % i, queue_id=0))
    with ConsumerOffsetTable(root) as table:
        table.commit("g", "T", 0, 4)
    return root, cut_ms


def test_show_lists_committed_min_max_and_lag(data: tuple[Path, int]) -> None:
    root, _ = data
    rows = lines(quiver("offsets", "show", "--data", root, "--group", "g", "--json"))
    assert [
        (r["queue_id"], r["committed"], r["min_offset"], r["max_offset"], r["lag"]) for r in rows
    ] == [
        (0, 4, 0, 8, 4),
        (1, None, 0, 2, 2),
    ]
    assert {(r["group"], r["topic"]) for r in rows} == {("g", "T")}
    human = quiver("offsets", "show", "--data", root, "--group", "g", "--topic", "T")
    assert human.returncode == 0, human.stderr
    assert "T/0: committed 4 min 0 max 8 lag 4" in human.stdout
    assert "T/1: committed - min 0 max 2 lag 2" in human.stdout
    assert "total lag 6" in human.stdout


def test_reset_to_earliest_latest_and_a_time(data: tuple[Path, int]) -> None:
    root, cut_ms = data
    latest = lines(
        quiver(
            "offsets",
            "reset",
            "--data",
            root,
            "--group",
            "g",
            "--topic",
            "T",
            "--to",
            "latest",
            "--json",
        )
    )
    assert [(r["queue_id"], r["previous"], r["offset"]) for r in latest] == [
        (0, 4, 8),
        (1, None, 2),
    ]
    document = json.loads((root / "config" / "consumerOffset.json").read_text())
    assert document["offsetTable"]["T@g"] == {"0": 8, "1": 2}  # beside the broker's own
    assert (root / "config" / "consumerOffset.json.bak").is_file()

    by_time = quiver(
        "offsets", "reset", "--data", root, "--group", "g", "--topic", "T", "--to", cut_ms
    )
    assert by_time.returncode == 0, by_time.stderr
    assert "T/0: 8 -> 5" in by_time.stdout and "T/1: 2 -> 2" in by_time.stdout
    earliest = lines(
        quiver(
            "offsets",
            "reset",
            "--data",
            root,
            "--group",
            "g",
            "--topic",
            "T",
            "--to",
            "earliest",
            "--json",
        )
    )
    assert [r["offset"] for r in earliest] == [0, 0]
    shown = lines(quiver("offsets", "show", "--data", root, "--group", "g", "--json"))
    assert [r["lag"] for r in shown] == [8, 2]


def test_errors_are_one_line(data: tuple[Path, int], tmp_path: Path) -> None:
    root, _ = data
    one_line_error(quiver("offsets", "show", "--data", root, "--group", "nobody"), 1, "nobody")
    one_line_error(
        quiver("offsets", "reset", "--data", root, "--group", "g", "--topic", "T", "--to", "soon"),
        2,
        "earliest, latest",
    )
    one_line_error(
        quiver(
            "offsets", "reset", "--data", root, "--group", "g", "--topic", "None", "--to", "latest"
        ),
        1,
        "no queues",
    )
    one_line_error(quiver("offsets", "show", "--data", root, "--group", "a@b"), 2, "'@'")
    one_line_error(quiver("offsets", "show", "--data", tmp_path / "missing", "--group", "g"), 2)
    (root / "config" / "consumerOffset.json").write_text("{garbage")
    (root / "config" / "consumerOffset.json.bak").write_text("{garbage")
    one_line_error(
        quiver("offsets", "show", "--data", root, "--group", "g"), 1, "consumerOffset.json.bak"
    )
