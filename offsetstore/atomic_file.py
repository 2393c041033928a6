"""Crash-safe replacement of a small file, keeping the previous version as ``<name>.bak``.

Protocol of :func:`write_atomically` (``path`` = ``dir/name``):

1. write the new content to a unique temporary file ``dir/.name.<random>.tmp`` (same folder, so
   same file system), ``fsync`` it;
2. if ``path`` exists, make ``dir/name.bak`` a **hard link** to it: link it as
   ``dir/.name.<random>.baktmp``, then ``os.replace`` that over ``name.bak``;
3. ``os.replace`` the temporary file over ``path``;
4. ``fsync`` the folder, so the renames themselves are durable.

Invariants, at every instant including after a crash (``kill -9`` or power loss after step 4):

* ``path`` is either absent (never written) or a complete file: the previous or the new content.
  It is never missing in between, unlike RocketMQ 5's "rename the old file to .bak, then write"
  (a reader holding no lock could find neither file) and never half written, unlike RocketMQ 4's
  "delete, then rename".
* ``name.bak``, once it exists, is a complete earlier version. Hard links are safe here because no
  file is ever modified in place: an inode, once renamed into place, is only ever unlinked.

Where hard links are not supported (some network or FAT file systems) step 2 copies the old
content to a temporary file, fsyncs it and renames it over ``name.bak``: slower, same invariants.

A process killed between steps 1 and 3 leaves its temporary file behind (harmless: readers never
look at it). :func:`remove_stale_temp_files` deletes such leftovers; call it only while holding
the lock that serialises all writers of ``path``, or it could delete a live writer's temp file.

Errors: any :class:`OSError` (read-only folder, full disk, file too large, ...) becomes an
:class:`~offsetstore.base.OffsetWriteError` naming the file; temporary files are removed, and
``path`` and ``name.bak`` keep their last good content.

Reading back (:func:`read_with_backup`, used for every JSON file written here: the offsets
files and the broker's config files): a file that cannot be read, is not valid JSON, or is
valid JSON of the wrong shape (the decoder raises :class:`ValueError`, see
:mod:`offsetstore.json_shape`) is damaged; the ``.bak`` is used instead, with a WARNING naming
both files. When both are damaged (or one is and the other missing)
:class:`~offsetstore.base.OffsetFileError` names both files and what is wrong with each; only
when neither exists is there nothing to load. A writer that loaded from ``.bak`` must not rotate
the damaged file over it: see ``keep_backup`` of :func:`write_atomically`.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import secrets
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Generic, TypeVar

from offsetstore.base import OffsetFileError, OffsetWriteError

__all__ = [
    "Loaded",
    "backup_path",
    "read_with_backup",
    "remove_stale_temp_files",
    "write_atomically",
]

log = logging.getLogger(__name__)
T = TypeVar("T")


def backup_path(path: str | os.PathLike[str]) -> Path:
    """The backup kept next to ``path``: ``<name>.bak``."""
    p = Path(path)
    return p.with_name(p.name + ".bak")


def write_atomically(
    path: str | os.PathLike[str], data: bytes, *, keep_backup: bool = True
) -> None:
    """Replace ``path``'s content with ``data`` crash-safely, keeping the old file as ``.bak``
    (with ``keep_backup=False`` the old file is dropped and ``.bak`` left as it is: for a file
    found damaged and loaded from ``.bak``).

    Raises :class:`~offsetstore.base.OffsetWriteError` (an ``OSError``) naming ``path``.
    """
    target = Path(path)
    folder = target.parent
    token = secrets.token_hex(6)
    tmp = folder / f".{target.name}.{token}.tmp"
    bak_tmp = folder / f".{target.name}.{token}.baktmp"
    try:
        _write_file(tmp, data)
        if keep_backup:
            _refresh_backup(target, bak_tmp)
        os.replace(tmp, target)
        _fsync_dir(folder)
    except OSError as exc:
        for leftover in (tmp, bak_tmp):
            with contextlib.suppress(OSError):
                leftover.unlink()
        reason = exc.strerror or str(exc)
        raise OffsetWriteError(
            exc.errno or errno.EIO, f"cannot write offsets file {target}: {reason}", str(target)
        ) from exc


@dataclass(frozen=True, slots=True)
class Loaded(Generic[T]):
    """What :func:`read_with_backup` decoded, and from which file."""

    value: T
    path: Path
    from_backup: bool


def read_with_backup(
    path: str | os.PathLike[str], decode: Callable[[bytes], T], what: str
) -> Loaded[T] | None:
    """``decode`` of ``path``'s bytes, else of its ``.bak``'s (logged at WARNING naming both
    files); None when neither file exists. ``decode`` raises :class:`ValueError` (JSON errors,
    :class:`~offsetstore.json_shape.ShapeError`) for a damaged file; ``what`` names the content
    in messages ("consumer offsets"). Raises :class:`~offsetstore.base.OffsetFileError` naming
    both files when neither is usable."""
    target = Path(path)
    backup = backup_path(target)
    problems: list[str] = []
    for candidate in (target, backup):
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
            problems.append(f"{candidate}: {_one_line(exc)}")
            continue
        if candidate == backup:
            log.warning(
                "%s: %s is damaged or missing (%s); using its backup %s",
                what,
                target,
                problems[0],
                backup,
            )
        return Loaded(value, candidate, candidate == backup)
    if all(problem.endswith(": missing") for problem in problems):
        return None
    raise OffsetFileError(
        f"cannot read {what} from {target} nor from its backup {backup}: {'; '.join(problems)}"
    )


def _one_line(exc: Exception) -> str:
    return " ".join(str(exc).split()) or type(exc).__name__


def remove_stale_temp_files(path: str | os.PathLike[str]) -> list[Path]:
    """Delete temporary files that writers of ``path`` left behind (killed mid-write); returns
    them. Only call while holding the lock that all writers of ``path`` take."""
    target = Path(path)
    removed: list[Path] = []
    for pattern in (f".{target.name}.*.tmp", f".{target.name}.*.baktmp"):
        for leftover in target.parent.glob(pattern):
            with contextlib.suppress(OSError):  # gone already, or a read-only folder
                leftover.unlink()
                removed.append(leftover)
    return removed


def _write_file(path: Path, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    try:
        view = memoryview(data)
        while view:
            written = os.write(fd, view)
            view = view[written:]
        os.fsync(fd)
    finally:
        os.close(fd)


def _refresh_backup(target: Path, bak_tmp: Path) -> None:
    """Point ``<name>.bak`` at the current content of ``target`` (if any), atomically."""
    try:
        os.link(target, bak_tmp)
    except FileNotFoundError:
        return  # first write: nothing to back up
    except OSError as exc:
        if exc.errno not in (errno.EPERM, errno.EOPNOTSUPP, errno.EMLINK, errno.EXDEV):
            raise
        try:
            old = target.read_bytes()
        except FileNotFoundError:
            return
        _write_file(bak_tmp, old)
    os.replace(bak_tmp, backup_path(target))


def _fsync_dir(folder: Path) -> None:
    try:
        fd = os.open(folder, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except OSError:  # pragma: no cover - platforms that cannot open folders (Windows)
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
