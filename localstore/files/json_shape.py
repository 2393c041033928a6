"""Reading back the store's JSON config files: wrong shapes are damage, ``.bak`` is the fallback.

The store's config files (``config/topics.json``, ``config/store.json``) are written with a
``.bak`` beside them (:mod:`localstore.files.atomic_file`). Reading one back
(:func:`read_with_backup`):

* a file that cannot be read, is not valid JSON, or is valid JSON of the wrong shape (its decoder
  raises :class:`ValueError`; :class:`ShapeError` names the field and what was found there) is
  damaged, and its ``.bak`` is used instead, with a WARNING naming both files;
* when both are damaged (or one is and the other is missing), :class:`CorruptStoreError` names
  both files and what is wrong with each; only when neither exists is there nothing to load.

A decoder checks the document field by field, so no JSON value makes it raise ``AttributeError``
or ``TypeError``. Found values are shown as JSON writes them (``"4"``, ``-1``, ``true``,
``null``), containers by their JSON type (``an object``, ``an array``), cut to 40 characters.

(offsetstore, which may not import localstore, reads its files and the broker's through the same
contract in :func:`offsetstore.atomic_file.read_with_backup`.)
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Generic, TypeVar

import orjson

from localstore.errors import CorruptStoreError

log = logging.getLogger(__name__)
T = TypeVar("T")
_SHOWN_CHARACTERS = 40


class ShapeError(ValueError):
    """A JSON document (valid JSON) that is not of the shape its file must have."""


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


def backup_path(path: Path) -> Path:
    """The backup kept next to ``path``: ``<name>.bak``."""
    return path.with_name(path.name + ".bak")


@dataclass(frozen=True, slots=True)
class Loaded(Generic[T]):
    """What :func:`read_with_backup` decoded, and whether from the ``.bak``."""

    value: T
    path: Path
    from_backup: bool


def decode_json_object(data: bytes) -> dict[str, Any]:
    """``data`` parsed as a JSON object; ValueError (ShapeError for another JSON value)."""
    try:
        document = orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        raise ValueError(f"is not valid JSON: {exc}") from exc
    if not isinstance(document, dict):
        raise ShapeError(f"not a JSON object (found {json_kind(document)})")
    return document


def read_with_backup(path: Path, decode: Callable[[bytes], T]) -> Loaded[T] | None:
    """``decode`` of ``path``'s bytes, else of its ``.bak``'s (a WARNING names both files); None
    when neither exists. ``decode`` raises :class:`ValueError` for a damaged file. Raises
    :class:`CorruptStoreError` naming both files when neither is usable."""
    backup = backup_path(path)
    problems: list[str] = []
    for candidate in (path, backup):
        try:
            data = candidate.read_bytes()
        except FileNotFoundError:
            problems.append(f"{candidate}: missing")
            continue
        except OSError as exc:
            problems.append(f"{candidate}: cannot be read ({exc.strerror or exc})")
            continue
        try:
            value = decode(data)
        except ValueError as exc:
            problems.append(f"{candidate}: {' '.join(str(exc).split())}")
            continue
        if candidate == backup:
            log.warning(
                "%s is damaged or missing (%s); using its backup %s", path, problems[0], backup
            )
        return Loaded(value, candidate, candidate == backup)
    if all(problem.endswith(": missing") for problem in problems):
        return None
    raise CorruptStoreError(f"cannot read {path} nor its backup {backup}: {'; '.join(problems)}")
