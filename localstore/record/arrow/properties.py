"""Properties found in many records' properties texts at once, by numpy over the texts' bytes.

The rules are :func:`~localstore.record.properties.decode_properties`': a pair starts a text or
follows a ``\\x02``; its name ends at its first ``\\x01``, its value at the next ``\\x02`` or
the text's end; a pair with an empty name or value does not count; of pairs of one name the
last counts (in the first one's place). The store's own first pair
(:data:`~localstore.record.properties.PROPERTY_PUT_RECORDS`) does not count.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from localstore.record.arrow.schema import KEYS, PROPERTIES
from localstore.record.arrow.slices import ByteSlices
from localstore.record.properties import PUT_RECORDS_PAIR_START, decode_properties

__all__ = ["PropertyFinder", "properties_maps", "split_keys"]


_NONE = np.iinfo(np.int64).max  # a position past every buffer
_PUT_MARK = np.frombuffer(PUT_RECORDS_PAIR_START.encode(), dtype=np.uint8)


class PropertyFinder:
    """Where properties of given names are in records' properties texts (a string array).

    Every pair of every text is known by its start, its text (owner) and its end (the next
    ``\\x02`` or the text's end), in two sorted tables made once: each text's first pair, and
    the pairs after a ``\\x02`` that is not its text's last byte."""

    def __init__(self, texts: pa.Array) -> None:
        self.count = len(texts)
        _, offsets, data = texts.buffers()
        self.offsets = np.frombuffer(offsets, dtype=np.int32)[
            texts.offset : texts.offset + self.count + 1
        ].astype(np.int64)
        octets = np.frombuffer(data, dtype=np.uint8) if data is not None else np.zeros(0, np.uint8)
        self.text = ByteSlices(octets, data if data is not None else pa.py_buffer(b""))
        separators = np.flatnonzero(octets == 0x02)
        text_ends = self.offsets[1:]
        first_starts = self.offsets[:-1]
        first_ends = np.minimum(_next(separators, first_starts), text_ends)
        self.first = (first_starts, np.arange(self.count, dtype=np.int64), first_ends)
        marked = self._pairs_named(self.first, _PUT_MARK)[0]  # the store's own: not counted
        if len(marked):
            kept = np.ones(self.count, dtype=bool)
            kept[marked] = False
            self.first = (first_starts[kept], self.first[1][kept], first_ends[kept])
        owners = np.searchsorted(self.offsets, separators, side="right") - 1
        after = separators + 1
        later = after < self.offsets[owners + 1]  # not its text's last byte
        next_separators = np.append(separators[1:], _NONE)
        later_owners = owners[later]
        later_ends = np.minimum(next_separators[later], self.offsets[later_owners + 1])
        self.later = (after[later], later_owners, later_ends)

    def values(self, name: str) -> pa.Array:
        """Per text, the value of property ``name`` (null without one)."""
        prefix = np.frombuffer((name + "\x01").encode(), dtype=np.uint8)
        value_at = np.zeros(self.count, dtype=np.int64)
        value_end = np.zeros(self.count, dtype=np.int64)
        found = np.zeros(self.count, dtype=bool)
        for table in (self.first, self.later):  # a later pair of the name overrides
            owners, at, end = self._pairs_named(table, prefix)
            value_at[owners], value_end[owners], found[owners] = at, end, True
        return self.text.slices(value_at, value_end - value_at, pa.string(), found)

    def every_pair(self) -> tuple[npt.NDArray[np.int64], pa.Array, pa.Array]:
        """(owner text, name, value) of every pair that counts, in text order (repeats of a
        name included)."""
        starts, owners, ends = (
            np.concatenate(pair) for pair in zip(self.first, self.later, strict=True)
        )
        in_order = np.argsort(starts, kind="stable")  # two sorted runs: one merge
        starts, owners, ends = starts[in_order], owners[in_order], ends[in_order]
        name_ends = _next(np.flatnonzero(self.text.octets == 0x01), starts)
        counts = (starts < name_ends) & (name_ends < ends - 1)  # a name, \x01 and a value
        starts, ends, name_ends, owners = (a[counts] for a in (starts, ends, name_ends, owners))
        names = self.text.slices(starts, name_ends - starts, pa.string())
        values = self.text.slices(name_ends + 1, ends - name_ends - 1, pa.string())
        return owners, names, values

    def _pairs_named(
        self, table: tuple[npt.NDArray[np.int64], ...], prefix: npt.NDArray[np.uint8]
    ) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64], npt.NDArray[np.int64]]:
        """(owner, value start, value end) of the pairs of ``table`` named ``prefix`` (the
        name and ``\\x01``) with a value: the last such pair of each owner, owners ascending."""
        starts, owners, ends = table
        octets, words = self.text.octets, self.text.words
        chosen = np.flatnonzero(starts + len(prefix) < ends)  # room for the name and a value
        checked = 0
        while len(prefix) - checked >= 4:  # 4 bytes at once, then one by one
            word = int(prefix[checked : checked + 4].view("<u4")[0])
            chosen = chosen[words[starts[chosen] + checked] == word]
            checked += 4
        for index in range(checked, len(prefix)):
            chosen = chosen[octets[starts[chosen] + index] == prefix[index]]
        owners = owners[chosen]
        last_of_owner = np.append(owners[1:] != owners[:-1], True)[: len(owners)]
        chosen = chosen[last_of_owner]
        return owners[last_of_owner], starts[chosen] + len(prefix), ends[chosen]


def _next(positions: npt.NDArray[np.int64], at: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
    """The first of the sorted ``positions`` at or after each of ``at`` (``_NONE``: none)."""
    return np.append(positions, _NONE)[np.searchsorted(positions, at)]


def split_keys(keys_text: pa.Array) -> pa.Array:
    """The KEYS values split at spaces, empty tokens dropped (as
    :func:`localstore.record.properties.split_keys` does); a record without keys has an empty
    list."""
    pieces = pc.split_pattern(keys_text, pattern=" ")
    owners = np.asarray(pc.list_parent_indices(pieces))
    tokens = pc.list_flatten(pieces)
    kept = np.asarray(pc.not_equal(tokens, "")).astype(bool)
    per_record = np.bincount(owners[kept], minlength=len(keys_text))
    offsets = np.zeros(len(keys_text) + 1, dtype=np.int32)
    np.cumsum(per_record, out=offsets[1:])
    return pa.ListArray.from_arrays(pa.array(offsets), tokens.filter(pa.array(kept)), type=KEYS)


def properties_maps(properties_text: pa.Array, found: PropertyFinder) -> pa.Array:
    """Every record's properties as a map, by decode_properties' rules (its ``found``)."""
    owners, names, values = found.every_pair()
    count = len(properties_text)
    repeated = _repeats_a_name(owners, _codes(names))
    if repeated:  # a repeated name: the later value, in the first one's place (rare)
        texts = properties_text.to_pylist()
        return pa.array([list(decode_properties(text).items()) for text in texts], type=PROPERTIES)
    offsets = np.zeros(count + 1, dtype=np.int32)
    np.cumsum(np.bincount(owners, minlength=count), out=offsets[1:])
    return pa.MapArray.from_arrays(pa.array(offsets), names, values, type=PROPERTIES)


def _repeats_a_name(owners: npt.NDArray[np.int64], codes: npt.NDArray[np.int64]) -> bool:
    """Whether a text holds two pairs of one name (code); a text's pairs are adjacent."""
    most = int(np.bincount(owners).max()) if len(owners) else 0
    if most > 16:
        return len(pc.unique(pa.array(owners * (int(codes.max()) + 1) + codes))) < len(owners)
    return any(
        bool(((owners[lag:] == owners[:-lag]) & (codes[lag:] == codes[:-lag])).any())
        for lag in range(1, most)
    )


def _codes(names: pa.Array) -> npt.NDArray[np.int64]:
    """An int per name, equal for equal names."""
    encoded = pc.dictionary_encode(names)
    return np.asarray(encoded.indices).astype(np.int64)
