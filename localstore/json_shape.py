"""Naming a JSON value of the wrong shape in an error message (config files read back).

The store's config files and the broker's records are checked field by field when loaded; an
error names the file, the field and what was found there: a container by its JSON type
(``an object``, ``an array``), a scalar as JSON writes it (``"4"``, ``-1``, ``true``, ``null``).
"""

from __future__ import annotations

from typing import Any

import orjson

_SHOWN_CHARACTERS = 40


def json_kind(value: Any) -> str:
    """``value`` as an error message shows what was found instead of the expected shape."""
    if isinstance(value, (dict, list)):
        return "an object" if isinstance(value, dict) else "an array"
    text = orjson.dumps(value).decode() if isinstance(value, str) else repr(value)
    text = {"True": "true", "False": "false", "None": "null"}.get(text, text)
    if len(text) <= _SHOWN_CHARACTERS:
        return text
    return text[: _SHOWN_CHARACTERS - 3] + "..."


def is_json_int(value: Any) -> bool:
    """An integer as JSON reads it (a bool is not one, though Python counts it so)."""
    return isinstance(value, int) and not isinstance(value, bool)
