"""The broker process's C allocator: large buffers go back to the system when freed.

glibc's ``malloc`` serves a request of at least its *mmap threshold* (128 KiB at start) with
a mapping of its own, unmapped on ``free``. But each time it frees such a mapping it raises
the threshold to that mapping's size (up to 32 MiB). After a few large request bodies and pull
answers, buffers of that size come from the heap instead; freed between small objects that
live on, they leave holes the heap keeps, and the broker's anonymous memory creeps up with the
traffic though its live objects do not. Fixing the threshold (``mallopt(M_MMAP_THRESHOLD)``)
turns that adjustment off: a buffer of 128 KiB or more is mapped and returned on ``free``.

Process-wide, so ``quiver broker`` sets it for its own process; an application serving the
broker in its own process may call :func:`keep_large_buffers_mapped` itself. Elsewhere than
glibc it does nothing.
"""

from __future__ import annotations

import ctypes

__all__ = ["MMAP_THRESHOLD_BYTES", "keep_large_buffers_mapped"]

MMAP_THRESHOLD_BYTES = 128 << 10
"""Buffers of at least this size are mapped on their own (glibc's starting threshold)."""

_M_MMAP_THRESHOLD = -3  # glibc's malloc.h


def keep_large_buffers_mapped() -> bool:
    """Fix glibc's mmap threshold at :data:`MMAP_THRESHOLD_BYTES` for this process (see the
    module docstring). True when the C library took it; False where it has no ``mallopt``
    or refused (not glibc)."""
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    return bool(mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES))
