"""offsetstore: consumer offsets, the part that turns a log into at-least-once delivery.

* :class:`LocalFileOffsetStore`: broadcasting consumers keep their own offsets in a local file
  (``{base_dir}/{client_id}/{group}/offsets.json``, atomic writes with ``.bak``, merged across
  processes under a file lock; reads RocketMQ's Java-client files too).
* :class:`RemoteBrokerOffsetStore`: clustering consumers cache offsets and commit them to the
  broker that owns each queue, through the small :class:`OffsetBackend` protocol.
* :class:`ConsumerOffsetTable`: the broker's own table (``config/consumerOffset.json``).

Offsets mean "next to consume". Reads answer an int, :data:`NOT_FOUND` or :data:`READ_FAILED`.
"""

from offsetstore.base import (
    NOT_FOUND,
    READ_FAILED,
    MessageQueue,
    OffsetFileError,
    OffsetStatus,
    OffsetStore,
    OffsetStoreError,
    OffsetWriteError,
    ReadOffsetType,
)
from offsetstore.broker_table import ConsumerOffsetTable
from offsetstore.local_file import LocalFileOffsetStore
from offsetstore.remote_broker import OffsetBackend, RemoteBrokerOffsetStore, TableBackend

__all__ = [
    "NOT_FOUND",
    "READ_FAILED",
    "ConsumerOffsetTable",
    "LocalFileOffsetStore",
    "MessageQueue",
    "OffsetBackend",
    "OffsetFileError",
    "OffsetStatus",
    "OffsetStore",
    "OffsetStoreError",
    "OffsetWriteError",
    "ReadOffsetType",
    "RemoteBrokerOffsetStore",
    "TableBackend",
]
