"""The single put's fast path (:mod:`localstore.put.single`): when it is taken, and that it leaves
exactly the files the general path leaves for the same puts."""

from __future__ import annotations

import errno
import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, NoReturn

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from localstore import MessageStore, NewMessage, PutStatus, StoredMessage, StoreOptions, pack_host
from localstore.record.codec import BLANK_MAGIC, BLANK_STRUCT

from .conftest import STORE_CLOCK_READERS, TINY_GEOMETRY, StoreFactory

STORE_TIME = 1_700_000_000_123


class FixedClock:
    def time_ns(self) -> int:
        return STORE_TIME * 1_000_000


@contextmanager
def fixed_store_time() -> Iterator[None]:
    """Both put paths stamp STORE_TIME, so two stores' files can be compared byte for byte."""
    with pytest.MonkeyPatch.context() as patch:
        for module in STORE_CLOCK_READERS:
            patch.setattr(module, FixedClock())
        yield


def general_path_refused(*args: Any, **kwargs: Any) -> NoReturn:
    raise AssertionError("the general put path was taken")


def store_files(root: Path) -> dict[str, bytes]:
    """Every file the put path writes (the lock, the abort marker and config aside)."""
    return {
        str(path.relative_to(root)): path.read_bytes()
        for sub in ("commitlog", "consumequeue", "index", "timeindex", "offsetindex", "checkpoint")
        for path in sorted((root / sub).rglob("*") if (root / sub).is_dir() else [root / sub])
        if path.is_file()
    }


def read_all(store: MessageStore, topic: str, queue_id: int) -> list[StoredMessage]:
    """Every message of the queue (a get stops at a consume-queue file's end)."""
    messages: list[StoredMessage] = []
    offset = 0
    while (got := store.get_messages(topic, queue_id, offset)).messages:
        messages.extend(got.messages)
        offset = got.next_offset
    return messages


def test_a_plain_put_to_a_written_queue_takes_the_fast_path(open_store: StoreFactory) -> None:
    store = open_store(**TINY_GEOMETRY)
    first = store.put(NewMessage("Orders", b"first", 1, {"KEYS": "k1"}))
    store.append = general_path_refused  # type: ignore[method-assign]
    second = store.put(NewMessage("Orders", b"second", 1, {"TAGS": "A", "KEYS": "k2"}))
    assert (first.status, second.status) == (PutStatus.PUT_OK, PutStatus.PUT_OK)
    first_size = store.message_at(first.phys_offset).store_size
    assert (second.queue_offset, second.phys_offset) == (1, first.phys_offset + first_size)
    assert second.phys_offsets == [second.phys_offset]
    assert second.store_host_raw == first.store_host_raw
    read = store.get_messages("Orders", 1, 0, tags="A")
    assert [m.body for m in read.messages] == [b"second"]
    assert store.query_by_key("Orders", "k2")[0].body == b"second"
    assert store.message_by_offset_msg_id(second.offset_msg_id).body == b"second"


@pytest.mark.parametrize(
    ("message", "why"),
    [
        (NewMessage("Orders", b"x", 2), "a queue not written yet"),
        (NewMessage("Orders", b"x", 1, sys_flag=0x4), "a transaction record"),
        (NewMessage("Orders", b"x", 1, born_host=pack_host("::1", 1)), "an IPv6 born host"),
        (NewMessage("Orders", b"", 1), "an empty body"),
        (NewMessage("Orders", b"x" * 5000, 1), "a body over the limit"),
        (NewMessage("Orders", b"x", 1, {"P": "v" * 40000}), "properties over 32767 bytes"),
    ],
)
def test_other_shapes_take_the_general_path(
    open_store: StoreFactory, message: NewMessage, why: str
) -> None:
    store = open_store(**TINY_GEOMETRY, max_message_size=3996)  # what a 4 KiB segment holds
    store.put(NewMessage("Orders", b"first", 1))
    general: list[NewMessage] = []
    append = store.append

    def recording_append(messages: Any, **kwargs: Any) -> Any:
        general.extend(messages)
        return append(messages, **kwargs)

    store.append = recording_append  # type: ignore[method-assign]
    store.put(message)
    assert general == [message], why


def test_a_put_that_reaches_the_segment_end_rolls_through_the_general_path(
    open_store: StoreFactory,
) -> None:
    store = open_store(**TINY_GEOMETRY)
    results = [store.put(NewMessage("Orders", b"b" * 300)) for _ in range(20)]
    assert all(r.ok for r in results)
    assert [r.queue_offset for r in results] == list(range(20))
    assert len({r.phys_offset // 4096 for r in results}) >= 2  # rolled at least once
    assert [m.phys_offset for m in read_all(store, "Orders", 0)] == [r.phys_offset for r in results]


def test_a_single_put_never_ends_where_a_blank_record_must_fit(open_store: StoreFactory) -> None:
    """The append window stops 8 bytes short of the segment's end: a record that would end
    inside them rolls to the next segment behind a blank record, as the general path does."""
    store = open_store(**TINY_GEOMETRY)
    store.put(NewMessage("Orders", b"first"))  # a new queue: the general path
    second = store.put(NewMessage("Orders", b"second"))  # the fast path: the window opens
    assert store.commitlog.window_end > store.commitlog.max_offset
    overhead = store.message_at(second.phys_offset).store_size - len(b"second")
    blank_at = store.commitlog.max_offset
    room = 4096 - blank_at
    close_to_end = store.put(NewMessage("Orders", b"x" * (room - 4 - overhead)))
    assert close_to_end.ok and close_to_end.phys_offset == 4096
    view, at = store.commitlog.segment_view(blank_at)
    assert BLANK_STRUCT.unpack_from(view, at) == (room, BLANK_MAGIC)
    assert [m.body[:1] for m in read_all(store, "Orders", 0)] == [b"f", b"s", b"x"]


def test_single_puts_have_the_next_segment_prepared_from_half_way(
    open_store: StoreFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With warm segments the append window ends where the next segment is due to be
    prepared, so the put that crosses half the segment asks for it."""
    store = open_store(**TINY_GEOMETRY, options=StoreOptions(warm_segments=True))
    allocator = store.commitlog._allocator
    assert allocator is not None
    asked: list[int] = []
    prepare = allocator.prepare
    monkeypatch.setattr(allocator, "prepare", lambda start: (asked.append(start), prepare(start)))
    ends = []
    while store.commitlog.max_offset < 2048 + 200:
        ends.append(store.put(NewMessage("Orders", b"b" * 100)).phys_offset)
    assert asked == [4096]
    assert all(offset < 4096 for offset in ends)


def test_a_closed_store_answers_a_single_put_with_a_status(open_store: StoreFactory) -> None:
    store = open_store(**TINY_GEOMETRY)
    store.put(NewMessage("Orders", b"first"))
    store.close()
    assert store.put(NewMessage("Orders", b"late")).status is PutStatus.SERVICE_NOT_AVAILABLE


@pytest.mark.parametrize("flush_mode", ["async", "sync"])
def test_single_puts_read_back_under_either_flush_mode(
    open_store: StoreFactory, flush_mode: str
) -> None:
    store = open_store(**TINY_GEOMETRY, flush_mode=flush_mode)
    results = [store.put(NewMessage("Orders", bytes([i]) * 50)) for i in range(30)]
    assert all(r.status is PutStatus.PUT_OK for r in results)
    if flush_mode == "sync":
        assert store.commitlog.flushed_offset >= results[-1].phys_offset
        # Under sync flush every record goes through the write-behind list: no append window.
        assert (store.commitlog.window, store.commitlog.window_end) == (None, -1)
    else:
        assert store.commitlog.window_end >= store.commitlog.max_offset
    assert [m.body[0] for m in read_all(store, "Orders", 0)] == list(range(30))


plain_messages = st.builds(
    NewMessage,
    topic=st.sampled_from(["T", "Orders", "%RETRY%" + "g" * 130]),
    body=st.binary(min_size=1, max_size=400),
    queue_id=st.integers(0, 1),
    properties=st.fixed_dictionaries(
        {},
        optional={
            "TAGS": st.sampled_from(["TagA", "标签", ""]),
            "KEYS": st.sampled_from(["k1", "k1 k2", "键"]),
            "UNIQ_KEY": st.just("C0A8000A10921B6D358647B760010000"),
        },
    ),
    flag=st.integers(0, 3),
    sys_flag=st.sampled_from([0, 0, 0, 0x4, 0x8]),
    born_timestamp=st.sampled_from([0, 1_600_000_000_000]),
    born_host=st.sampled_from([pack_host("10.0.0.5", 4242), pack_host("::1", 4242)]),
    reconsume_times=st.integers(0, 2),
)


@pytest.mark.parametrize("warm_segments", [False, True])
@settings(max_examples=30, deadline=None)
@given(messages=st.lists(plain_messages, min_size=1, max_size=30))
def test_single_puts_leave_the_files_batches_of_one_leave(
    warm_segments: bool, messages: list[NewMessage]
) -> None:
    """store.put (fast path where the shape allows), the same puts with every third one a batch
    of one, and store.put_batch([m]) for every message (always the general path) write the same
    commitlog, consume queues, index files and checkpoint. The batches between single puts move
    the commitlog on behind the single put's append window and fill consume-queue files behind it;
    with warm segments the window also stops where the next segment is prepared."""
    geometry = {**TINY_GEOMETRY, "index_slots": 16, "index_entries": 64}
    options = StoreOptions(store_host="127.0.0.1:10911", warm_segments=warm_segments)
    files = []
    with tempfile.TemporaryDirectory() as tmp, fixed_store_time():
        for how in ("single", "mixed", "batch"):
            root = Path(tmp) / how
            with MessageStore(root, options=options, **geometry) as store:
                statuses = [
                    (
                        store.put(m)
                        if how == "single" or (how == "mixed" and i % 3)
                        else store.put_batch([m])
                    ).status
                    for i, m in enumerate(messages)
                ]
            files.append((statuses, store_files(root)))
    assert files[0] == files[2]
    assert files[1] == files[2]


def test_a_disk_that_refuses_blocks_gets_a_status_not_an_exception(
    open_store: StoreFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = open_store(**TINY_GEOMETRY)  # segments not warmed: blocks are reserved as they fill
    first = store.put(NewMessage("Orders", b"first"))
    segment = store.commitlog.segments.segments[-1]
    segment.reserved = segment.wrote_position  # the next write must reserve blocks

    def no_space(fd: int, offset: int, length: int) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "posix_fallocate", no_space)
    refused = store.put(NewMessage("Orders", b"second"))
    assert refused.status is PutStatus.CREATE_MAPPED_FILE_FAILED
    assert "No space left on device" in refused.detail
    monkeypatch.undo()
    third = store.put(NewMessage("Orders", b"third"))
    assert third.ok and third.queue_offset == first.queue_offset + 1  # the refusal took none
    assert [m.body for m in read_all(store, "Orders", 0)] == [b"first", b"third"]
