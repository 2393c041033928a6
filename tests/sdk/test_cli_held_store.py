"""The reading commands on a store another process holds (a running application): ``store
info``, ``read``, ``query`` and ``offsets show`` fall back to a read-only view, say so on
stderr and in ``--json``, and change nothing in the store."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from offsetstore.broker_table import ConsumerOffsetTable
from tests.localstore.store_holder import QUEUES, TOPIC, HeldStore
from tests.sdk.test_cli import lines, quiver

pytestmark = pytest.mark.integration


def _tree(root: Path) -> dict[str, str]:
    return {
        str(path.relative_to(root)): "dir"
        if path.is_dir()
        else hashlib.sha256(path.read_bytes()).hexdigest()
        for path in sorted(root.rglob("*"))
    }


def _said_held(stderr: str, pid: int) -> None:
    assert stderr.strip() == (
        f"quiver: store held by another process (pid {pid}): read-only view of what it has written"
    )


@pytest.fixture
def held(tmp_path: Path) -> HeldStore:
    root = tmp_path / "data"
    holder = HeldStore(root)  # 40 messages, then paused
    with ConsumerOffsetTable(root) as table:
        table.commit("g", TOPIC, 0, 5)
    yield holder  # type: ignore[misc]
    holder.close()


def test_store_info_describes_a_held_store_read_only(held: HeldStore) -> None:
    before = _tree(held.root)
    done = quiver("store", "info", held.root, "--json")
    (document,) = lines(done)
    _said_held(done.stderr, held.pid)
    assert document["read_only"] is True
    assert document["recovery"] is None
    (topic,) = document["topics"]
    assert topic["messages"] == 40
    human = quiver("store", "info", held.root)
    assert human.returncode == 0, human.stderr
    assert "T: 40 message(s)" in human.stdout
    assert _tree(held.root) == before


def test_read_serves_whole_messages_while_the_holder_writes(held: HeldStore) -> None:
    held.produce()
    done = quiver("read", "--data", held.root, "--topic", TOPIC, "--json")
    messages = lines(done)
    _said_held(done.stderr, held.pid)
    assert all(message["read_only"] is True for message in messages)
    for queue_id in range(QUEUES):
        numbers = [int(m["body"][1:]) for m in messages if m["queue_id"] == queue_id]
        assert numbers == list(range(queue_id, queue_id + QUEUES * len(numbers), QUEUES))
        assert len(numbers) >= 20
    held.stop()


def test_query_by_key_id_and_time_on_a_held_store(held: HeldStore) -> None:
    before = _tree(held.root)
    by_key = quiver("query", "key", "--data", held.root, "--topic", TOPIC, "--key", "k7", "--json")
    (found,) = lines(by_key)
    _said_held(by_key.stderr, held.pid)
    assert (found["body"], found["read_only"]) == ("m7", True)
    by_id = quiver("query", "id", "--data", held.root, found["offset_msg_id"], "--json")
    assert [m["body"] for m in lines(by_id)] == ["m7"]
    by_time = quiver(
        "query", "time", "--data", held.root, "--topic", TOPIC, "--queue", "1",
        "--timestamp", "0", "--json",
    )  # fmt: skip
    (document,) = lines(by_time)
    assert (document["queue_offset"], document["max_offset"], document["read_only"]) == (
        0,
        20,
        True,
    )
    assert _tree(held.root) == before


def test_offsets_show_on_a_held_store(held: HeldStore) -> None:
    before = _tree(held.root)
    done = quiver("offsets", "show", "--data", held.root, "--group", "g", "--json")
    rows = lines(done)
    _said_held(done.stderr, held.pid)
    assert [
        (r["queue_id"], r["committed"], r["max_offset"], r["lag"], r["read_only"]) for r in rows
    ] == [
        (0, 5, 20, 15, True),
        (1, None, 20, 20, True),
    ]
    assert _tree(held.root) == before


def test_a_store_nobody_holds_is_opened_as_before(held: HeldStore) -> None:
    held.close()
    done = quiver("offsets", "show", "--data", held.root, "--group", "g", "--json")
    assert done.stderr == ""
    assert all("read_only" not in row for row in lines(done))
    (document,) = lines(quiver("store", "info", held.root, "--json"))
    assert "read_only" not in document
    assert document["recovery"] is not None
