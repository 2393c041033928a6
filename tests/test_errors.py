"""``except QuiverError`` catches whatever the public API raises: each entry point (producer,
consumers, broker, offset stores, MessageStore, the CLI) is driven into each of its errors on
real files, and the error must be a QuiverError whose message names the problem."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from localstore import MessageStore, NewMessage
from localstore.errors import StoreError
from localstore.record.tags import TagFilter
from offsetstore import (
    ConsumerOffsetTable,
    LocalFileOffsetStore,
    MessageQueue,
    OffsetStoreError,
)
from sdk import (
    ArgumentTypeError,
    EmbeddedBroker,
    IllegalStateError,
    InvalidArgumentError,
    Message,
    Producer,
    PullConsumer,
    PushConsumer,
    QuiverError,
)
from sdk.cli.main import _expected_status
from sdk.cli.main import main as cli_main
from sdk.errors import QuiverError as QuiverErrorFromErrors

REPO = Path(__file__).resolve().parents[1]
SMALL = {"commitlog_file_size": 1 << 20}


def a_file(tmp_path: Path) -> Path:
    path = tmp_path / "a-file"
    path.write_text("not a directory")
    return path


def a_closed_store(tmp_path: Path) -> MessageStore:
    store = MessageStore(tmp_path / "closed", **SMALL)
    store.close()
    return store


def a_damaged_store_config(tmp_path: Path) -> Path:
    root = tmp_path / "damaged-config"
    MessageStore(root, **SMALL).close()
    for name in ("store.json", "store.json.bak"):
        (root / "config" / name).write_text("{not json")
    return root


def a_damaged_offsets_file(tmp_path: Path) -> Path:
    root = tmp_path / "damaged-offsets"
    EmbeddedBroker(root, **SMALL).close()
    for name in ("consumerOffset.json", "consumerOffset.json.bak"):
        (root / "config" / name).write_text("{not json")
    return root


def locked_twice(tmp_path: Path) -> None:
    with MessageStore(tmp_path / "locked", **SMALL):
        MessageStore(tmp_path / "locked", **SMALL)


def broker_locked_twice(tmp_path: Path) -> None:
    with EmbeddedBroker(tmp_path / "locked", **SMALL):
        EmbeddedBroker(tmp_path / "locked", **SMALL)


def geometry_mismatch(tmp_path: Path) -> None:
    MessageStore(tmp_path / "geometry", **SMALL).close()
    MessageStore(tmp_path / "geometry", commitlog_file_size=2 << 20)


def not_a_store(tmp_path: Path) -> None:
    (tmp_path / "project").mkdir()
    (tmp_path / "project" / "notes.txt").write_text("mine")
    EmbeddedBroker(tmp_path / "project", **SMALL)


def with_broker(tmp_path: Path, use: Callable[[EmbeddedBroker], object]) -> None:
    with EmbeddedBroker(tmp_path / "broker", **SMALL) as broker:
        use(broker)


def send_one(broker: EmbeddedBroker, message: Message) -> None:
    with Producer(broker) as producer:
        producer.send(message)


def send_after_close(broker: EmbeddedBroker) -> None:
    producer = Producer(broker)
    producer.close()
    producer.send(Message("orders", b"x"))


def poll_unsubscribed(broker: EmbeddedBroker) -> None:
    with PullConsumer(broker, "g") as consumer:
        consumer.poll()


def subscribe_after_assign(broker: EmbeddedBroker) -> None:
    with PullConsumer(broker, "g") as consumer:
        consumer.assign([MessageQueue("orders", broker.service.broker_name, 0)])
        consumer.subscribe(["orders"])


def offsets_of_a_file(tmp_path: Path) -> None:
    store = LocalFileOffsetStore("client", "g", a_file(tmp_path))
    store.update_offset(MessageQueue("t", "b", 0), 5, False)
    store.persist_all([MessageQueue("t", "b", 0)])


def damaged_local_offsets(tmp_path: Path) -> None:
    store = LocalFileOffsetStore("client", "g", tmp_path / "offsets")
    store.path.parent.mkdir(parents=True)
    store.path.write_text("{not json")
    store.load()


def noop(messages: object) -> None:
    return None


CASES: dict[str, Callable[[Path], object]] = {
    # MessageStore
    "store on a file": lambda tmp: MessageStore(a_file(tmp)),
    "store locked": locked_twice,
    "store closed": lambda tmp: a_closed_store(tmp).get_messages("t", 0, 0),
    "store geometry mismatch": geometry_mismatch,
    "store unknown geometry": lambda tmp: MessageStore(tmp / "s", nonsense=1),
    "store geometry out of range": lambda tmp: MessageStore(tmp / "s", commitlog_file_size=3),
    "store damaged config": lambda tmp: MessageStore(a_damaged_store_config(tmp)),
    "store bad max_count": lambda tmp: MessageStore(tmp / "s", **SMALL).get_messages(
        "t", 0, 0, max_count=0
    ),
    # EmbeddedBroker
    "broker on a file": lambda tmp: EmbeddedBroker(a_file(tmp)),
    "broker locked": broker_locked_twice,
    "broker on a directory that is not a store": not_a_store,
    "broker damaged offsets file": lambda tmp: EmbeddedBroker(a_damaged_offsets_file(tmp)),
    # Producer
    "producer invalid topic": lambda tmp: with_broker(
        tmp, lambda b: send_one(b, Message("bad topic", b"x"))
    ),
    "producer tag with ||": lambda tmp: with_broker(
        tmp, lambda b: send_one(b, Message("orders", b"x", tags="a||b"))
    ),
    "producer closed": lambda tmp: with_broker(tmp, send_after_close),
    "producer negative retries": lambda tmp: with_broker(tmp, lambda b: Producer(b, retries=-1)),
    "producer not a broker": lambda tmp: Producer(object()),
    # consumers
    "push consumer blank group": lambda tmp: with_broker(
        tmp, lambda b: PushConsumer(b, " ", {"orders": None}, noop)
    ),
    "push consumer listener not callable": lambda tmp: with_broker(
        tmp,
        lambda b: PushConsumer(b, "g", {"orders": None}, "not callable"),  # type: ignore[arg-type]
    ),
    "push consumer no threads": lambda tmp: with_broker(
        tmp, lambda b: PushConsumer(b, "g", {"orders": None}, noop, consume_threads=0)
    ),
    "push consumer bad tag expression": lambda tmp: with_broker(
        tmp, lambda b: PushConsumer(b, "g", {"orders": "||"}, noop)
    ),
    "pull consumer invalid group": lambda tmp: with_broker(tmp, lambda b: PullConsumer(b, "a b")),
    "pull consumer poll before subscribe": lambda tmp: with_broker(tmp, poll_unsubscribed),
    "pull consumer subscribe after assign": lambda tmp: with_broker(tmp, subscribe_after_assign),
    # offset stores
    "local offsets bad client id": lambda tmp: LocalFileOffsetStore("a/b", "g", tmp),
    "local offsets under a file": offsets_of_a_file,
    "local offsets damaged file": damaged_local_offsets,
    "local offsets negative offset": lambda tmp: LocalFileOffsetStore("c", "g", tmp).update_offset(
        MessageQueue("t", "b", 0), -1, False
    ),
    "broker offset table @ in a group": lambda tmp: ConsumerOffsetTable(tmp).commit(
        "g@x", "t", 0, 1
    ),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_every_public_error_is_a_quiver_error(tmp_path: Path, case: str):
    with pytest.raises(QuiverError) as caught:
        CASES[case](tmp_path)
    assert str(caught.value).strip(), f"{case}: {type(caught.value).__name__} without a message"


def test_the_tree_has_one_root():
    assert QuiverErrorFromErrors is QuiverError
    assert issubclass(StoreError, QuiverError)
    assert issubclass(OffsetStoreError, QuiverError)
    assert issubclass(InvalidArgumentError, ValueError)
    assert issubclass(ArgumentTypeError, TypeError)
    assert issubclass(IllegalStateError, RuntimeError)


def test_an_async_consumer_error_is_a_quiver_error(tmp_path: Path):
    from sdk import AsyncPullConsumer

    async def poll_unsubscribed_async() -> None:
        with EmbeddedBroker(tmp_path / "b", **SMALL) as broker:
            async with AsyncPullConsumer(broker, "g") as consumer:
                await consumer.poll()

    with pytest.raises(IllegalStateError, match=r"subscribe\(\) or assign\(\)"):
        asyncio.run(poll_unsubscribed_async())


def test_the_cli_exits_with_one_line_naming_the_problem(tmp_path: Path, capsys):
    with MessageStore(tmp_path / "locked", **SMALL):
        assert cli_main(["store", "verify", str(tmp_path / "locked")]) == 1
    err = capsys.readouterr().err
    assert err.startswith("quiver: error: store") and "already open" in err
    assert "Traceback" not in err


@pytest.mark.parametrize(
    ("error", "status"),
    [
        (InvalidArgumentError("bad value"), 2),
        (ArgumentTypeError("bad type"), 2),
        (IllegalStateError("not now"), 1),
        (OffsetStoreError("offsets"), 1),
        (QuiverError("any"), 1),
    ],
)
def test_the_cli_treats_every_quiver_error_as_expected(error: QuiverError, status: int):
    assert _expected_status(error) == status


@pytest.mark.integration
def test_the_cli_process_exits_nonzero_without_a_traceback(tmp_path: Path):
    root = a_damaged_offsets_file(tmp_path)
    command = ["offsets", "show", "--data", str(root), "--group", "g"]
    done = subprocess.run(
        [sys.executable, "-m", "sdk.cli.main", *command],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 1
    assert done.stderr.startswith("quiver: error: cannot read consumer offsets")
    assert "Traceback" not in done.stderr


def test_the_record_format_errors_the_store_hands_out_are_quiver_errors(tmp_path: Path):
    """The record package sits below the store, but what it raises reaches users through it: a
    message asked for where no record starts, a malformed offsetMsgId, a tag expression that
    names no tag, an unknown StoredMessage field."""
    with MessageStore(tmp_path / "store", **SMALL) as store:
        store.put(NewMessage("Errors", b"x" * 50, 0))
        attempts: list[Callable[[], object]] = [
            lambda: store.message_at(3),
            lambda: store.message_by_offset_msg_id("zz" * 16),
            lambda: store.message_by_offset_msg_id("abc"),
            lambda: store.message_by_offset_msg_id(" " * 32),
            lambda: TagFilter.parse("||"),
            lambda: store.message_at(0).replace(no_such_field=1),
        ]
        for attempt in attempts:
            with pytest.raises(QuiverError) as raised:
                attempt()
            assert str(raised.value)


def test_the_store_errors_an_application_meets_are_named_in_sdk(tmp_path: Path):
    """A locked store and a directory that is no store are caught by their names from sdk,
    the same classes as localstore's."""
    import sdk
    from localstore import errors

    assert {"StoreDirectoryError", "StoreLockedError"} <= set(sdk.__all__)
    assert sdk.StoreLockedError is errors.StoreLockedError
    assert sdk.StoreDirectoryError is errors.StoreDirectoryError
    with EmbeddedBroker(tmp_path / "b", **SMALL), pytest.raises(sdk.StoreLockedError):
        EmbeddedBroker(tmp_path / "b", **SMALL)
    with pytest.raises(sdk.StoreDirectoryError, match="is a file"):
        EmbeddedBroker(a_file(tmp_path), **SMALL)


def test_naming_a_store_error_from_sdk_loads_no_store_engine():
    code = (
        "import sys, sdk\n"
        "sdk.StoreLockedError, sdk.StoreDirectoryError\n"
        "print('localstore.errors' in sys.modules, 'localstore.store' in sys.modules)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True
    )
    assert done.stdout.split() == ["True", "False"]
