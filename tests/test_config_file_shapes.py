"""Config and offset files of valid JSON but the wrong shape: the store's ``config/topics.json``
and ``config/store.json``, the broker's ``config/consumerOffset.json``, ``delayOffset.json`` and
``quiverConsumerGroups.json``, and a broadcasting consumer's ``offsets.json``.

A wrong shape is a damaged file, exactly like malformed JSON: the file's ``.bak`` is used (a
WARNING names both files); when both are damaged a typed error (``CorruptStoreError`` for the
store's files, ``OffsetFileError`` for the others) names both files and what is wrong with each,
the CLI prints it on one line with a non-zero exit status, never a traceback, and the damaged
files are left as they were. Files RocketMQ itself writes (tests/fixtures) still load.
Hypothesis puts arbitrary JSON values anywhere in a valid document of each file: the decoder
accepts it or refuses it with a ValueError, nothing else, and the file-level read then uses the
good ``.bak``.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import shutil
import subprocess
import tarfile
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from localstore import CorruptStoreError, MessageStore, NewMessage
from localstore.errors import GeometryMismatchError
from localstore.geometry import FORMAT_VERSION, load_geometry, new_geometry
from localstore.queue.topics import TopicTable
from offsetstore import MessageQueue, OffsetFileError
from sdk import EmbeddedBroker
from sdk.broker.group_report import read_snapshot, snapshot_document, write_snapshot
from sdk.transport.models import GroupView
from tests.sdk.test_cli import quiver

REPO = Path(__file__).resolve().parents[1]
FIXTURES = REPO / "tests" / "fixtures"
# Small files: every test copies the store.
GEOMETRY = ["--commitlog-file-size", "64K", "--cq-entries-per-file", "50"]
GEOMETRY += ["--index-slots", "64", "--index-entries", "256"]
GROUP = "gx"

pytestmark = pytest.mark.integration


def assert_one_line_error(
    done: subprocess.CompletedProcess[str], file_name: str, fragment: str
) -> None:
    assert "Traceback" not in done.stderr, done.stderr
    assert done.returncode != 0, (done.stdout, done.stderr)
    error = done.stderr.strip()
    assert "\n" not in error, error
    assert error.startswith("quiver: error: "), error
    assert f"config/{file_name}" in error, error
    assert f"config/{file_name}.bak" in error, error  # both files are named
    assert fragment in error, error


def damage_both(config: Path, file_name: str, content: str) -> None:
    """Write ``content`` to the file and to its ``.bak``."""
    for name in (file_name, file_name + ".bak"):
        (config / name).write_text(content)


def assert_warned_about(caplog: pytest.LogCaptureFixture, path: Path) -> None:
    """A WARNING named the damaged file and the backup used instead."""
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any(str(path) in w and f"{path}.bak" in w for w in warnings), warnings


def snapshot_of(members: dict[str, dict[str, str]]) -> bytes:
    """A snapshot as the broker writes it: group ``GROUP`` with ``members`` (client id ->
    subscriptions), each owning queue 0 of its first topic."""
    owners = {MessageQueue(next(iter(subs)), "broker-a", 0): cid for cid, subs in members.items()}
    view = GroupView(3, tuple(sorted(members)), members, owners)
    models = {GROUP: dict.fromkeys(members, "CLUSTERING")}
    return snapshot_document({GROUP: view}, models, 1_700_000_000_000)


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A store made by ``quiver store init``, with two topics (so ``topics.json`` and its
    ``.bak`` exist) and a snapshot of group ``GROUP`` written twice (so it has a ``.bak`` too)."""
    root = tmp_path_factory.mktemp("template") / "store"
    done = quiver("store", "init", root, *GEOMETRY)
    assert done.returncode == 0, done.stderr
    with MessageStore(root) as store:
        for topic in ("T", "U"):
            assert store.put(NewMessage(topic, b"body", queue_id=0)).ok
    write_snapshot(root, snapshot_of({"node-a@1": {"T": "*"}}))
    write_snapshot(root, snapshot_of({"node-a@1": {"T": "*"}, "node-b@2": {"U": "tag"}}))
    for name in ("topics.json", "topics.json.bak", "store.json", "quiverConsumerGroups.json"):
        assert (root / "config" / name).is_file(), name
    assert (root / "config" / "quiverConsumerGroups.json.bak").is_file()
    return root


@pytest.fixture
def store_dir(template: Path, tmp_path: Path) -> Path:
    return Path(shutil.copytree(template, tmp_path / "store"))


def test_the_template_store_is_readable(store_dir: Path):
    """The control: the store the bad shapes are written into opens, and its group shows."""
    assert quiver("store", "info", store_dir).returncode == 0
    done = quiver("group", "show", "--data", store_dir, "--group", GROUP)
    assert done.returncode == 0, done.stderr
    assert "node-b@2 CLUSTERING: U [tag]" in done.stdout


# -- config/topics.json ------------------------------------------------------------------------

BAD_TOPICS = [
    ("[]", "topics.json: not a JSON object"),
    ('"topics"', "topics.json: not a JSON object"),
    ("null", "topics.json: not a JSON object"),
    ('{"topicConfigTable": 5}', "topicConfigTable is not an object"),
    ('{"topicConfigTable": []}', "topicConfigTable is not an object"),
    ('{"dataVersion": [], "topicConfigTable": {}}', "dataVersion is not an object"),
    ('{"dataVersion": {"counter": "3"}}', "dataVersion.counter is not an integer"),
    ('{"topicConfigTable": {"T": 5}}', "topicConfigTable['T'] is not an object"),
    ('{"topicConfigTable": {"T": ["T"]}}', "topicConfigTable['T'] is not an object"),
    (
        '{"topicConfigTable": {"T": {"readQueueNums": -1}}}',
        "topicConfigTable['T'].readQueueNums is not an integer in [0, 2147483647] (found -1)",
    ),
    (
        '{"topicConfigTable": {"T": {"readQueueNums": "4"}}}',
        "readQueueNums is not an integer in [0, 2147483647]",
    ),
    ('{"topicConfigTable": {"T": {"readQueueNums": 2147483648}}}', "readQueueNums is not an"),
    ('{"topicConfigTable": {"T": {"readQueueNums": 4.0}}}', "readQueueNums is not an integer"),
    ('{"topicConfigTable": {"T": {"writeQueueNums": null}}}', "writeQueueNums is not an integer"),
    ('{"topicConfigTable": {"T": {"writeQueueNums": true}}}', "writeQueueNums is not an integer"),
    ('{"topicConfigTable": {"T": {"perm": "rw"}}}', "perm is not an integer"),
    ('{"topicConfigTable": {"T": {"order": "false"}}}', "order is not a boolean"),
]


@pytest.mark.parametrize(("content", "fragment"), BAD_TOPICS)
def test_topics_json_of_a_wrong_shape_falls_back_to_its_backup(
    store_dir: Path, content: str, fragment: str, caplog: pytest.LogCaptureFixture
):
    """Before: a valid topics.json.bak was never used; the store refused to open."""
    path = store_dir / "config" / "topics.json"
    backup = (store_dir / "config" / "topics.json.bak").read_bytes()
    path.write_text(content)
    with caplog.at_level(logging.WARNING), MessageStore(store_dir) as store:
        assert store.topics.get("T") is not None and store.topics.get("U") is not None
        assert path.read_text() == content  # left as it was until the next save
        assert store.put(NewMessage("V", b"body", queue_id=0)).ok  # saves topics.json
    assert_warned_about(caplog, path)
    assert (store_dir / "config" / "topics.json.bak").read_bytes() == backup  # not overwritten
    assert "V" in orjson.loads(path.read_bytes())["topicConfigTable"]
    assert quiver("store", "info", store_dir).returncode == 0


@pytest.mark.parametrize(("content", "fragment"), BAD_TOPICS)
def test_topics_json_and_backup_of_a_wrong_shape_are_refused_naming_both(
    store_dir: Path, content: str, fragment: str
):
    damage_both(store_dir / "config", "topics.json", content)
    with pytest.raises(CorruptStoreError, match=r"config/topics\.json\.bak") as raised:
        MessageStore(store_dir)
    assert fragment in str(raised.value)
    assert_one_line_error(quiver("store", "info", store_dir), "topics.json", fragment)
    for name in ("topics.json", "topics.json.bak"):  # left for the operator
        assert (store_dir / "config" / name).read_text() == content


def test_topics_json_is_checked_like_malformed_json(store_dir: Path):
    """Malformed JSON already gave CorruptStoreError naming the file: a wrong shape gets the
    same, and a broker fails to start the same way."""
    for content, fragment in (("{bad", "is not valid JSON"), ("[]", "not a JSON object")):
        damage_both(store_dir / "config", "topics.json", content)
        with pytest.raises(CorruptStoreError, match=fragment):
            EmbeddedBroker(store_dir)


# -- config/store.json -------------------------------------------------------------------------


def recorded_geometry(store_dir: Path, **changes: Any) -> str:
    data = json.loads((store_dir / "config" / "store.json").read_text())
    return json.dumps({**data, **changes})


BAD_STORE: list[tuple[Any, str]] = [
    ("[]", "store.json: not a JSON object"),
    ("null", "store.json: not a JSON object"),
    ("1", "store.json: not a JSON object"),
    ('"async"', "store.json: not a JSON object"),
    ({"commitlog_file_size": "64K"}, 'commitlog_file_size is not an integer (found "64K")'),
    ({"commitlog_file_size": True}, "commitlog_file_size is not an integer (found true)"),
    ({"cq_entries_per_file": 1.5}, "cq_entries_per_file is not an integer (found 1.5)"),
    ({"index_slots": None}, "index_slots is not an integer (found null)"),
    ({"index_entries": [20]}, "index_entries is not an integer (found an array)"),
    ({"max_message_size": 0}, "max_message_size=0 is out of range: allowed [1, "),
    ({"commitlog_file_size": 99 << 30}, "commitlog_file_size=106300440576 is out of range"),
    ({"format_version": "1"}, 'format_version is not an integer (found "1")'),
    ({"flush_mode": 1}, "flush_mode is not a string"),
    ({"flush_mode": "never"}, "flush_mode must be 'async' or 'sync'"),
    ({"index_enabled": "yes"}, "index_enabled is not a boolean"),
    ({"index_enabled": 1}, "index_enabled is not a boolean"),
]


@pytest.mark.parametrize(("change", "fragment"), BAD_STORE)
def test_store_json_of_a_wrong_shape_falls_back_to_its_backup(
    store_dir: Path, change: Any, fragment: str, caplog: pytest.LogCaptureFixture
):
    path = store_dir / "config" / "store.json"
    good = path.read_bytes()
    content = change if isinstance(change, str) else recorded_geometry(store_dir, **change)
    path.write_text(content)
    with caplog.at_level(logging.WARNING), MessageStore(store_dir) as store:
        assert store.geometry.commitlog_file_size == 64 * 1024
    assert_warned_about(caplog, path)
    assert path.read_bytes() == good  # the geometry is recorded again


@pytest.mark.parametrize(("change", "fragment"), BAD_STORE)
def test_store_json_and_backup_of_a_wrong_shape_are_refused_naming_both(
    store_dir: Path, change: Any, fragment: str
):
    content = change if isinstance(change, str) else recorded_geometry(store_dir, **change)
    damage_both(store_dir / "config", "store.json", content)
    with pytest.raises(CorruptStoreError, match=r"config/store\.json\.bak") as raised:
        MessageStore(store_dir)
    assert fragment in str(raised.value)
    assert_one_line_error(quiver("store", "info", store_dir), "store.json", fragment)
    assert (store_dir / "config" / "store.json").read_text() == content


def test_store_json_is_checked_like_malformed_json(store_dir: Path):
    """Malformed store.json names the file too, through the same typed error."""
    for content, fragment in (("{bad", "is not valid JSON"), ("[]", "not a JSON object")):
        damage_both(store_dir / "config", "store.json", content)
        with pytest.raises(CorruptStoreError, match=fragment):
            MessageStore(store_dir)


def test_a_store_recorded_without_a_backup_names_the_missing_backup(store_dir: Path):
    """Stores created before store.json.bak existed: a damaged store.json is refused, naming
    the backup as missing."""
    (store_dir / "config" / "store.json.bak").unlink()
    (store_dir / "config" / "store.json").write_text("[]")
    with pytest.raises(CorruptStoreError, match=r"store\.json\.bak: missing"):
        MessageStore(store_dir)


@pytest.mark.parametrize(("file_name", "content"), [("store.json", "[]"), ("topics.json", "[]")])
@pytest.mark.parametrize(
    "command",
    [
        ["store", "init", "{dir}"],  # opens the store itself, not through the CLI's open_store
        ["store", "verify", "{dir}"],
        ["read", "--data", "{dir}", "--topic", "T"],
        ["offsets", "show", "--data", "{dir}", "--group", GROUP],
        ["group", "show", "--data", "{dir}", "--group", GROUP],
    ],
    ids=lambda command: " ".join(command[:2]) if isinstance(command, list) else None,
)
def test_every_command_that_opens_the_store_says_which_file(
    store_dir: Path, file_name: str, content: str, command: list[str]
):
    damage_both(store_dir / "config", file_name, content)
    done = quiver(*(part.format(dir=store_dir) for part in command))
    assert_one_line_error(done, file_name, "not a JSON object")


# -- config/quiverConsumerGroups.json ----------------------------------------------------------

BAD_SNAPSHOTS = [
    ("[]", "quiverConsumerGroups.json: not a JSON object"),
    ("5", "quiverConsumerGroups.json: not a JSON object"),
    ('{"groups": 5}', "groups is not an object (found 5)"),
    ('{"groups": []}', "groups is not an object (found an array)"),
    ('{"timestamp": "now", "groups": {}}', 'timestamp is not a non-negative integer (found "now")'),
    ('{"groups": {"gx": []}}', "groups['gx'] is not an object"),
    ('{"groups": {"gx": {"generation": "7"}}}', "groups['gx'].generation is not a non-negative"),
    ('{"groups": {"gx": {"members": ["node-a"]}}}', "groups['gx'].members is not an object"),
    ('{"groups": {"gx": {"members": {"node-a": 1}}}}', "groups['gx'].members['node-a'] is not"),
    (
        '{"groups": {"gx": {"members": {"a": {"subscriptions": ["T"]}}}}}',
        "groups['gx'].members['a'].subscriptions is not an object",
    ),
    (
        '{"groups": {"gx": {"members": {"a": {"subscriptions": {"T": 1}}}}}}',
        "groups['gx'].members['a'].subscriptions['T'] is not a string (found 1)",
    ),
    (
        '{"groups": {"gx": {"members": {"a": {"messageModel": null}}}}}',
        "groups['gx'].members['a'].messageModel is not a string (found null)",
    ),
    ('{"groups": {"gx": {"owners": ["T@0"]}}}', "groups['gx'].owners is not an object"),
    ('{"groups": {"gx": {"owners": {"T": "a"}}}}', "owners key 'T' is not TOPIC@QUEUE_ID"),
    ('{"groups": {"gx": {"owners": {"T@x": "a"}}}}', "owners key 'T@x' is not TOPIC@QUEUE_ID"),
    ('{"groups": {"gx": {"owners": {"T@0": 5}}}}', "groups['gx'].owners['T@0'] is not a string"),
    # the whole file is checked, not only the entry of the group asked for
    ('{"groups": {"gx": {}, "gy": {"generation": -1}}}', "groups['gy'].generation is not"),
]


@pytest.mark.parametrize(("content", "fragment"), BAD_SNAPSHOTS)
def test_group_snapshot_of_a_wrong_shape_falls_back_to_its_backup(
    store_dir: Path, content: str, fragment: str, caplog: pytest.LogCaptureFixture
):
    path = store_dir / "config" / "quiverConsumerGroups.json"
    path.write_text(content)
    with caplog.at_level(logging.WARNING):
        view, _, _ = read_snapshot(store_dir, GROUP, "broker-a")
    assert view.members == ("node-a@1",)  # the snapshot before the last
    assert_warned_about(caplog, path)
    done = quiver("group", "show", "--data", store_dir, "--group", GROUP)
    assert done.returncode == 0, done.stderr
    assert "node-a@1 CLUSTERING: T [*]" in done.stdout


@pytest.mark.parametrize(("content", "fragment"), BAD_SNAPSHOTS)
def test_group_snapshot_and_backup_of_a_wrong_shape_are_refused_naming_both(
    store_dir: Path, content: str, fragment: str
):
    damage_both(store_dir / "config", "quiverConsumerGroups.json", content)
    with pytest.raises(OffsetFileError, match=r"config/quiverConsumerGroups\.json\.bak") as raised:
        read_snapshot(store_dir, GROUP, "broker-a")
    assert fragment in str(raised.value)
    done = quiver("group", "show", "--data", store_dir, "--group", GROUP)
    assert_one_line_error(done, "quiverConsumerGroups.json", fragment)
    assert "cannot read the group records" in done.stderr
    assert (store_dir / "config" / "quiverConsumerGroups.json").read_text() == content


def test_group_snapshot_is_checked_like_malformed_json(store_dir: Path):
    for content, fragment in (("{bad", "is not valid JSON"), ("[]", "not a JSON object")):
        damage_both(store_dir / "config", "quiverConsumerGroups.json", content)
        with pytest.raises(OffsetFileError, match=rf"quiverConsumerGroups\.json.*{fragment}"):
            read_snapshot(store_dir, GROUP, "broker-a")


def test_a_snapshot_the_broker_wrote_reads_back(tmp_path: Path):
    members = {"node-a@1": {"T": "*", "%RETRY%gx": "*"}, "node-b@2": {"U": "tag || other"}}
    (tmp_path / "config").mkdir()
    write_snapshot(tmp_path, snapshot_of(members))
    view, models, as_of = read_snapshot(tmp_path, GROUP, "broker-a")
    assert as_of == 1_700_000_000_000
    assert view.generation == 3 and view.members == ("node-a@1", "node-b@2")
    assert view.subscriptions == members
    assert dict(view.owners) == {
        MessageQueue("T", "broker-a", 0): "node-a@1",
        MessageQueue("U", "broker-a", 0): "node-b@2",
    }
    assert models == {"node-a@1": "CLUSTERING", "node-b@2": "CLUSTERING"}
    assert read_snapshot(tmp_path, "nobody", "broker-a") == (GroupView(0, ()), {}, as_of)


# -- files RocketMQ writes ---------------------------------------------------------------------


def test_rocketmq_topics_json_of_the_reference_store_loads(tmp_path: Path):
    root = Path(shutil.copytree(FIXTURES / "reference-encoder" / "store", tmp_path / "store"))
    geometry = json.loads((FIXTURES / "reference-encoder" / "geometry.json").read_text())
    with MessageStore(root, **geometry) as store:
        queues = {
            name: (config.read_queue_nums, config.write_queue_nums, config.perm, config.order)
            for name, config in store.topics.topics.items()
            if name in ("TopicTest", "OrderTopic", "NoPropsTopic")
        }
    assert queues == {
        "TopicTest": (4, 4, 6, False),
        "OrderTopic": (2, 2, 6, False),
        "NoPropsTopic": (1, 1, 6, False),
    }
    done = quiver("store", "info", root)  # store.json recorded by the first open reads back
    assert done.returncode == 0, done.stderr


@pytest.mark.parametrize("name", ["store", "crashed-store"])
def test_rocketmq_own_stores_still_open(tmp_path: Path, name: str):
    with tarfile.open(FIXTURES / "rocketmq-4.9.8" / "stores.tar.gz") as archive:
        archive.extractall(tmp_path, filter="data")
    root = tmp_path / name
    geometry = {
        "commitlog_file_size": 262144,
        "cq_entries_per_file": 50,
        "index_slots": 64,
        "index_entries": 256,
    }
    with MessageStore(root, **geometry) as store:
        assert "TopicTest" in store.topics.topics
    assert (root / "config" / "store.json").is_file()
    done = quiver("store", "info", root)
    assert done.returncode == 0, done.stderr


def test_topics_json_with_the_fields_of_rocketmq_5_loads(store_dir: Path):
    """RocketMQ 5's broker writes more than Quiver reads (static-topic mapping tables, topic
    attributes, fastjson's tab indentation): none of it is a wrong shape."""
    document = {
        "dataVersion": {"counter": 12, "stateVersion": 0, "timestamp": 1_700_000_000_000},
        "mappingDataVersion": {"counter": 0, "stateVersion": 0, "timestamp": 1_700_000_000_000},
        "topicConfigTable": {
            name: {
                "attributes": {"message.type": "NORMAL"},
                "order": name == "T",
                "perm": 6,
                "readQueueNums": 8,
                "topicFilterType": "SINGLE_TAG",
                "topicName": name,
                "topicSysFlag": 0,
                "writeQueueNums": 8,
            }
            for name in ("T", "U", "SCHEDULE_TOPIC_XXXX")
        },
        "topicQueueMappingDetailMap": {},
        "topicQueueMappingInfoMap": {},
    }
    text = orjson.dumps(document, option=orjson.OPT_INDENT_2).decode().replace("  ", "\t")
    (store_dir / "config" / "topics.json").write_text(text)
    with MessageStore(store_dir) as store:
        config = store.topics.get("T")
        assert config is not None
        assert (config.read_queue_nums, config.write_queue_nums, config.order) == (8, 8, True)
        assert store.topics.get("SCHEDULE_TOPIC_XXXX") is not None
    assert quiver("store", "info", store_dir).returncode == 0


# -- config/consumerOffset.json (the broker's committed offsets) -------------------------------

GOOD_OFFSETS = '{"dataVersion": {"counter": 3}, "offsetTable": {"T@gx": {"0": 42, "1": 41}}}'

BAD_OFFSETS = [
    ("[]", "not a JSON object (found an array)"),
    ('"offsets"', 'not a JSON object (found "offsets")'),
    ("null", "not a JSON object (found null)"),
    ('{"offsetTable": 5}', "offsetTable is not an object (found 5)"),
    ('{"offsetTable": []}', "offsetTable is not an object (found an array)"),
    ('{"offsetTable": {"T@gx": 5}}', 'offsetTable["T@gx"] is not an object (found 5)'),
    ('{"offsetTable": {"T@gx": ["0"]}}', 'offsetTable["T@gx"] is not an object'),
    ('{"offsetTable": {"T@gx": {"0": -1}}}', "is not an integer in [0, 9223372036854775807]"),
    ('{"offsetTable": {"T@gx": {"0": "42"}}}', "is not an integer in [0, 92"),
    ('{"offsetTable": {"T@gx": {"0": 4.5}}}', "(found 4.5)"),
    ('{"offsetTable": {"T@gx": {"0": true}}}', "(found true)"),
    ('{"offsetTable": {"T@gx": {"0": null}}}', "(found null)"),
    ('{"offsetTable": {"T@gx": {"x": 1}}}', 'key "x" is not an integer in [0, 2147483647]'),
    ('{"offsetTable": {"T@gx": {"-1": 1}}}', 'key "-1" is not an integer'),
    ('{"offsetTable": {"T@gx": {"1.5": 1}}}', 'key "1.5" is not an integer'),
    ('{"offsetTable": {"T@gx": {null: 1}}}', "key null is not an integer"),  # fastjson keys
    ('{"offsetTable": {"T@gx": {1.5: 1}}}', "key 1.5 is not an integer"),
    ('{"offsetTable": {5: {"0": 1}}}', "offsetTable key 5 is not TOPIC@GROUP"),
    ('{"offsetTable": {{"a": 1}: {"0": 1}}}', "offsetTable key an object is not TOPIC@GROUP"),
    ('{"offsetTable": {"Tgx": {"0": 1}}}', 'offsetTable key "Tgx" is not TOPIC@GROUP'),
    ('{"offsetTable": {"@gx": {"0": 1}}}', 'offsetTable key "@gx" is not TOPIC@GROUP'),
    ('{"dataVersion": 7, "offsetTable": {}}', "dataVersion is not an object (found 7)"),
    ('{"dataVersion": {"counter": "7"}}', "dataVersion.counter is not an integer"),
    ('{"dataVersion": {"timestamp": -5}}', "dataVersion.timestamp is not an integer"),
    ("", "empty"),
]


def offsets_files(store_dir: Path, main: str, backup: str = GOOD_OFFSETS) -> Path:
    path = store_dir / "config" / "consumerOffset.json"
    path.write_text(main)
    (store_dir / "config" / "consumerOffset.json.bak").write_text(backup)
    return path


@pytest.mark.parametrize(("content", "fragment"), BAD_OFFSETS)
def test_consumer_offsets_of_a_wrong_shape_fall_back_to_the_backup(
    store_dir: Path, content: str, fragment: str, caplog: pytest.LogCaptureFixture
):
    """Before: AttributeError or TypeError from the open (or a negative offset taken)."""
    from offsetstore import ConsumerOffsetTable

    path = offsets_files(store_dir, content)
    with caplog.at_level(logging.WARNING):
        table = ConsumerOffsetTable(store_dir)
    assert table.offsets("gx", "T") == {0: 42, 1: 41}
    assert_warned_about(caplog, path)
    table.commit("gx", "T", 0, 43)
    table.close()  # writes the file; the good backup stays
    assert (store_dir / "config" / "consumerOffset.json.bak").read_text() == GOOD_OFFSETS
    with caplog.at_level(logging.WARNING), EmbeddedBroker(store_dir) as broker:
        assert broker.service.offsets.offsets("gx", "T") == {0: 43, 1: 41}


@pytest.mark.parametrize(("content", "fragment"), BAD_OFFSETS)
def test_consumer_offsets_and_backup_of_a_wrong_shape_are_refused_naming_both(
    store_dir: Path, content: str, fragment: str
):
    from offsetstore import ConsumerOffsetTable

    offsets_files(store_dir, content, content)
    with pytest.raises(OffsetFileError, match=r"consumerOffset\.json\.bak") as raised:
        ConsumerOffsetTable(store_dir)
    assert fragment in str(raised.value)
    with pytest.raises(OffsetFileError):
        EmbeddedBroker(store_dir)
    done = quiver("offsets", "show", "--data", store_dir, "--group", GROUP)
    assert_one_line_error(done, "consumerOffset.json", fragment)


# -- config/delayOffset.json (the schedule service's progress) -----------------------------------

BAD_DELAY_OFFSETS = [
    ("[1]", "not a JSON object (found an array)"),
    ('{"offsetTable": [1]}', "offsetTable is not an object"),
    ('{"offsetTable": {"0": 1}}', 'key "0" is not an integer in [1, 2147483647]'),
    ('{"offsetTable": {"x": 1}}', 'key "x" is not an integer'),
    ('{"offsetTable": {"1": "5"}}', 'offsetTable["1"] is not an integer'),
    ('{"offsetTable": {"1": null}}', "(found null)"),
    ('{"offsetTable": {}, "dataVersion": []}', "dataVersion is not an object"),
]


@pytest.mark.parametrize(("content", "fragment"), BAD_DELAY_OFFSETS)
def test_delay_offsets_of_a_wrong_shape_fall_back_or_are_refused(
    store_dir: Path, content: str, fragment: str, caplog: pytest.LogCaptureFixture
):
    """Before: a damaged file and backup silently restarted every level from its queue's
    start (every delayed message delivered again)."""
    from sdk.broker.schedule import ScheduleService

    path = store_dir / "config" / "delayOffset.json"
    path.write_text(content)
    (store_dir / "config" / "delayOffset.json.bak").write_text('{"offsetTable": {1: 0}}')
    with MessageStore(store_dir) as store, caplog.at_level(logging.WARNING):
        assert ScheduleService(store, store_dir).offsets[1] == 0
        assert_warned_about(caplog, path)
        (store_dir / "config" / "delayOffset.json.bak").write_text(content)
        with pytest.raises(OffsetFileError, match=r"delayOffset\.json\.bak") as raised:
            ScheduleService(store, store_dir)
    assert fragment in str(raised.value)


# -- Hypothesis: any JSON value anywhere in a valid document of each file --------------------------

JSON_VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=6),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3)
    ),
    max_leaves=8,
)

VALID_DOCUMENTS: dict[str, Any] = {
    "topics.json": {
        "dataVersion": {"counter": 2, "stateVersion": 0, "timestamp": 1},
        "topicConfigTable": {
            "T": {"order": False, "perm": 6, "readQueueNums": 4, "writeQueueNums": 4}
        },
    },
    "store.json": {
        "format_version": 1,
        **dataclasses.asdict(new_geometry({"commitlog_file_size": 65536})),
    },
    "consumerOffset.json": {
        "dataVersion": {"counter": 3, "stateVersion": 0, "timestamp": 1},
        "offsetTable": {"T@gx": {"0": 42, "1": 41}},
    },
    "delayOffset.json": {"dataVersion": {"counter": 1}, "offsetTable": {"1": 5, "2": 0}},
    "offsets.json": {
        "version": 1,
        "offsetTable": [{"topic": "T", "brokerName": "b", "queueId": 3, "offset": 1470}],
    },
    "quiverConsumerGroups.json": orjson.loads(snapshot_of({"node-a@1": {"T": "*"}})),
}


def _paths(value: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every place in a document a value can be put: each node, and each key's slot."""
    found = [prefix]
    if isinstance(value, dict):
        for key, item in value.items():
            found += _paths(item, (*prefix, key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            found += _paths(item, (*prefix, index))
    return found


def _replaced(document: Any, path: tuple[Any, ...], value: Any) -> Any:
    if not path:
        return value
    copy = document.copy()
    copy[path[0]] = _replaced(document[path[0]], path[1:], value)
    return copy


@st.composite
def damaged_documents(draw: st.DrawFn, file_name: str) -> bytes:
    """A valid document of ``file_name`` with one node replaced by any JSON value."""
    document = VALID_DOCUMENTS[file_name]
    path = draw(st.sampled_from(_paths(document)))
    return json.dumps(_replaced(document, path, draw(JSON_VALUES))).encode()


def _decoder(file_name: str, directory: Path) -> Callable[[], Any]:
    """Read ``file_name`` (and its .bak) from ``directory`` through the code that loads it."""
    from offsetstore import ConsumerOffsetTable
    from offsetstore.atomic_file import read_with_backup
    from offsetstore.local_file import read_offsets_file
    from sdk.broker.schedule import parse_delay_offsets

    root = directory.parent
    readers: dict[str, Callable[[], Any]] = {
        "topics.json": lambda: _topics(root),
        "store.json": lambda: load_geometry(directory / file_name),
        "consumerOffset.json": lambda: ConsumerOffsetTable(root).offsets("gx", "T"),
        "delayOffset.json": lambda: read_with_backup(
            directory / file_name, parse_delay_offsets, "progress"
        ).value[0],  # type: ignore[union-attr]
        "offsets.json": lambda: read_offsets_file(directory / file_name),
        "quiverConsumerGroups.json": lambda: read_snapshot(root, GROUP, "broker-a")[0],
    }
    return readers[file_name]


def _topics(root: Path) -> dict[str, Any]:
    table = TopicTable(root)
    table.load(root / "consumequeue")
    return {name: dataclasses.asdict(config) for name, config in table.topics.items()}


def _format_version(content: bytes) -> object:
    """The integer ``format_version`` a document names, or None."""
    try:
        document = orjson.loads(content)
    except orjson.JSONDecodeError:
        return None
    version = document.get("format_version") if isinstance(document, dict) else None
    return version if type(version) is int else None


@pytest.mark.parametrize("file_name", sorted(VALID_DOCUMENTS))
def test_any_json_anywhere_loads_or_falls_back_to_the_good_backup(file_name: str):
    @settings(max_examples=60, deadline=None)
    @given(content=damaged_documents(file_name))
    def check(content: bytes) -> None:
        with tempfile.TemporaryDirectory() as tmp:
            config = Path(tmp) / "config"
            config.mkdir()
            good = orjson.dumps(VALID_DOCUMENTS[file_name])
            (config / (file_name + ".bak")).write_bytes(good)
            (config / file_name).write_bytes(good)
            expected = _decoder(file_name, config)()  # what the good file holds
            (config / file_name).write_bytes(content)
            try:
                _decoder(file_name, config)()  # accepted: a shape the reader takes
            except (CorruptStoreError, OffsetFileError) as exc:  # pragma: no cover
                raise AssertionError(f"refused although the backup is good: {exc}") from exc
            except GeometryMismatchError:
                # not damage: a store.json of another format version is refused, by design,
                # rather than silently replaced by the backup
                assert file_name == "store.json"
                assert _format_version(content) not in (None, FORMAT_VERSION)
                return
            # refused: the good backup was used; with both damaged, a typed error names both
            (config / (file_name + ".bak")).write_bytes(content)
            try:
                got = _decoder(file_name, config)()
            except (CorruptStoreError, OffsetFileError) as exc:
                assert f"{file_name}.bak" in str(exc)
                (config / (file_name + ".bak")).write_bytes(good)
                assert _decoder(file_name, config)() == expected  # the good backup is used
            else:
                assert got is not None

    check()
