"""The order in which a sync-flush run reaches the file (``MappedFile.pwrite``): a run that spans
pages is first written with every record's size and magic (its first 8 bytes) zeroed, then
whole, so a process killed in between leaves no visible part of the run, and one killed inside
the second write (which the kernel applies page by page from the start) a prefix of whole
records; a run within one page is one write, which the kernel applies whole or not at all. The
durable write (``pwrite_durably``) keeps the same order with one ``pwritev(RWF_DSYNC)`` of the
whole run after the plain write of the zeroed copy. (What recovery makes of every state a kill
can leave: ``test_torn_batch.py``.)"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from localstore.files import mapped_file as mapped_file_module
from localstore.files.mapped_file import MappedFile

SEGMENT = 16 * 4096


def run_of_records(length: int) -> tuple[bytes, bytes]:
    """A commitlog run of ``length`` bytes (records of random bytes, each led by its 4-byte
    size), and the same run with each record's first 8 bytes zeroed."""
    run, zeroed = bytearray(), bytearray()
    while len(run) < length:
        size = min(max(length - len(run), 8), 1000)
        record = size.to_bytes(4, "big") + os.urandom(size - 4)
        run += record
        zeroed += bytes(8) + record[8:]
    return bytes(run), bytes(zeroed)


@pytest.fixture
def segment(tmp_path: Path) -> Iterator[MappedFile]:
    mapped = MappedFile.create(tmp_path, 0, SEGMENT)
    yield mapped
    mapped.close()


@pytest.fixture
def writes(monkeypatch: pytest.MonkeyPatch) -> list[tuple[int, bytes]]:
    """Every ``os.pwrite`` as (position, bytes), passed on to the real call."""
    seen: list[tuple[int, bytes]] = []
    real = os.pwrite

    def recording(fd: int, data: bytes | memoryview, position: int) -> int:
        seen.append((position, bytes(data)))
        return real(fd, data, position)

    monkeypatch.setattr(os, "pwrite", recording)
    return seen


@pytest.mark.parametrize(("position", "length"), [(0, 4096), (100, 3000), (4096 + 4000, 96)])
def test_a_run_within_one_page_is_one_write(
    segment: MappedFile, writes: list[tuple[int, bytes]], position: int, length: int
) -> None:
    data = os.urandom(length)
    segment.pwrite(position, data)
    assert writes == [(position, data)]
    assert bytes(segment.view[position : position + length]) == data


@pytest.mark.parametrize(("position", "length"), [(0, 4097), (4000, 200), (100, 3 * 4096)])
def test_a_run_across_pages_is_written_with_its_magics_zeroed_then_whole(
    segment: MappedFile, writes: list[tuple[int, bytes]], position: int, length: int
) -> None:
    data, zeroed = run_of_records(length)
    segment.pwrite(position, data)
    assert writes == [(position, zeroed), (position, data)]
    assert bytes(segment.view[position : position + length]) == data


@pytest.fixture
def durable_writes(monkeypatch: pytest.MonkeyPatch) -> list[tuple[int, bytes, int]]:
    """Every ``os.pwritev`` as (position, bytes, flags), passed on to the real call."""
    seen: list[tuple[int, bytes, int]] = []
    real = os.pwritev

    def recording(fd: int, buffers: list[bytes], position: int, flags: int = 0) -> int:
        seen.append((position, b"".join(buffers), flags))
        return real(fd, buffers, position, flags)

    monkeypatch.setattr(os, "pwritev", recording)
    return seen


@pytest.mark.skipif(not hasattr(os, "RWF_DSYNC"), reason="pwritev's RWF_DSYNC is Linux's")
def test_a_run_within_one_page_is_written_and_synced_in_one_call(
    segment: MappedFile, durable_writes: list[tuple[int, bytes, int]]
) -> None:
    data = os.urandom(300)
    assert segment.pwrite_durably(4096 + 100, data)
    assert durable_writes == [(4096 + 100, data, os.RWF_DSYNC)]
    assert bytes(segment.view[4196 : 4196 + 300]) == data


@pytest.mark.skipif(not hasattr(os, "RWF_DSYNC"), reason="pwritev's RWF_DSYNC is Linux's")
@pytest.mark.parametrize(("position", "length"), [(4000, 200), (100, 3 * 4096)])
def test_a_run_across_pages_is_written_with_its_magics_zeroed_before_the_durable_write(
    segment: MappedFile,
    durable_writes: list[tuple[int, bytes, int]],
    writes: list[tuple[int, bytes]],
    position: int,
    length: int,
) -> None:
    data, zeroed = run_of_records(length)
    assert segment.pwrite_durably(position, data)
    # Everything but the magics is in place before the call that can publish them.
    assert writes == [(position, zeroed)]
    assert durable_writes == [(position, data, os.RWF_DSYNC)]
    assert bytes(segment.view[position : position + length]) == data


def test_without_rwf_dsync_nothing_is_written_durably(
    segment: MappedFile,
    monkeypatch: pytest.MonkeyPatch,
    durable_writes: list[tuple[int, bytes, int]],
    writes: list[tuple[int, bytes]],
) -> None:
    monkeypatch.setattr(mapped_file_module, "_RWF_DSYNC", None)
    assert not segment.pwrite_durably(4000, os.urandom(200))
    assert durable_writes == [] and writes == []
    assert bytes(segment.view[4000:4200]) == bytes(200)
