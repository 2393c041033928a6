"""'quiver store verify' checks the files as recovery at open left them, so it must say what
that recovery did: a damaged record that valid records follow is kept (not cut, as recovery once
did, losing the messages after it), and verify names it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from localstore import MessageStore
from localstore.record.codec import NewMessage

from .test_cli import quiver

pytestmark = pytest.mark.integration


def _crashed_store_with_a_damaged_body(root: Path) -> int:
    """Six messages; then the abort marker (as a killed process leaves it) and a flipped bit in
    the third message's body. Returns that message's commitlog offset."""
    with MessageStore(root) as store:
        results = [store.put(NewMessage("T", b"body %d" % i, i % 2)) for i in range(6)]
    (root / "abort").touch()
    damaged = results[2].phys_offset
    segment = root / "commitlog" / "00000000000000000000"
    data = bytearray(segment.read_bytes())
    data[data.index(b"body 2", damaged)] ^= 0x01
    segment.write_bytes(data)
    return damaged


def test_verify_names_the_damaged_record_recovery_kept(tmp_path):
    root = tmp_path / "store"
    damaged = _crashed_store_with_a_damaged_body(root)
    text = quiver("store", "verify", root)
    assert text.returncode == 1
    assert "kept 1 damaged range(s) that valid records follow" in text.stdout, text.stdout
    assert f"commitlog offset {damaged}" in text.stdout
    assert "cut" not in text.stdout.replace("kept", "")


def test_verify_json_carries_the_recovery(tmp_path):
    root = tmp_path / "store"
    damaged = _crashed_store_with_a_damaged_body(root)
    (document,) = [
        json.loads(line) for line in quiver("store", "verify", root, "--json").stdout.splitlines()
    ]
    recovery = document["recovery"]
    assert recovery["crashed_last_time"] and recovery["abnormal"]
    assert recovery["units_truncated"] == 0 and recovery["end_offset"] > damaged
    ((kept,),) = [recovery["damaged"]]
    assert kept["phys_offset"] == damaged and kept["file"].startswith("commitlog/")


def test_a_clean_store_reports_no_cut(tmp_path):
    root = tmp_path / "store"
    with MessageStore(root) as store:
        store.put(NewMessage("T", b"x"))
    text = quiver("store", "verify", root)
    assert text.returncode == 0 and "recovery at open" not in text.stdout


def test_verify_repair_rebuilds_a_unit_pointing_at_another_record(tmp_path):
    """A unit in the middle of a queue pointing at the other queue's record: verify names it
    and exits 1; ``--repair`` rebuilds it from the commitlog, says so, verifies again (OK) and
    the message is read at its queue offset."""
    root = tmp_path / "store"
    with MessageStore(root) as store:
        results = [store.put(NewMessage("T", b"body %d" % i, i % 2)) for i in range(10)]
    unit_file = root / "consumequeue" / "T" / "0" / f"{0:020d}"
    units = bytearray(unit_file.read_bytes())
    units[2 * 20 : 2 * 20 + 8] = results[3].phys_offset.to_bytes(8, "big")  # queue 1's record
    unit_file.write_bytes(units)
    checked = quiver("store", "verify", root)
    assert checked.returncode == 1
    assert "consume queue T/0 offset 2: the record at" in checked.stdout, checked.stdout
    repaired = quiver("store", "verify", root, "--repair")
    assert repaired.returncode == 0, repaired.stdout + repaired.stderr
    assert "consume queue T/0 offset 2: rebuilt" in repaired.stdout
    assert "OK" in repaired.stdout
    with MessageStore(root) as store:
        (message,) = store.get_messages("T", 0, 2, max_count=1).messages
        assert message.phys_offset == results[4].phys_offset and message.body == b"body 4"
