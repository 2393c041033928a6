"""The pipe protocol between a store and its key-index process (:mod:`localstore.index.process`).

Frames are :mod:`localstore.runtime.pipe_frames`'s. The store writes requests on the process's stdin
and reads replies on its stdout; only ``KEYS`` goes unanswered, and at most one answered request
is in flight.

    kind  store -> index process                     reply
    K     KEYS: JSON list of appended batches, each  none
          [store time, topic, [commitlog offsets],
          [UNIQ_KEY or null] or {"run": [head,
          first counter, count]} (a producer's ids),
          [KEYS or null], [SYSFLAG] or null (all 0)]
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

import struct

KEYS = b"K"
SYNC = b"S"
FLUSH = b"F"
QUERY = b"Q"
RETIRE = b"R"
CLOSE = b"C"
ERROR = b"E"
READY = b"Y"

OFFSET = struct.Struct(">q")
