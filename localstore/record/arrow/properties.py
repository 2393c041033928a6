"""Properties found in many records' properties texts at once, by numpy over the texts' bytes.

The rules are :func:`~localstore.record.properties.decode_properties`': a pair starts a text or
follows a ``\\x02``; its name ends at its first ``\\x01``, its value at the next ``\\x02`` or
the text's end; a pair with an empty name or value does not count; of pairs of one name the
last counts (in the first one's place).
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from localstore.record.arrow.schema import KEYS, PROPERTIES
from localstore.record.arrow.slices import ByteSlices
from localstore.record.properties import decode_properties

__all__ = ["PropertyFinder", "properties_maps", "split_keys"]


class PropertyFinder:
    """Where properties of given names are in records' properties texts (a string array), by
    decode_properties' rules: a pair starts a text or follows a ``\\x02``, its name ends at
    its first ``\\x01``, its value at the next ``\\x02`` or the text's end; a pair with an
    empty value does not count; of pairs of one name the last counts."""

    def __init__(self, texts: pa.Array) -> None:
        self.count = len(texts)
        _, offsets, data = texts.buffers()
        self.offsets = np.frombuffer(offsets, dtype=np.int32)[
            texts.offset : texts.offset + self.count + 1
        ].astype(np.int64)
        octets = np.frombuffer(data, dtype=np.uint8) if data is not None else np.zeros(0, np.uint8)
        self.text = ByteSlices(octets, data if data is not None else pa.py_buffer(b""))
        self.separators = np.flatnonzero(octets == 0x02)
        after = self.separators + 1
        starts_a_text = np.zeros(len(octets) + 1, dtype=bool)
        starts_a_text[self.offsets] = True
        self.text_starts = self.offsets[:-1]
        self.pair_starts = after[~starts_a_text[after]]  # the later pairs of each text

    def every_pair(self) -> tuple[npt.NDArray[np.int64], pa.Array, pa.Array]:
        """(owner text, name, value) of every pair that counts, in text order (repeats of a
        name included)."""
        octets = self.text.octets
        is_start = np.zeros(len(octets) + 1, dtype=bool)
        is_start[self.offsets] = True
        is_start[self.separators + 1] = True
        starts = np.flatnonzero(is_start[:-1])
        owners = np.searchsorted(self.offsets, starts, side="right") - 1
        ends = np.minimum(self._next(self.separators, starts), self.offsets[owners + 1])
        name_ends = self._next(np.flatnonzero(octets == 0x01), starts)
        counts = (starts < name_ends) & (name_ends < ends - 1)  # a name, \x01 and a value
        starts, ends, name_ends, owners = (
            starts[counts],
            ends[counts],
            name_ends[counts],
            owners[counts],
        )
        names = self.text.slices(starts, name_ends - starts, pa.string())
        values = self.text.slices(name_ends + 1, ends - name_ends - 1, pa.string())
        return owners, names, values

    @staticmethod
    def _next(positions: npt.NDArray[np.int64], at: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
        """The first of the sorted ``positions`` at or after each of ``at`` (int64 max: none)."""
        beyond = np.append(positions, np.iinfo(np.int64).max)
        return beyond[np.searchsorted(positions, at)]

    def values(self, name: str) -> pa.Array:
        """Per text, the value of property ``name`` (null without one)."""
        prefix = np.frombuffer((name + "\x01").encode(), dtype=np.uint8)
        at = np.full(self.count, -1, dtype=np.int64)
        # first pairs, then later ones: a later pair of the name overrides an earlier one
        for starts in (self.text_starts, self.pair_starts):
            owners, value_at = self._pairs_named(starts, prefix)
            at[owners] = value_at
        found = at >= 0
        value_at = np.where(found, at, 0)
        value_end = np.minimum(self._next(self.separators, value_at), self.offsets[1:])
        length = np.where(found, value_end - value_at, 0)
        return self.text.slices(value_at, length, pa.string(), found)

    def _pairs_named(
        self, starts: npt.NDArray[np.int64], prefix: npt.NDArray[np.uint8]
    ) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
        """(owner text, value offset) of the pairs at ``starts`` named ``prefix`` (the name
        and ``\\x01``) with a value, in ascending order."""
        octets = self.text.octets
        last = len(octets) - 1
        if last < 0:
            return np.zeros(0, np.int64), np.zeros(0, np.int64)
        words = self.text.words
        checked = 0
        while len(prefix) - checked >= 4 and len(words):  # 4 bytes at once, then one by one
            word = int(prefix[checked : checked + 4].view("<u4")[0])
            starts = starts[words[np.minimum(starts + checked, len(words) - 1)] == word]
            checked += 4
        for index in range(checked, len(prefix)):
            starts = starts[octets[np.minimum(starts + index, last)] == prefix[index]]
        owners = np.searchsorted(self.offsets, starts, side="right") - 1
        value_at = starts + len(prefix)
        has_value = value_at < self.offsets[owners + 1]  # the text goes on after the name
        has_value[has_value] &= octets[value_at[has_value]] != 0x02
        owners, value_at = owners[has_value], value_at[has_value]
        last_of_owner = np.append(owners[1:] != owners[:-1], True)[: len(owners)]
        return owners[last_of_owner], value_at[last_of_owner]


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
