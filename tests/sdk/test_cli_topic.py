"""``quiver topic list|create|update|delete`` and ``quiver offsets reset --create``, run in
process through ``sdk.cli.main.main`` (and once as a real subprocess), on stores a real
embedded broker wrote."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import orjson
import pytest

from sdk import EmbeddedBroker, Message, Producer
from sdk.cli.main import main
from tests.sdk.test_cli import lines, quiver

from .brokers import SMALL_GEOMETRY

TOPIC = "orders"


def run(capsys: pytest.CaptureFixture[str], *args: Any) -> tuple[int, str, str]:
    """``quiver ARGS`` in this process: exit status, stdout, stderr."""
    status = main([str(arg) for arg in args])
    captured = capsys.readouterr()
    return status, captured.out, captured.err


def json_lines(text: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in text.splitlines()]


@pytest.fixture
def data(tmp_path: Path) -> Path:
    """A store with 3 messages on orders/3 (4 queues), none consumed."""
    root = tmp_path / "data"
    with EmbeddedBroker(root, **SMALL_GEOMETRY) as broker, Producer(broker) as producer:
        for i in range(3):
            producer.send(Message(TOPIC, b"m%d" % i), queue_id=3)
    return root


def test_create_list_update_delete(data: Path, capsys: pytest.CaptureFixture[str]) -> None:
    status, out, _ = run(capsys, "topic", "create", "--data", data, "--topic", "refunds",
                         "--queues", "2", "--json")  # fmt: skip
    assert status == 0
    assert json_lines(out) == [
        {"topic": "refunds", "read_queue_nums": 2, "write_queue_nums": 2, "perm": 6,
         "system": False}
    ]  # fmt: skip
    status, out, _ = run(capsys, "topic", "list", "--data", data)
    assert status == 0
    assert out.splitlines() == [
        "orders: 4 queues, read-write",
        "refunds: 2 queues, read-write",
        "2 topic(s)",
    ]
    status, out, _ = run(capsys, "topic", "update", "--data", data, "--topic", "refunds",
                         "--queues", "8", "--perm", "4")  # fmt: skip
    assert (status, out) == (0, "refunds: 8 queues, read-only\n")
    on_disk = orjson.loads((data / "config" / "topics.json").read_bytes())["topicConfigTable"]
    assert (on_disk["refunds"]["readQueueNums"], on_disk["refunds"]["writeQueueNums"]) == (8, 8)
    assert on_disk["refunds"]["perm"] == 4
    status, out, _ = run(capsys, "topic", "delete", "--data", data, "--topic", "refunds")
    assert (status, out) == (0, "deleted topic refunds (0 queue(s) removed)\n")
    status, out, _ = run(capsys, "topic", "list", "--data", data, "--json")
    assert [row["topic"] for row in json_lines(out)] == [TOPIC]


def test_refusals_are_one_line_with_the_right_status(
    data: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    refusals = [
        (["update", "--topic", TOPIC, "--queues", "2"], 1, "orders/3 holds 3 message"),
        (["update", "--topic", "nothing", "--perm", "4"], 1, "does not exist"),
        (["update", "--topic", TOPIC], 2, "nothing to change"),
        (["create", "--topic", TOPIC], 1, "already exists"),
        (["delete", "--topic", "%DLQ%billing"], 2, "broker's own"),
        (["create", "--topic", "a b"], 2, "illegal characters"),
    ]
    for args, expected, words in refusals:
        status, out, err = run(capsys, "topic", args[0], "--data", data, *args[1:])
        assert (status, out) == (expected, ""), (args, err)
        assert err.count("\n") == 1 and words in err, (args, err)
    status, _, err = run(capsys, "topic", "list", "--data", data.parent / "missing")
    assert status == 2 and "does not exist" in err


def test_offsets_reset_of_an_unknown_group_needs_create(
    data: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    reset = ["offsets", "reset", "--data", data, "--group", "fresh", "--topic", TOPIC]
    status, _, err = run(capsys, *reset, "--to", "latest")
    assert status == 1 and "add --create" in err and err.count("\n") == 1
    status, out, _ = run(capsys, *reset, "--queue-offset", "3=1", "--create", "--json")
    assert status == 0 and json_lines(out) == [
        {"group": "fresh", "topic": TOPIC, "queue_id": 3, "previous": None, "offset": 1}
    ]
    status, out, _ = run(capsys, "offsets", "show", "--data", data, "--group", "fresh",
                         "--topic", TOPIC, "--json")  # fmt: skip
    assert status == 0
    assert [(r["queue_id"], r["committed"], r["lag"]) for r in json_lines(out)][-1] == (3, 1, 2)
    status, _, err = run(capsys, *reset, "--queue-offset", "3=9")
    assert status == 2 and "outside" in err


def test_topic_commands_as_a_subprocess(data: Path) -> None:
    created = lines(quiver("topic", "create", "--data", data, "--topic", "audit", "--json"))
    assert created[0]["read_queue_nums"] == 4
    listed = lines(quiver("topic", "list", "--data", data, "--all", "--json"))
    assert {row["topic"] for row in listed} >= {TOPIC, "audit"}
    deleted = lines(quiver("topic", "delete", "--data", data, "--topic", TOPIC, "--json"))
    assert deleted == [{"topic": TOPIC, "deleted": True, "queue_ids": [3]}]
    assert not (data / "consumequeue" / TOPIC).exists()
