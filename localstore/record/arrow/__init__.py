"""Stored records laid end to end, decoded column by column into one Arrow record batch: the
record format's columnar decoder, for the Spark source (numba, numpy and pyarrow: the
``spark`` extra).

Input: the bytes of whole records back to back, as a store's ``get_message_bytes(...).raw``, a
pull answer's ``raw`` or a commitlog range holds them (no blank record among them). The record
layout is :mod:`localstore.record.layout`'s; the common shape, v1 or v2 magic and IPv4 hosts
(SYSFLAG & 0x30 == 0), is

    off  size  field
      0     4  TOTALSIZE       (the walk from one record to the next)
      4     4  MAGICCODE
     12     4  QUEUEID
     20     8  QUEUEOFFSET
     28     8  PHYSICALOFFSET
     36     4  SYSFLAG
     40     8  BORNTIMESTAMP   (ms)
     56     8  STORETIMESTAMP  (ms)
     64     8  STOREHOSTADDRESS (4 address bytes + int port: with PHYSICALOFFSET, offset_msg_id)
     72     4  RECONSUMETIMES
     84     4  BODYLENGTH B, then B body bytes at 88
  88+B  1|2+T  TOPIC (v1: 1-byte length, v2: 2-byte length)
     .    2+P  PROPERTIES (``name\\x01value\\x02`` pairs)

How, one module each, the loops compiled by numba (each value's bytes copied once, no
Python object per record): :mod:`.records` walks the TOTALSIZE chain and reads every record's
fixed fields and the places of its body, topic and properties text into one table;
:mod:`.pairs` finds ``UNIQ_KEY``, ``TAGS``, ``KEYS`` and, when asked, every pair in the
properties texts by :func:`~localstore.record.properties.decode_properties`' rules;
:mod:`.buffers` copies the values at those places into Arrow arrays (and spells the
offset_msg_ids, and splits the keys); :mod:`.batch` puts the columns together; :mod:`.schema`
names their types.

Invariant: the batch holds, row for row, exactly what
:func:`localstore.record.codec.decode_record` reads from each record (a time no microsecond
timestamp holds, as a damaged field can give, is null). A record the compiled path does not
take (IPv6 hosts, or fields that do not add up) is decoded by ``decode_record`` itself, so a
damaged record raises the same :class:`~localstore.record.codec.RecordError`, the first in the
bytes' order. Columns left out (``include_body=False``, ``include_properties=False``) are not
decoded at all.

The column types are what Spark's ``to_arrow_schema`` makes of the schema declared with
Spark's defaults (every field nullable): a Python data source must yield batches of exactly
that schema. ``import sdk`` never loads this package.
"""

from __future__ import annotations

from localstore.record.arrow.batch import decode_record_batch
from localstore.record.arrow.schema import arrow_schema

__all__ = ["arrow_schema", "decode_record_batch"]
