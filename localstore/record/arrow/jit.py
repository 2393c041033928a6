"""How the columnar decoder's loops are compiled: by numba, each for exactly one signature,
when its module is imported, without the GIL held while it runs.

One signature per function is what keeps numba's on-disk cache sound: its index maps a
signature to a data file without checking the data's own signature, and processes compiling
different signatures of one function at once (test workers, Spark's Python workers on a cold
cache) could leave an index naming the other's code. With one signature they write the same
(on one kind of CPU: numba keys its cache by the CPU too, so machines of different CPUs should
not share one cache directory).
An argument of another type (a strided array, another dtype) is refused with a ``TypeError``,
never run with code compiled for something else.

Compiled code is kept in numba's cache (next to the sources, or under ``NUMBA_CACHE_DIR``), so
a process loads it instead of compiling for seconds. Where no cache directory is writable the
loops are compiled in each process (as where saving fails, on a full disk), and a warning says
how to give them one. The cache is
keyed by each module's own source: the layout constants compiled in from
:mod:`localstore.record.layout` are RocketMQ's format, which does not change.
"""

from __future__ import annotations

import logging
import pickle
from collections.abc import Callable
from typing import Any, TypeVar

import numba
from numba import types

__all__ = [
    "BYTES",
    "INT32S",
    "INTS",
    "OUT_BYTES",
    "OUT_INTS",
    "TABLE",
    "compiled",
    "tuple_of",
    "types",
]

log = logging.getLogger(__name__)

F = TypeVar("F", bound=Callable[..., Any])

BYTES = types.Array(types.uint8, 1, "C", readonly=True)
"""Bytes read (the records, a name): a writable array is taken as it is, read only."""
INTS = types.Array(types.int64, 1, "C", readonly=True)
"""Offsets and lengths read."""
TABLE = types.Array(types.int64, 2, "C")
"""A table written (a row per field, a column per record)."""
OUT_BYTES = types.Array(types.uint8, 1, "C")
OUT_INTS = types.Array(types.int64, 1, "C")
INT32S = types.Array(types.int32, 1, "C")
"""Arrow's 32-bit value offsets, written."""

_warned = False
# What numba raises when its cache fails: no directory it may write (RuntimeError), a failed
# write (OSError: a full disk, a quota), an index it cannot read back.
_CACHE_FAULTS = (RuntimeError, OSError, EOFError, pickle.UnpicklingError)


def tuple_of(*members: Any) -> Any:
    """The numba type of a tuple of ``members`` (numba types)."""
    return types.Tuple(members)  # type: ignore[no-untyped-call]  # numba has no hints here


def compiled(signature: Any) -> Callable[[F], F]:
    """Compile the decorated function for ``signature`` (a numba signature) now."""

    def compile_now(function: F) -> F:
        global _warned
        try:
            jitted: F = numba.njit(signature, cache=True, nogil=True)(function)
        except _CACHE_FAULTS as exc:  # no cache directory, a full disk, a damaged index
            if not _warned:
                _warned = True
                log.warning(
                    "the columnar decoder is compiled in every process: its cache failed "
                    "(%s); set NUMBA_CACHE_DIR to a writable directory with room",
                    exc,
                )
            jitted = numba.njit(signature, nogil=True)(function)
        return jitted

    return compile_now
