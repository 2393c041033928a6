"""The commitlog record's byte format, with no I/O: layout, message types, encoding (one record,
a batch, a uniform batch), decoding (one record, a run of one queue's records, a walk of a
segment), tag codes, message ids and validation. Everything else in :mod:`localstore` reads and
writes records through these modules; a client that decodes stored record bytes needs only this
package."""
