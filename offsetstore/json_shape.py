"""Checking a JSON document read back from a file against the shape it must have.

Valid JSON of the wrong shape (a list where an object belongs, ``"3"`` or ``-1`` where an offset
belongs, a key that names no queue) is a damaged file, exactly like unparsable JSON: a decoder
checks the document field by field with these helpers and raises :class:`ShapeError` (a
:class:`ValueError`) naming the field and what was found, and
:func:`offsetstore.atomic_file.read_with_backup` then falls back to the file's ``.bak``. A
decoder built from them never lets ``AttributeError`` or ``TypeError`` out, whatever the JSON.

Found values are shown as JSON writes them (``"4"``, ``-1``, ``true``, ``null``), containers by
their type (``an object``, ``an array``), cut to 40 characters.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

__all__ = [
    "INT32_MAX",
    "INT64_MAX",
    "ShapeError",
    "data_version",
    "expect_int",
    "expect_int_key",
    "expect_object",
    "expect_str",
    "json_kind",
]

INT32_MAX = 2**31 - 1  # a Java int: queue ids, delay levels
INT64_MAX = 2**63 - 1  # a Java long: offsets, timestamps
_SHOWN_CHARACTERS = 40


class ShapeError(ValueError):
    """A JSON document (valid JSON) that is not of the shape its file must have."""


def json_kind(value: Any) -> str:
    """``value`` as an error message shows what was found instead of the expected shape."""
    if isinstance(value, Mapping):
        return "an object"
    if isinstance(value, list | tuple):
        return "an array"
    try:
        text = json.dumps(value, ensure_ascii=False)
    except (TypeError, ValueError):  # pragma: no cover - only JSON values reach here
        text = repr(value)
    if len(text) <= _SHOWN_CHARACTERS:
        return text
    return text[: _SHOWN_CHARACTERS - 3] + "..."


def _fail(where: str, expected: str, value: Any) -> ShapeError:
    return ShapeError(f"{where} is not {expected} (found {json_kind(value)})")


def expect_object(where: str, value: Any) -> Mapping[Any, Any]:
    """``value`` if it is a JSON object (keys unchecked), else :class:`ShapeError`."""
    if not isinstance(value, Mapping):
        raise _fail(where, "an object", value)
    return value


def expect_str(where: str, value: Any, *, non_empty: bool = False) -> str:
    if not isinstance(value, str) or (non_empty and not value):
        raise _fail(where, "a non-empty string" if non_empty else "a string", value)
    return value


def expect_int(where: str, value: Any, low: int = 0, high: int = INT64_MAX) -> int:
    """``value`` if it is a JSON integer in ``[low, high]`` (a bool or ``4.0`` is not one)."""
    if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= high:
        raise _fail(where, f"an integer in [{low}, {high}]", value)
    return value


def expect_int_key(where: str, key: Any, low: int = 0, high: int = INT32_MAX) -> int:
    """A map key that holds an integer in ``[low, high]``: unquoted, as fastjson writes Java
    integer keys, or a string of ASCII digits, as strict JSON must write them."""
    number = key
    if isinstance(key, str) and key.isascii() and key.isdigit() and len(key) <= 20:
        number = int(key)
    if not isinstance(number, int) or isinstance(number, bool) or not low <= number <= high:
        raise ShapeError(f"{where}: key {json_kind(key)} is not an integer in [{low}, {high}]")
    return number


_VERSION_FIELDS = {"counter": (0, INT64_MAX), "stateVersion": (-INT64_MAX - 1, INT64_MAX)}
_VERSION_FIELDS["timestamp"] = (0, INT64_MAX)


def data_version(value: Any) -> dict[str, int]:
    """RocketMQ's ``dataVersion`` object (``counter``, ``stateVersion``, ``timestamp``: longs;
    other fields are ignored, absent ones are left out)."""
    version = expect_object("dataVersion", value)
    return {
        name: expect_int(f"dataVersion.{name}", version[name], low, high)
        for name, (low, high) in _VERSION_FIELDS.items()
        if name in version
    }
