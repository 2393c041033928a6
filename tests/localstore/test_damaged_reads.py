"""Reads of a damaged record (issue 25, item 3 and the read half of item 11), on real store files.

One record of queue 2 of 4 gets a damaged byte in its properties (no CRC covers them), or in its
body (the CRC does), written to its segment file under the open store (recovery's handling of
such a record at the next open is not what these tests are about). Every get that meets
the record names it with :class:`DamagedRecordError` (topic, queue id, queue offset, commitlog
offset), never a raw ``UnicodeDecodeError`` or ``struct.error``; the records before it are
answered and those after it are readable from ``queue_offset + 1``; the other queues never see
it.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from localstore import DamagedRecordError, MessageStore, NewMessage, StoreOptions
from localstore.record.codec import RecordError, decode_record

TOPIC = "Damaged"
QUEUES = 4
PER_QUEUE = 12
BAD_QUEUE = 2
BAD_OFFSET = 5  # the damaged record's queue offset in BAD_QUEUE
SEGMENT_SIZE = 1 << 20
BODY_AT = 88  # a v1 record with IPv4 hosts: its body starts here (localstore.record.codec)


def _fill(store: MessageStore) -> dict[int, list[int]]:
    """Four queues of PER_QUEUE messages, put round-robin, tagged A and B in turn; answers
    each queue's commitlog offsets."""
    phys: dict[int, list[int]] = {q: [] for q in range(QUEUES)}
    for i in range(PER_QUEUE):
        for queue_id in range(QUEUES):
            tag = "A" if i % 2 == 0 else "B"
            body = f"q{queue_id}-m{i}".encode() * 3
            result = store.put(NewMessage(TOPIC, body, queue_id, {"TAGS": tag}))
            assert result.ok
            phys[queue_id].append(result.phys_offset)
    return phys


def _damage(root: Path, phys_offset: int, at: int | None = None) -> None:
    """Overwrite one byte of the record at ``phys_offset`` in its segment file: byte ``at`` of
    the record, or its last one (the end of its properties: 0xFF is never UTF-8)."""
    segment = root / "commitlog" / str(phys_offset - phys_offset % SEGMENT_SIZE).zfill(20)
    position = phys_offset % SEGMENT_SIZE
    with open(segment, "r+b") as handle:
        handle.seek(position)
        size = int.from_bytes(handle.read(4), "big")
        where = position + (size - 1 if at is None else at)
        handle.seek(where)
        old = handle.read(1)[0]
        handle.seek(where)
        handle.write(bytes([0xFF if at is None else old ^ 0x20]))


def _open(root: Path, options: StoreOptions | None = None) -> MessageStore:
    return MessageStore(root, options=options, commitlog_file_size=SEGMENT_SIZE)


@pytest.fixture
def damaged_props(tmp_path: Path) -> Iterator[tuple[MessageStore, int]]:
    with _open(tmp_path) as store:
        bad_phys = _fill(store)[BAD_QUEUE][BAD_OFFSET]
        _damage(tmp_path, bad_phys)
        yield store, bad_phys


def _assert_names_the_record(error: DamagedRecordError | None, bad_phys: int) -> None:
    assert isinstance(error, DamagedRecordError)
    assert (error.topic, error.queue_id) == (TOPIC, BAD_QUEUE)
    assert (error.queue_offset, error.phys_offset) == (BAD_OFFSET, bad_phys)
    text = str(error)
    assert f"{TOPIC}/{BAD_QUEUE} queue offset {BAD_OFFSET}, commitlog offset {bad_phys}" in text
    assert isinstance(error.__cause__, RecordError | None)


def _raw_offsets(raw: bytes) -> list[int]:
    offsets, position = [], 0
    while position < len(raw):
        record = decode_record(raw, position)
        offsets.append(record.queue_offset)
        position += record.store_size
    return offsets


def test_the_plain_get_answers_the_records_before_and_names_the_damaged_one(
    damaged_props: tuple[MessageStore, int],
) -> None:
    store, bad_phys = damaged_props
    got = store.get_messages(TOPIC, BAD_QUEUE, 0, max_count=32)
    assert [m.queue_offset for m in got.messages] == list(range(BAD_OFFSET))
    assert got.next_offset == BAD_OFFSET
    _assert_names_the_record(got.damaged, bad_phys)
    with pytest.raises(DamagedRecordError) as raised:
        store.get_messages(TOPIC, BAD_QUEUE, BAD_OFFSET, max_count=32)
    _assert_names_the_record(raised.value, bad_phys)
    after = store.get_messages(TOPIC, BAD_QUEUE, BAD_OFFSET + 1, max_count=32)
    assert [m.queue_offset for m in after.messages] == list(range(BAD_OFFSET + 1, PER_QUEUE))
    assert after.damaged is None
    for queue_id in set(range(QUEUES)) - {BAD_QUEUE}:
        whole = store.get_messages(TOPIC, queue_id, 0, max_count=32)
        assert whole.count == PER_QUEUE and whole.damaged is None


@pytest.mark.parametrize("raw", [False, True], ids=["decoded", "raw"])
def test_the_tag_filtered_get_names_the_damaged_record(
    damaged_props: tuple[MessageStore, int], raw: bool
) -> None:
    """Before: the raw one raised a bare UnicodeDecodeError from reading the tag."""
    store, bad_phys = damaged_props
    tag = "A" if BAD_OFFSET % 2 == 0 else "B"
    get = store.get_message_bytes if raw else store.get_messages
    got = get(TOPIC, BAD_QUEUE, 0, max_count=32, tags=tag)
    before = [o for o in range(BAD_OFFSET) if o % 2 == BAD_OFFSET % 2]
    offsets = _raw_offsets(got.raw) if raw else [m.queue_offset for m in got.messages]
    assert offsets == before
    assert got.next_offset == BAD_OFFSET
    _assert_names_the_record(got.damaged, bad_phys)
    with pytest.raises(DamagedRecordError) as raised:
        get(TOPIC, BAD_QUEUE, BAD_OFFSET - 1, max_count=32, tags=tag)  # a B, then it
    _assert_names_the_record(raised.value, bad_phys)
    after = get(TOPIC, BAD_QUEUE, BAD_OFFSET + 1, max_count=32, tags=tag)
    offsets = _raw_offsets(after.raw) if raw else [m.queue_offset for m in after.messages]
    assert offsets == [o for o in range(BAD_OFFSET + 1, PER_QUEUE) if o % 2 == BAD_OFFSET % 2]


def test_the_raw_get_copies_without_decoding_unless_asked_to_check(
    damaged_props: tuple[MessageStore, int],
) -> None:
    """The unfiltered raw get (what a pull sends) copies the records: the damage shows where
    they are decoded, as the codec's RecordError. Asked to ``check``, it decodes each first."""
    store, bad_phys = damaged_props
    copied = store.get_message_bytes(TOPIC, BAD_QUEUE, 0, max_count=32)
    assert copied.count == PER_QUEUE and copied.damaged is None
    with pytest.raises(RecordError):
        _raw_offsets(copied.raw)
    checked = store.get_message_bytes(TOPIC, BAD_QUEUE, 0, max_count=32, check=True)
    assert _raw_offsets(checked.raw) == list(range(BAD_OFFSET))
    assert (checked.count, checked.next_offset) == (BAD_OFFSET, BAD_OFFSET)
    _assert_names_the_record(checked.damaged, bad_phys)
    with pytest.raises(DamagedRecordError) as raised:
        store.get_message_bytes(TOPIC, BAD_QUEUE, BAD_OFFSET, max_count=32, check=True)
    _assert_names_the_record(raised.value, bad_phys)
    after = store.get_message_bytes(TOPIC, BAD_QUEUE, BAD_OFFSET + 1, check=True)
    assert _raw_offsets(after.raw) == list(range(BAD_OFFSET + 1, PER_QUEUE))


def _flipped_body(root: Path, options: StoreOptions) -> Iterator[tuple[MessageStore, int]]:
    with _open(root, options) as store:
        bad_phys = _fill(store)[BAD_QUEUE][BAD_OFFSET]
        _damage(root, bad_phys, at=BODY_AT + 1)
        yield store, bad_phys


def test_by_default_no_get_reads_the_crc(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Off (the default), a flipped body byte is handed out as stored, and no get computes a
    CRC: the function that would is replaced by one that fails the test."""

    def no_crc(body: bytes) -> int:
        raise AssertionError("a get read the body CRC with check_crc_on_read off")

    for store, _ in _flipped_body(tmp_path, StoreOptions()):
        monkeypatch.setattr("localstore.reader.body_crc", no_crc)
        got = store.get_messages(TOPIC, BAD_QUEUE, 0, max_count=32)
        assert got.count == PER_QUEUE and got.damaged is None
        assert got.messages[BAD_OFFSET].body != f"q{BAD_QUEUE}-m{BAD_OFFSET}".encode() * 3
        assert store.get_messages(TOPIC, BAD_QUEUE, 0, max_count=32, tags="A || B").count == 12
        assert store.get_message_bytes(TOPIC, BAD_QUEUE, 0, max_count=32).count == PER_QUEUE
        assert store.get_message_bytes(TOPIC, BAD_QUEUE, 0, max_count=32, check=True).count == 12


@pytest.mark.parametrize(
    "kind", ["decoded", "raw", "filtered", "raw filtered"], ids=lambda kind: kind.replace(" ", "-")
)
def test_check_crc_on_read_catches_a_flipped_body_byte(tmp_path: Path, kind: str) -> None:
    tags = "A || B" if "filtered" in kind else None
    for store, bad_phys in _flipped_body(tmp_path, StoreOptions(check_crc_on_read=True)):
        get = store.get_message_bytes if "raw" in kind else store.get_messages
        got = get(TOPIC, BAD_QUEUE, 0, max_count=32, tags=tags)
        assert got.count == BAD_OFFSET and got.next_offset == BAD_OFFSET
        _assert_names_the_record(got.damaged, bad_phys)
        assert "CRC" in str(got.damaged)
        with pytest.raises(DamagedRecordError, match="CRC") as raised:
            get(TOPIC, BAD_QUEUE, BAD_OFFSET, max_count=32, tags=tags)
        _assert_names_the_record(raised.value, bad_phys)
        after = get(TOPIC, BAD_QUEUE, BAD_OFFSET + 1, max_count=32, tags=tags)
        assert after.count == PER_QUEUE - BAD_OFFSET - 1 and after.damaged is None
        for queue_id in set(range(QUEUES)) - {BAD_QUEUE}:
            assert get(TOPIC, queue_id, 0, max_count=32, tags=tags).count == PER_QUEUE
