"""An administrator's topic changes on a live store: queue counts and permission bind the next
put (also one whose queue was written before), and a deleted topic stays deleted across a
reopen although its records are still in the commitlog."""

from __future__ import annotations

import logging
from pathlib import Path

import orjson
import pytest

from localstore import MessageStore
from localstore.queue.topics import PERM_READ, PERM_READ_WRITE

from .conftest import TINY_GEOMETRY, message


def test_fewer_write_queues_refuse_the_next_put_to_a_queue_written_before(
    tmp_path: Path,
) -> None:
    with MessageStore(tmp_path / "s") as store:
        assert store.put(message(topic="T", queue_id=3)).status.stored
        store.set_topic("T", read_queue_nums=4, write_queue_nums=2, perm=PERM_READ_WRITE)
        refused = store.put(message(topic="T", queue_id=3))
        assert not refused.status.stored and "2 write queues" in refused.detail
        assert store.put(message(topic="T", queue_id=1)).status.stored
        assert store.max_offset("T", 3) == 1  # what it held is still readable


def test_a_read_only_topic_refuses_puts_until_writable_again(tmp_path: Path) -> None:
    with MessageStore(tmp_path / "s") as store:
        assert store.put(message(topic="T", queue_id=0)).status.stored
        store.set_topic("T", read_queue_nums=4, write_queue_nums=4, perm=PERM_READ)
        refused = store.put(message(topic="T", queue_id=0))
        assert not refused.status.stored and "not writable" in refused.detail
        store.set_topic("T", read_queue_nums=4, write_queue_nums=4, perm=PERM_READ_WRITE)
        assert store.put(message(topic="T", queue_id=0)).queue_offset == 1
    document = orjson.loads((tmp_path / "s" / "config" / "topics.json").read_bytes())
    assert document["topicConfigTable"]["T"]["perm"] == PERM_READ_WRITE


def test_a_deleted_topic_stays_deleted_after_a_reopen(tmp_path: Path) -> None:
    root = tmp_path / "s"
    with MessageStore(root, **TINY_GEOMETRY) as store:
        store.put(message(topic="Keep", queue_id=0))
        for _ in range(10):  # the gone topic holds the log's last records
            assert store.put(message(topic="Gone", queue_id=1)).status.stored
        assert store.delete_topic("Gone") == [1]
        assert store.topics.get("Gone") is None and store.queue_ids("Gone") == []
        assert store.max_offset("Gone", 1) == 0
    assert not (root / "consumequeue" / "Gone").exists()
    with MessageStore(root) as store:
        assert store.queue_ids("Gone") == [] and store.topics.get("Gone") is None
        assert store.max_offset("Keep", 0) == 1
        again = store.put(message(topic="Gone", queue_id=1))  # a new topic of the same name
        assert again.status.stored and again.queue_offset == 0
    with MessageStore(root) as store:  # its new records are dispatched again, the old not
        assert store.max_offset("Gone", 1) == 1


def test_a_deleted_topic_is_logged_with_the_messages_it_made_unreadable(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with MessageStore(tmp_path / "s", **TINY_GEOMETRY) as store:
        for queue_id in (0, 0, 2):
            assert store.put(message(topic="Gone", queue_id=queue_id)).status.stored
        with caplog.at_level(logging.WARNING, logger="localstore.queue.topic_changes"):
            assert store.delete_topic("Gone") == [0, 2]
    (record,) = [r for r in caplog.records if r.name == "localstore.queue.topic_changes"]
    assert record.levelno == logging.WARNING
    assert "deleted topic Gone: 3 message(s) in queue(s) [0, 2]" in record.getMessage()
