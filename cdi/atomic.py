"""Atomic file writes: temp file in the same directory, fsync, rename, fsync of the directory.

Used for every file drakit writes (CDI specs, the checkpoint), so a crash leaves either the
old content or the new one, never a partial file, and never a stray temp file on error.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path


def atomic_write(path: str | os.PathLike[str], data: bytes, mode: int = 0o644) -> None:
    """Replace ``path`` with ``data`` atomically; the file gets permission bits ``mode``.

    Raises ``OSError`` when the directory is missing or not writable; the temp file is
    removed in every failure case.
    """
    target = Path(path)
    directory = target.parent
    fd, tmp_name = tempfile.mkstemp(dir=directory, prefix=f".{target.name}.", suffix=".tmp")
    tmp = Path(tmp_name)
    try:
        try:
            os.fchmod(fd, mode)
            view = memoryview(data)
            while view:
                written = os.write(fd, view)
                view = view[written:]
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    fsync_dir(directory)


def fsync_dir(directory: str | os.PathLike[str]) -> None:
    """fsync a directory so a rename or unlink in it is durable."""
    dfd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(dfd)
    finally:
        os.close(dfd)


def remove_durably(path: str | os.PathLike[str]) -> bool:
    """Unlink ``path`` and fsync its directory. Returns False when it did not exist."""
    target = Path(path)
    try:
        target.unlink()
    except FileNotFoundError:
        return False
    fsync_dir(target.parent)
    return True
