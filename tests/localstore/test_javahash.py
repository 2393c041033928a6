"""Java ``String.hashCode`` (tag codes, index keys): known values and the fast path vs the loop."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from localstore.record.javahash import index_key_hash, java_hash, java_hash_concat, java_hash_slow

INT_MIN = -(2**31)
INT_MAX = 2**31 - 1

KNOWN = [
    ("", 0),
    ("a", 97),
    ("TagA", 2598919),
    ("TagB", 2598920),
    ("TAG1", 2567159),
    ("标签", 857175),  # UTF-16 code units, not UTF-8 bytes
    ("TopicTest#key1", -1655984460),
    ("AaTopic#BB", -10606476),
    ("BBTopic#Aa", -10606476),
    ("Aa", 2112),
    ("BB", 2112),
    ("polygenelubricants", INT_MIN),  # the classic Integer.MIN_VALUE hash
]


@pytest.mark.parametrize(("text", "expected"), KNOWN)
def test_known_values(text: str, expected: int) -> None:
    assert java_hash(text) == expected
    assert java_hash_slow(text) == expected


def test_a_lone_surrogate_is_one_code_unit_as_in_java() -> None:
    # Java: "\uD800".hashCode() == 55296, ("a" + "\uD800").hashCode() == 97 * 31 + 55296
    assert java_hash("\ud800") == 0xD800 == java_hash_slow("\ud800")
    assert java_hash("a\ud800") == 97 * 31 + 0xD800
    assert java_hash_concat(java_hash("a"), "\ud800") == java_hash("a\ud800")


def test_non_bmp_hashes_surrogate_pairs() -> None:
    # U+1F600 is the UTF-16 pair D83D DE00: 31 * 0xD83D + 0xDE00.
    assert java_hash("😀") == 31 * 0xD83D + 0xDE00
    assert java_hash("a😀") == java_hash_slow("a😀")


@settings(max_examples=200, deadline=None)
@given(st.text())
def test_fast_path_equals_reference_loop(text: str) -> None:
    assert java_hash(text) == java_hash_slow(text)


@settings(max_examples=200, deadline=None)
@given(st.text(alphabet=st.characters(max_codepoint=127), min_size=1, max_size=400))
def test_ascii_fast_path_long_strings(text: str) -> None:
    h = java_hash(text)
    assert h == java_hash_slow(text)
    assert INT_MIN <= h <= INT_MAX


@settings(max_examples=200, deadline=None)
@given(st.text())
def test_index_key_hash_is_non_negative_abs(text: str) -> None:
    h = index_key_hash(text)
    assert 0 <= h <= INT_MAX
    expected = java_hash_slow(text)
    assert h == (0 if expected == INT_MIN else abs(expected))


def test_index_key_hash_of_min_value_is_zero() -> None:
    assert java_hash("polygenelubricants") == INT_MIN
    assert index_key_hash("polygenelubricants") == 0
    assert index_key_hash("TopicTest#key1") == 1655984460


_uniq_suffix = st.one_of(  # 4 characters make a 32-character UNIQ_KEY; 3 and 5 other lengths
    st.text(alphabet="0123456789ABCDEF", min_size=3, max_size=5),  # a producer's counter
    st.text(
        alphabet=st.characters(max_codepoint=0x2FFFF, blacklist_categories=("Cs",)),
        min_size=3,
        max_size=5,
    ),
)
_key = st.one_of(
    st.text(st.characters(blacklist_categories=("Cs",)), max_size=12),
    st.text(alphabet="ab", min_size=250, max_size=300),  # past the lengths hashed inline
)


@given(
    prefixes=st.lists(
        st.text(alphabet="0123456789ABCDEF", min_size=28, max_size=28), min_size=1, max_size=3
    ),
    suffixes=st.lists(_uniq_suffix, min_size=1, max_size=12),
    keys=st.lists(_key, max_size=3),
    without_uniq=st.sets(st.integers(0, 11), max_size=3),
    flags=st.none() | st.lists(st.sampled_from([0, 4, 8, 12]), min_size=12, max_size=12),
)
def test_batch_index_hashes_match_java_for_shared_uniq_prefixes(
    prefixes, suffixes, keys, without_uniq, flags
) -> None:
    """The put path hashes UNIQ_KEYs sharing a 28-character prefix from the prefix's hash, and
    short ASCII keys inline: every hash must equal RocketMQ's abs(String.hashCode) of topic#key,
    whatever the UNIQ_KEY's length, with or without one, for keys of any length; ROLLBACK
    records (SYSFLAG 0xC) get none."""
    from localstore.index.service import IndexService, key_columns
    from localstore.record.codec import NewMessage

    topic = "orders"
    messages = []
    for index, suffix in enumerate(suffixes):
        properties = {}
        if index not in without_uniq:
            properties["UNIQ_KEY"] = prefixes[index % len(prefixes)] + suffix
        if keys and index % 2:
            properties["KEYS"] = " ".join(keys)
        messages.append(NewMessage(topic, b"x", 0, properties))
    service = IndexService.__new__(IndexService)
    service._prefix_hashes = {}
    uniq_keys, all_keys = key_columns(messages)
    if flags is not None:
        flags = flags[: len(messages)]
    hashes, offsets = service._key_hashes(
        topic, uniq_keys, all_keys, flags, list(range(len(messages)))
    )
    expected = []
    for phys, message in enumerate(messages):
        if flags is not None and flags[phys] == 12:
            continue
        wanted = [
            message.properties.get("UNIQ_KEY"),
            *message.properties.get("KEYS", "").split(" "),
        ]
        expected += [(index_key_hash(f"{topic}#{k}"), phys) for k in wanted if k]
    assert list(zip(hashes, offsets, strict=True)) == expected


def test_index_hashes_refuse_lists_of_different_lengths():
    from localstore.index.service import IndexService

    service = IndexService.__new__(IndexService)
    service._prefix_hashes = {}
    with pytest.raises(ValueError, match=r"3 messages' UNIQ_KEYs do not match 3 KEYS, 2 offsets$"):
        service._key_hashes("orders", [None] * 3, ["a"] * 3, None, [0, 1])
    with pytest.raises(ValueError, match="do not match 2 KEYS, 2 offsets and 1 SYSFLAGs"):
        service._key_hashes("orders", [None] * 2, ["a"] * 2, [0], [0, 1])
    with pytest.raises(ValueError, match="2 messages' UNIQ_KEYs do not match 1 KEYS, 2 offsets"):
        service._key_hashes("orders", [None] * 2, ["a"], None, [0, 1])


@settings(max_examples=200, deadline=None)
@given(
    # a client's head, or any text a remote client's keys start with (the broker takes a run
    # of them as drawn by a client: sdk.protocol.produce_body)
    head=st.sampled_from(["7F00000131C8AB5E6F1A0000", "0" * 24, "A" * 56])
    | st.text(st.characters(blacklist_characters="\x01\x02"), max_size=40),
    millis=st.text("0123456789ABCDEF", min_size=0, max_size=8),
    first=st.sampled_from([0, 1, 0xFFF0, 0xFFFF]) | st.integers(0, 0xFFFF),
    keys=st.lists(
        st.none() | st.text("kx9 é", min_size=0, max_size=6) | st.just("z" * 300), max_size=40
    ),
    with_flags=st.booleans(),
)
def test_a_uniq_key_run_hashes_as_its_keys(head, millis, first, keys, with_flags) -> None:
    """A producer batch's UNIQ_KEYs given as a CounterRun (head + 4 hex digits of a counter
    that may wrap) index exactly as the same keys given one by one: same hashes, same offsets,
    in the same order, whether the batch takes the comprehension path (one plain key a
    message) or the loop (several keys, none, non-ASCII, long, transaction records)."""
    from localstore.index.service import CounterRun, IndexService

    run = CounterRun(head + millis, first, len(keys))
    flags = [12 if i % 3 == 1 else 0 for i in range(len(keys))] if with_flags else None
    service = IndexService.__new__(IndexService)
    service._prefix_hashes = {}
    offsets = [100 * i for i in range(len(keys))]
    by_run = service._key_hashes("orders", run, keys, flags, offsets)
    by_keys = service._key_hashes("orders", run.keys(), keys, flags, offsets)
    assert by_run == by_keys
    assert len(by_run[0]) >= len(keys) - (len(keys) + 1) // 3 * with_flags


@pytest.mark.parametrize("keys", [[None] * 5, [None, "", None, None, ""]], ids=["none", "empty"])
def test_a_uniq_key_run_without_keys_hashes_as_its_keys(keys) -> None:
    from localstore.index.service import CounterRun, IndexService

    run = CounterRun("7F00000131C8AB5E6F1A0000ABCD", 0xFFFD, 5)  # wraps
    service = IndexService.__new__(IndexService)
    service._prefix_hashes = {}
    offsets = [7, 9, 11, 13, 15]
    by_run = service._key_hashes("orders", run, keys, None, offsets)
    assert by_run == service._key_hashes("orders", run.keys(), keys, None, offsets)
    assert by_run[1] == offsets
    uniq_keys = run.keys()  # a CounterRun method, not a mapping's
    assert by_run[0] == [index_key_hash(f"orders#{key}") for key in uniq_keys]


def test_next_many_is_a_run_of_its_ids() -> None:
    from localstore.index.service import CounterRun, counter_run_of
    from localstore.record.message_id import UniqKeyGenerator

    generator = UniqKeyGenerator()
    generator._counter = itertools.count(0x1FFFE)  # wraps inside the batch
    ids = generator.next_many(4)
    run = counter_run_of(ids)
    assert run == CounterRun(ids.head, 0xFFFE, 4)
    assert run.keys() == ids
    assert [key[-4:] for key in ids] == ["FFFE", "FFFF", "0000", "0001"]
    assert counter_run_of(list(ids)) is None and counter_run_of([]) is None
