"""Framing for the pipes between the store and its helper processes (the key index, the sync
process).

A frame is ``kind`` (1 ASCII byte) + ``length`` (4 bytes, big-endian) + ``length`` bytes of
payload; a frame is written with one call, so a reader never sees half of one and then another.
"""

from __future__ import annotations

import os
import struct

FRAME_HEAD = struct.Struct(">cI")


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
