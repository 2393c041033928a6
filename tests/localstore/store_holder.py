"""A store held by another process, for the tests of read-only opens (``ReadOnlyStore`` and
the CLI on a held store).

``python -m tests.localstore.store_holder ROOT FLUSH_MODE COUNT`` opens a :class:`MessageStore`
at ROOT with the tests' tiny geometry (files roll every few messages), puts COUNT messages to
topic ``T`` (message i: body ``m{i}``, queue ``i % 2``, key ``k{i}``, tag ``A``), prints
``ready`` and then (writing nothing while it does not put) obeys the commands of
:mod:`tests.commanded_writer` on its stdin (``produce`` puts a message at a time). End of
stdin closes the store cleanly.

:class:`HeldStore` runs it and speaks that protocol.
"""

from __future__ import annotations

import sys
from pathlib import Path

from tests.commanded_writer import CommandedWriter, obey_commands

TOPIC = "T"
QUEUES = 2
GEOMETRY = {"commitlog_file_size": 4096, "cq_entries_per_file": 4}


def _message(i: int) -> object:
    from localstore.record.codec import NewMessage

    properties = {"KEYS": f"k{i}", "TAGS": "A"}
    return NewMessage(TOPIC, f"m{i}".encode(), i % QUEUES, properties=properties)


def _main(root: str, flush_mode: str, count: int) -> None:
    from localstore.options import StoreOptions
    from localstore.store import MessageStore

    # No periodic flush of the queues and checkpoint, no retention check: while it does not
    # put, the holder changes no byte of the store (its tests hash the files).
    options = StoreOptions(cq_flush_interval_ms=3_600_000, clean_interval_ms=0)
    store = MessageStore(root, flush_mode=flush_mode, options=options, **GEOMETRY)
    for i in range(count):
        store.put(_message(i))  # type: ignore[arg-type]
    print("ready", flush=True)

    def put_one(stored: int) -> int:
        store.put(_message(stored))  # type: ignore[arg-type]
        return stored + 1

    obey_commands(put_one, count)
    store.close()


class HeldStore(CommandedWriter):
    """The holder process over ``root`` (see the module docstring), once it is ``ready``."""

    def __init__(self, root: Path, *, flush_mode: str = "async", count: int = 40):
        super().__init__("tests.localstore.store_holder", str(root), flush_mode, str(count))
        self.root = root
        self.wait_for("ready")


if __name__ == "__main__":
    _main(sys.argv[1], sys.argv[2], int(sys.argv[3]))
