"""Produce bodies of equal messages are written and read across the batch
(:mod:`sdk.protocol.produce_body`): each such reading gives exactly what the message-by-message
one gives, or declines and leaves the body to it, whatever byte of the body is wrong."""

from __future__ import annotations

import struct
import zlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from localstore.record.message_id import UniqKeyRun, uniq_key_run
from sdk.errors import MalformedBodyError
from sdk.protocol.produce_body import (
    ACROSS_FROM,
    _drawn_run,
    _encode_each,
    _encode_equal,
    _split_each,
    _split_equal,
)

# A batch of equal messages: bodies of one length, properties texts of one length, one flag.
_equal_batches = st.tuples(
    st.integers(ACROSS_FROM, ACROSS_FROM + 24),
    st.integers(0, 40),
    st.integers(0, 12),
    st.integers(-(2**31), 2**31 - 1),
).flatmap(
    lambda shape: st.tuples(
        st.lists(
            st.binary(min_size=shape[1], max_size=shape[1]), min_size=shape[0], max_size=shape[0]
        ),
        st.lists(
            st.binary(min_size=shape[2], max_size=shape[2]), min_size=shape[0], max_size=shape[0]
        ),
        st.just(shape[3]),
    )
)


def split_or_error(data: bytes) -> object:
    """What the message-by-message reading makes of ``data``: its split, or its refusal."""
    try:
        return _split_each(data)
    except MalformedBodyError as exc:
        return ("refused", exc.offset, str(exc))


@settings(max_examples=200, deadline=None)
@given(_equal_batches)
def test_equal_messages_are_written_and_read_as_one_by_one(
    batch: tuple[list[bytes], list[bytes], int],
) -> None:
    bodies, texts, flag = batch
    flags = [flag] * len(bodies)
    body = _encode_each(bodies, texts, flags)
    assert _encode_equal(bodies, texts, flags) == body
    crcs = [zlib.crc32(b) & 0x7FFFFFFF for b in bodies]
    assert _split_equal(body) == _split_each(body) == (bodies, texts, flags, crcs)


@settings(max_examples=300, deadline=None)
@given(_equal_batches, st.data())
def test_a_damaged_byte_anywhere_is_read_as_one_by_one_reads_it(
    batch: tuple[list[bytes], list[bytes], int], data: st.DataObject
) -> None:
    bodies, texts, flag = batch
    body = bytearray(_encode_each(bodies, texts, [flag] * len(bodies)))
    at = data.draw(st.integers(0, len(body) - 1), label="at")
    body[at] = data.draw(st.integers(0, 255).filter(lambda value: value != body[at]), label="to")
    damaged = bytes(body)
    across = _split_equal(damaged)
    if across is not None:  # taken across the batch only when one by one takes it the same
        assert across == split_or_error(damaged)


def test_a_body_without_crcs_is_read_across_unchecked() -> None:
    message = struct.pack(">iiiii", 22 + 3 + 1, 0, 0, 7, 3) + b"abc" + struct.pack(">h", 1) + b"t"
    body = message * ACROSS_FROM
    assert _split_equal(body) == _split_each(body)
    assert _split_each(body) == (
        [b"abc"] * ACROSS_FROM,
        [b"t"] * ACROSS_FROM,
        [7] * ACROSS_FROM,
        None,
    )


_N = ACROSS_FROM


@pytest.mark.parametrize(
    ("bodies", "texts", "flags"),
    [
        ([b"a"] * (_N - 1) + [b"bb"], [b"t"] * _N, [0] * _N),
        ([b"a"] * _N, [b"t"] * (_N - 1) + [b"tt"], [0] * _N),
        ([b"a"] * _N, [b"t"] * _N, [0] * (_N - 1) + [1]),
        ([b"a"] * _N, [b"t" * 32768] * _N, [0] * _N),
        ([b"a"] * _N, [b"t"] * _N, [1] * (_N - 1) + [1.0]),
        ([b"a"] * _N, [b"t"] * _N, [0] * (_N + 1)),
    ],
    ids=["body-lengths", "text-lengths", "flags", "text-too-long", "a-float-flag", "more-flags"],
)
def test_unequal_messages_are_left_to_the_loop(
    bodies: list[bytes], texts: list[bytes], flags: list[int]
) -> None:
    assert _encode_equal(bodies, texts, flags) is None


@pytest.mark.parametrize("count", [ACROSS_FROM, ACROSS_FROM + 1])
def test_a_properties_length_all_messages_get_wrong_is_left_to_the_loop(count: int) -> None:
    message = bytearray(_encode_each([b"abc"], [b"tt"], [0]))
    message[24] = 3  # the properties length, a short at 20 + 3: 3, the text is 2 bytes
    body = bytes(message) * count
    assert _split_equal(body) is None
    with pytest.raises(MalformedBodyError, match="properties length 3 does not add up"):
        _split_each(body)


@pytest.mark.parametrize("count", [1, ACROSS_FROM - 1])
def test_fewer_messages_than_across_from_go_one_by_one(count: int) -> None:
    bodies, texts, flags = [b"abc"] * count, [b"t"] * count, [0] * count
    assert _encode_equal(bodies, texts, flags) is None  # the loop is cheaper there
    assert _split_equal(_encode_each(bodies, texts, flags)) is None


def drawn_run(texts: list[bytes]) -> UniqKeyRun | None:
    return _drawn_run(texts, b"".join(texts))


def run_texts(keys: list[str]) -> list[bytes]:
    return [b"UNIQ_KEY\x01" + key.encode() + b"\x02" for key in keys]


@settings(max_examples=150, deadline=None)
@given(
    st.sampled_from(["7F0000010F2A3B4C5D6E7F0A1B2C", "", "é-\U0001f600-"]),
    st.integers(0, 0xFFFF),
    st.integers(1, 300),
)
def test_a_drawn_run_is_read_as_that_run(head: str, first: int, count: int) -> None:
    run = drawn_run(run_texts(uniq_key_run(head, first, count)))
    assert type(run) is UniqKeyRun
    assert (run.head, run.first, list(run)) == (head, first, list(uniq_key_run(head, first, count)))


def keys_one_by_one(texts: list[bytes]) -> list[str] | None:
    """The keys of texts that each are ``UNIQ_KEY\\x01value\\x02`` alone, read text by text
    (None for any other texts)."""
    pair = b"UNIQ_KEY\x01"
    if not all(t.startswith(pair) and t.find(b"\x02") == len(t) - 1 for t in texts):
        return None
    try:
        return [text[len(pair) : -1].decode() for text in texts]
    except UnicodeDecodeError:
        return None


def test_a_boundary_moved_between_two_texts_is_no_run() -> None:
    texts = run_texts(uniq_key_run("AB", 0, 3))
    texts[1:] = [texts[1][:-1], b"\x02" + texts[2]]  # joined, the texts are as they were
    assert drawn_run(texts) is None


@settings(max_examples=300, deadline=None)
@given(st.integers(0, 0xFFFF), st.integers(2, 40), st.data())
def test_a_damaged_run_is_no_run_unless_its_texts_still_are_one(
    first: int, count: int, data: st.DataObject
) -> None:
    texts = run_texts(uniq_key_run("7F00000100", first, count))
    index = data.draw(st.integers(0, count - 2), label="text")
    if data.draw(st.booleans(), label="move a boundary"):
        cut = data.draw(st.integers(1, len(texts[index])), label="bytes moved")
        texts[index], texts[index + 1] = texts[index][:-cut], texts[index][-cut:] + texts[index + 1]
    else:
        text = bytearray(texts[index])
        at = data.draw(st.integers(0, len(text) - 1), label="at")
        text[at] = data.draw(st.integers(0, 255).filter(lambda v: v != text[at]), label="to")
        texts[index] = bytes(text)
    run = drawn_run(texts)
    if run is not None:  # only what is a run, read as text by text reads it
        assert list(run) == keys_one_by_one(texts)
        assert list(run) == list(uniq_key_run(run.head, run.first, count))
