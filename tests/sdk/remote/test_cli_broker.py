"""``quiver ... --broker URL``: the real CLI, as a subprocess, against a real broker process on a
loopback port. Each command answers as it does with ``--data DIR`` (the same JSON fields and
human lines), a read commits no group offset, and a broker that cannot be reached is one error
line (JSON with ``--json``), exit status 1."""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.sdk.remote.broker_process import BrokerProcess
from tests.sdk.test_cli import quiver

pytestmark = pytest.mark.integration

EXIT_FAILED = 1


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    with BrokerProcess(tmp_path_factory.mktemp("cli") / "data") as process:
        yield process


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A store the same commands run on with ``--data``, to compare the output's shape."""
    root = tmp_path_factory.mktemp("cli-store") / "data"
    assert quiver("store", "init", "--data", root, "--commitlog-file-size", "1M").returncode == 0
    return root


def ok(*args: object) -> list[str]:
    """Run ``quiver ARGS``: it succeeds; its stdout lines."""
    done = quiver(*args)
    assert done.returncode == 0, (done.stdout, done.stderr)
    return done.stdout.splitlines()


def documents(*args: object) -> list[dict[str, object]]:
    """Run ``quiver ARGS --json``: it succeeds; its JSON lines."""
    return [json.loads(line) for line in ok(*args, "--json")]


def same_shape(
    broker: BrokerProcess, store: Path, command: tuple[str, ...], *args: object
) -> list[dict[str, object]]:
    """``quiver COMMAND ARGS --json`` on the broker and on the store print the same fields;
    the broker's documents."""
    remote = documents(*command, "--broker", broker.url, *args)
    local = documents(*command, "--data", store, *args)
    assert remote and local
    assert {tuple(sorted(d)) for d in remote} == {tuple(sorted(d)) for d in local}
    return remote


def test_topics_are_created_listed_changed_and_deleted(broker, store) -> None:
    (created,) = same_shape(broker, store, ("topic", "create"), "--topic", "cli-t", "--queues", "2")
    assert (created["topic"], created["read_queue_nums"]) == ("cli-t", 2)
    (updated,) = same_shape(broker, store, ("topic", "update"), "--topic", "cli-t", "--perm", "4")
    assert updated["perm"] == 4
    listed = documents("topic", "list", "--broker", broker.url)
    assert "cli-t" in {topic["topic"] for topic in listed}
    assert ok("topic", "list", "--broker", broker.url)[-1].endswith("topic(s)")
    (deleted,) = same_shape(broker, store, ("topic", "delete"), "--topic", "cli-t")
    assert (deleted["topic"], deleted["deleted"]) == ("cli-t", True)
    listed = documents("topic", "list", "--broker", broker.url)
    assert "cli-t" not in {topic["topic"] for topic in listed}


def test_produced_messages_are_read_and_found_as_from_a_store(broker, store) -> None:
    produce = ("produce", "x", "--topic", "cli-m", "--tag", "paid", "--key", "order-1")
    for target in (("--broker", broker.url), ("--data", store)):
        ok(*produce[:1], *target, *produce[2:], "--body", "hello", "--count", "3", "--queue", "1")
    sent = documents(
        "produce", "--broker", broker.url, *produce[2:], "--body", "bye", "--queue", "1"
    )
    assert [d["queue_id"] for d in sent] == [1] and sent[0]["status"] == "PUT_OK"

    read = same_shape(broker, store, ("read",), "--topic", "cli-m", "--queue", "1")
    assert [d["body"] for d in read] == ["hello"] * 3 + ["bye"]
    assert {d["tags"] for d in read} == {"paid"} and read[0]["keys"] == ["order-1"]
    assert [d["queue_offset"] for d in read] == [0, 1, 2, 3]
    later = documents("read", "--broker", broker.url, "--topic", "cli-m", "--from-offset", "2",
                      "--max", "1")  # fmt: skip
    assert [(d["queue_id"], d["queue_offset"]) for d in later] == [(1, 2)]
    human = ok("read", "--broker", broker.url, "--topic", "cli-m", "--tags", "other")
    assert human == ["read 0 message(s) from cli-m (queues 0, 1, 2, 3)"]

    by_key = same_shape(broker, store, ("query", "key"), "--topic", "cli-m", "--key", "order-1")
    assert [d["body"] for d in by_key] == ["bye"] + ["hello"] * 3  # newest first
    (by_id,) = documents("query", "id", "--broker", broker.url, sent[0]["msg_id"])
    (by_offset_id,) = documents("query", "id", "--broker", broker.url, sent[0]["offset_msg_id"])
    assert by_id == by_offset_id == read[-1]  # the message as read, field for field
    (when,) = same_shape(broker, store, ("query", "time"), "--topic", "cli-m", "--queue", "1",
                         "--timestamp", "0")  # fmt: skip
    assert (when["queue_offset"], when["min_offset"], when["max_offset"]) == (0, 0, 4)


def test_a_read_commits_no_offset(broker) -> None:
    ok("produce", "--broker", broker.url, "--topic", "cli-r", "--body", "x", "--count", "2")
    assert len(documents("read", "--broker", broker.url, "--topic", "cli-r")) == 2
    for command in (("group", "show"), ("offsets", "show")):  # the pulls' group is unknown
        done = quiver(*command, "--broker", broker.url, "--group", "quiver-cli-read", "--json")
        assert done.returncode == EXIT_FAILED, done.stdout
        assert json.loads(done.stderr)["error"] == "UnknownGroupError"


def test_offsets_are_reset_and_shown_and_the_group_described(broker, store) -> None:
    ok("produce", "--broker", broker.url, "--topic", "cli-o", "--body", "x", "--count", "4",
       "--queue", "0")  # fmt: skip
    reset = ("offsets", "reset", "--group", "cli-g", "--topic", "cli-o", "--to", "latest")
    refused = quiver(*reset[:2], "--broker", broker.url, *reset[2:], "--json")
    assert refused.returncode == EXIT_FAILED and "--create" in refused.stderr
    moved = documents(*reset[:2], "--broker", broker.url, *reset[2:], "--create")
    assert {(d["queue_id"], d["offset"]) for d in moved} >= {(0, 4)}
    shown = documents("offsets", "show", "--broker", broker.url, "--group", "cli-g")
    assert {(d["queue_id"], d["committed"], d["lag"]) for d in shown} >= {(0, 4, 0)}
    (report,) = documents("group", "show", "--broker", broker.url, "--group", "cli-g")
    assert report["group"] == "cli-g"
    assert ok("group", "show", "--broker", broker.url, "--group", "cli-g")[-1].startswith(
        "group cli-g:"
    )


def test_a_broker_that_cannot_be_reached_is_one_error_line(tmp_path) -> None:
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{probe.getsockname()[1]}"
    done = quiver("topic", "list", "--broker", url)
    assert done.returncode == EXIT_FAILED and done.stdout == ""
    (line,) = done.stderr.splitlines()
    assert line.startswith(f"quiver: error: cannot reach the broker at {url}")
    as_json = quiver("read", "--broker", url, "--topic", "T", "--json")
    assert as_json.returncode == EXIT_FAILED and as_json.stdout == ""
    error = json.loads(as_json.stderr)
    assert error["error"] == "BrokerUnavailableError" and url in error["detail"]
