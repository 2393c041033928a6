"""A recovery walk worker: ``python -m localstore.recovery.scan_worker PATH BASE SIZE POS LIMIT
CRC``.

Maps the commitlog segment file PATH (SIZE bytes, at log offset BASE) read-only, walks its
records from POS while below LIMIT (CRC: 1 to check body CRCs) with
:func:`localstore.record.walk.walk_marking`, and prints ``POSITION RECORDS STATUS LAST_PUT`` on
one line (LAST_PUT: the last record opening a put of several, or -1).
:mod:`localstore.recovery.parallel_scan` starts it. The store never imports this module, so
running it imports only the record walk and the codec.
"""

from __future__ import annotations

import mmap
import sys

from localstore.record.walk import walk_marking


def walk_file(
    path: str, base: int, size: int, pos: int, limit: int, check_crc: bool
) -> tuple[int, int, int, int]:
    """Map the segment file read-only and walk [pos, limit)."""
    with (
        open(path, "rb") as file,
        mmap.mmap(file.fileno(), size, access=mmap.ACCESS_READ) as mapped,
        memoryview(mapped) as view,
    ):
        return walk_marking(view, base, size, pos, limit, check_crc)


def main(argv: list[str]) -> None:
    path, *numbers = argv
    base, size, pos, limit, crc = map(int, numbers)
    print(*walk_file(path, base, size, pos, limit, bool(crc)))


if __name__ == "__main__":
    main(sys.argv[1:])
