"""The commitlog record's byte format, with no I/O: the field table (``layout``: every Struct,
offset and limit), the properties text (``properties``), the validity rules every reader
shares (``frame``), message types and single-record decoding (``codec``), encoding (a batch, a
uniform batch), decoding a run of one queue's records, the walk of a segment, tag codes,
message ids and topic validation. Everything else in :mod:`localstore` reads and writes records
through these modules; a client that decodes stored record bytes needs only this package."""
