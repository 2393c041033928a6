"""Shared helpers for the localstore tests: store factories, message builders, fixture stores.

Fixture stores are always copied or extracted into ``tmp_path`` first: opening a store may modify
it (recovery truncates, the geometry gets recorded, the lock file is rewritten).
"""

from __future__ import annotations

import asyncio
import gzip
import json
import shutil
import tarfile
from collections.abc import Callable, Coroutine, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest

from localstore import MessageStore, NewMessage, StoreOptions
from localstore.commitlog.flush import DurableCallback, FlushWaiter

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
ROCKETMQ_DIR = FIXTURES / "rocketmq-4.9.8"
REFERENCE_DIR = FIXTURES / "reference-encoder"

# The modules whose ``time`` stamps a put's store time (both put paths, and retention's clock):
# a test that fixes the store time patches each.
STORE_CLOCK_READERS = (
    "localstore.store.time",
    "localstore.put.path.time",
    "localstore.put.single.time",
)

# A geometry small enough that a few dozen messages roll commitlog and consume-queue files.
TINY_GEOMETRY: dict[str, Any] = {"commitlog_file_size": 4096, "cq_entries_per_file": 4}

StoreFactory = Callable[..., MessageStore]
T = TypeVar("T")
RunOnLoop = Callable[[Coroutine[Any, Any, Any]], Any]


@pytest.fixture(params=["asyncio", "uvloop"])
def run_on_loop(request: pytest.FixtureRequest) -> RunOnLoop:
    """Run a coroutine to completion on asyncio's own event loop, or on uvloop's."""
    factory = None
    if request.param == "uvloop":
        import uvloop

        factory = uvloop.new_event_loop

    def run(main: Coroutine[Any, Any, T]) -> T:
        with asyncio.Runner(loop_factory=factory) as runner:
            return runner.run(main)

    return run


@pytest.fixture
def store_dir(tmp_path: Path) -> Path:
    return tmp_path / "store"


@pytest.fixture
def open_store(store_dir: Path) -> Iterator[StoreFactory]:
    """Open a MessageStore (default directory: ``store_dir``); every store opened through this
    factory is closed at teardown, so a failing test leaves no lock or mapping behind."""
    opened: list[MessageStore] = []

    def factory(
        root: Path | None = None, *, options: StoreOptions | None = None, **geometry: Any
    ) -> MessageStore:
        store = MessageStore(root if root is not None else store_dir, options=options, **geometry)
        opened.append(store)
        return store

    yield factory
    for store in reversed(opened):
        store.close()


@pytest.fixture
def tiny_store(open_store: StoreFactory) -> MessageStore:
    """A store with 4 KiB commitlog segments and consume-queue files of 4 units."""
    return open_store(**TINY_GEOMETRY)


@pytest.fixture
def store(open_store: StoreFactory) -> MessageStore:
    """A store with the default (RocketMQ) geometry."""
    return open_store()


def message(
    topic: str = "TopicTest",
    body: bytes = b"hello",
    *,
    queue_id: int = 0,
    tags: str | None = None,
    keys: str | None = None,
    properties: dict[str, str] | None = None,
    **fields: Any,
) -> NewMessage:
    """A NewMessage with TAGS/KEYS given as keywords."""
    props = dict(properties or {})
    if tags is not None:
        props["TAGS"] = tags
    if keys is not None:
        props["KEYS"] = keys
    return NewMessage(topic, body, queue_id=queue_id, properties=props, **fields)


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as handle:
        return [json.loads(line) for line in handle if line.strip()]


def extract_rocketmq_stores(dest: Path) -> Path:
    """Extract RocketMQ 4.9.8's ``stores.tar.gz`` into ``dest``; returns ``dest``."""
    with tarfile.open(ROCKETMQ_DIR / "stores.tar.gz") as archive:
        archive.extractall(dest, filter="data")
    return dest


def copy_reference_store(dest: Path) -> Path:
    """Copy the reference encoder's store to ``dest/store``; returns that directory."""
    target = dest / "store"
    shutil.copytree(REFERENCE_DIR / "store", target)
    return target


def reference_geometry() -> dict[str, Any]:
    return json.loads((REFERENCE_DIR / "geometry.json").read_text())


class GatheredFlushRequests:
    """A ``FlushRequests`` that only keeps the requests: the test answers them or drives the
    flushes itself."""

    def __init__(self) -> None:
        self.waiters: list[FlushWaiter] = []

    def request(self, end_offset: int, callback: DurableCallback) -> FlushWaiter:
        waiter = FlushWaiter(end_offset, callback)
        self.waiters.append(waiter)
        return waiter
