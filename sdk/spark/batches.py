"""Stored record bytes to an Arrow record batch with Spark's Arrow types (``int32`` for
``int``, ``timestamp[us, tz=UTC]`` for ``timestamp``), the columns of
:mod:`sdk.spark.schema` in its order.

:func:`records_to_batch` decodes each record with the store's general decoder (as a consumer
receives it: ``tags``, ``keys``, ``msg_id`` and the user's properties from the record's
properties); it is the one place a columnar decoder replaces.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa  # type: ignore[import-untyped]

from localstore.record.codec import decode_record
from sdk.message import ReceivedMessage
from sdk.spark.schema import column_names

_MS_TO_US = 1000
_TIMESTAMP = pa.timestamp("us", tz="UTC")
ARROW_TYPES: dict[str, pa.DataType] = {
    "topic": pa.string(),
    "queue_id": pa.int32(),
    "queue_offset": pa.int64(),
    "msg_id": pa.string(),
    "offset_msg_id": pa.string(),
    "tags": pa.string(),
    "keys": pa.list_(pa.string()),
    "body": pa.binary(),
    "born_timestamp": _TIMESTAMP,
    "store_timestamp": _TIMESTAMP,
    "reconsume_times": pa.int32(),
    "properties": pa.map_(pa.string(), pa.string()),
}


def arrow_schema(include_body: bool, include_properties: bool) -> pa.Schema:
    """The Arrow schema of the batches a read with these options yields."""
    names = column_names(include_body, include_properties)
    return pa.schema([pa.field(name, ARROW_TYPES[name]) for name in names])


def _column_values(message: ReceivedMessage, name: str) -> Any:
    if name == "topic":
        return message.stored_topic
    if name in ("born_timestamp", "store_timestamp"):
        return getattr(message, name) * _MS_TO_US
    if name == "keys":
        return list(message.keys)
    if name == "properties":
        return list(message.properties.items())
    return getattr(message, name)


def records_to_batch(
    raw: bytes | memoryview, include_body: bool, include_properties: bool
) -> pa.RecordBatch:
    """The stored records laid end to end in ``raw`` as one record batch, a row per record.
    Raises :class:`~localstore.errors.RecordError` for bytes that are not whole records."""
    messages = []
    position, end = 0, len(raw)
    while position < end:
        message = decode_record(raw, position, make=ReceivedMessage)
        messages.append(message)
        position += message.store_size
    schema = arrow_schema(include_body, include_properties)
    arrays = [
        pa.array([_column_values(m, field.name) for m in messages], type=field.type)
        for field in schema
    ]
    return pa.RecordBatch.from_arrays(arrays, schema=schema)
