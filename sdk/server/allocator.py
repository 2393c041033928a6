"""The broker process's C allocator: large buffers go back to the system when freed.

glibc's ``malloc`` serves a request of at least its *mmap threshold* (128 KiB at start) with
a mapping of its own, unmapped on ``free``. But when it frees such a mapping larger than the
threshold, it raises the threshold to that size (up to 32 MiB on 64-bit systems) and the heap's
trim threshold to twice that. After a few large request bodies and pull answers, buffers of
that size come from the heap instead, and the heap gives little back: freed between small
objects that live on, they leave holes it keeps, and the broker's anonymous memory creeps up
with the traffic though its live objects do not. Setting the threshold
(``mallopt(M_MMAP_THRESHOLD)``) turns both adjustments off: a buffer of 128 KiB or more is
mapped and returned on ``free``.

Process-wide, so ``quiver broker`` sets it for its own process (not for its key-index child,
which holds no request buffers); an application serving the broker in its own process may call
:func:`keep_large_buffers_mapped` itself. It leaves the allocator alone where an operator tuned
it (``MALLOC_*`` or ``GLIBC_TUNABLES`` in the environment), and does nothing outside Linux or
without glibc's ``mallopt``.
"""

from __future__ import annotations

import ctypes
import os
import sys

__all__ = ["MMAP_THRESHOLD_BYTES", "keep_large_buffers_mapped"]

MMAP_THRESHOLD_BYTES = 128 << 10
"""Buffers of at least this size are mapped on their own (glibc's starting threshold)."""

_M_MMAP_THRESHOLD = -3  # glibc's malloc.h


def keep_large_buffers_mapped() -> bool:
    """Set glibc's mmap threshold to :data:`MMAP_THRESHOLD_BYTES` for this process (see the
    module docstring). True when glibc's ``mallopt`` accepted it; False when it was not tried
    (not Linux, an allocator tuned by the environment) or not accepted (no glibc)."""
    if not sys.platform.startswith("linux") or _tuned_by_environment():
        return False
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError, TypeError):
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    return bool(mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES))


def _tuned_by_environment() -> bool:
    """Whether the environment tunes glibc's malloc (an operator's choice wins)."""
    return "malloc" in os.environ.get("GLIBC_TUNABLES", "") or any(
        name.startswith("MALLOC_") for name in os.environ
    )
