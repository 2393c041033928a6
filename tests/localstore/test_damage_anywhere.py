"""Hypothesis damages one byte anywhere in a small store (any file of commitlog/, consumequeue/,
index/, timeindex/, offsetindex/, the checkpoint, config/), with and without the abort marker
(issue 25). Opening never raises anything but the store's own errors; every message but the one
whose bytes were damaged stays readable through ``get_messages`` (every message, when the
damage is in a consume queue: it is derived from the log, and rebuilt); nothing else
disappears."""

from __future__ import annotations

import shutil
import struct
import threading
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from localstore import GetStatus, MessageStore, NewMessage
from localstore.errors import DamagedRecordError, StoreError
from localstore.record.codec import decode_record
from localstore.recovery.verify import verify_store

TOPIC = "Anywhere"
QUEUES = 2
COUNT = 40
GEOMETRY = {
    "commitlog_file_size": 4096,
    "cq_entries_per_file": 8,
    "index_slots": 16,
    "index_entries": 64,
}
DAMAGED_DIRS = ("commitlog", "consumequeue", "index", "timeindex", "offsetindex", "config")

Placed = list[tuple[int, int, int, bytes]]  # phys, queue id, queue offset, body


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Placed, list[Path]]:
    root = tmp_path_factory.mktemp("template") / "store"
    placed: Placed = []
    with MessageStore(root, **GEOMETRY) as store:
        for i in range(COUNT):
            body = f"anywhere-{i:03d}".encode() * 5
            result = store.put(NewMessage(TOPIC, body, i % QUEUES, {"KEYS": f"k{i}", "TAGS": "T"}))
            assert result.ok
            placed.append((result.phys_offset, result.queue_id, result.queue_offset, body))
    files = [root / "checkpoint"]
    for name in DAMAGED_DIRS:
        files += sorted(p for p in (root / name).rglob("*") if p.is_file() and p.stat().st_size)
    return root, placed, files


def readable(store: MessageStore, placed: Placed) -> tuple[set[int], set[int]]:
    """The records a get answers whole, and those a get reports as damaged."""
    found, reported = set(), set()
    for phys, queue_id, queue_offset, body in placed:
        try:
            got = store.get_messages(TOPIC, queue_id, queue_offset, max_count=1)
        except DamagedRecordError as exc:  # the damaged record's own get may say so
            if exc.phys_offset == phys:
                reported.add(phys)
            continue
        except StoreError:
            continue
        if got.status is GetStatus.FOUND and got.messages[0].body == body:
            found.add(phys)
    return found, reported


@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(data=st.data(), crashed=st.booleans())
def test_one_damaged_byte_anywhere(template, tmp_path_factory, data, crashed):
    source, placed, files = template
    victim = data.draw(st.sampled_from(files), label="file")
    size = victim.stat().st_size
    position = data.draw(st.integers(0, size - 1), label="byte")
    flip = data.draw(st.integers(1, 255), label="xor")
    root = tmp_path_factory.mktemp("damaged") / "store"
    shutil.copytree(source, root)
    target = root / victim.relative_to(source)
    raw = bytearray(target.read_bytes())
    raw[position] ^= flip
    target.write_bytes(raw)
    if crashed:
        (root / "abort").write_text("4242")
    try:
        store = MessageStore(root)
    except StoreError:
        assert victim.parent.name == "config", "only a damaged config file may refuse the open"
        return
    with store:
        found, reported = readable(store, placed)
        lost = {p[0] for p in placed} - found
        assert len(lost) <= 1, (victim, position, sorted(lost))
        if victim.parent.parent.parent.name == "consumequeue":  # derived: rebuilt, none lost
            assert not lost, (victim, position, sorted(lost))
        if lost and victim.parent.name == "commitlog":
            # the lost one is the damaged record: kept and recorded, cut as a torn tail, or
            # (its header names another queue offset: no CRC covers it) reported by its get
            (phys,) = lost
            recovery = store.recovery
            assert (
                store.damaged.containing(phys) is not None
                or phys in reported
                or (recovery.cut_tail is not None and recovery.cut_tail[0] == phys)
                or _crc_only_damage_unseen(store, phys)
            ), (victim, position)
    shutil.rmtree(root.parent)


def _crc_only_damage_unseen(store: MessageStore, phys: int) -> bool:
    """A clean open walks only the log's tail: damage in an older record is found by verify
    (and reads hand it out damaged only without the read-side CRC check)."""
    return not store.crashed_last_time


@pytest.mark.parametrize("flip", [0x80, 0x01], ids=["negative", "far"])
@pytest.mark.parametrize("damaged_unit", [0, 5, 7], ids=["first", "mid", "last-of-file"])
def test_a_damaged_unit_offset_hides_no_message(template, tmp_path, caplog, flip, damaged_unit):
    """A unit of queue 0 whose commitlog offset's top byte is damaged (negative, or far past
    the log): the queue's first unit must still be found where it is (a damaged unit is not a
    record deleted by retention), and no message is lost: the queue's first unit is checked at
    open (the queue rebuilt), a later one is rebuilt from the log by the get that meets it (it
    was once skipped, read as deleted by retention), which says so."""
    source, placed, _ = template
    root = _with_a_damaged_unit(source, tmp_path, 0, damaged_unit, 0, flip, crashed=False)
    with MessageStore(root) as store:
        assert store.min_offset(TOPIC, 0) == 0
        found, _ = readable(store, placed)
        assert found == {p[0] for p in placed}
        if damaged_unit:
            assert f"consume queue {TOPIC}/0 offset {damaged_unit} was damaged" in caplog.text


def _record_elsewhere(placed: Placed, queue_id: int, queue_offset: int, target: str) -> int:
    """Where a damaged unit of ``queue_id`` at ``queue_offset`` points for ``target``."""
    phys = {p[1:3]: p[0] for p in placed}
    if target == "same-queue-earlier":
        return phys[(queue_id, queue_offset - 2)]
    if target == "same-queue-later":
        return phys[(queue_id, queue_offset + 1)]
    if target == "other-queue":
        return phys[(1 - queue_id, queue_offset)]
    return phys[(queue_id, queue_offset)] + 8  # inside its own record: no record starts there


@pytest.mark.parametrize("crashed", [False, True], ids=["clean", "crashed"])
@pytest.mark.parametrize(
    "target", ["same-queue-earlier", "same-queue-later", "other-queue", "inside-a-record"]
)
def test_a_unit_pointing_at_another_record_loses_no_message(
    template, tmp_path, caplog, target, crashed
):
    """A unit in the middle of queue 0 (offset 5) damaged to point at another valid record of
    its queue or of the other queue, or inside a record: a decoded get, and a raw get asked to
    check, answer every message of the queue, each at its own queue offset, never the record
    the unit pointed at (they reported offset 5 as damaged, and a consumer skipped it). The get
    rebuilt the unit from the log and said so, on disk (verify finds nothing). (A raw get not
    asked to check copies without decoding: its reader checks each record's header and asks
    again with ``check``, tests/sdk/test_damaged_records.py.)"""
    source, placed, _ = template
    root = tmp_path / "store"
    shutil.copytree(source, root)
    unit_file = root / "consumequeue" / TOPIC / "0" / f"{0:020d}"
    raw = bytearray(unit_file.read_bytes())
    struct.pack_into(">q", raw, 5 * 20, _record_elsewhere(placed, 0, 5, target))
    unit_file.write_bytes(raw)
    if crashed:
        (root / "abort").write_text("4242")
    queue = [(phys, body) for phys, queue_id, _, body in placed if queue_id == 0]
    for how in ("decoded", "checked"):
        caplog.clear()  # each way of reading must log its own rebuild
        with MessageStore(root) as store:
            assert _queue_read(store, how) == queue[:8], how  # the unit's file: offsets 0-7
            assert verify_store(store).ok
        assert f"consume queue {TOPIC}/0 offset 5 was damaged" in caplog.text
        shutil.rmtree(root)
        shutil.copytree(source, root)
        unit_file.write_bytes(raw)


def _queue_read(store: MessageStore, how: str) -> list[tuple[int, bytes]]:
    """Queue 0's first file read in one get from offset 0, as (commitlog offset, body)."""
    if how == "decoded":
        got = store.get_messages(TOPIC, 0, 0, max_count=32)
        messages = got.messages
    else:
        got = store.get_message_bytes(TOPIC, 0, 0, max_count=32, check=True)
        messages = list(_decoded(got.raw))
    assert got.damaged is None
    assert [m.queue_offset for m in messages] == list(range(len(messages)))
    return [(m.phys_offset, m.body) for m in messages]


def _decoded(raw: bytes):
    position = 0
    while position < len(raw):
        message = decode_record(memoryview(raw), position)
        yield message
        position += message.store_size


@pytest.mark.parametrize("crashed", [False, True], ids=["clean", "crashed"])
@pytest.mark.parametrize(
    ("queue_id", "queue_offset"),
    [(1, 18), (0, 18), (0, 19)],
    ids=["newest-queue", "older-queue", "older-queue-last-unit"],
)
def test_a_damaged_unit_in_a_last_file_hides_no_later_unit(
    template, tmp_path, caplog, queue_id, queue_offset, crashed
):
    """The size of a unit in its queue's last file turned negative (hypothesis found it: queue
    1's unit 18, 0x80 on its size's top byte): the queue's load stops there, as at its end, so
    the units after it are not loaded. Recovery must notice, rebuild the queue from the log and
    say so: a clean open refused the store (queue 1: its next record skipped a queue offset),
    or opened it with the queue silently short (queue 0: the records of the hidden queue
    offsets unreadable, and those offsets free for new puts)."""
    source, placed, _ = template
    # the size's top byte: negative
    root = _with_a_damaged_unit(source, tmp_path, queue_id, queue_offset, 8, 0x80, crashed)
    with MessageStore(root) as store:
        found, _ = readable(store, placed)
        assert found == {p[0] for p in placed}
        assert store.max_offset(TOPIC, queue_id) == COUNT // QUEUES
        assert store.recovery.rebuilt_queues == [f"{TOPIC}/{queue_id}"]
        assert "a damaged unit having hidden its later units" in caplog.text
        result = store.put(NewMessage(TOPIC, b"after", queue_id))
        assert result.queue_offset == COUNT // QUEUES


@pytest.mark.parametrize("crashed", [False, True], ids=["clean", "crashed"])
def test_a_last_unit_damaged_to_point_past_the_log_is_dispatched_again(template, tmp_path, crashed):
    """The last unit of a queue other than the newest, its commitlog offset damaged to point
    past the log's end: recovery cuts it as a unit written ahead of its record, so its record,
    which lies before the end, must be dispatched again (a clean open once left the queue a
    unit short, the record unreadable and its queue offset free for the next put)."""
    source, placed, _ = template
    # queue offset 19's commitlog offset, top byte: far past the log
    root = _with_a_damaged_unit(source, tmp_path, 0, 19, 0, 0x01, crashed)
    with MessageStore(root) as store:
        found, _ = readable(store, placed)
        assert found == {p[0] for p in placed}
        assert store.max_offset(TOPIC, 0) == COUNT // QUEUES
        assert store.recovery.abnormal and store.recovery.units_truncated == 1
        assert store.put(NewMessage(TOPIC, b"after", 0)).queue_offset == COUNT // QUEUES


def _with_a_damaged_unit(
    source: Path,
    tmp_path: Path,
    queue_id: int,
    queue_offset: int,
    byte_in_unit: int,
    flip: int,
    crashed: bool,
) -> Path:
    """A copy of the template store whose unit ``queue_offset`` of queue ``queue_id`` has
    ``flip`` xored into its byte ``byte_in_unit``, left as a kill leaves it if ``crashed``."""
    root = tmp_path / "store"
    shutil.copytree(source, root)
    per_file = GEOMETRY["cq_entries_per_file"]
    first_of_file = queue_offset - queue_offset % per_file
    unit_file = root / "consumequeue" / TOPIC / str(queue_id) / f"{first_of_file * 20:020d}"
    raw = bytearray(unit_file.read_bytes())
    raw[(queue_offset % per_file) * 20 + byte_in_unit] ^= flip
    unit_file.write_bytes(raw)
    if crashed:
        (root / "abort").write_text("4242")
    return root


def test_a_unit_is_rebuilt_while_puts_go_on(tmp_path, caplog):
    """A get rebuilds a damaged unit while another thread keeps putting to the same queue (the
    rebuild holds the put lock, so no put moves the queue meanwhile): every message, those put
    before and during the rebuild, is read at its own queue offset, and verify finds nothing."""
    root = tmp_path / "store"
    with MessageStore(root, **GEOMETRY) as store:
        first = [store.put(NewMessage(TOPIC, b"before %d" % i, i % QUEUES)) for i in range(20)]
        stop = threading.Event()
        bodies: list[bytes] = []

        def keep_putting() -> None:
            while not stop.is_set() and len(bodies) < 2000:
                body = b"during %d" % len(bodies)
                assert store.put(NewMessage(TOPIC, body, 0)).ok
                bodies.append(body)

        writer = threading.Thread(target=keep_putting)
        writer.start()
        try:
            unit_file = root / "consumequeue" / TOPIC / "0" / f"{0:020d}"
            with open(unit_file, "r+b") as handle:  # unit 5 -> queue 1's record
                handle.seek(5 * 20)
                handle.write(first[3].phys_offset.to_bytes(8, "big"))
            (message,) = store.get_messages(TOPIC, 0, 5, max_count=1).messages
        finally:
            stop.set()
            writer.join(timeout=60)
        assert not writer.is_alive()
        assert message.phys_offset == first[10].phys_offset
        assert f"consume queue {TOPIC}/0 offset 5 was damaged" in caplog.text
        queue = [b"before %d" % i for i in range(0, 20, QUEUES)] + bodies
        got = []
        while len(got) < len(queue):
            result = store.get_messages(TOPIC, 0, len(got), max_count=32)
            assert result.damaged is None
            got += [m.body for m in result.messages]
        assert got == queue
        assert verify_store(store).ok
