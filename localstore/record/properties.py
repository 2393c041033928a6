"""The PROPERTIES field's text: ``name\\x01value\\x02`` for every property, in UTF-8.

A record's properties are one string of pairs, each a name, ``\\x01``, a value and ``\\x02``, in
the order the message's dict gives them; its UTF-8 bytes take at most
:data:`~localstore.record.layout.MAX_PROPERTIES_BYTES`. This module alone defines that text:
every writer makes it with :func:`encode_properties` (the single put, the batch encoder) or,
on a producer batch's per-message path where a call per field costs, by concatenating the
``*_PAIR_START`` prefixes and :data:`PROPERTY_SEPARATOR` defined here; every reader parses it
with :func:`decode_properties`, as RocketMQ's ``string2messageProperties`` does (a pair
without a separator, with an empty name or an empty value is skipped; a repeated name keeps
the later value). :func:`decode_written_properties` gives back exactly the dict a text was written
from (an empty value too), for a batch that turns its own columns back into messages.

A name or a value holding either separator would cut or forge a pair: writers refuse them
(:func:`holds_property_separator`).

One pair is the store's own: :data:`PROPERTY_PUT_RECORDS`, which the store writes as the first
pair of the first record of a put of several records (:mod:`localstore.record.put_mark`). Readers
never see it: :func:`decode_properties` drops it, and puts that name it are refused.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import Protocol

from localstore.record.layout import MAX_PROPERTIES_BYTES

__all__ = [
    "KEYS_PAIR_START",
    "KEY_SEPARATOR",
    "MAX_PROPERTIES_BYTES",
    "NAME_VALUE_SEPARATOR",
    "PROPERTY_PUT_RECORDS",
    "PROPERTY_SEPARATOR",
    "PUT_RECORDS_PAIR_START",
    "TAGS_PAIR_START",
    "UNIQ_KEY_PAIR_START",
    "LazyProperties",
    "decode_properties",
    "decode_written_properties",
    "encode_properties",
    "holds_property_separator",
    "parse_once",
    "split_keys",
]

NAME_VALUE_SEPARATOR = "\x01"
PROPERTY_SEPARATOR = "\x02"
_EMPTY_NAME = PROPERTY_SEPARATOR + NAME_VALUE_SEPARATOR  # a pair that starts with \x01
_EMPTY_VALUE = NAME_VALUE_SEPARATOR + PROPERTY_SEPARATOR  # a pair that ends with \x01
KEY_SEPARATOR = " "  # between the keys of the KEYS property

# Well-known property names (MessageConst).
PROPERTY_KEYS = "KEYS"
PROPERTY_TAGS = "TAGS"
PROPERTY_UNIQ_KEY = "UNIQ_KEY"
PROPERTY_WAIT = "WAIT"
PROPERTY_DELAY = "DELAY"
PROPERTY_REAL_TOPIC = "REAL_TOPIC"
PROPERTY_REAL_QUEUE_ID = "REAL_QID"
PROPERTY_TRANSACTION_PREPARED = "TRAN_MSG"
PROPERTY_RETRY_TOPIC = "RETRY_TOPIC"
PROPERTY_ORIGIN_MESSAGE_ID = "ORIGIN_MESSAGE_ID"
PROPERTY_RECONSUME_TIME = "RECONSUME_TIME"
PROPERTY_MAX_RECONSUME_TIMES = "MAX_RECONSUME_TIMES"
# The store's own (a reserved name): how many records the put its record opens holds.
PROPERTY_PUT_RECORDS = "__QUIVER_PUT_RECORDS"
PUT_RECORDS_PAIR_START = PROPERTY_PUT_RECORDS + NAME_VALUE_SEPARATOR

# The start of the pairs a producer's batch writes itself, one string concatenation per field
# on its per-message path (no call): TAGS_PAIR_START + tags + PROPERTY_SEPARATOR is the pair
# encode_properties({"TAGS": tags}) makes.
TAGS_PAIR_START = PROPERTY_TAGS + NAME_VALUE_SEPARATOR
KEYS_PAIR_START = PROPERTY_KEYS + NAME_VALUE_SEPARATOR
UNIQ_KEY_PAIR_START = PROPERTY_UNIQ_KEY + NAME_VALUE_SEPARATOR


def encode_properties(properties: Mapping[str, str]) -> str:
    """The properties text: ``name\\x01value\\x02`` for every entry, in the mapping's order
    (the caller encodes it to UTF-8 and checks the limit)."""
    text = ""
    for name, value in properties.items():  # faster than joins for the few a message has
        text += f"{name}\x01{value}\x02"  # the two separators, spelled as literals for speed
    return text


def holds_property_separator(text: str) -> bool:
    """Whether ``text``, stored as a property name or value, would cut or forge a property:
    it holds one of the two separators of the ``name\\x01value\\x02`` pairs."""
    return NAME_VALUE_SEPARATOR in text or PROPERTY_SEPARATOR in text


def decode_properties(text: str) -> dict[str, str]:
    """Parse a properties text the way RocketMQ's ``string2messageProperties`` does.

    Segments without a separator, with an empty name or an empty value are skipped; a repeated
    name keeps the later value. The store's own first pair (:data:`PROPERTY_PUT_RECORDS`) is
    dropped.
    """
    if text.startswith(PUT_RECORDS_PAIR_START):
        text = text[text.find(PROPERTY_SEPARATOR) + 1 :]
    items = text.split(PROPERTY_SEPARATOR)
    if not items[-1]:
        items.pop()
    try:  # fast path: every segment is exactly name \x01 value
        result = dict([item.split(NAME_VALUE_SEPARATOR) for item in items])
    except ValueError:
        return _decode_properties_tolerantly(items)
    if (
        "" in result
        or "" in result.values()
        # a repeated name: the pair overwritten may have been one that does not count
        or (len(result) < len(items) and _has_an_empty_name_or_value(text))
    ):
        return _decode_properties_tolerantly(items)
    return result


def _has_an_empty_name_or_value(text: str) -> bool:
    """Whether a pair of ``text`` has an empty name (``\x01`` at a pair's start) or value
    (``\x01`` at its end). The fast path must not take it: its pair would hold its name's
    place in the dict even when a later pair of that name overwrites it."""
    return (
        text.startswith(NAME_VALUE_SEPARATOR)
        or text.endswith(NAME_VALUE_SEPARATOR)
        or _EMPTY_NAME in text
        or _EMPTY_VALUE in text
    )


def _decode_properties_tolerantly(items: list[str]) -> dict[str, str]:
    result: dict[str, str] = {}
    for item in items:
        name, sep, value = item.partition(NAME_VALUE_SEPARATOR)
        if sep and name and value:
            result[name] = value
    return result


def decode_written_properties(text: bytes) -> dict[str, str]:
    """The dict :func:`encode_properties` made ``text`` from (UTF-8), exactly: an empty value
    too, which :func:`decode_properties` (a reader of the stored record) skips."""
    if not text:
        return {}
    pairs = text.decode().split(PROPERTY_SEPARATOR)
    pairs.pop()  # the text ends with a separator
    return dict(pair.split(NAME_VALUE_SEPARATOR, 1) for pair in pairs)


def split_keys(keys: str) -> list[str]:
    """The ``KEYS`` property holds keys separated by single spaces; empty tokens are dropped."""
    return [key for key in keys.split(KEY_SEPARATOR) if key]


class LazyProperties(Protocol):
    """A decoded record whose properties stay the stored text until first read."""

    _properties: dict[str, str] | str


_PARSE_LOCK = threading.Lock()


def parse_once(holder: LazyProperties) -> dict[str, str]:
    """``holder``'s properties, its stored text parsed (:func:`decode_properties`) and kept in
    its place on the first call; two threads reading at once end up with one dict."""
    properties = holder._properties
    if type(properties) is str:
        parsed = decode_properties(properties) if properties else {}
        with _PARSE_LOCK:
            properties = holder._properties
            if type(properties) is str:
                properties = holder._properties = parsed
    return properties  # type: ignore[return-value]  # a dict once parsed
