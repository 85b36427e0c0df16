"""Atomic file writes, for the data caches and the framework's run outputs alike: a new file is written
beside its target under a name no other process uses, fsynced, and renamed into place."""

from __future__ import annotations

import os
import re
import secrets
import shutil
from pathlib import Path

TEMP = re.compile(r"^\..+\.\d+\.[0-9a-f]{8}\.tmp$")  # the names _temp_name gives


def _temp_name(path: Path) -> Path:
    """A name beside ``path`` that no other process or call uses (PID and 32 random bits)."""
    return path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")


def _fsync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def atomic_write(path: Path, write, previous: Path | None = None) -> None:
    """``write(tmp)`` a new file beside ``path`` (mode 0666 less the umask), fsync, rename it to ``path``.
    On any failure (a full disk) the temp file goes and ``path`` stays as it was. With ``previous``, the
    file being replaced is kept there (a hard link) before the new one lands."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp, keep = _temp_name(path), None
    try:
        os.close(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666))
        write(str(tmp))
        _fsync(tmp)
        if previous is not None and path.exists():
            keep = _temp_name(previous)
            try:
                os.link(path, keep)
            except OSError:  # no hard links on this file system
                shutil.copyfile(path, keep)
            os.replace(keep, previous)
        os.replace(tmp, path)
        _fsync(path.parent)
    except OSError as e:
        if e.filename is None and e.errno is not None:  # a full disk while writing: name the file, not its temp
            raise OSError(e.errno, e.strerror, str(path)) from e
        raise
    finally:
        for leftover in (tmp, keep):
            if leftover is not None and os.path.lexists(leftover):
                os.remove(leftover)
