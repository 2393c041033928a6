"""A tolerant reader (and a writer) for the JSON dialect RocketMQ's Java side writes with fastjson.

fastjson serialises ``Map`` keys that are not strings as they are, which is not JSON:

* integer keys unquoted: ``{"TopicTest@group":{0:42,1:41}}`` (the broker's consumerOffset.json);
* object keys, e.g. a ``MessageQueue`` as the key of the client's offsets.json:
  ``{"offsetTable":{{"brokerName":"b","queueId":3,"topic":"T"}:1470}}``;
* the pretty form indents with tabs and breaks lines anywhere between tokens.

:func:`loads` accepts all of that plus standard JSON (RFC 8259). It returns plain Python values:
``dict``, ``list``, ``str``, ``int``, ``float``, ``bool``, ``None``. Object keys may be ``str``,
``int``, ``float``, ``bool``, ``None`` or a :class:`FrozenObject` -- an immutable, hashable mapping
whose own nested objects are FrozenObjects and whose arrays are tuples, so it can be a dict key.
``FrozenObject({"topic": "T", ...})["topic"]`` reads like the dict it came from, which is all a
caller needs to rebuild e.g. a ``MessageQueue``. Duplicate keys: the last one wins (as in Java).

Garbage raises :class:`ValueError` with the character position (and line/column). Nesting deeper
than :data:`MAX_DEPTH` is refused rather than blowing the stack.

:func:`dumps` writes the dialect back (compact, or pretty with tabs like fastjson's
``PrettyFormat``); used to produce RocketMQ-shaped files and in tests.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterator, Mapping
from typing import Any

__all__ = ["MAX_DEPTH", "FrozenObject", "dumps", "loads"]

MAX_DEPTH = 256


_WHITESPACE = " \t\n\r"
_ESCAPES = {'"': '"', "\\": "\\", "/": "/", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t"}
# RFC 8259 numbers; group 1 = fraction, group 2 = exponent (either makes it a float).
_NUMBER = re.compile(r"-?(?:0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?(?![0-9.eE+-])")


class FrozenObject(Mapping[str, Any]):
    """An immutable, hashable JSON object (used where fastjson wrote an object as a map key).

    Items are kept sorted by key, so equal content means equal and same hash, whatever the order
    in the file.
    """

    __slots__ = ("_hash", "_items", "_map")

    def __init__(self, items: Mapping[Any, Any] | None = None) -> None:
        source = dict(items or {})
        frozen = {key: _freeze(value) for key, value in source.items()}
        self._items: tuple[tuple[Any, Any], ...] = tuple(
            sorted(frozen.items(), key=lambda kv: (type(kv[0]).__name__, str(kv[0])))
        )
        self._map: dict[Any, Any] = dict(self._items)
        self._hash = hash(self._items)

    def __getitem__(self, key: Any) -> Any:
        return self._map[key]

    def __iter__(self) -> Iterator[Any]:
        return (key for key, _ in self._items)

    def __len__(self) -> int:
        return len(self._items)

    def __hash__(self) -> int:
        return self._hash

    def __eq__(self, other: object) -> bool:
        if isinstance(other, FrozenObject):
            return self._items == other._items
        return super().__eq__(other)

    def __repr__(self) -> str:
        return f"FrozenObject({self._map!r})"


def _freeze(value: Any) -> Any:
    if isinstance(value, FrozenObject):
        return value
    if isinstance(value, Mapping):
        return FrozenObject(value)
    if isinstance(value, list | tuple):
        return tuple(_freeze(item) for item in value)
    return value


def loads(text: str | bytes | bytearray) -> Any:
    """Parse standard JSON or fastjson's dialect; :class:`ValueError` on anything else."""
    if isinstance(text, bytes | bytearray):
        try:
            text = bytes(text).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise ValueError(f"not UTF-8 at byte {exc.start}") from exc
    if text.startswith("\ufeff"):
        text = text[1:]
    parser = _Parser(text)
    value = parser.value(0)
    parser.skip_ws()
    if parser.pos != len(text):
        parser.fail("unexpected data after the top-level value")
    return value


class _Parser:
    """Recursive descent over one string; ``pos`` is the index of the next unread character."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.pos = 0

    def fail(self, message: str) -> None:
        line = self.text.count("\n", 0, self.pos) + 1
        column = self.pos - (self.text.rfind("\n", 0, self.pos) + 1) + 1
        near = self.text[self.pos : self.pos + 20]
        raise ValueError(
            f"{message} at position {self.pos} (line {line}, column {column}) near {near!r}"
        )

    def skip_ws(self) -> None:
        text, pos = self.text, self.pos
        while pos < len(text) and text[pos] in _WHITESPACE:
            pos += 1
        self.pos = pos

    def peek(self) -> str:
        self.skip_ws()
        if self.pos >= len(self.text):
            self.fail("unexpected end of input")
        return self.text[self.pos]

    def value(self, depth: int) -> Any:
        char = self.peek()
        if char == "{":
            return self.object(depth + 1)
        if char == "[":
            return self.array(depth + 1)
        if char == '"':
            return self.string()
        if char == "-" or char.isdigit():
            return self.number()
        for word, result in (("true", True), ("false", False), ("null", None)):
            if self.text.startswith(word, self.pos):
                self.pos += len(word)
                return result
        self.fail(f"unexpected character {char!r}")
        raise AssertionError("unreachable")  # pragma: no cover

    def key(self, depth: int) -> Any:
        char = self.peek()
        if char == "{":
            return FrozenObject(self.object(depth + 1))
        if char == "[":
            return _freeze(self.array(depth + 1))
        return self.value(depth)

    def object(self, depth: int) -> dict[Any, Any]:
        if depth > MAX_DEPTH:
            self.fail(f"nesting deeper than {MAX_DEPTH}")
        self.pos += 1  # "{"
        result: dict[Any, Any] = {}
        if self.peek() == "}":
            self.pos += 1
            return result
        while True:
            key = self.key(depth)
            if self.peek() != ":":
                self.fail("expected ':' after an object key")
            self.pos += 1
            result[key] = self.value(depth)
            char = self.peek()
            self.pos += 1
            if char == "}":
                return result
            if char != ",":
                self.pos -= 1
                self.fail("expected ',' or '}' in an object")

    def array(self, depth: int) -> list[Any]:
        if depth > MAX_DEPTH:
            self.fail(f"nesting deeper than {MAX_DEPTH}")
        self.pos += 1  # "["
        result: list[Any] = []
        if self.peek() == "]":
            self.pos += 1
            return result
        while True:
            result.append(self.value(depth))
            char = self.peek()
            self.pos += 1
            if char == "]":
                return result
            if char != ",":
                self.pos -= 1
                self.fail("expected ',' or ']' in an array")

    def string(self) -> str:
        text = self.text
        self.pos += 1  # opening quote
        parts: list[str] = []
        start = self.pos
        while True:
            if self.pos >= len(text):
                self.fail("unterminated string")
            char = text[self.pos]
            if char == '"':
                parts.append(text[start : self.pos])
                self.pos += 1
                return "".join(parts)
            if char == "\\":
                parts.append(text[start : self.pos])
                parts.append(self.escape())
                start = self.pos
            elif char < " ":
                self.fail("control character in a string")
            else:
                self.pos += 1

    def escape(self) -> str:
        """Decode the escape at ``pos`` (a backslash) and move past it."""
        code = self.text[self.pos + 1 : self.pos + 2]
        if code in _ESCAPES:
            self.pos += 2
            return _ESCAPES[code]
        if code != "u":
            self.fail("invalid escape in a string")
        unit = self.hex4(self.pos + 2)
        self.pos += 6
        if 0xD800 <= unit < 0xDC00 and self.text.startswith("\\u", self.pos):
            low = self.hex4(self.pos + 2)
            if 0xDC00 <= low < 0xE000:
                self.pos += 6
                return chr(0x10000 + ((unit - 0xD800) << 10) + (low - 0xDC00))
        return chr(unit)

    def hex4(self, at: int) -> int:
        digits = self.text[at : at + 4]
        if len(digits) != 4 or any(d not in "0123456789abcdefABCDEF" for d in digits):
            self.pos = at
            self.fail("invalid \\u escape")
        return int(digits, 16)

    def number(self) -> int | float:
        match = _NUMBER.match(self.text, self.pos)
        if match is None:
            self.fail("invalid number")
            raise AssertionError("unreachable")  # pragma: no cover
        start, self.pos = self.pos, match.end()
        if match.group(1) is None and match.group(2) is None:
            return int(match.group(0))
        number = float(match.group(0))
        if not math.isfinite(number):
            self.pos = start
            self.fail("number out of range")
        return number


def dumps(value: Any, *, pretty: bool = False) -> str:
    """Serialise in fastjson's dialect: non-string map keys are written bare (ints) or as
    objects (mappings); ``pretty`` indents with tabs and sorts nothing (pass sorted dicts)."""
    out: list[str] = []
    _dump(value, out, 0 if pretty else -1)
    return "".join(out)


def _newline(out: list[str], indent: int) -> None:
    if indent >= 0:
        out.append("\n" + "\t" * indent)


def _dump(value: Any, out: list[str], indent: int) -> None:
    inner = indent + 1 if indent >= 0 else -1
    if isinstance(value, Mapping):
        out.append("{")
        for index, (key, item) in enumerate(value.items()):
            if index:
                out.append(",")
            _newline(out, inner)
            _dump_key(key, out, inner)
            out.append(":")
            _dump(item, out, inner)
        if value:
            _newline(out, indent)
        out.append("}")
    elif isinstance(value, list | tuple):
        out.append("[")
        for index, item in enumerate(value):
            if index:
                out.append(",")
            _dump(item, out, indent)
        out.append("]")
    elif isinstance(value, float) and not math.isfinite(value):
        raise ValueError(f"cannot serialise {value!r}")
    else:
        out.append(json.dumps(value, ensure_ascii=False))


def _dump_key(key: Any, out: list[str], indent: int) -> None:
    if isinstance(key, Mapping):
        _dump(key, out, indent)
    elif isinstance(key, bool) or key is None:
        out.append(json.dumps(key))
    elif isinstance(key, int | float):
        out.append(repr(key) if isinstance(key, float) else str(key))
    elif isinstance(key, str):
        out.append(json.dumps(key, ensure_ascii=False))
    else:
        raise TypeError(f"cannot serialise a map key of type {type(key).__name__}")
