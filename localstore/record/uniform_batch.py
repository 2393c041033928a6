"""A batch whose messages differ only in body and properties, held as columns.

What a producer's ``send_batch`` hands the store: every message goes to one topic-queue and
shares the flag, the born time and the born host; none is a transaction record (SYSFLAG 0 but
for the host bits), none was reconsumed. What differs is kept in parallel lists, one item a
message:

    bodies      the body (bytes)
    properties  the properties as stored: :func:`~localstore.record.properties.encode_properties`
                of the message's dict, UTF-8 (bytes)
    uniq_keys   the ``UNIQ_KEY`` value, or None           (what the key index needs,
    keys        the ``KEYS`` value, or None                so that it never parses the
    tags        the ``TAGS`` value, or None; or the whole  properties)
                column None when no message has tags

Invariant (kept by whoever builds the batch, see ``sdk.outgoing``): ``uniq_keys``, ``keys`` and
``tags`` are the values ``properties`` holds under those names. ``plain`` says the properties
hold no other names: a caller looking for another property (a delay) then knows without a scan.
``other_names``, when not None, is exactly the set of the other names they hold (a batch that
was plain and had one property added to a message knows it), so a lookup needs no scan either.
``body_crcs``, when not None, holds each body's ``zlib.crc32(body) & 0x7FFFFFFF`` (a produce
body carries them, checked when it is decoded): the encoder takes them and computes none.

The store encodes such a batch without a message object per record
(:func:`localstore.record.batch_encoder.encode_uniform`), byte for byte as it encodes the same
messages given as :class:`~localstore.record.codec.NewMessage` objects. It is also a
``Sequence[NewMessage]``: reading an item makes the messages, once, for code that wants objects
(a message made so is a copy: changing it does not change what the batch stores).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import overload

from localstore.record.codec import NewMessage
from localstore.record.properties import (
    NAME_VALUE_SEPARATOR,
    PROPERTY_KEYS,
    PROPERTY_SEPARATOR,
    PROPERTY_TAGS,
    PROPERTY_UNIQ_KEY,
    decode_written_properties,
)
from quiver_errors import InvalidArgumentError

DEFAULT_BORN_HOST = b"\x7f\x00\x00\x01\x00\x00\x00\x00"
_INDEXED_NAMES = frozenset({PROPERTY_TAGS, PROPERTY_KEYS, PROPERTY_UNIQ_KEY})


class UniformBatch(Sequence[NewMessage]):
    """Messages of one topic-queue as columns (see the module docstring)."""

    __slots__ = (
        "_messages",
        "bodies",
        "body_crcs",
        "born_host",
        "born_timestamp",
        "flag",
        "keys",
        "other_names",
        "plain",
        "properties",
        "queue_id",
        "tags",
        "topic",
        "uniq_keys",
    )

    def __init__(
        self,
        topic: str,
        queue_id: int,
        bodies: Sequence[bytes],
        properties: Sequence[bytes],
        uniq_keys: Sequence[str | None],
        keys: Sequence[str | None],
        tags: Sequence[str | None] | None = None,
        *,
        plain: bool = False,
        flag: int = 0,
        born_timestamp: int = 0,
        born_host: bytes = DEFAULT_BORN_HOST,
        other_names: frozenset[str] | None = None,
        body_crcs: Sequence[int] | None = None,
    ):
        count = len(bodies)
        if not (
            len(properties) == len(uniq_keys) == len(keys) == count
            and (tags is None or len(tags) == count)
            and (body_crcs is None or len(body_crcs) == count)
        ):
            raise InvalidArgumentError(
                f"a uniform batch needs one item a message in every column: {count} bodies, "
                f"{len(properties)} properties, {len(uniq_keys)} UNIQ_KEYs, {len(keys)} KEYS"
                + ("" if tags is None else f", {len(tags)} TAGS")
                + ("" if body_crcs is None else f", {len(body_crcs)} body CRCs")
            )
        self.topic = topic
        self.queue_id = queue_id
        self.bodies = bodies
        self.body_crcs = body_crcs
        self.properties = properties
        self.uniq_keys = uniq_keys
        self.keys = keys
        self.tags = tags
        self.plain = plain
        self.other_names = frozenset() if plain else other_names
        self.flag = flag
        self.born_timestamp = born_timestamp
        self.born_host = born_host
        self._messages: list[NewMessage] | None = None

    def __len__(self) -> int:
        return len(self.bodies)

    @overload
    def __getitem__(self, index: int) -> NewMessage: ...

    @overload
    def __getitem__(self, index: slice) -> list[NewMessage]: ...

    def __getitem__(self, index: int | slice) -> NewMessage | list[NewMessage]:
        return self.messages()[index]

    def __iter__(self) -> Iterator[NewMessage]:
        return iter(self.messages())

    def messages(self) -> list[NewMessage]:
        """The batch as message objects, made on the first call."""
        made = self._messages
        if made is None:
            topic, queue_id, flag = self.topic, self.queue_id, self.flag
            born, host = self.born_timestamp, self.born_host
            made = self._messages = [
                NewMessage(
                    topic, body, queue_id, decode_written_properties(text), flag, 0, born, host
                )
                for body, text in zip(self.bodies, self.properties, strict=True)
            ]
        return made

    def holds_property(self, name: str) -> bool:
        """Whether a message of the batch holds property ``name`` (read from the columns or
        ``other_names``, or found as a whole ``name\\x01`` pair in the stored text: a value
        cannot hold the separators, so the match is exact)."""
        if name in _INDEXED_NAMES:
            column = self._column(name)
            return column is not None and any(value is not None for value in column)
        if self.other_names is not None:
            return name in self.other_names
        wanted = (name + NAME_VALUE_SEPARATOR).encode()
        after_pair = (PROPERTY_SEPARATOR + name + NAME_VALUE_SEPARATOR).encode()
        return any(text.startswith(wanted) or after_pair in text for text in self.properties)

    def _column(self, name: str) -> Sequence[str | None] | None:
        """The column of an indexed property (None for TAGS when no message has tags)."""
        if name == PROPERTY_UNIQ_KEY:
            return self.uniq_keys
        if name == PROPERTY_KEYS:
            return self.keys
        return self.tags if name == PROPERTY_TAGS else None


def batch_head(messages: Sequence[NewMessage]) -> tuple[str, int, int]:
    """Where a non-empty batch goes and what its first record is: topic, queue id and the first
    message's SYSFLAG, read from a :class:`UniformBatch`'s fields (no message is made; its
    SYSFLAG is 0) or from the first message."""
    if isinstance(messages, UniformBatch):
        return messages.topic, messages.queue_id, 0
    first = messages[0]
    return first.topic, first.queue_id, first.sys_flag
