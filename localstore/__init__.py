"""localstore: Quiver's embedded store engine, byte-compatible with RocketMQ's broker store.

from localstore import MessageStore, NewMessage
with MessageStore("./data") as store:
    result = store.put(NewMessage("orders", b"hello", properties={"TAGS": "paid"}))
    got = store.get_messages("orders", 0, 0)
"""

from localstore.codec import NewMessage, StoredMessage, pack_host, unpack_host
from localstore.errors import (
    CorruptStoreError,
    GeometryMismatchError,
    StoreClosedError,
    StoreError,
    StoreLockedError,
)
from localstore.geometry import StoreGeometry
from localstore.message_id import UniqKeyGenerator, make_offset_msg_id, parse_offset_msg_id
from localstore.options import StoreOptions
from localstore.results import GetResult, GetStatus, PutResult, PutStatus
from localstore.store import MessageStore
from localstore.tags import TagFilter

__all__ = [
    "CorruptStoreError",
    "GeometryMismatchError",
    "GetResult",
    "GetStatus",
    "MessageStore",
    "NewMessage",
    "PutResult",
    "PutStatus",
    "StoreClosedError",
    "StoreError",
    "StoreGeometry",
    "StoreLockedError",
    "StoreOptions",
    "StoredMessage",
    "TagFilter",
    "UniqKeyGenerator",
    "make_offset_msg_id",
    "pack_host",
    "parse_offset_msg_id",
    "unpack_host",
]
