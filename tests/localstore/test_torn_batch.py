"""A batch put killed while its records are written into the commitlog.

A kill keeps the page cache: what the file holds afterwards is whatever the process had written
when it died. Whatever that is, the log holds a prefix of the batch's records, each whole,
and recovery finds nothing damaged: no record of the batch may be readable while an earlier
one is not (recovery steps over damage to the valid records after it, so such a record would
leave a "damaged" range behind a plain kill). Recovery then keeps all of the batch or none of
it: a prefix of k of its n records (never acknowledged) is cut, and its report says so.

The states a kill can leave are taken from a real batch put: under async flush (stores into the
segment's mapping) the segment's bytes before every line the writing code runs, as a kill
between two lines leaves them; under sync flush (writes through the file, which the kernel
applies page by page from the start, a kill stopping it only between pages) every prefix of
whole pages of each write. Each state is laid onto a copy of the store as it was before the
put, and recovered as after a kill.
"""

from __future__ import annotations

import os
import shutil
import struct
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from types import FrameType
from typing import Any

import pytest

from localstore import MessageStore, NewMessage, PutStatus, UniformBatch
from localstore.files import mapped_file
from localstore.files.mapped_file import MappedFile
from localstore.record.properties import (
    PROPERTY_PUT_RECORDS,
    decode_written_properties,
    encode_properties,
)
from localstore.record.walk import walk_segment
from localstore.recovery.verify import verify_store

TOPIC = "Torn"
GEOMETRY = {"commitlog_file_size": 64 * 1024, "cq_entries_per_file": 64}
_PAGE = 4096
Write = tuple[int, bytes]  # (position in the segment file, bytes)


@contextmanager
def _before_every_line_of(path: str, call: Callable[[], None]) -> Iterator[None]:
    """Calls ``call`` before each line this thread runs in the source file ``path`` (a kill
    between two lines leaves what ``call`` sees)."""

    def on_line(frame: FrameType, event: str, arg: Any) -> Any:
        if event == "line":
            call()
        return on_line

    def on_call(frame: FrameType, event: str, arg: Any) -> Any:
        return on_line if frame.f_code.co_filename == path else None

    previous = sys.gettrace()  # coverage's tracer, when it runs: given back after
    sys.settrace(on_call)
    try:
        yield
    finally:
        sys.settrace(previous)


def _async_states(segment: MappedFile, put: Callable[[], None]) -> list[list[Write]]:
    """The segment's bytes from its write position on, before every line the mapping's writer
    runs during ``put`` and after it."""
    start = segment.wrote_position
    states: list[list[Write]] = []

    def snapshot() -> None:
        states.append([(start, bytes(segment.view[start:]))])

    with _before_every_line_of(mapped_file.__file__, snapshot):
        put()
    snapshot()
    return states


def _sync_states(
    segment: MappedFile, put: Callable[[], None], monkeypatch: pytest.MonkeyPatch
) -> list[list[Write]]:
    """The writes into the segment's file during ``put``: the first k whole, then each prefix
    of whole pages of the next one, or nothing of it."""
    writes: list[Write] = []
    fd = segment._fd
    real_pwrite, real_pwritev = os.pwrite, os.pwritev

    def pwrite(to: int, data: Any, position: int) -> int:
        if to == fd:
            writes.append((position, bytes(data)))
        return real_pwrite(to, data, position)

    def pwritev(to: int, buffers: list[Any], position: int, flags: int = 0) -> int:
        if to == fd:
            writes.append((position, b"".join(bytes(b) for b in buffers)))
        return real_pwritev(to, buffers, position, flags)

    with monkeypatch.context() as patch:
        patch.setattr(os, "pwrite", pwrite)
        patch.setattr(os, "pwritev", pwritev)
        put()
    states = []
    for k in range(len(writes) + 1):
        states.append(writes[:k])
        if k < len(writes):
            position, data = writes[k]
            cuts = range(_PAGE - position % _PAGE, len(data), _PAGE)
            states += [[*writes[:k], (position, data[:cut])] for cut in cuts]
    return states


def _killed_states_of_a_batch_put(
    root: Path, mode: str, bodies: list[bytes], monkeypatch: pytest.MonkeyPatch
) -> tuple[Path, int, list[list[Write]]]:
    """Writes a few messages, keeps a copy of the store (``before``), then puts ``bodies`` as
    one batch; returns the segment file the batch went to, the batch's position in it and the
    states a kill can leave."""
    with MessageStore(root, flush_mode=mode, **GEOMETRY) as store:
        for i in range(5):
            assert store.put(NewMessage(TOPIC, f"before-{i}".encode(), 0)).ok
    shutil.copytree(root, root.parent / "before")
    with MessageStore(root, flush_mode=mode, **GEOMETRY) as store:
        segment = store.commitlog.segments.segments[-1]
        results = []

        def put() -> None:
            results.append(store.put_batch([NewMessage(TOPIC, body, 0) for body in bodies]))

        if mode == "sync":
            states = _sync_states(segment, put, monkeypatch)
        else:
            states = _async_states(segment, put)
        assert results[0].ok and len(results[0].phys_offsets) == len(bodies)
        start = results[0].phys_offsets[0] - segment.start_offset
        return segment.path.relative_to(root), start, states


def _whole_records_from(path: Path, start: int) -> int:
    """How many valid records the segment file ``path`` holds from ``start`` on, one after
    another (what a kill left of the batch, before any recovery)."""
    data = path.read_bytes()
    return walk_segment(data, 0, len(data), start, len(data), True)[1]


@pytest.mark.parametrize("mode", ["async", "sync"])
@pytest.mark.parametrize(
    ("count", "body_size"),
    [(2, 40), (3, 1500), (4, 2600)],  # within one page, across pages, across several pages
)
def test_a_batch_killed_mid_write_is_recovered_all_or_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, mode: str, count: int, body_size: int
) -> None:
    bodies = [f"torn-{i}-".encode().ljust(body_size, b"x") for i in range(count)]
    segment_name, start, states = _killed_states_of_a_batch_put(
        tmp_path / "store", mode, bodies, monkeypatch
    )
    seen, prefixes = set(), set()
    for state in states:
        if repr(state) in seen:
            continue
        seen.add(repr(state))
        root = tmp_path / "killed"
        shutil.rmtree(root, ignore_errors=True)
        shutil.copytree(tmp_path / "before", root)
        with (root / segment_name).open("r+b") as file:
            for position, data in state:
                file.seek(position)
                file.write(data)
        (root / "abort").write_text("4242")  # what a killed process leaves
        left = _whole_records_from(root / segment_name, start)
        assert left <= count  # a prefix of whole records: nothing of the batch out of order
        prefixes.add(left)
        with MessageStore(root, **GEOMETRY) as store:
            report = verify_store(store)
            assert report.ok, report.problems[:3]
            got = store.get_messages(TOPIC, 0, 5, max_count=count)
            found = [message.body for message in got.messages] if got.found else []
            unfinished = store.recovery.unfinished_put
            queue_end = store.max_offset(TOPIC, 0)
            end_offset = store.commitlog.max_offset
        assert found in ([], bodies), (left, len(found))
        if 0 < left < count:
            assert unfinished is not None
            assert (unfinished.phys_offset, unfinished.announced, unfinished.found) == (
                start,  # the store's first segment starts at offset 0
                count,
                left,
            )
            assert store.recovery.cut_tail is not None
            assert store.recovery.cut_tail[0] == start
        else:
            assert unfinished is None
        assert queue_end == 5 + len(found)  # the consume queue follows the cut
        if not found:
            assert end_offset == start
    assert found == bodies  # the last state is the whole put
    assert len(seen) >= 2  # the put was seen before and after it wrote
    assert {0, count} <= prefixes
    if mode == "async":  # the heads are published one by one: every prefix is met, and cut
        assert set(range(count + 1)) == prefixes


@pytest.mark.parametrize("mode", ["async", "sync"])
def test_a_batch_killed_between_two_segments_is_cut_whole(tmp_path: Path, mode: str) -> None:
    """A batch that ends one segment and goes on in the next, killed after its first run was
    written and before its second: its records in the first segment are cut too."""
    root = tmp_path / "store"
    bodies = [f"span-{i}-".encode().ljust(12_000, b"y") for i in range(8)]  # over 64 KiB
    with MessageStore(root, flush_mode=mode, **GEOMETRY) as store:
        assert store.put(NewMessage(TOPIC, b"before", 0)).ok
        result = store.put_batch([NewMessage(TOPIC, body, 0) for body in bodies])
        assert result.ok
        first, second = store.commitlog.segments.segments[:2]
        in_first = sum(phys < first.end_offset for phys in result.phys_offsets)
        assert 0 < in_first < len(bodies)
        second_path = second.path
    second_path.write_bytes(bytes(second_path.stat().st_size))  # its run never written
    (root / "abort").write_text("4242")
    with MessageStore(root, **GEOMETRY) as store:
        unfinished = store.recovery.unfinished_put
        assert unfinished is not None
        assert (unfinished.phys_offset, unfinished.announced, unfinished.found) == (
            result.phys_offsets[0],
            len(bodies),
            in_first,
        )
        got = store.get_messages(TOPIC, 0, 0, max_count=len(bodies) + 1)
        assert [message.body for message in got.messages] == [b"before"]
        assert store.max_offset(TOPIC, 0) == 1
        assert verify_store(store).ok
        assert store.put_batch([NewMessage(TOPIC, b"after", 0)]).ok
    with MessageStore(root, **GEOMETRY) as store:  # what the cut left holds no stale record
        got = store.get_messages(TOPIC, 0, 0, max_count=len(bodies) + 1)
        assert [message.body for message in got.messages] == [b"before", b"after"]


def test_verify_names_a_put_the_log_ends_inside(tmp_path: Path) -> None:
    """Recovery leaves no unfinished put behind; verify says so if one is there all the same
    (here a log made to end before the last record of a put of three)."""
    with MessageStore(tmp_path / "store", **GEOMETRY) as store:
        result = store.put_batch([NewMessage(TOPIC, f"m{i}".encode(), 0) for i in range(3)])
        assert verify_store(store).ok
        end = store.commitlog.max_offset
        store.commitlog.max_offset = result.phys_offsets[2]
        try:
            report = verify_store(store)
        finally:
            store.commitlog.max_offset = end
    unfinished = [p for p in report.problems if "unfinished put" in p.message]
    assert [p.phys_offset for p in unfinished] == [result.phys_offsets[0]]
    assert "a put of 3 records starts here, but only 2" in unfinished[0].message


def test_the_put_mark_is_the_store_s_own(tmp_path: Path) -> None:
    """Readers never see the mark a batch's first record carries, and a put that names it is
    refused (a mark the store did not write could make recovery cut an acknowledged put)."""
    with MessageStore(tmp_path / "store", **GEOMETRY) as store:
        assert store.put_batch([NewMessage(TOPIC, b"a", 0, {"K": "1"}), NewMessage(TOPIC, b"b", 0)])
        got = store.get_messages(TOPIC, 0, 0, max_count=2)
        assert [m.properties for m in got.messages] == [{"K": "1"}, {}]
        raw = bytes(store.get_message_bytes(TOPIC, 0, 0, max_count=1).raw)
        assert PROPERTY_PUT_RECORDS.encode() + b"\x012\x02" in raw  # on disk, for recovery
        forged = {PROPERTY_PUT_RECORDS: "5"}
        for put in (
            lambda: store.put(NewMessage(TOPIC, b"x", 0, forged)),
            lambda: store.put_batch(
                [NewMessage(TOPIC, b"x", 0), NewMessage(TOPIC, b"y", 0, forged)]
            ),
            lambda: store.put_batch(
                UniformBatch(TOPIC, 0, [b"x"], [encode_properties(forged).encode()], [None], [None])
            ),
        ):
            result = put()
            assert result.status is PutStatus.MESSAGE_ILLEGAL
            assert "store's own" in result.detail
        assert store.max_offset(TOPIC, 0) == 2


def test_a_refusal_for_properties_the_mark_makes_too_long_says_so(tmp_path: Path) -> None:
    """The mark is the store's: a first message whose own properties fit, and which a put of
    it alone stores, is refused naming its own size and the mark that took it past the limit."""
    text = encode_properties({"big": "x" * 32_760}).encode()  # fits alone (under 32767)
    with MessageStore(tmp_path / "store", **GEOMETRY) as store:
        alone = NewMessage(TOPIC, b"a", 0, decode_written_properties(text))
        assert store.put(alone).ok
        for batch in (
            [alone, NewMessage(TOPIC, b"b", 0)],
            UniformBatch(TOPIC, 0, [b"a", b"b"], [text, b""], [None, None], [None, None]),
        ):
            result = store.put_batch(batch)
            assert result.status is PutStatus.PROPERTIES_SIZE_EXCEEDED
            assert result.detail.startswith(f"message 0: properties take {len(text)} bytes, ")
            assert "mark the store puts on the first message of a put of several" in result.detail


def test_a_batch_killed_in_the_segment_recovery_starts_at_is_cut_whole(tmp_path: Path) -> None:
    """A batch that goes on in a second segment, killed after some of its records there were
    written, recovered from that segment (its first record before the checkpoint's time): the
    batch's mark lies in the segment before, and the batch is cut whole all the same."""
    root = tmp_path / "store"
    bodies = [f"span-{i}-".encode().ljust(12_000, b"y") for i in range(8)]  # over 64 KiB
    with MessageStore(root, **GEOMETRY) as store:
        assert store.put(NewMessage(TOPIC, b"before", 0)).ok
        result = store.put_batch([NewMessage(TOPIC, body, 0) for body in bodies])
        assert result.ok
        first, second = store.commitlog.segments.segments[:2]
        in_first = sum(phys < first.end_offset for phys in result.phys_offsets)
        assert 0 < in_first < len(bodies) - 1
        second_path, second_start = second.path, second.start_offset
    kept = result.phys_offsets[in_first + 1] - second_start  # one record of it in the second
    with second_path.open("r+b") as file:
        file.seek(kept)
        file.write(bytes(second_path.stat().st_size - kept))  # the rest never written
    with (root / "checkpoint").open("r+b") as file:  # flushed, it says, through now + 1 h
        file.write(struct.pack(">qq", *[time.time_ns() // 1_000_000 + 3_600_000] * 2))
    (root / "abort").write_text("4242")
    with MessageStore(root, **GEOMETRY) as store:
        assert store.recovery.start_offset == second_start  # the walk began past the mark
        unfinished = store.recovery.unfinished_put
        assert unfinished is not None
        assert (unfinished.phys_offset, unfinished.announced, unfinished.found) == (
            result.phys_offsets[0],
            len(bodies),
            in_first + 1,
        )
        got = store.get_messages(TOPIC, 0, 0, max_count=len(bodies) + 1)
        assert [message.body for message in got.messages] == [b"before"]
        assert store.max_offset(TOPIC, 0) == 1
        assert verify_store(store).ok
