"""Slices of a byte buffer as Arrow binary and string arrays, with no copy per value in Python.

Each slice is an Arrow binary view (16 bytes: the length, then the bytes themselves up to 12,
else their first 4, the buffer index and the offset) into the buffer; Arrow copies the viewed
bytes into the plain ``binary`` / ``string`` array Spark reads (one cast: to ``string``, it
checks the bytes are UTF-8). Arrow trusts a view: every slice is checked to lie inside the
buffer before Arrow sees it.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt
import pyarrow as pa

from quiver_errors import IllegalStateError

__all__ = ["ByteSlices"]

_INLINE_BYTES = 12  # a binary view holds a value up to 12 bytes itself


class ByteSlices:
    """A byte buffer (as numpy and as Arrow) whose slices become Arrow arrays."""

    def __init__(self, octets: npt.NDArray[np.uint8], buffer: pa.Buffer) -> None:
        self.octets = octets
        self.buffer = buffer
        size = len(octets)
        # a little-endian word at every byte position, for the views' inline bytes
        self.words = np.ndarray((max(size - 3, 0),), dtype="<u4", buffer=octets, strides=(1,))

    def slices(
        self,
        at: npt.NDArray[np.int64],
        length: npt.NDArray[np.int64],
        kind: pa.DataType,
        valid: npt.NDArray[np.bool_] | None = None,
    ) -> pa.Array:
        """The ``length[i]`` bytes at ``at[i]`` as a ``kind`` (binary or string) array, null
        where ``valid`` is False. Raises ``pa.ArrowInvalid`` for a string that is not UTF-8."""
        count = len(at)
        inside = (at >= 0) & (length >= 0) & (at + length <= len(self.octets))
        if not (inside if valid is None else inside | ~valid).all():  # Arrow would read astray
            raise IllegalStateError("the columnar decoder made a slice outside its buffer")
        views = np.zeros((count, 4), dtype="<u4")
        views[:, 0] = length
        self._inline(views, at, length)
        outside = length > _INLINE_BYTES
        views[outside, 2] = 0  # buffer 0: every value lies in ``buffer``
        views[outside, 3] = at[outside]
        validity = None if valid is None else pa.py_buffer(np.packbits(valid, bitorder="little"))
        viewed = pa.Array.from_buffers(
            pa.binary_view(), count, [validity, pa.py_buffer(views), self.buffer]
        )
        return viewed.cast(kind)  # a copy into a plain array; to a string, checked as UTF-8

    def _inline(
        self,
        views: npt.NDArray[np.uint32],
        at: npt.NDArray[np.int64],
        length: npt.NDArray[np.int64],
    ) -> None:
        """Fill views' bytes 4 to 16 with each value's first 12 bytes, zero-padded."""
        size = len(self.octets)
        if (length > _INLINE_BYTES).all():  # every value long: only its first 4 bytes here
            views[:, 1] = self.words[at]
            return
        room = at + _INLINE_BYTES <= size
        everywhere = bool(room.all())
        roomy = at if everywhere else at[room]
        for word in range(3):
            bytes_in_word = np.clip(length - 4 * word, 0, 4)
            first = (
                self.words[roomy + 4 * word]
                & _LOW_BYTES[bytes_in_word if everywhere else bytes_in_word[room]]
            )
            if everywhere:
                views[:, 1 + word] = first
            else:
                views[room, 1 + word] = first
        if not everywhere:  # values near the buffer's end: byte by byte, clipped
            near_end = ~room
            spread = np.minimum(at[near_end, None] + np.arange(_INLINE_BYTES), max(size - 1, 0))
            tail = self.octets[spread] if size else np.zeros(spread.shape, np.uint8)
            tail[np.arange(_INLINE_BYTES) >= length[near_end, None]] = 0
            views[near_end, 1:] = tail.view("<u4")


# a little-endian word's first n bytes, n = 0 to 4
_LOW_BYTES = np.array([0, 0xFF, 0xFFFF, 0xFFFFFF, 0xFFFFFFFF], dtype=np.uint32)
