"""The broker's consumer offset table: RocketMQ's file, atomic writes, .bak, resets, lag."""

from __future__ import annotations

import gzip
import json
import tarfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from localstore import MessageStore, NewMessage
from offsetstore.base import NOT_FOUND, OffsetFileError
from offsetstore.broker_table import ConsumerOffsetTable, QueueBounds, parse_offset_file
from quiver_errors import InvalidArgumentError

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "rocketmq-4.9.8"
GEOMETRY = {"commitlog_file_size": 65536, "cq_entries_per_file": 50}


@pytest.fixture
def store(tmp_path: Path) -> Iterator[MessageStore]:
    with MessageStore(tmp_path / "store", **GEOMETRY) as opened:
        yield opened


def put(store: MessageStore, topic: str, queue_id: int, count: int) -> None:
    for i in range(count):
        store.put(NewMessage(topic=topic, body=b"m%d" % i, queue_id=queue_id))


def test_loads_rocketmqs_own_file_exactly(tmp_path: Path) -> None:
    with tarfile.open(FIXTURES / "stores.tar.gz") as archive:
        archive.extract("store/config/consumerOffset.json", tmp_path, filter="data")
    with gzip.open(FIXTURES / "store.jsonl.gz", "rt") as dump:
        expected = json.loads(dump.readline())
    assert expected["type"] == "consumerOffsets"
    raw = (tmp_path / "store/config/consumerOffset.json").read_text()
    assert "\t" in raw and "{0:" in raw  # fastjson's dialect, not JSON

    table = ConsumerOffsetTable(tmp_path / "store")
    found = {
        f"{topic}@{group}": {str(q): o for q, o in table.offsets(group, topic).items()}
        for group in table.groups()
        for topic in table.topics(group)
    }
    assert found == expected["table"]
    assert table.groups() == ["other_group", "quiver_group"]
    assert table.query("quiver_group", "TopicTest", 1) == 42
    assert table.query("quiver_group", "TopicTest", 9) is NOT_FOUND


def test_rocketmq_5_shape_ignores_derived_maps() -> None:
    text = (
        '{\n\t"dataVersion":{"counter":1448,"stateVersion":0,"timestamp":1736661762584},\n'
        '\t"groupTopicMap":{"push_test":["%RETRY%push_test","test"]},\n'
        '\t"lmqOffsetTable":{},\n\t"offsetTable":{\n'
        '\t\t"test@push_test":{0:165243,1:165245,2:165243,3:165242},\n'
        '\t\t"%RETRY%push_test@push_test":{0:0}\n\t}\n}'
    )
    table, version = parse_offset_file(text)
    assert table == {
        "test@push_test": {0: 165243, 1: 165245, 2: 165243, 3: 165242},
        "%RETRY%push_test@push_test": {0: 0},
    }
    assert version["counter"] == 1448
    # a string holding what looks like an integer key is left alone
    odd, _ = parse_offset_file('{"offsetTable":{"a,1:x@g":{"7":1}}}')
    assert odd == {"a,1:x@g": {7: 1}}


def test_commit_overwrites_and_persist_is_atomic_with_backup(tmp_path: Path) -> None:
    table = ConsumerOffsetTable(tmp_path)
    table.commit("g", "T", 0, 10)
    table.commit("g", "T", 0, 7)  # the broker overwrites: an admin may move back
    assert table.query("g", "T", 0) == 7
    table.persist()
    first = table.path.read_bytes()
    assert not table.backup_path.exists()
    table.commit("g", "T", 1, 3)
    table.persist()
    assert table.backup_path.read_bytes() == first
    assert json.loads(table.path.read_text())["offsetTable"] == {"T@g": {"0": 7, "1": 3}}
    assert [p.name for p in table.path.parent.iterdir() if p.name.endswith("tmp")] == []
    again = ConsumerOffsetTable(tmp_path)
    assert again.offsets("g", "T") == {0: 7, 1: 3}
    assert again.data_version()["counter"] == table.data_version()["counter"]


@pytest.mark.parametrize("garbage", [b"", b'{\n\t"offsetTable":{"T@g":{0:4', b"\xff\xfe"])
def test_garbage_main_file_falls_back_to_backup(tmp_path: Path, garbage: bytes) -> None:
    table = ConsumerOffsetTable(tmp_path)
    table.commit("g", "T", 0, 5)
    table.persist()
    table.commit("g", "T", 0, 6)
    table.persist()  # .bak holds 5, the file 6
    table.path.write_bytes(garbage)  # the crash RocketMQ users report
    recovered = ConsumerOffsetTable(tmp_path)
    assert recovered.offsets("g", "T") == {0: 5}
    recovered.commit("g", "T", 1, 1)
    recovered.persist()  # the garbage is not rotated over the good backup
    assert ConsumerOffsetTable(tmp_path).offsets("g", "T") == {0: 5, 1: 1}
    table.path.unlink()
    assert ConsumerOffsetTable(tmp_path).offsets("g", "T") == {0: 5}  # .bak


def test_both_files_garbage_is_an_error_naming_both(tmp_path: Path) -> None:
    config = tmp_path / "config"
    config.mkdir()
    (config / "consumerOffset.json").write_text("{nope")
    (config / "consumerOffset.json.bak").write_text("[]")
    with pytest.raises(OffsetFileError) as caught:
        ConsumerOffsetTable(tmp_path)
    assert "consumerOffset.json:" in str(caught.value)
    assert "consumerOffset.json.bak:" in str(caught.value)


def test_young_queue_answers_zero(store: MessageStore, tmp_path: Path) -> None:
    bounds: QueueBounds = store
    table = ConsumerOffsetTable(tmp_path / "t", min_offsets=bounds)
    assert table.query("g", "T", 0) == 0  # min offset 0: nothing was deleted
    assert table.query("g", "T", 0, zero_if_young=False) is NOT_FOUND
    assert ConsumerOffsetTable(tmp_path / "t").query("g", "T", 0) is NOT_FOUND


def test_a_queue_that_lost_messages_to_retention_is_not_young(tmp_path: Path) -> None:
    class Trimmed:
        """Queue 1 lost its first five messages to retention; queue 0 lost none."""

        def min_offset(self, topic: str, queue_id: int) -> int:
            return 5 if queue_id == 1 else 0

    table = ConsumerOffsetTable(tmp_path / "t", min_offsets=Trimmed())
    assert table.query("g", "T", 0) == 0
    assert table.query("g", "T", 1) is NOT_FOUND  # its first messages are gone: no made-up 0
    table.commit("g", "T", 1, 7)
    assert table.query("g", "T", 1) == 7


def test_reset_to_earliest_latest_and_time(store: MessageStore, tmp_path: Path) -> None:
    put(store, "T", 0, 5)
    put(store, "T", 1, 2)
    time.sleep(0.02)
    cut_ms = int(time.time() * 1000)
    time.sleep(0.02)
    put(store, "T", 0, 3)
    table = ConsumerOffsetTable(tmp_path / "t")
    table.commit("g", "T", 0, 4)

    assert table.reset("g", "T", "latest", store) == {0: 8, 1: 2}
    assert table.offsets("g", "T") == {0: 8, 1: 2}
    assert table.reset("g", "T", "earliest", store) == {0: 0, 1: 0}
    assert table.reset("g", "T", cut_ms, store) == {0: 5, 1: 2}
    assert table.offsets("g", "T") == {0: 5, 1: 2}
    with pytest.raises(ValueError, match="earliest, latest"):
        table.reset("g", "T", -1, store)


def test_auto_persist_and_close(tmp_path: Path) -> None:
    table = ConsumerOffsetTable(tmp_path)
    table.start_auto_persist(interval_s=0.01)
    table.commit("g", "T", 3, 9)
    deadline = time.monotonic() + 5
    while not table.path.exists() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert ConsumerOffsetTable(tmp_path).offsets("g", "T") == {3: 9}
    table.commit("g", "T", 3, 10)
    table.close()
    table.close()
    assert ConsumerOffsetTable(tmp_path).offsets("g", "T") == {3: 10}


def test_at_sign_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="'@'"):
        ConsumerOffsetTable(tmp_path).commit("g@x", "T", 0, 1)


@pytest.mark.parametrize(("group", "topic"), [("", "T"), ("g", ""), ("", "")])
def test_an_empty_name_is_refused_and_the_table_still_loads(
    tmp_path: Path, group: str, topic: str
) -> None:
    with ConsumerOffsetTable(tmp_path) as table:
        table.commit("g", "T", 0, 1)
        with pytest.raises(InvalidArgumentError, match="must not be empty"):
            table.commit(group, topic, 0, 5)
    with ConsumerOffsetTable(tmp_path) as reopened:  # a key "@" would not load
        assert reopened.offsets("g", "T") == {0: 1}


@pytest.mark.parametrize(("queue_id", "offset"), [(0, -1), (0, 2**63), (-3, 1), (2**31, 1)])
def test_an_offset_the_file_could_not_hold_is_refused_and_the_table_still_loads(
    tmp_path: Path, queue_id: int, offset: int
) -> None:
    with ConsumerOffsetTable(tmp_path) as table:
        table.commit("g", "t", 1, 5)
        with pytest.raises(InvalidArgumentError, match="is an int in"):
            table.commit_many("g", "t", {2: 7, queue_id: offset})
        assert table.offsets("g", "t") == {1: 5}  # nothing of the refused call recorded
    with ConsumerOffsetTable(tmp_path) as reopened:
        assert reopened.offsets("g", "t") == {1: 5}
