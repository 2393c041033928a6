"""localstore: Quiver's embedded store engine, byte-compatible with RocketMQ's broker store.

from localstore import MessageStore, NewMessage
with MessageStore("./data") as store:
    result = store.put(NewMessage("orders", b"hello", properties={"TAGS": "paid"}))
    got = store.get_messages("orders", 0, 0)
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from localstore.errors import (
        CorruptStoreError,
        DamagedRecordError,
        GeometryError,
        GeometryMismatchError,
        StoreClosedError,
        StoreError,
        StoreLockedError,
    )
    from localstore.geometry import StoreGeometry
    from localstore.options import StoreOptions
    from localstore.read_only import ReadOnlyStore
    from localstore.record.codec import NewMessage, StoredMessage, pack_host, unpack_host
    from localstore.record.message_id import (
        UniqKeyGenerator,
        make_offset_msg_id,
        parse_offset_msg_id,
    )
    from localstore.record.tags import TagFilter
    from localstore.record.uniform_batch import UniformBatch
    from localstore.results import GetResult, GetStatus, PutResult, PutStatus
    from localstore.store import MessageStore

# Names are imported on first use (PEP 562): ``import localstore.record.walk`` in a recovery
# worker, or the command line's start, does not pay for loading the whole store. The type
# checkers read the imports above and ``__all__``; tests/localstore/test_package.py keeps this
# table, ``__all__`` and the modules in step.
_EXPORTS = {
    "CorruptStoreError": "localstore.errors",
    "DamagedRecordError": "localstore.errors",
    "GeometryError": "localstore.errors",
    "GeometryMismatchError": "localstore.errors",
    "GetResult": "localstore.results",
    "GetStatus": "localstore.results",
    "MessageStore": "localstore.store",
    "NewMessage": "localstore.record.codec",
    "PutResult": "localstore.results",
    "PutStatus": "localstore.results",
    "ReadOnlyStore": "localstore.read_only",
    "StoreClosedError": "localstore.errors",
    "StoreError": "localstore.errors",
    "StoreGeometry": "localstore.geometry",
    "StoreLockedError": "localstore.errors",
    "StoreOptions": "localstore.options",
    "StoredMessage": "localstore.record.codec",
    "TagFilter": "localstore.record.tags",
    "UniformBatch": "localstore.record.uniform_batch",
    "UniqKeyGenerator": "localstore.record.message_id",
    "make_offset_msg_id": "localstore.record.message_id",
    "pack_host": "localstore.record.codec",
    "parse_offset_msg_id": "localstore.record.message_id",
    "unpack_host": "localstore.record.codec",
}


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'localstore' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_EXPORTS})


__all__ = [
    "CorruptStoreError",
    "DamagedRecordError",
    "GeometryError",
    "GeometryMismatchError",
    "GetResult",
    "GetStatus",
    "MessageStore",
    "NewMessage",
    "PutResult",
    "PutStatus",
    "ReadOnlyStore",
    "StoreClosedError",
    "StoreError",
    "StoreGeometry",
    "StoreLockedError",
    "StoreOptions",
    "StoredMessage",
    "TagFilter",
    "UniformBatch",
    "UniqKeyGenerator",
    "make_offset_msg_id",
    "pack_host",
    "parse_offset_msg_id",
    "unpack_host",
]
