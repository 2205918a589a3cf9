"""Atomic file writes: temp file in the same directory, fsync, rename, fsync of the directory
(unless the caller re-creates a lost file itself: ``sync_dir=False``).

Used for every file drakit writes (CDI specs, the checkpoint), so a crash leaves either the
old content or the new one, never a partial file, and never a stray temp file on error.
"""

from __future__ import annotations

import contextlib
import itertools
import os

_TEMP_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC | os.O_NOFOLLOW
_counter = itertools.count()  # next() is atomic under the GIL


def _create_temp(directory: str, name: str) -> tuple[int, str]:
    """A new, exclusively created temp file ``<directory>/.<name>.<pid>-<n>.tmp`` (mode
    0600 until changed). A name left over by a crashed process is skipped."""
    pid = os.getpid()
    for _ in range(100):
        tmp = os.path.join(directory, f".{name}.{pid}-{next(_counter)}.tmp")
        try:
            return os.open(tmp, _TEMP_FLAGS, 0o600), tmp
        except FileExistsError:
            continue
    raise FileExistsError(f"{directory}: no free temp file name for {name}")


def atomic_write(path: str | os.PathLike[str], data: bytes,
                 mode: int = 0o644, *, sync_dir: bool = True) -> os.stat_result:
    """Replace ``path`` with ``data`` atomically; the file gets permission bits ``mode``.
    Returns the new file's ``fstat`` (taken before the rename: its inode is the one now at
    ``path`` unless another writer replaced it since).

    The data is always fsynced before the rename, so no reader and no power loss ever sees
    a partial file. ``sync_dir=False`` skips the directory's fsync after the rename: after a
    power loss the file may then be missing or hold its previous content, for a caller
    that re-creates it from a durable record of its own (CDI specs: the start-up recovery
    re-writes the spec of every completed claim in the checkpoint).

    Raises ``OSError`` when the directory is missing or not writable; the temp file is
    removed in every failure case.
    """
    target = os.fspath(path)
    directory, name = os.path.split(target)
    directory = directory or "."
    fd, tmp = _create_temp(directory, name)
    try:
        try:
            os.fchmod(fd, mode)
            view = memoryview(data)
            while view:
                written = os.write(fd, view)
                view = view[written:]
            os.fsync(fd)
            result = os.fstat(fd)
        finally:
            os.close(fd)
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    if sync_dir:
        fsync_dir(directory)
    return result


def fsync_dir(directory: str | os.PathLike[str]) -> None:
    """fsync a directory so a rename or unlink in it is durable."""
    dfd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(dfd)
    finally:
        os.close(dfd)


def remove_durably(path: str | os.PathLike[str], *, sync_dir: bool = True) -> bool:
    """Unlink ``path`` and fsync its directory (``sync_dir=False``: unlink only, for a
    caller that repairs a removal lost to a power loss). Returns False when it did not
    exist."""
    target = os.fspath(path)
    try:
        os.unlink(target)
    except FileNotFoundError:
        return False
    if sync_dir:
        fsync_dir(os.path.dirname(target) or ".")
    return True
