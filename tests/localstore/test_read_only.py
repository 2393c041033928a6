"""``ReadOnlyStore``: a store another process holds, read without a lock, a write or a torn
record (see :mod:`localstore.read_only`)."""

from __future__ import annotations

import hashlib
import os
import shutil
import struct
from pathlib import Path

import pytest

from localstore import read_only
from localstore.errors import StoreDirectoryError, StoreLockedError
from localstore.files.segments import SegmentQueue
from localstore.queue.consume_queue import UNIT
from localstore.read_only import ReadOnlyStore
from localstore.record.codec import StoredMessage, decode_record
from localstore.results import GetStatus
from localstore.store import MessageStore
from tests.localstore.conftest import message
from tests.localstore.store_holder import GEOMETRY, QUEUES, TOPIC, HeldStore


def _tree(root: Path) -> dict[str, str]:
    """Every file under ``root`` with the SHA-256 of its bytes (directories as "dir")."""
    return {
        str(path.relative_to(root)): "dir"
        if path.is_dir()
        else hashlib.sha256(path.read_bytes()).hexdigest()
        for path in sorted(root.rglob("*"))
    }


def _writable_in_this_process(root: Path) -> list[str]:
    """The files under ``root`` this process has mapped or opened for writing
    (``/proc/self/maps`` permissions, ``/proc/self/fdinfo`` flags)."""
    found = []
    inside = str(root.resolve()) + "/"
    for line in Path("/proc/self/maps").read_text().splitlines():
        fields = line.split(maxsplit=5)
        if len(fields) == 6 and fields[5].startswith(inside) and "w" in fields[1]:
            found.append(f"mapped {fields[1]} {fields[5]}")
    for fd in Path("/proc/self/fd").iterdir():
        try:
            target = os.readlink(fd)
            flags = int(Path(f"/proc/self/fdinfo/{fd.name}").read_text().split()[3], 8)
        except OSError:  # closed meanwhile
            continue
        if target.startswith(inside) and flags & os.O_ACCMODE != os.O_RDONLY:
            found.append(f"open {flags:o} {target}")
    return found


def _numbers(store: ReadOnlyStore, queue_id: int) -> list[int]:
    """The message numbers of one queue, read from its min offset to the end."""
    found: list[int] = []
    offset = store.min_offset(TOPIC, queue_id)
    while True:
        result = store.get_messages(TOPIC, queue_id, offset, max_count=64)
        if result.status != GetStatus.FOUND:
            return found
        found += [int(message.body[1:]) for message in result.messages]
        offset = result.next_offset


@pytest.mark.parametrize("flush_mode", ["async", "sync"])
def test_reads_only_complete_records_of_a_store_another_process_writes(
    tmp_path: Path, flush_mode: str
) -> None:
    root = tmp_path / "store"
    with HeldStore(root, flush_mode=flush_mode) as holder:
        with pytest.raises(StoreLockedError):  # held indeed
            MessageStore(root)
        holder.produce()
        with ReadOnlyStore(root) as store:
            for queue_id in range(QUEUES):
                numbers = _numbers(store, queue_id)
                # every message of the queue, in order, none missing, none torn
                assert numbers == list(range(queue_id, queue_id + QUEUES * len(numbers), QUEUES))
                assert len(numbers) == store.max_offset(TOPIC, queue_id)
                assert len(numbers) >= 20
            first_end = store.visible_end
            (found,) = store.query_by_key(TOPIC, "k7")
            assert found.body == b"m7"
            assert store.query_by_id(found.offset_msg_id)[0].body == b"m7"
            assert store.offset_for_timestamp(TOPIC, 1, 0) == 0
            store.refresh()
            assert store.visible_end >= first_end
            assert _numbers(store, 0)[:10] == list(range(0, 20, 2))
        stored = holder.stop()
        with ReadOnlyStore(root) as store:
            assert sum(store.max_offset(TOPIC, q) for q in range(QUEUES)) == stored


def test_changes_no_byte_and_creates_nothing_in_a_held_store(tmp_path: Path) -> None:
    root = tmp_path / "store"
    with HeldStore(root, flush_mode="sync"):
        before = _tree(root)  # the writer is paused: only the read-only open could change it
        with ReadOnlyStore(root) as store:
            assert _numbers(store, 0) == list(range(0, 40, 2))
            assert store.query_by_key(TOPIC, "k3")[0].body == b"m3"
            assert store.offset_for_timestamp(TOPIC, 0, 2**62) == 20
            assert store.commitlog.segments.segments[-1].view  # mapped
            assert _writable_in_this_process(root) == []
            store.refresh()
            assert store.max_offset(TOPIC, 1) == 20
        assert _tree(root) == before


def _closed_store(root: Path, count: int = 40) -> None:
    with HeldStore(root, flush_mode="async", count=count):
        pass


def _last_unit(root: Path, queue_id: int) -> tuple[Path, int, int, int]:
    """(file, byte position, phys offset, size) of a queue's last unit."""
    files = sorted((root / "consumequeue" / TOPIC / str(queue_id)).iterdir())
    for path in reversed(files):
        data = path.read_bytes()
        units = [UNIT.unpack_from(data, i) for i in range(0, len(data), UNIT.size)]
        valid = [i for i, (phys, size, _) in enumerate(units) if size > 0 and phys >= 0]
        if valid:
            last = valid[-1]
            return path, last * UNIT.size, units[last][0], units[last][1]
    raise AssertionError("no unit")


def test_a_torn_last_record_is_not_served(tmp_path: Path) -> None:
    root = tmp_path / "store"
    _closed_store(root)
    _, _, phys, size = _last_unit(root, 1)  # m39, the log's last record
    segment = root / "commitlog" / str(phys - phys % GEOMETRY["commitlog_file_size"]).zfill(20)
    with open(segment, "r+b") as handle:  # as if the writer were mid-record: its tail unwritten
        handle.seek(phys % GEOMETRY["commitlog_file_size"] + size // 2)
        handle.write(bytes(size - size // 2))
    with ReadOnlyStore(root) as store:
        assert _numbers(store, 1) == list(range(1, 39, 2))
        assert _numbers(store, 0) == list(range(0, 40, 2))
        assert store.visible_end == phys
        assert store.get_messages(TOPIC, 1, 19).status == GetStatus.OFFSET_OVERFLOW_ONE


def test_a_commitlog_segment_cut_short_is_not_served(tmp_path: Path) -> None:
    root = tmp_path / "store"
    _closed_store(root)
    _, _, phys, _ = _last_unit(root, 1)
    segment = root / "commitlog" / str(phys - phys % GEOMETRY["commitlog_file_size"]).zfill(20)
    with open(segment, "r+b") as handle:
        handle.truncate(phys % GEOMETRY["commitlog_file_size"] + 10)  # mid-record
    with ReadOnlyStore(root) as store:
        served = _numbers(store, 0) + _numbers(store, 1)
        assert served  # the earlier, whole segments are served
        assert store.visible_end <= phys - phys % GEOMETRY["commitlog_file_size"]


def test_a_unit_written_beyond_the_commitlog_end_is_not_served(tmp_path: Path) -> None:
    root = tmp_path / "store"
    _closed_store(root, count=38)  # queue 0's last file has room for one more unit
    path, position, _, size = _last_unit(root, 0)
    with ReadOnlyStore(root) as store:
        end = store.visible_end
        before = store.max_offset(TOPIC, 0)
    data = bytearray(path.read_bytes())
    assert position + 2 * UNIT.size <= len(data)
    struct.pack_into(">qiq", data, position + UNIT.size, end, size, 0)  # a unit ahead of its record
    path.write_bytes(bytes(data))
    with ReadOnlyStore(root) as store:
        assert store.max_offset(TOPIC, 0) == before
        assert store.get_messages(TOPIC, 0, before).status == GetStatus.OFFSET_OVERFLOW_ONE
        assert _numbers(store, 0) == list(range(0, 38, 2))


def test_refuses_what_is_not_a_store_and_creates_nothing(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("not a store")
    before = _tree(tmp_path)
    with pytest.raises(StoreDirectoryError, match="holds no store"):
        ReadOnlyStore(tmp_path)
    with pytest.raises(StoreDirectoryError, match="does not exist"):
        ReadOnlyStore(tmp_path / "missing")
    with pytest.raises(StoreDirectoryError, match="is a file"):
        ReadOnlyStore(tmp_path / "notes.txt")
    assert _tree(tmp_path) == before


def test_copy_of_a_store_reads_as_the_store_itself(tmp_path: Path) -> None:
    root = tmp_path / "store"
    _closed_store(root)
    shutil.copytree(root, tmp_path / "copy")
    with ReadOnlyStore(tmp_path / "copy") as copy, MessageStore(root) as store:
        for queue_id in range(QUEUES):
            assert copy.max_offset(TOPIC, queue_id) == store.max_offset(TOPIC, queue_id)
            assert copy.min_offset(TOPIC, queue_id) == store.min_offset(TOPIC, queue_id)
        assert copy.visible_end == store.commitlog.max_offset


def test_a_topic_the_holder_deletes_while_the_snapshot_loads_is_left_out(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = tmp_path / "store"
    with MessageStore(root, commitlog_file_size=4096, cq_entries_per_file=4) as writer:
        for topic in ("Gone", "Kept"):
            assert writer.put(message(topic=topic, body=b"m0", queue_id=0)).status.stored
    load_segments = read_only._load_segments

    def deleted_meanwhile(segments: SegmentQueue, *, read_ahead: bool) -> None:
        load_segments(segments, read_ahead=read_ahead)
        if segments.directory.parent.name == "Gone":  # the holder's delete_topic, now
            shutil.rmtree(segments.directory.parent)

    monkeypatch.setattr(read_only, "_load_segments", deleted_meanwhile)
    with ReadOnlyStore(root) as store:
        assert store.queue_ids("Gone") == [] and store.max_offset("Gone", 0) == 0
        assert [m.body for m in store.get_messages("Kept", 0, 0).messages] == [b"m0"]


def _decoded(raw: bytes) -> list[StoredMessage]:
    messages, position = [], 0
    while position < len(raw):
        messages.append(decode_record(raw, position))
        position += messages[-1].store_size
    return messages


def test_the_bytes_of_a_get_are_the_records_a_decoded_get_answers(tmp_path: Path) -> None:
    root = tmp_path / "store"
    with HeldStore(root, flush_mode="async", count=30), ReadOnlyStore(root) as store:
        decoded = store.get_messages(TOPIC, 1, 2, max_count=9)
        raw = store.get_message_bytes(TOPIC, 1, 2, max_count=9)
        assert raw.status == GetStatus.FOUND and raw.next_offset == decoded.next_offset
        assert raw.count == decoded.count >= 1
        assert _decoded(raw.raw) == decoded.messages
        beyond = store.get_message_bytes(TOPIC, 1, store.max_offset(TOPIC, 1))
        assert (beyond.status, beyond.raw) == (GetStatus.OFFSET_OVERFLOW_ONE, b"")
