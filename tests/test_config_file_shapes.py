"""Config files of valid JSON but the wrong shape: ``config/topics.json``, ``config/store.json``
and ``config/quiverConsumerGroups.json``.

Each bad shape must be refused the way malformed JSON is: a typed error naming the file and what
is wrong with it (``CorruptStoreError`` for the store's two files, ``ValueError`` from
``read_snapshot``), one line on stderr and a non-zero exit status from the CLI, never a traceback,
and the damaged file left as it was. Files RocketMQ itself writes (tests/fixtures) still load.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import tarfile
from pathlib import Path
from typing import Any

import orjson
import pytest

from localstore import CorruptStoreError, MessageStore, NewMessage
from offsetstore import MessageQueue
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
    assert fragment in error, error


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
        "topicConfigTable['T'].readQueueNums is not a non-negative integer (found -1)",
    ),
    (
        '{"topicConfigTable": {"T": {"readQueueNums": "4"}}}',
        "readQueueNums is not a non-negative integer",
    ),
    ('{"topicConfigTable": {"T": {"readQueueNums": 4.0}}}', "readQueueNums is not a non-negative"),
    ('{"topicConfigTable": {"T": {"writeQueueNums": null}}}', "writeQueueNums is not a non-neg"),
    ('{"topicConfigTable": {"T": {"writeQueueNums": true}}}', "writeQueueNums is not a non-neg"),
    ('{"topicConfigTable": {"T": {"perm": "rw"}}}', "perm is not a non-negative integer"),
    ('{"topicConfigTable": {"T": {"order": "false"}}}', "order is not a boolean"),
]


@pytest.mark.parametrize(("content", "fragment"), BAD_TOPICS)
def test_topics_json_of_a_wrong_shape_is_refused_naming_the_file(
    store_dir: Path, content: str, fragment: str
):
    path = store_dir / "config" / "topics.json"
    backup = (store_dir / "config" / "topics.json.bak").read_bytes()
    path.write_text(content)
    with pytest.raises(CorruptStoreError, match=r"config/topics\.json") as raised:
        MessageStore(store_dir)
    assert fragment in str(raised.value)
    assert_one_line_error(quiver("store", "info", store_dir), "topics.json", fragment)
    assert path.read_text() == content  # left for the operator: nothing rewrote or dropped it
    assert (store_dir / "config" / "topics.json.bak").read_bytes() == backup


def test_topics_json_is_checked_like_malformed_json(store_dir: Path):
    """Malformed JSON already gave CorruptStoreError naming the file: a wrong shape gets the
    same, and a broker fails to start the same way."""
    path = store_dir / "config" / "topics.json"
    for content, fragment in (("{bad", "is not valid JSON"), ("[]", "not a JSON object")):
        path.write_text(content)
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
    ({"max_message_size": 0}, "max_message_size must be positive"),
    ({"flush_mode": 1}, "flush_mode is not a string"),
    ({"flush_mode": "never"}, "flush_mode must be 'async' or 'sync'"),
    ({"index_enabled": "yes"}, "index_enabled is not a boolean"),
    ({"index_enabled": 1}, "index_enabled is not a boolean"),
]


@pytest.mark.parametrize(("change", "fragment"), BAD_STORE)
def test_store_json_of_a_wrong_shape_is_refused_naming_the_file(
    store_dir: Path, change: Any, fragment: str
):
    path = store_dir / "config" / "store.json"
    content = change if isinstance(change, str) else recorded_geometry(store_dir, **change)
    path.write_text(content)
    with pytest.raises(CorruptStoreError, match=r"config/store\.json") as raised:
        MessageStore(store_dir)
    assert fragment in str(raised.value)
    assert_one_line_error(quiver("store", "info", store_dir), "store.json", fragment)
    assert path.read_text() == content


def test_store_json_is_checked_like_malformed_json(store_dir: Path):
    """Malformed store.json names the file too, through the same typed error."""
    path = store_dir / "config" / "store.json"
    for content, fragment in (("{bad", "is not valid JSON"), ("[]", "not a JSON object")):
        path.write_text(content)
        with pytest.raises(CorruptStoreError, match=fragment):
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
    (store_dir / "config" / file_name).write_text(content)
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
def test_group_snapshot_of_a_wrong_shape_is_refused_naming_the_file(
    store_dir: Path, content: str, fragment: str
):
    path = store_dir / "config" / "quiverConsumerGroups.json"
    path.write_text(content)
    with pytest.raises(ValueError, match=r"config/quiverConsumerGroups\.json") as raised:
        read_snapshot(store_dir, GROUP, "broker-a")
    assert fragment in str(raised.value)
    done = quiver("group", "show", "--data", store_dir, "--group", GROUP)
    assert_one_line_error(done, "quiverConsumerGroups.json", fragment)
    assert "cannot read the group records" in done.stderr
    assert path.read_text() == content


def test_group_snapshot_is_checked_like_malformed_json(store_dir: Path):
    path = store_dir / "config" / "quiverConsumerGroups.json"
    for content, fragment in (("{bad", "is not valid JSON"), ("[]", "not a JSON object")):
        path.write_text(content)
        with pytest.raises(ValueError, match=rf"quiverConsumerGroups\.json.*{fragment}"):
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
