"""Stored records laid end to end, decoded into one Arrow record batch (the package's entry)."""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from localstore.record.arrow.headers import Headers, offset_msg_ids
from localstore.record.arrow.properties import PropertyFinder, properties_maps, split_keys
from localstore.record.arrow.schema import TIMESTAMP, arrow_schema, timestamps
from localstore.record.arrow.slices import ByteSlices
from localstore.record.arrow.starts import record_starts
from localstore.record.codec import StoredMessage, decode_record
from localstore.record.properties import PROPERTY_KEYS, PROPERTY_TAGS, PROPERTY_UNIQ_KEY
from localstore.record.properties import split_keys as split_key_text

__all__ = ["decode_record_batch"]


def decode_record_batch(
    raw: bytes | bytearray | memoryview,
    count: int | None = None,
    *,
    include_body: bool = True,
    include_properties: bool = False,
) -> pa.RecordBatch:
    """The records laid end to end in ``raw`` as one record batch of the schema
    :func:`~localstore.record.arrow.schema.arrow_schema` gives, one row per record in their
    order.

    ``topic`` is the record's TOPIC (a retry topic's name for a record stored there);
    ``msg_id`` its ``UNIQ_KEY`` property, else its ``offset_msg_id`` (as the SDK's
    ``ReceivedMessage.msg_id``); ``tags`` the ``TAGS`` property or null; ``keys`` the ``KEYS``
    property split at spaces (empty: none); ``properties`` every stored property, system ones
    included. ``count``: decode only the first ``count`` records (None: every record ``raw``
    holds). Without ``include_body`` / ``include_properties`` the column is absent and never
    decoded.

    Raises :class:`~localstore.record.codec.RecordError` for bytes that are not whole records
    (the error :func:`~localstore.record.codec.decode_record` gives for a bad one), or
    when ``raw`` holds fewer than ``count`` records.
    """
    view = memoryview(raw).cast("B") if not isinstance(raw, bytes) else raw
    starts = record_starts(view, count)
    schema = arrow_schema(include_body=include_body, include_properties=include_properties)
    if len(starts) == 0:
        return _empty_batch(schema)
    header = Headers(view, starts)
    fast = header.common_shape()
    if fast.all():
        try:
            return _vectorised(view, header, schema, include_body, include_properties)
        except pa.ArrowInvalid:  # a topic or properties text is not UTF-8: decode_record says
            return _general(view, starts, schema, include_body, include_properties)
    fast_rows = np.flatnonzero(fast)
    other_rows = np.flatnonzero(~fast)
    # decoded first: a damaged record raises before any vectorised work
    others = _general(view, starts[other_rows], schema, include_body, include_properties)
    if len(fast_rows) == 0:
        return others
    try:
        common = _vectorised(
            view, header.subset(fast_rows), schema, include_body, include_properties
        )
    except pa.ArrowInvalid:
        return _general(view, starts, schema, include_body, include_properties)
    order = np.empty(len(starts), dtype=np.int64)
    order[np.concatenate([fast_rows, other_rows])] = np.arange(len(starts))
    table = pa.Table.from_batches([common, others]).take(pa.array(order))
    return table.combine_chunks().to_batches()[0]


def _empty_batch(schema: pa.Schema) -> pa.RecordBatch:
    return pa.RecordBatch.from_arrays([pa.array([], type=f.type) for f in schema], schema=schema)


def _vectorised(
    view: bytes | memoryview,
    header: Headers,
    schema: pa.Schema,
    include_body: bool,
    include_properties: bool,
) -> pa.RecordBatch:
    """The batch of records all of the common shape. Raises ``pa.ArrowInvalid`` when a topic
    or properties text is not UTF-8."""
    records = ByteSlices(np.frombuffer(view, dtype=np.uint8), pa.py_buffer(view))
    topic = records.slices(header.topic_at, header.topic_length, pa.string())
    properties_text = records.slices(header.properties_at, header.properties_length, pa.string())
    found = PropertyFinder(properties_text)
    offset_msg_id = offset_msg_ids(header)
    columns: dict[str, pa.Array] = {
        "topic": topic,
        "queue_id": pa.array(header.int_at("QUEUEID").astype(np.int32)),
        "queue_offset": pa.array(header.long_at("QUEUEOFFSET")),
        "msg_id": pc.coalesce(found.values(PROPERTY_UNIQ_KEY), offset_msg_id),
        "offset_msg_id": offset_msg_id,
        "tags": found.values(PROPERTY_TAGS),
        "keys": split_keys(found.values(PROPERTY_KEYS)),
        "born_timestamp": timestamps(header.long_at("BORNTIMESTAMP")),
        "store_timestamp": timestamps(header.long_at("STORETIMESTAMP")),
        "reconsume_times": pa.array(header.int_at("RECONSUMETIMES").astype(np.int32)),
    }
    if include_body:
        columns["body"] = records.slices(header.body_at, header.body_length, pa.binary())
    if include_properties:
        columns["properties"] = properties_maps(properties_text, found)
    return pa.RecordBatch.from_arrays([columns[name] for name in schema.names], schema=schema)


def _general(
    view: bytes | memoryview,
    starts: npt.NDArray[np.int64],
    schema: pa.Schema,
    include_body: bool,
    include_properties: bool,
) -> pa.RecordBatch:
    """The batch of the records at ``starts``, each read by decode_record."""
    rows: dict[str, list[Any]] = {name: [] for name in schema.names}
    for pos in starts.tolist():
        message = decode_record(view, pos, body=include_body)
        for name, value in _row(message, include_properties).items():
            if name in rows:
                rows[name].append(value)
    arrays = [
        timestamps(np.array(rows[f.name], dtype=np.int64))
        if f.type == TIMESTAMP
        else pa.array(rows[f.name], type=f.type)
        for f in schema
    ]
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


def _row(message: StoredMessage, include_properties: bool) -> dict[str, Any]:
    properties = message.properties
    keys = properties.get(PROPERTY_KEYS)
    return {
        "topic": message.topic,
        "queue_id": message.queue_id,
        "queue_offset": message.queue_offset,
        "msg_id": properties.get(PROPERTY_UNIQ_KEY) or message.offset_msg_id,
        "offset_msg_id": message.offset_msg_id,
        "tags": properties.get(PROPERTY_TAGS),
        "keys": split_key_text(keys) if keys else [],
        "body": message.body,
        "born_timestamp": message.born_timestamp,
        "store_timestamp": message.store_timestamp,
        "reconsume_times": message.reconsume_times,
        "properties": list(properties.items()) if include_properties else None,
    }
