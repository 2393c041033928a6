"""The fixed-offset fields of many records at once: numpy gathers from overlapping big-endian
views of the buffer (element p of the int view reads bytes p to p+3), IPv4 shape.

A record whose fields there do not add up (another host shape, or damage) is not
:meth:`Headers.common_shape`'s: its arrays hold garbage for it, which nobody reads.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt
import pyarrow as pa

from localstore.record.layout import (
    HEADER_V4_SIZE,
    MAGIC_V1,
    MAGIC_V2,
    PROPERTIES_LENGTH_BYTES,
    SYSFLAG_HOSTS_V6,
    header_offsets,
)

__all__ = ["Headers", "offset_msg_ids"]

_V4 = header_offsets(0)


class Headers:
    """The fixed-offset fields of the records at ``starts``, IPv4 shape, one array each (those
    of a record of another shape are wrong and unused: it takes the general decoder)."""

    def __init__(self, view: bytes | memoryview, starts: npt.NDArray[np.int64]) -> None:
        self.view = view
        self.starts = starts
        size = len(view)
        # an int at every byte position: element p reads bytes p .. p+3 (p+7), big-endian
        self._ints = np.ndarray((size - 3,), dtype=">i4", buffer=view, strides=(1,))
        self._longs = np.ndarray((size - 7,), dtype=">i8", buffer=view, strides=(1,))
        self._shorts = np.ndarray((size - 1,), dtype=">i2", buffer=view, strides=(1,))
        self.total = self.int_at("TOTALSIZE")
        self.magic = self.int_at("MAGICCODE")
        self.sys_flag = self.int_at("SYSFLAG")
        self.body_length = self.int_at("BODYLENGTH")
        self.body_at = starts + HEADER_V4_SIZE
        topic_field_at = np.minimum(self.body_at + np.maximum(self.body_length, 0), size - 2)
        is_v2 = self.magic == MAGIC_V2
        v1_length = np.frombuffer(view, dtype=np.uint8)[topic_field_at]
        v2_length = self._shorts[topic_field_at]
        self.topic_length = np.where(is_v2, v2_length, v1_length).astype(np.int64)
        self.topic_at = topic_field_at + np.where(is_v2, 2, 1)
        properties_field_at = np.minimum(self.topic_at + np.maximum(self.topic_length, 0), size - 2)
        self.properties_length = self._shorts[properties_field_at].astype(np.int64)
        self.properties_at = properties_field_at + PROPERTIES_LENGTH_BYTES

    def int_at(self, name: str) -> npt.NDArray[np.int64]:
        return self._ints[self.starts + _V4[name]].astype(np.int64)

    def long_at(self, name: str) -> npt.NDArray[np.int64]:
        return self._longs[self.starts + _V4[name]].astype(np.int64)

    def common_shape(self) -> npt.NDArray[np.bool_]:
        """Per record: of the shape the vectorised path reads, its fields adding up."""
        takes: npt.NDArray[np.bool_] = (
            ((self.magic == MAGIC_V1) | (self.magic == MAGIC_V2))
            & (self.sys_flag & SYSFLAG_HOSTS_V6 == 0)
            & (self.body_length >= 0)
            & (self.topic_length >= 0)
            & (self.properties_length >= 0)
            & (self.properties_at + self.properties_length == self.starts + self.total)
        )
        return takes

    def subset(self, rows: npt.NDArray[np.int64]) -> Headers:
        """These headers of records ``rows`` only."""
        chosen = object.__new__(Headers)
        chosen.view, chosen._ints, chosen._longs = self.view, self._ints, self._longs
        chosen._shorts = self._shorts
        for name in (
            "starts",
            "total",
            "magic",
            "sys_flag",
            "body_length",
            "body_at",
            "topic_length",
            "topic_at",
            "properties_length",
            "properties_at",
        ):
            setattr(chosen, name, getattr(self, name)[rows])
        return chosen


# byte -> its two upper-case hex digits, as the 2 bytes of one uint16
_HEX_PAIRS = np.frombuffer("".join(f"{octet:02X}" for octet in range(256)).encode(), dtype="<u2")


def offset_msg_ids(header: Headers) -> pa.Array:
    """Upper-case hex of the IPv4 store host (address and port) and PHYSICALOFFSET: 32
    characters per record (:func:`~localstore.record.codec.make_offset_msg_id`)."""
    count = len(header.starts)
    packed = np.empty((count, 2), dtype=">i8")
    packed[:, 0] = header.long_at("STOREHOSTADDRESS")
    packed[:, 1] = header.long_at("PHYSICALOFFSET")
    octets = packed.view(np.uint8).reshape(count, 16)
    text = _HEX_PAIRS[octets]  # (count, 16) digit pairs: 32 characters a row
    offsets = np.arange(0, 32 * count + 1, 32, dtype=np.int32)
    return pa.Array.from_buffers(
        pa.string(), count, [None, pa.py_buffer(offsets), pa.py_buffer(text)]
    )
