"""A contract every :class:`~offsetstore.base.OffsetStore` implementation must pass.

``check_offset_store(factory)`` runs the checks one after another and raises
:class:`AssertionError` with a message naming the check at the first violation. It is a plain
function, so any package's tests can call it (``check_offset_store(lambda: MyStore(...))``).

The factory contract:

* every call returns a **new store instance**, ``load()``-ed if the implementation needs it
  (the suite never calls ``load()`` itself);
* all instances returned by one factory share **one durable backend** (the same file, the same
  broker and group): what one instance persisted, a later instance reads with
  ``ReadOffsetType.STORE``;
* the backend may hold other data. The suite uses topics named ``contract-<random>-<check>``
  that nobody else uses, so it can run against a backend that is not fresh, and several checks
  can share one backend.

Checked: unknown queue is NOT_FOUND from memory (and from the store); update/read in memory;
``increase_only`` keeps the maximum; overwrite without it; freeze ignores updates until
``remove_offset``; persist + a new instance with READ_FROM_STORE; MEMORY_FIRST_THEN_STORE;
``persist_all`` of a subset makes exactly that subset durable and keeps what the store held for
other queues; ``remove_offset``; ``clone_offset_table`` per topic; 8 threads updating with
``increase_only`` end at the maximum.

Left to the implementation (not checked): what ``persist_all`` does to in-memory entries it was
not given (RocketMQ's RemoteBrokerOffsetStore drops them, LocalFileOffsetStore keeps them).
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable
from dataclasses import dataclass

from offsetstore.base import NOT_FOUND, MessageQueue, OffsetStore, ReadOffsetType

__all__ = ["check_offset_store"]

StoreFactory = Callable[[], OffsetStore]


@dataclass(frozen=True)
class _Context:
    factory: StoreFactory
    topic: str
    absent_in_store: tuple[object, ...]  # what READ_FROM_STORE may answer for a queue never stored


MEMORY = ReadOffsetType.MEMORY
STORE = ReadOffsetType.STORE
BROKER = "contract-broker"


def check_offset_store(factory: StoreFactory, *, zero_if_not_found: bool = False) -> None:
    """Run every check against stores made by ``factory``; AssertionError on a violation.

    ``zero_if_not_found``: the store may answer 0 instead of NOT_FOUND for a queue it never
    stored (a RocketMQ broker does for a young queue whose offset 0 is still in memory); the
    checks then accept either answer from READ_FROM_STORE for a never-persisted queue.
    """
    run = uuid.uuid4().hex[:8]
    absent: tuple[object, ...] = (NOT_FOUND, 0) if zero_if_not_found else (NOT_FOUND,)
    for check in _CHECKS:
        topic = f"contract-{run}-{check.__name__.removeprefix('_check_')}"
        check(_Context(factory, topic, absent))


def _expect(
    store: OffsetStore, queue: MessageQueue, read_type: ReadOffsetType, want: object, check: str
) -> None:
    got = store.read_offset(queue, read_type)
    if got != want or type(got) is not type(want):
        raise AssertionError(
            f"{check}: read_offset({queue}, {read_type.name}) = {got!r}, expected {want!r}"
        )


def _expect_absent(
    ctx: _Context, store: OffsetStore, queue: MessageQueue, read_type: ReadOffsetType, check: str
) -> None:
    got = store.read_offset(queue, read_type)
    if not any(got == ok and type(got) is type(ok) for ok in ctx.absent_in_store):
        raise AssertionError(
            f"{check}: read_offset({queue}, {read_type.name}) = {got!r}, "
            f"expected one of {ctx.absent_in_store!r}"
        )


def _check_unknown_queue(ctx: _Context) -> None:
    factory, topic = ctx.factory, ctx.topic
    store = factory()
    queue = MessageQueue(topic, BROKER, 0)
    _expect(store, queue, MEMORY, NOT_FOUND, "unknown queue")
    if store.clone_offset_table(topic) != {}:
        raise AssertionError("unknown queue: clone_offset_table of an unused topic is not empty")
    _expect_absent(ctx, store, queue, STORE, "unknown queue")
    _expect_absent(ctx, store, queue, ReadOffsetType.MEMORY_FIRST_THEN_STORE, "unknown queue")


def _check_update_and_read(ctx: _Context) -> None:
    factory, topic = ctx.factory, ctx.topic
    store = factory()
    queue = MessageQueue(topic, BROKER, 1)
    store.update_offset(queue, 17, increase_only=False)
    _expect(store, queue, MEMORY, 17, "update then read")
    _expect(store, queue, ReadOffsetType.MEMORY_FIRST_THEN_STORE, 17, "update then read")
    _expect(store, MessageQueue(topic, BROKER, 2), MEMORY, NOT_FOUND, "update then read (other)")


def _check_increase_only(ctx: _Context) -> None:
    factory, topic = ctx.factory, ctx.topic
    store = factory()
    queue = MessageQueue(topic, BROKER, 0)
    store.update_offset(queue, 100, increase_only=True)
    store.update_offset(queue, 40, increase_only=True)
    _expect(store, queue, MEMORY, 100, "increase_only keeps the maximum")
    store.update_offset(queue, 150, increase_only=True)
    _expect(store, queue, MEMORY, 150, "increase_only accepts a larger offset")


def _check_overwrite(ctx: _Context) -> None:
    factory, topic = ctx.factory, ctx.topic
    store = factory()
    queue = MessageQueue(topic, BROKER, 0)
    store.update_offset(queue, 100, increase_only=False)
    store.update_offset(queue, 40, increase_only=False)
    _expect(store, queue, MEMORY, 40, "overwrite without increase_only")


def _check_freeze(ctx: _Context) -> None:
    factory, topic = ctx.factory, ctx.topic
    store = factory()
    queue = MessageQueue(topic, BROKER, 0)
    store.update_offset(queue, 10, increase_only=False)
    store.update_and_freeze_offset(queue, 500)
    _expect(store, queue, MEMORY, 500, "freeze sets the offset")
    store.update_offset(queue, 900, increase_only=True)
    store.update_offset(queue, 3, increase_only=False)
    _expect(store, queue, MEMORY, 500, "a frozen entry ignores updates")
    store.remove_offset(queue)
    _expect(store, queue, MEMORY, NOT_FOUND, "remove_offset drops a frozen entry")
    store.update_offset(queue, 7, increase_only=False)
    _expect(store, queue, MEMORY, 7, "after remove_offset updates apply again")


def _check_persist_round_trip(ctx: _Context) -> None:
    factory, topic = ctx.factory, ctx.topic
    writer = factory()
    queue = MessageQueue(topic, BROKER, 3)
    writer.update_offset(queue, 1470, increase_only=True)
    writer.persist(queue)
    reader = factory()
    _expect(reader, queue, STORE, 1470, "persist then READ_FROM_STORE in a new instance")
    _expect(reader, queue, MEMORY, 1470, "READ_FROM_STORE puts the answer into memory")
    other = factory()
    _expect(
        other,
        queue,
        ReadOffsetType.MEMORY_FIRST_THEN_STORE,
        1470,
        "MEMORY_FIRST_THEN_STORE falls back to the store",
    )


def _check_persist_all_subset(ctx: _Context) -> None:
    factory, topic = ctx.factory, ctx.topic
    writer = factory()
    queues = [MessageQueue(topic, BROKER, i) for i in range(4)]
    for i, queue in enumerate(queues):
        writer.update_offset(queue, 100 + i, increase_only=False)
    writer.persist_all(queues[:2])
    reader = factory()
    for i, queue in enumerate(queues[:2]):
        _expect(reader, queue, STORE, 100 + i, "persist_all persists the queues given")
    for queue in queues[2:]:
        _expect_absent(ctx, reader, queue, STORE, "persist_all persists only the queues given")
    # What persist_all does to in-memory entries it was not given is implementation-defined
    # (RocketMQ's RemoteBrokerOffsetStore drops them), so update again before the second call.
    writer.update_offset(queues[0], 200, increase_only=True)
    writer.update_offset(queues[3], 103, increase_only=True)
    writer.persist_all([queues[0], queues[3]])
    reader = factory()
    _expect(reader, queues[0], STORE, 200, "a second persist_all overwrites the stored offset")
    _expect(reader, queues[1], STORE, 101, "persist_all keeps stored queues it was not given")
    _expect(reader, queues[3], STORE, 103, "a second persist_all adds queues")


def _check_remove(ctx: _Context) -> None:
    store = _forget_one(ctx, "remove_offset", lambda store, queue: store.remove_offset(queue))
    if MessageQueue(ctx.topic, BROKER, 1) in store.clone_offset_table(ctx.topic):
        raise AssertionError("remove_offset: the queue is still in clone_offset_table")
    store.remove_offset(MessageQueue(ctx.topic, BROKER, 1))  # removing twice is harmless


def _check_discard(ctx: _Context) -> None:
    store = _forget_one(ctx, "discard", lambda store, queue: store.discard(queue))
    if MessageQueue(ctx.topic, BROKER, 1) in store.pending():
        raise AssertionError("discard: a commit of the lost queue still waits to be retried")


def _forget_one(
    ctx: _Context, how: str, forget: Callable[[OffsetStore, MessageQueue], None]
) -> OffsetStore:
    """Two queues with offsets; queue 1 forgotten with ``forget`` (the store's ``how``).
    Checks that it is gone from memory and queue 0 is not; answers the store."""
    store = ctx.factory()
    kept, forgotten = MessageQueue(ctx.topic, BROKER, 0), MessageQueue(ctx.topic, BROKER, 1)
    store.update_offset(kept, 5, increase_only=False)
    store.update_offset(forgotten, 6, increase_only=False)
    forget(store, forgotten)
    _expect(store, forgotten, MEMORY, NOT_FOUND, f"{how} forgets the queue")
    _expect(store, kept, MEMORY, 5, f"{how} keeps the other queues")
    return store


def _check_clone_per_topic(ctx: _Context) -> None:
    factory, topic = ctx.factory, ctx.topic
    store = factory()
    other_topic = topic + "-other"
    mine = {MessageQueue(topic, BROKER, i): 10 * i for i in range(3)}
    mine[MessageQueue(topic, BROKER + "-b", 0)] = 99
    for queue, offset in mine.items():
        store.update_offset(queue, offset, increase_only=False)
    store.update_offset(MessageQueue(other_topic, BROKER, 0), 1, increase_only=False)
    clone = store.clone_offset_table(topic)
    if clone != mine:
        raise AssertionError(f"clone_offset_table({topic!r}) = {clone!r}, expected {mine!r}")
    clone[MessageQueue(topic, BROKER, 0)] = 12345
    _expect(store, MessageQueue(topic, BROKER, 0), MEMORY, 0, "clone_offset_table is a copy")


def _check_concurrent_increase_only(ctx: _Context) -> None:
    factory, topic = ctx.factory, ctx.topic
    store = factory()
    queue = MessageQueue(topic, BROKER, 0)
    threads_n, per_thread = 8, 2000
    barrier = threading.Barrier(threads_n)
    errors: list[BaseException] = []

    def worker(index: int) -> None:
        try:
            barrier.wait()
            # interleaved, not monotonic per thread: offsets index, index + 8, ... shuffled
            for step in range(per_thread):
                offset = (step * 7919 % per_thread) * threads_n + index
                store.update_offset(queue, offset, increase_only=True)
        except BaseException as exc:  # reported below, in the calling thread
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(threads_n)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if errors:
        raise AssertionError(f"concurrent update_offset raised {errors[0]!r}") from errors[0]
    _expect(
        store,
        queue,
        MEMORY,
        per_thread * threads_n - 1,
        "8 threads updating with increase_only end at the maximum",
    )


_CHECKS: tuple[Callable[[_Context], None], ...] = (
    _check_unknown_queue,
    _check_update_and_read,
    _check_increase_only,
    _check_overwrite,
    _check_freeze,
    _check_persist_round_trip,
    _check_persist_all_subset,
    _check_remove,
    _check_discard,
    _check_clone_per_topic,
    _check_concurrent_increase_only,
)
