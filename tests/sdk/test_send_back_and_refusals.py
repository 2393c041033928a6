"""What the SDK refuses and what it says about messages it gives up on: a tag no subscription
can match, a broker pointed at a directory that holds something else, the dead-letter queue
and a failed broadcast (both logged), a message that outlived the consume timeout (sent back
at delay level 3, as RocketMQ's ``ProcessQueue.cleanExpiredMsg`` does)."""

from __future__ import annotations

import logging
import threading
from pathlib import Path

import pytest

from localstore.errors import StoreDirectoryError
from localstore.files import store_directory
from sdk import (
    BrokerOptions,
    ConsumeFrom,
    ConsumeResult,
    EmbeddedBroker,
    InvalidMessageError,
    Message,
    MessageModel,
    Producer,
    PushConsumer,
    QuiverError,
    retry_topic,
)
from sdk.transport.in_process import InProcessTransport

from .waiting import wait_until

SMALL = {"commitlog_file_size": 1 << 20}


@pytest.fixture
def broker(tmp_path: Path):
    options = BrokerOptions(delay_levels=[30] * 18, schedule_poll_interval_s=0.01)
    with EmbeddedBroker(tmp_path / "b", options=options, **SMALL) as b:
        yield b


@pytest.mark.parametrize("tags", ["a||b", "||", "paid||"])
def test_a_tag_holding_the_subscription_separator_is_refused(broker, tags: str):
    with Producer(broker) as producer:
        with pytest.raises(InvalidMessageError, match=r"tag '.*' holds '\|\|'") as caught:
            producer.send(Message("orders", b"x", tags=tags))
        assert tags in str(caught.value)
        with pytest.raises(InvalidMessageError, match=r"holds '\|\|'"):
            producer.send_batch([Message("orders", b"x", tags=tags)])
        assert producer.send(Message("orders", b"x", tags="a|b")).status == "PUT_OK"


def test_the_broker_refuses_a_directory_that_holds_something_else(tmp_path: Path):
    project = tmp_path / "project"
    project.mkdir()
    (project / "notes.txt").write_text("mine")
    with pytest.raises(StoreDirectoryError, match=r"notes\.txt.*create=True") as caught:
        EmbeddedBroker(project, **SMALL)
    assert isinstance(caught.value, QuiverError)
    assert sorted(p.name for p in project.iterdir()) == ["notes.txt"]  # nothing written
    with EmbeddedBroker(project, create=True, **SMALL):
        pass
    with EmbeddedBroker(project, **SMALL):  # a store now: opens without being told
        pass


@pytest.mark.parametrize(
    "entries",
    [
        ["lost+found/"],
        [".DS_Store"],
        [".gitkeep", ".hidden/"],
        ["lost+found/", ".Trashes/", ".DS_Store"],
    ],
    ids=["lost+found", "DS_Store", "dotfiles", "fresh-disk"],
)
def test_the_broker_opens_a_directory_holding_only_what_any_new_one_may(
    tmp_path: Path, entries: list[str]
):
    """A freshly made file system's lost+found and dotfiles say nothing: such a directory is
    as good as empty."""
    root = tmp_path / "disk"
    make_entries(root, entries)
    with EmbeddedBroker(root, **SMALL):
        pass


@pytest.mark.parametrize(
    "entries",
    [
        ["abort"],
        ["config/consumerOffset.json"],
        ["config/consumerOffset.json.bak"],
        ["config/topics.json", "notes.txt"],
        ["config/delayOffset.json"],
        ["index/"],
        ["timeindex/"],
        ["offsetindex/"],
    ],
)
def test_the_broker_opens_what_is_left_of_a_store(tmp_path: Path, entries: list[str]):
    """A store reduced to its offsets, its topics, its aborted-run marker or its key index is
    still a store: it opens without create=True."""
    root = tmp_path / "store"
    make_entries(root, entries)
    with EmbeddedBroker(root, **SMALL):
        pass


def test_an_index_directory_counts_only_when_it_holds_key_index_files(tmp_path: Path):
    make_entries(tmp_path / "a", ["index/20240101120000000", "index/20240101130000000"])
    make_entries(tmp_path / "b", ["index/20240101120000000", "index/README"])
    assert store_directory.store_marks_in(tmp_path / "a") == ["index/"]
    assert store_directory.store_marks_in(tmp_path / "b") == []


@pytest.mark.parametrize(
    ("entries", "named"),
    [
        (["index/notes.txt"], "index"),
        (["config/app.yaml", ".gitkeep"], "config"),
        (["lost+found/", "photos/"], "photos"),
    ],
)
def test_a_refusal_names_what_the_directory_holds(tmp_path: Path, entries: list[str], named: str):
    """A common name holding something else (an index/ of other files, a config/ of other
    settings) is no store; the refusal lists what was found (not the ignored entries) and
    says create=True makes a store there."""
    root = tmp_path / "project"
    make_entries(root, entries)
    with pytest.raises(StoreDirectoryError, match=r"create=True") as caught:
        EmbeddedBroker(root, **SMALL)
    text = str(caught.value)
    assert f"holds {named} but no store" in text  # the only entry shown


def make_entries(root: Path, entries: list[str]) -> None:
    """Make ``root`` holding ``entries`` (a trailing / makes a directory)."""
    root.mkdir()
    for entry in entries:
        path = root / entry
        path.parent.mkdir(parents=True, exist_ok=True)
        if entry.endswith("/"):
            path.mkdir()
        else:
            path.write_text("{}" if entry.endswith((".json", ".bak")) else "")


def test_the_broker_opens_an_empty_or_missing_directory_and_a_store(tmp_path: Path):
    (tmp_path / "empty").mkdir()
    for root in (tmp_path / "empty", tmp_path / "missing" / "deeper"):
        with EmbeddedBroker(root, **SMALL):
            pass
        with EmbeddedBroker(root, **SMALL):
            pass


def test_the_broker_refuses_a_file(tmp_path: Path):
    path = tmp_path / "a-file"
    path.write_text("x")
    for create in (False, True):
        with pytest.raises(StoreDirectoryError, match="is a file"):
            EmbeddedBroker(path, create=create, **SMALL)


def test_a_message_moved_to_the_dead_letter_queue_is_logged(broker, caplog):
    with Producer(broker) as producer:
        receipt = producer.send(Message("orders", b"x"), queue_id=0)
    with caplog.at_level(logging.WARNING, logger="sdk.broker.retries"):
        answer = broker.service.send_back("g", receipt.phys_offset, delay_level=-1)
    assert answer.stored
    [record] = [r for r in caplog.records if "dead-letter" in r.getMessage()]
    assert record.levelno == logging.WARNING and record.name == "sdk.broker.retries"
    text = record.getMessage()
    assert receipt.msg_id in text and "topic orders" in text and "group g" in text
    assert text.endswith("without a retry, as its consumer asked (delay level -1)")
    assert "reconsumes" not in text  # none ran out: the consumer sent it there


def test_a_message_whose_reconsumes_ran_out_is_logged_with_their_count(broker, caplog):
    with Producer(broker) as producer:
        receipt = producer.send(Message("orders", b"x"), queue_id=0)
    with caplog.at_level(logging.WARNING, logger="sdk.broker.retries"):
        answer = broker.service.send_back(
            "g", receipt.phys_offset, max_reconsume_times=2, reconsume_times=2
        )
    assert answer.stored
    [record] = [r for r in caplog.records if "dead-letter" in r.getMessage()]
    text = record.getMessage()
    assert receipt.msg_id in text and "group g" in text
    assert text.endswith("after 2 reconsumes (limit 2)")


def test_the_broker_s_reconsume_limit_is_read_at_each_send_back(broker, caplog):
    """``options.max_reconsume_times`` changed on an open broker holds for the next send-back,
    as it did before retries had a module of their own."""
    with Producer(broker) as producer:
        receipt = producer.send(Message("orders", b"x"), queue_id=0)
    broker.service.options.max_reconsume_times = 1
    with caplog.at_level(logging.WARNING, logger="sdk.broker.retries"):
        answer = broker.service.send_back("g", receipt.phys_offset, reconsume_times=1)
    assert answer.stored and answer.topic.startswith("%DLQ%")
    assert caplog.text.rstrip().endswith("after 1 reconsumes (limit 1)")


def test_a_failed_broadcast_listener_is_logged_as_dropped(broker, tmp_path: Path, caplog):
    with Producer(broker) as producer:
        producer.send(Message("orders", b"x"), queue_id=0)
    calls: list[int] = []

    def fails(messages):
        calls.append(len(messages))
        raise RuntimeError("listener bug")

    with (
        caplog.at_level(logging.WARNING, logger="sdk.consumer"),
        PushConsumer(
            broker, "g", {"orders": None}, fails,
            message_model=MessageModel.BROADCASTING, offsets_dir=str(tmp_path / "offsets"),
            consume_from=ConsumeFrom.FIRST_OFFSET,
        ),
    ):  # fmt: skip
        wait_until(lambda: calls and any("not retried" in r.getMessage() for r in caplog.records))
    texts = [r.getMessage() for r in caplog.records]
    assert not any("reconsuming later" in t for t in texts)
    assert any("listener of g raised; its messages are dropped" in t for t in texts)
    assert calls == [1]  # dropped: never delivered again


class RecordsSendBacks(InProcessTransport):
    def __init__(self, service) -> None:
        super().__init__(service)
        self.delay_levels: list[int] = []

    def send_back(self, *args, **kwargs):
        self.delay_levels.append(kwargs.get("delay_level", 0))
        return super().send_back(*args, **kwargs)


def test_a_timed_out_message_is_sent_back_at_delay_level_3(broker):
    with Producer(broker) as producer:
        producer.send(Message("orders", b"x"), queue_id=0)
    deliveries: list[int] = []
    release = threading.Event()

    def fails_twice_then_sticks(messages):
        deliveries.append(messages[0].reconsume_times)
        if len(deliveries) <= 2:
            return ConsumeResult.RECONSUME_LATER
        if len(deliveries) == 3:
            release.wait(5)  # far past the consume timeout
        return ConsumeResult.SUCCESS

    transport = RecordsSendBacks(broker.service)
    with PushConsumer(
        transport, "g", {"orders": None}, fails_twice_then_sticks,
        consume_from=ConsumeFrom.FIRST_OFFSET, consume_timeout_ms=200,
    ):  # fmt: skip
        wait_until(lambda: len(deliveries) >= 4)
        release.set()
    # Failures leave the level to the broker (3 + reconsume count); the timeout asks for 3.
    assert transport.delay_levels[:3] == [0, 0, 3]
    assert deliveries[:4] == [0, 1, 2, 3]


@pytest.mark.parametrize("reconsume_times", [2**31 - 1, 2**31, 2**40])
def test_a_send_back_whose_count_cannot_be_stored_is_refused_not_raised(
    broker, reconsume_times: int
):
    """The retry copy carries one more reconsume than it is given, in a signed 32-bit field:
    a count with no room for that is refused with a status, like any bad message, and nothing
    is stored."""
    with Producer(broker) as producer:
        producer.send(Message("orders", b"once"), queue_id=0)
    (stored,) = broker.service.store.get_messages("orders", 0, 0).messages
    answer = InProcessTransport(broker.service).send_back(
        "billing", stored.phys_offset, reconsume_times=reconsume_times
    )
    assert answer.status == "MESSAGE_ILLEGAL" and "reconsume times" in answer.detail
    assert broker.service.max_offset(retry_topic("billing"), 0) == 0
