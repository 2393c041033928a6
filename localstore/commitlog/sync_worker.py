"""The sync process's own code: ``python -m localstore.commitlog.sync_worker`` (see
:mod:`localstore.commitlog.sync_process`).

It reads frames (:mod:`localstore.runtime.pipe_frames`) on stdin and answers on stdout, in order:

    kind  store -> sync process                        reply
    S     SYNC: sequence number (8 bytes, big-endian)  S: the sequence number, once every file
          + the paths of the files to fdatasync,          is synced
          separated by NUL bytes                       E: the sequence number + UTF-8 text: why
                                                          a sync failed
    C     CLOSE                                        C: empty, then it exits

It also exits when stdin ends (the store's process is gone). It keeps the two files it synced
last open: a commitlog writer moves to a new segment only every segment size, and an old
segment that retention deletes must not stay held open here.
"""

from __future__ import annotations

import os
import struct
import sys

from localstore.runtime.pipe_frames import frame, read_frame, write_all

SYNC = b"S"
CLOSE = b"C"
ERROR = b"E"
SEQUENCE = struct.Struct(">q")
_OPEN_FILES = 2


class _Files:
    """Descriptors of the files synced last, opened on first use."""

    def __init__(self) -> None:
        self._open: dict[bytes, int] = {}  # path -> descriptor, oldest first

    def sync(self, path: bytes) -> None:
        fd = self._open.pop(path, None)
        if fd is None:
            fd = os.open(path, os.O_RDWR | os.O_CLOEXEC)
            while len(self._open) >= _OPEN_FILES:
                os.close(self._open.pop(next(iter(self._open))))
        self._open[path] = fd
        try:
            os.fdatasync(fd)
        except OSError:
            # The next sync of this file opens it again: a descriptor that saw a writeback
            # error does not report it twice.
            os.close(self._open.pop(path))
            raise


def serve(requests: int, replies: int) -> None:
    """Answer requests until CLOSE or the end of ``requests``."""
    files = _Files()
    while True:
        received = read_frame(requests)
        if received is None:
            return
        kind, payload = received
        if kind == CLOSE:
            write_all(replies, frame(CLOSE))
            return
        sequence = payload[: SEQUENCE.size]
        if kind != SYNC:
            write_all(replies, frame(ERROR, sequence + b"unknown request " + kind))
            continue
        try:
            for path in payload[SEQUENCE.size :].split(b"\0"):
                files.sync(path)
        except OSError as exc:
            write_all(replies, frame(ERROR, sequence + str(exc).encode()))
        else:
            write_all(replies, frame(SYNC, sequence))


def main() -> None:
    serve(sys.stdin.fileno(), sys.stdout.fileno())


if __name__ == "__main__":
    main()
