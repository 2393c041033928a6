"""Stored record bytes to an Arrow record batch with Spark's Arrow types, the columns of
:mod:`sdk.spark.schema` in its order.

The columnar decoder (:mod:`localstore.record.arrow`) does the work; this module chooses what
the source shows: the ``properties`` column holds the user's properties only, as
:attr:`sdk.message.ReceivedMessage.properties` does (the system ones are columns of their own:
``tags``, ``keys``, ``msg_id``, ...).
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from localstore.record.arrow import decode_record_batch
from sdk.message import QUIVER_PROPERTY_PREFIX, RESERVED_PROPERTIES

_RESERVED = pa.array(sorted(RESERVED_PROPERTIES), pa.string())


def records_to_batch(
    raw: bytes | memoryview, include_body: bool, include_properties: bool
) -> pa.RecordBatch:
    """The stored records laid end to end in ``raw`` as one record batch, a row per record.
    Raises :class:`~localstore.errors.RecordError` for bytes that are not whole records."""
    batch = decode_record_batch(
        raw, include_body=include_body, include_properties=include_properties
    )
    if not include_properties:
        return batch
    index = batch.schema.get_field_index("properties")
    return batch.set_column(index, batch.schema.field(index), _user_properties(batch[index]))


def _user_properties(column: pa.MapArray) -> pa.MapArray:
    """``column`` without the entries whose names are RocketMQ's or Quiver's own."""
    keys, items = column.keys, column.items
    system = pc.or_(
        pc.is_in(keys, value_set=_RESERVED), pc.starts_with(keys, QUIVER_PROPERTY_PREFIX)
    )
    keep = pc.invert(system)
    kept_before = np.concatenate(([0], np.cumsum(keep.to_numpy(zero_copy_only=False))))
    offsets = kept_before[column.offsets.to_numpy() - column.offsets[0].as_py()]
    return pa.MapArray.from_arrays(
        pa.array(offsets, pa.int32()),
        keys.filter(keep),
        items.filter(keep),
        type=column.type,
    )
