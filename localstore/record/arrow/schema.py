"""The Arrow schema of decoded records: Spark's types for the columns of a stored message.

Spark's Python data source compares a yielded batch's schema with ``to_arrow_schema`` of the
schema it declared (nullability and the list and map child names included): these are the types
that function makes of a schema declared with Spark's defaults (every field nullable).
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt
import pyarrow as pa

__all__ = ["KEYS", "PROPERTIES", "TIMESTAMP", "arrow_schema", "timestamps"]

TIMESTAMP = pa.timestamp("us", tz="UTC")
KEYS = pa.list_(pa.field("element", pa.string()))
PROPERTIES = pa.map_(pa.string(), pa.string())
_BODY_FIELD = pa.field("body", pa.binary())
_PROPERTIES_FIELD = pa.field("properties", PROPERTIES)
_FIELDS_BEFORE_BODY = (
    pa.field("topic", pa.string()),
    pa.field("queue_id", pa.int32()),
    pa.field("queue_offset", pa.int64()),
    pa.field("msg_id", pa.string()),
    pa.field("offset_msg_id", pa.string()),
    pa.field("tags", pa.string()),
    pa.field("keys", KEYS),
)
_FIELDS_AFTER_BODY = (
    pa.field("born_timestamp", TIMESTAMP),
    pa.field("store_timestamp", TIMESTAMP),
    pa.field("reconsume_times", pa.int32()),
)


def arrow_schema(*, include_body: bool = True, include_properties: bool = False) -> pa.Schema:
    """The schema of :func:`~localstore.record.arrow.decode_record_batch`'s batches, in this
    column order: topic, queue_id, queue_offset, msg_id, offset_msg_id, tags, keys, body
    (with ``include_body``), born_timestamp, store_timestamp, reconsume_times, properties
    (with ``include_properties``). It equals Spark's ``to_arrow_schema`` of the Spark schema
    ``topic string, queue_id int, queue_offset bigint, msg_id string, offset_msg_id string,
    tags string, keys array<string>, body binary, born_timestamp timestamp, store_timestamp
    timestamp, reconsume_times int, properties map<string,string>`` (columns left out alike)."""
    fields = [*_FIELDS_BEFORE_BODY]
    if include_body:
        fields.append(_BODY_FIELD)
    fields.extend(_FIELDS_AFTER_BODY)
    if include_properties:
        fields.append(_PROPERTIES_FIELD)
    return pa.schema(fields)


_MAX_MILLIS = np.iinfo(np.int64).max // 1000  # beyond: no 64-bit microsecond count


def timestamps(millis: npt.NDArray[np.int64]) -> pa.Array:
    """Milliseconds since the epoch as a UTC microsecond timestamp array; null for a time
    no microsecond timestamp holds (a damaged field), never a wrapped-around one."""
    fits = (millis >= -_MAX_MILLIS) & (millis <= _MAX_MILLIS)
    if fits.all():
        return pa.array(millis * 1000, type=TIMESTAMP)
    return pa.array(np.where(fits, millis, 0) * 1000, type=TIMESTAMP, mask=~fits)
