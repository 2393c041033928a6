"""The pipe protocol between a store and its key-index process (:mod:`localstore.index_process`).

A frame is ``kind`` (1 ASCII byte) + ``length`` (4 bytes, big-endian) + ``length`` bytes of
payload. The store writes requests on the process's stdin and reads replies on its stdout; only
``KEYS`` goes unanswered, and at most one answered request is in flight.

    kind  store -> index process                     reply
    K     KEYS: JSON list of appended batches, each  none
          [store time, topic, [commitlog offsets],
          [properties (objects)], [SYSFLAG] or null
          (all 0)]
    S     SYNC                                       S: empty
    F     FLUSH: sync the newest files               F: completed time (8-byte int)
    Q     QUERY: JSON [topic, key, max, begin, end]  Q: JSON list of commitlog offsets
    R     RETIRE: commitlog min offset (8)           R: JSON list of deleted file paths
    C     CLOSE: flush, close, exit                  C: empty
    E     (reply only) the request failed            E: UTF-8 message
    Y     (index process only) READY: the files are loaded and the process serves; sent once,
          first

Frames are handled in order, so an answer covers every batch whose keys were sent before it.
"""

from __future__ import annotations

import os
import struct

KEYS = b"K"
SYNC = b"S"
FLUSH = b"F"
QUERY = b"Q"
RETIRE = b"R"
CLOSE = b"C"
ERROR = b"E"
READY = b"Y"

FRAME_HEAD = struct.Struct(">cI")
OFFSET = struct.Struct(">q")


def frame(kind: bytes, payload: bytes = b"") -> bytes:
    """One frame, ready for a single write."""
    return FRAME_HEAD.pack(kind, len(payload)) + payload


def split_frames(buffer: bytearray) -> list[tuple[bytes, bytes]]:
    """Remove the complete frames at the front of ``buffer`` and return them (kind, payload)."""
    frames = []
    at = 0
    head = FRAME_HEAD.size
    while len(buffer) - at >= head:
        kind, length = FRAME_HEAD.unpack_from(buffer, at)
        if len(buffer) - at - head < length:
            break
        frames.append((kind, bytes(buffer[at + head : at + head + length])))
        at += head + length
    del buffer[:at]
    return frames


def read_frame(fd: int) -> tuple[bytes, bytes] | None:
    """Read exactly one frame from ``fd``; None at end of file."""
    head = _read_exactly(fd, FRAME_HEAD.size)
    if head is None:
        return None
    kind, length = FRAME_HEAD.unpack(head)
    payload = _read_exactly(fd, length) if length else b""
    if payload is None:
        return None
    return kind, payload


def write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _read_exactly(fd: int, count: int) -> bytes | None:
    parts = []
    while count:
        chunk = os.read(fd, count)
        if not chunk:
            return None
        parts.append(chunk)
        count -= len(chunk)
    return b"".join(parts)
