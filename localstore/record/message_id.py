"""Message ids.

* ``offsetMsgId`` (server side): upper-case hex of store host address (4 or 16 bytes) + port (int)
  + commitlog offset (long): 32 hex characters for IPv4, 56 for IPv6.
* ``UNIQ_KEY`` (producer side, what clients show as the message id): upper-case hex of client
  address (4 or 16 bytes) + pid (short) + a per-process random int, then the milliseconds since
  the start of the current month (int) and a counter (short): 32 hex characters for IPv4.
"""

from __future__ import annotations

import calendar
import ipaddress
import itertools
import os
import secrets
import struct
import threading
import time

from localstore.record.codec import LONG, make_offset_msg_id, unpack_host
from quiver_errors import InvalidArgumentError

__all__ = [
    "UNIQ_KEY_COUNTER_DIGITS",
    "UniqKeyGenerator",
    "UniqKeyRun",
    "make_offset_msg_id",
    "parse_offset_msg_id",
    "uniq_key_run",
]

_HEX2 = tuple(f"{i:02X}" for i in range(256))
_SUFFIX = struct.Struct(">IH")  # Java writes an int that wraps after 24.8 days: same bytes


def parse_offset_msg_id(msg_id: str) -> tuple[str, int]:
    """``offsetMsgId`` -> (``host:port``, commitlog offset). Raises
    :class:`~quiver_errors.InvalidArgumentError` if malformed."""
    if len(msg_id) not in (32, 56):
        raise InvalidArgumentError(
            f"an offsetMsgId has 32 or 56 hex characters, not {len(msg_id)}: {msg_id!r}"
        )
    try:
        raw = bytes.fromhex(msg_id)
    except ValueError:
        raw = b""
    if len(raw) * 2 != len(msg_id):  # not hex, or hex with spaces (fromhex skips them)
        raise InvalidArgumentError(f"an offsetMsgId is hex, not {msg_id!r}")
    return unpack_host(raw[:-8]), int(LONG.unpack_from(raw, len(raw) - 8)[0])


class UniqKeyRun(list[str]):
    """The ids of one :meth:`UniqKeyGenerator.next_many` call: the i-th is ``head`` followed by
    the 4 hex digits of ``(first + i) & 0xFFFF``. A list of the ids; the key index reads
    ``head`` and ``first`` to hash them all without reading each."""

    __slots__ = ("first", "head")

    head: str
    first: int


UNIQ_KEY_COUNTER_DIGITS = 4  # a UNIQ_KEY ends with its counter: a short, in upper-case hex


def uniq_key_run(head: str, first: int, n: int) -> UniqKeyRun:
    """The ``n`` ids ``head`` + the 4 hex digits of ``(first + i) & 0xFFFF``, as a run."""
    hex2 = _HEX2
    run = UniqKeyRun(
        [head + hex2[(c >> 8) & 0xFF] + hex2[c & 0xFF] for c in range(first, first + n)]
    )
    run.head = head
    run.first = first & 0xFFFF
    return run


class UniqKeyGenerator:
    """Makes RocketMQ-shaped ``UNIQ_KEY`` values; thread-safe."""

    def __init__(self, client_ip: str = "127.0.0.1"):
        address = ipaddress.ip_address(client_ip).packed
        prefix = address + struct.pack(">hi", os.getpid() & 0x7FFF, secrets.randbits(31))
        self._prefix = prefix.hex().upper()
        self._counter = itertools.count()
        self._lock = threading.Lock()
        self._month_start_ms = 0
        self._next_month_ms = 0

    def _month_bounds(self, now_ms: int) -> None:
        local = time.localtime(now_ms / 1000)
        start = time.mktime((local.tm_year, local.tm_mon, 1, 0, 0, 0, 0, 0, -1))
        days = calendar.monthrange(local.tm_year, local.tm_mon)[1]
        self._month_start_ms = int(start * 1000)
        self._next_month_ms = self._month_start_ms + days * 86_400_000

    def next(self) -> str:
        now_ms = time.time_ns() // 1_000_000
        if not self._month_start_ms <= now_ms < self._next_month_ms:
            with self._lock:
                self._month_bounds(now_ms)
        with self._lock:  # next_many swaps the counter: draw under the same lock
            count = next(self._counter) & 0xFFFF
        millis = (now_ms - self._month_start_ms) & 0xFFFFFFFF
        return self._prefix + _SUFFIX.pack(millis, count).hex().upper()

    def next_many(self, n: int) -> UniqKeyRun:
        """``n`` ids at once: one clock read, one counter reservation, the 4 counter digits
        from a table (a batch's ids differ only there)."""
        now_ms = time.time_ns() // 1_000_000
        if not self._month_start_ms <= now_ms < self._next_month_ms:
            with self._lock:
                self._month_bounds(now_ms)
        millis = (now_ms - self._month_start_ms) & 0xFFFFFFFF
        head = f"{self._prefix}{millis:08X}"
        with self._lock:
            first = next(self._counter)
            if n > 1:  # reserve n values: the shared counter moves past them
                self._counter = itertools.count(first + n)
        return uniq_key_run(head, first, n)
