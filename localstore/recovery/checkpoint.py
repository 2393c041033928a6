"""The ``checkpoint`` file and the ``abort`` marker.

``checkpoint`` is 4096 bytes, memory-mapped, zero beyond its fields (big-endian longs):

    off  field
      0  physicMsgTimestamp   store time of the last message known flushed in the commitlog
      8  logicsMsgTimestamp   store time of the last message appended to a consume queue
     16  indexMsgTimestamp    end time of the last index file that was completed and flushed
     24  masterFlushedOffset  (RocketMQ 5 HA; kept as read)
     32  confirmPhyOffset     (RocketMQ 5; kept as read)

The file is flushed with the store's periodic flush and on close. ``abort`` exists while a store
is open: created on open (holding the opener's pid, as RocketMQ 5 does), removed on a clean close,
so its presence at open means the last run did not end cleanly.
"""

from __future__ import annotations

import mmap
import os
import struct
from pathlib import Path

CHECKPOINT_SIZE = 4096
_FIELDS = struct.Struct(">qqqqq")


class Checkpoint:
    """The mapped checkpoint file; fields are plain attributes written back by :meth:`flush`."""

    def __init__(self, path: Path):
        self.path = path
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            if os.fstat(fd).st_size < CHECKPOINT_SIZE:
                os.ftruncate(fd, CHECKPOINT_SIZE)
            self._map = mmap.mmap(fd, CHECKPOINT_SIZE, access=mmap.ACCESS_WRITE)
        finally:
            os.close(fd)
        (
            self.physic_msg_timestamp,
            self.logics_msg_timestamp,
            self.index_msg_timestamp,
            self.master_flushed_offset,
            self.confirm_phy_offset,
        ) = _FIELDS.unpack_from(self._map, 0)

    @property
    def min_timestamp(self) -> int:
        """RocketMQ's recovery bound: the older of the two timestamps, less 3 s."""
        return max(0, int(min(self.physic_msg_timestamp, self.logics_msg_timestamp)) - 3000)

    def flush(self) -> None:
        _FIELDS.pack_into(
            self._map,
            0,
            self.physic_msg_timestamp,
            self.logics_msg_timestamp,
            self.index_msg_timestamp,
            self.master_flushed_offset,
            self.confirm_phy_offset,
        )
        self._map.flush()

    def close(self) -> None:
        self.flush()
        self._map.close()


class AbortMarker:
    """``{root}/abort``: present while the store is open."""

    def __init__(self, root: Path):
        self.path = root / "abort"

    def existed_at_open(self) -> bool:
        return self.path.exists()

    def create(self) -> None:
        self.path.write_text(str(os.getpid()))

    def remove(self) -> None:
        self.path.unlink(missing_ok=True)
