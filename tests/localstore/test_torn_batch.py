"""A batch put killed while its records are written into the commitlog.

A kill keeps the page cache: what the file holds afterwards is whatever the process had written
when it died. Whatever that is, the log must hold a prefix of the batch's records, each whole,
and recovery must find nothing damaged: no record of the batch may be readable while an earlier
one is not (recovery steps over damage to the valid records after it, so such a record would
leave a "damaged" range behind a plain kill).

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
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from types import FrameType
from typing import Any

import pytest

from localstore import MessageStore, NewMessage
from localstore.files import mapped_file
from localstore.files.mapped_file import MappedFile
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
) -> tuple[Path, list[list[Write]]]:
    """Writes a few messages, keeps a copy of the store (``before``), then puts ``bodies`` as
    one batch; returns the segment file the batch went to and the states a kill can leave."""
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
        return segment.path.relative_to(root), states


@pytest.mark.parametrize("mode", ["async", "sync"])
@pytest.mark.parametrize(
    ("count", "body_size"),
    [(2, 40), (3, 1500), (4, 2600)],  # within one page, across pages, across several pages
)
def test_a_batch_killed_mid_write_leaves_a_prefix_of_whole_records_and_no_damage(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, mode: str, count: int, body_size: int
) -> None:
    bodies = [f"torn-{i}-".encode().ljust(body_size, b"x") for i in range(count)]
    segment_name, states = _killed_states_of_a_batch_put(
        tmp_path / "store", mode, bodies, monkeypatch
    )
    seen = set()
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
        with MessageStore(root, **GEOMETRY) as store:
            report = verify_store(store)
            assert report.ok, report.problems[:3]
            got = store.get_messages(TOPIC, 0, 5, max_count=count)
            found = [message.body for message in got.messages] if got.found else []
        assert found == bodies[: len(found)]
    assert found == bodies  # the last state is the whole put
    assert len(seen) >= 2  # the put was seen before and after it wrote
