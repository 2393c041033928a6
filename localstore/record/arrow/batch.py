"""Stored records laid end to end, decoded into one Arrow record batch (the package's entry)."""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from localstore.record.arrow.buffers import key_tokens, offset_msg_ids, values_at
from localstore.record.arrow.pairs import every_pair, values_named
from localstore.record.arrow.records import (
    BODY_AT_ROW,
    BODY_LENGTH_ROW,
    BORN_TIMESTAMP_ROW,
    COMMON_ROW,
    PROPERTIES_AT_ROW,
    PROPERTIES_LENGTH_ROW,
    QUEUE_ID_ROW,
    QUEUE_OFFSET_ROW,
    RECONSUME_TIMES_ROW,
    START_ROW,
    STORE_TIMESTAMP_ROW,
    TOPIC_AT_ROW,
    TOPIC_LENGTH_ROW,
    holding_no_views,
    read_only_bytes,
    record_table,
)
from localstore.record.arrow.schema import KEYS, PROPERTIES, TIMESTAMP, arrow_schema, timestamps
from localstore.record.codec import RecordError, StoredMessage, decode_record
from localstore.record.properties import PROPERTY_KEYS, PROPERTY_TAGS, PROPERTY_UNIQ_KEY
from localstore.record.properties import split_keys as split_key_text

__all__ = ["decode_record_batch"]

# The properties every batch reads, by their index in _NAMED.
_NAMED = [PROPERTY_UNIQ_KEY, PROPERTY_TAGS, PROPERTY_KEYS]
_UNIQ_KEY, _TAGS, _KEYS = range(len(_NAMED))


@holding_no_views
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
    (the error :func:`~localstore.record.codec.decode_record` gives for the first bad one), or
    when ``raw`` holds fewer than ``count`` records; ``ValueError`` for a negative ``count``.
    """
    octets = read_only_bytes(raw)
    table = record_table(octets, count)
    schema = arrow_schema(include_body=include_body, include_properties=include_properties)
    if table.shape[1] == 0:
        return _empty_batch(schema)
    view = octets.data
    starts = table[START_ROW]
    common = table[COMMON_ROW].astype(bool)
    if common.all():
        try:
            return _compiled(octets, table, schema, include_body, include_properties)
        except pa.ArrowInvalid:  # a topic or properties text is not UTF-8: decode_record says
            return _general(view, starts, schema, include_body, include_properties)
    common_rows = np.flatnonzero(common)
    other_rows = np.flatnonzero(~common)
    try:  # decoded first: a damaged record raises before any other work
        others = _general(view, starts[other_rows], schema, include_body, include_properties)
        if len(common_rows) == 0:
            return others
        decoded = _compiled(
            octets, table.take(common_rows, axis=1), schema, include_body, include_properties
        )
    except (RecordError, pa.ArrowInvalid):  # the first fault in the bytes' order is named
        return _general(view, starts, schema, include_body, include_properties)
    order = np.empty(table.shape[1], dtype=np.int64)
    order[np.concatenate([common_rows, other_rows])] = np.arange(table.shape[1])
    joined = pa.Table.from_batches([decoded, others]).take(pa.array(order))
    return joined.combine_chunks().to_batches()[0]


def _empty_batch(schema: pa.Schema) -> pa.RecordBatch:
    return pa.RecordBatch.from_arrays([pa.array([], type=f.type) for f in schema], schema=schema)


def _compiled(
    octets: npt.NDArray[np.uint8],
    table: npt.NDArray[np.int64],
    schema: pa.Schema,
    include_body: bool,
    include_properties: bool,
) -> pa.RecordBatch:
    """The batch of records all of the common shape (``table``'s columns). Raises
    ``pa.ArrowInvalid`` when a topic or properties text is not UTF-8."""
    texts_at, texts_length = table[PROPERTIES_AT_ROW], table[PROPERTIES_LENGTH_ROW]
    values_at(octets, texts_at, texts_length, pa.string())  # each text UTF-8, so each part
    at, length = values_named(octets, texts_at, texts_length, _NAMED)
    uniq_key, tags = (
        values_at(octets, at[index], length[index], pa.string(), checked=True)
        for index in (_UNIQ_KEY, _TAGS)
    )
    offset_msg_id = offset_msg_ids(octets, table[START_ROW])
    columns: dict[str, pa.Array] = {
        "topic": values_at(octets, table[TOPIC_AT_ROW], table[TOPIC_LENGTH_ROW], pa.string()),
        "queue_id": pa.array(table[QUEUE_ID_ROW].astype(np.int32)),
        "queue_offset": pa.array(table[QUEUE_OFFSET_ROW]),
        "msg_id": pc.coalesce(uniq_key, offset_msg_id),
        "offset_msg_id": offset_msg_id,
        "tags": tags,
        "keys": _split_keys(octets, at[_KEYS], length[_KEYS]),
        "born_timestamp": timestamps(table[BORN_TIMESTAMP_ROW]),
        "store_timestamp": timestamps(table[STORE_TIMESTAMP_ROW]),
        "reconsume_times": pa.array(table[RECONSUME_TIMES_ROW].astype(np.int32)),
    }
    if include_body:
        columns["body"] = values_at(octets, table[BODY_AT_ROW], table[BODY_LENGTH_ROW], pa.binary())
    if include_properties:
        columns["properties"] = _properties_maps(octets, texts_at, texts_length)
    return pa.RecordBatch.from_arrays([columns[name] for name in schema.names], schema=schema)


def _split_keys(
    octets: npt.NDArray[np.uint8], at: npt.NDArray[np.int64], length: npt.NDArray[np.int64]
) -> pa.Array:
    """The KEYS values at their places split at spaces, empty tokens dropped (as
    :func:`localstore.record.properties.split_keys` does): a list per record, empty without
    keys. The values lie in properties texts already checked as UTF-8."""
    lists, token_at, token_length = key_tokens(octets, at, length)
    tokens = values_at(octets, token_at, token_length, pa.string(), checked=True)
    return pa.ListArray.from_arrays(pa.array(lists), tokens, type=KEYS)


def _properties_maps(
    octets: npt.NDArray[np.uint8],
    texts_at: npt.NDArray[np.int64],
    texts_length: npt.NDArray[np.int64],
) -> pa.Array:
    """Every record's properties as a map, by decode_properties' rules. The texts are
    already checked as UTF-8."""
    first, name_at, name_length, value_at, value_length = every_pair(octets, texts_at, texts_length)
    names = values_at(octets, name_at, name_length, pa.string(), checked=True)
    values = values_at(octets, value_at, value_length, pa.string(), checked=True)
    return pa.MapArray.from_arrays(pa.array(first.astype(np.int32)), names, values, type=PROPERTIES)


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
