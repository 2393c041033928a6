"""Java's ``String.hashCode`` in Python, fast for the ASCII strings a message queue hashes.

RocketMQ hashes tags (the consume-queue ``tagsCode``) and index keys with ``String.hashCode``:
``h = 31 * h + c`` over the string's UTF-16 code units, wrapping at 32 bits, read as a signed int.

A per-character Python loop costs about 60 ns a character. For ASCII we avoid the loop: every code
unit ``c < 128`` can be written ``c = 31 * a + b`` with ``a = c // 31`` and ``b = c % 31``, both
valid base-31 digits. Turning the string into the two digit strings ``A`` and ``B`` takes two
``bytes.translate`` calls, and then ``hash = 31 * int(A, 31) + int(B, 31)`` (mod 2**32), because
``sum(c_i * 31**(n-1-i)) = 31 * sum(a_i * 31**(n-1-i)) + sum(b_i * 31**(n-1-i))``.
Non-ASCII strings take the plain loop over UTF-16 code units (a lone surrogate is one unit, as
in Java).
"""

from __future__ import annotations

_DIGITS = b"0123456789abcdefghijklmnopqrstu"  # base-31 digit characters accepted by int()
_HIGH = bytes(_DIGITS[c // 31] if c < 128 else 0 for c in range(256))
_LOW = bytes(_DIGITS[c % 31] if c < 128 else 0 for c in range(256))
_MASK = 0xFFFFFFFF
_SIGN = 0x80000000
# A Java string may hold a lone surrogate (one code unit, hashed as it is); so may a Python str
# (made with surrogateescape, say): it is encoded as its one unit, not refused.
_LONE_SURROGATES = "surrogatepass"


def java_hash(text: str) -> int:
    """Return Java's ``String.hashCode()`` of ``text`` as a signed 32-bit int."""
    if not text:
        return 0
    if text.isascii():
        raw = text.encode("ascii")
        h = (31 * int(raw.translate(_HIGH), 31) + int(raw.translate(_LOW), 31)) & _MASK
    else:
        h = 0
        units = text.encode("utf-16-be", _LONE_SURROGATES)
        for i in range(0, len(units), 2):
            h = (31 * h + (units[i] << 8 | units[i + 1])) & _MASK
    return h - 0x100000000 if h & _SIGN else h


def java_hash_slow(text: str) -> int:
    """Reference implementation (one loop over UTF-16 code units), used to test ``java_hash``."""
    h = 0
    units = text.encode("utf-16-be", _LONE_SURROGATES)
    for i in range(0, len(units), 2):
        h = (31 * h + int.from_bytes(units[i : i + 2], "big")) & _MASK
    return h - 0x100000000 if h & _SIGN else h


def index_key_hash(key: str) -> int:
    """The non-negative hash RocketMQ's IndexFile stores: ``abs(hashCode)``, MIN_VALUE -> 0."""
    h = java_hash(key)
    return 0 if h == -0x80000000 else abs(h)


_POW31: dict[int, int] = {}


def java_hash_concat(prefix_hash: int, suffix: str) -> int:
    """``java_hash(prefix + suffix)`` from ``java_hash(prefix)`` without rehashing the prefix:
    ``h(p + s) = h(p) * 31**len(s) + h(s)`` (mod 2**32, lengths in UTF-16 code units)."""
    units = (
        len(suffix) if suffix.isascii() else len(suffix.encode("utf-16-be", _LONE_SURROGATES)) // 2
    )
    power = _POW31.get(units)
    if power is None:
        power = _POW31[units] = pow(31, units, 1 << 32)
    h = (prefix_hash * power + java_hash(suffix)) & _MASK
    return h - 0x100000000 if h & _SIGN else h
