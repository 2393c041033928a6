"""One corpus of damaged records that every validator of the commitlog must judge alike.

Each case is one record (encoded by the store's own encoder, then damaged) placed at ``BASE`` of
the log, and the rule it breaks (see :mod:`localstore.record.frame`):

* ``frame``: rules 1 to 3 (magic, size, fields that add up): every validator refuses it;
* ``utf8``: a sound frame whose topic or properties are not UTF-8: the decoders refuse it, the
  frame walks (recovery's) accept it, as RocketMQ's recovery does;
* ``phys``: PHYSICALOFFSET names another log offset: refused by whoever knows the offset;
* ``crc``: BODYCRC does not match: refused by whoever checks it;
* ``queue``: the header names another queue offset than the unit gives: refused by the run
  decoder (a get knows it), sound for everyone else;
* None: a valid record.

Where a validator names a reason, it contains the case's reason text.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import dataclass

import pytest

from localstore.record.batch_encoder import encode_batch
from localstore.record.codec import NewMessage, RecordError, decode_record, pack_host
from localstore.record.frame import frame_problem, head_problem
from localstore.record.layout import (
    HEADER_SIZES,
    MAGIC_V1,
    SIZE_AND_MAGIC,
    header_offsets,
)
from localstore.record.run_decoder import RunDecodeError, decode_run
from localstore.record.walk import walk_segment
from localstore.recovery.verify import _MalformedError, _record_at

BASE = 1 << 20  # the log offset of the segment the corpus's records sit in
QUEUE_ID = 3
QUEUE_OFFSET = 7
SHORT_TOPIC = "CorpusTopic"
LONG_TOPIC = "T" * 200  # a v2 record
IPV6_HOST = pack_host("::1", 40001)
IPV4_HOST = pack_host("127.0.0.1", 10911)


def _record(topic: str, born_host: bytes = IPV4_HOST, store_host: bytes = IPV4_HOST) -> bytes:
    message = NewMessage(topic, b"corpus body " * 5, QUEUE_ID, {"TAGS": "t", "K": "v"})
    message.born_host = born_host
    encoded = encode_batch(
        [message],
        topic,
        QUEUE_ID,
        QUEUE_OFFSET,
        BASE,
        1 << 30,
        1_700_000_000_000,
        store_host,
        1 << 20,
    )
    return bytes(encoded.published_runs()[0])


SHAPES = {
    "v1": (SHORT_TOPIC, _record(SHORT_TOPIC)),
    "v2-topic": (LONG_TOPIC, _record(LONG_TOPIC)),
    "ipv6-born": (SHORT_TOPIC, _record(SHORT_TOPIC, born_host=IPV6_HOST)),
    "ipv6-both": (LONG_TOPIC, _record(LONG_TOPIC, IPV6_HOST, IPV6_HOST)),
}


@dataclass(frozen=True)
class Case:
    name: str
    topic: str
    data: bytes  # the record (or what is left of it) at BASE; the segment ends with it
    rule: str | None  # which rule it breaks (module docstring)
    reason: str = ""  # what a validator that names a reason says


def _patched(data: bytes, at: int, packed: bytes) -> bytes:
    if at < 0:
        at += len(data)
    return data[:at] + packed + data[at + len(packed) :]


def _fields_of(data: bytes) -> dict[str, int]:
    """Offsets of every field in a record: the header's, then BODY, TOPIC, PROPERTIES."""
    offsets = header_offsets((struct.unpack_from(">i", data, 36)[0] >> 4) & 3)
    body_at = HEADER_SIZES[(struct.unpack_from(">i", data, 36)[0] >> 4) & 3]
    body_len = struct.unpack_from(">i", data, body_at - 4)[0]
    topic_at = body_at + body_len
    magic = struct.unpack_from(">i", data, 4)[0]
    if magic == MAGIC_V1:
        props_at = topic_at + 1 + data[topic_at]
    else:
        props_at = topic_at + 2 + struct.unpack_from(">h", data, topic_at)[0]
    return {**offsets, "BODY": body_at, "TOPIC": topic_at, "PROPERTIES": props_at}


def _cases() -> list[Case]:
    cases: list[Case] = []
    for shape, (topic, data) in SHAPES.items():
        fields = _fields_of(data)
        props_at = fields["PROPERTIES"]
        topic_len_at = fields["TOPIC"]
        cases += [
            Case(f"{shape}-valid", topic, data, None),
            Case(
                f"{shape}-bad-magic",
                topic,
                _patched(data, 4, b"\x12\x34\x56\x78"),
                "frame",
                "bad magic",
            ),
            Case(f"{shape}-zeros", topic, bytes(len(data)), "frame", "zero bytes"),
            Case(
                f"{shape}-size-past-segment",
                topic,
                _patched(data, 0, struct.pack(">i", 1 << 24)),
                "frame",
                "does not fit",
            ),
            Case(
                f"{shape}-negative-size",
                topic,
                _patched(data, 0, struct.pack(">i", -5)),
                "frame",
                "declares",
            ),
            Case(
                f"{shape}-size-one-short",
                topic,
                _patched(data, 0, struct.pack(">i", len(data) - 1)),
                "frame",
                "declares",
            ),
            Case(
                f"{shape}-negative-body",
                topic,
                _patched(data, fields["BODY"] - 4, struct.pack(">i", -1)),
                "frame",
                "negative body length",
            ),
            Case(
                f"{shape}-body-too-long",
                topic,
                _patched(data, fields["BODY"] - 4, struct.pack(">i", len(data))),
                "frame",
                "runs past",
            ),
            Case(
                f"{shape}-negative-properties",
                topic,
                _patched(data, props_at, struct.pack(">h", -2)),
                "frame",
                "negative properties length",
            ),
            Case(
                f"{shape}-properties-too-long",
                topic,
                _patched(data, props_at, struct.pack(">h", 300)),
                "frame",
                "declares",
            ),
            Case(
                f"{shape}-properties-not-utf8",
                topic,
                _patched(data, -3, b"\xff\xfe\xfd"),
                "utf8",
                "not UTF-8",
            ),
            Case(
                f"{shape}-topic-not-utf8",
                topic,
                _patched(data, props_at - 1, b"\xff"),
                "utf8",
                "not UTF-8",
            ),
            Case(
                f"{shape}-misplaced",
                topic,
                _patched(data, 28, struct.pack(">q", BASE + 64)),
                "phys",
                "PHYSICALOFFSET",
            ),
            Case(
                f"{shape}-bad-crc", topic, _patched(data, 8, struct.pack(">i", 12345)), "crc", "CRC"
            ),
            Case(
                f"{shape}-body-flipped", topic, _patched(data, fields["BODY"], b"X"), "crc", "CRC"
            ),
            Case(
                f"{shape}-other-queue-offset",
                topic,
                _patched(data, 20, struct.pack(">q", QUEUE_OFFSET + 1)),
                "queue",
                "queue offset",
            ),
        ]
        if shape.startswith("v2") or topic == LONG_TOPIC:
            cases.append(
                Case(
                    f"{shape}-negative-topic",
                    topic,
                    _patched(data, topic_len_at, struct.pack(">h", -3)),
                    "frame",
                    "negative topic length",
                )
            )
        for name, at in sorted({**fields, "END": len(data)}.items(), key=lambda item: item[1]):
            if 0 < at < len(data):  # cut at a field boundary: the segment ends there
                cases.append(Case(f"{shape}-cut-before-{name}", topic, data[:at], "frame"))
            if 0 < at + 1 < len(data):  # and inside the field
                cases.append(Case(f"{shape}-cut-inside-{name}", topic, data[: at + 1], "frame"))
    return cases


CASES = _cases()
# Which rules each validator applies (the module docstring).
FRAME, UTF8, PHYS, CRC, QUEUE = "frame", "utf8", "phys", "crc", "queue"


def _reference(case: Case) -> str | None:
    return frame_problem(case.data, 0, len(case.data), phys_offset=BASE, check_crc=True)


def _walk(case: Case) -> str | None:
    _, records, _ = walk_segment(case.data, BASE, len(case.data), 0, 1, True)
    return None if records == 1 else "invalid"


def _decode(case: Case) -> str | None:
    try:
        decode_record(memoryview(case.data), 0)
    except RecordError as exc:
        return str(exc)
    return None


def _decode_without_body(case: Case) -> str | None:
    try:
        decode_record(memoryview(case.data), 0, body=False)
    except RecordError as exc:
        return str(exc)
    return None


def _run(case: Case) -> str | None:
    try:
        decode_run(memoryview(case.data), [0], BASE, case.topic, QUEUE_ID, QUEUE_OFFSET)
    except RunDecodeError as exc:
        return str(exc)
    return None


def _verify(case: Case) -> str | None:
    try:
        _record_at(memoryview(case.data), 0)
    except _MalformedError as exc:
        return str(exc)
    return None


VALIDATORS: dict[str, tuple[Callable[[Case], str | None], frozenset[str], bool]] = {
    # name: (validator, the rules it applies, whether it names a reason)
    "frame_problem": (_reference, frozenset({FRAME, PHYS, CRC}), True),
    "walk_segment": (_walk, frozenset({FRAME, PHYS, CRC}), False),
    "decode_record": (_decode, frozenset({FRAME, UTF8}), True),
    "decode_record(body=False)": (_decode_without_body, frozenset({FRAME, UTF8}), True),
    "decode_run": (_run, frozenset({FRAME, UTF8, PHYS, QUEUE}), True),
    "verify": (_verify, frozenset({FRAME, UTF8}), True),
}


@pytest.mark.parametrize("validator", list(VALIDATORS))
@pytest.mark.parametrize("case", CASES, ids=[case.name for case in CASES])
def test_every_validator_judges_the_corpus_alike(case: Case, validator: str) -> None:
    judge, rules, names_reason = VALIDATORS[validator]
    problem = judge(case)
    if case.rule in rules:
        assert problem is not None, f"{validator} takes {case.name} for a record"
        if names_reason and case.reason:
            assert case.reason in problem, f"{validator} on {case.name}: {problem}"
    else:
        assert problem is None, f"{validator} refuses {case.name}: {problem}"


@pytest.mark.parametrize("case", CASES, ids=[case.name for case in CASES])
def test_the_cheap_head_check_never_refuses_what_the_full_rules_accept(case: Case) -> None:
    """``head_problem`` (the commitlog's ``record_size_at``, the offset index's walk) applies
    rules 1 and 2 only: it may accept damage, never refuse a sound frame."""
    if len(case.data) < 8:
        return
    total, magic = SIZE_AND_MAGIC.unpack_from(case.data, 0)
    if frame_problem(case.data, 0, len(case.data)) is None:
        assert head_problem(total, magic, len(case.data)) is None


def test_the_corpus_covers_each_rule_and_shape() -> None:
    rules = {case.rule for case in CASES}
    assert rules == {None, FRAME, UTF8, PHYS, CRC, QUEUE}
    assert len(CASES) > 100
