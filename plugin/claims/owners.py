"""Owner locks of the checkpoint's instances: each instance holds an ``flock`` on its own file
``<dir>/<owner>.lock`` for its lifetime; the kernel drops it when the process dies, which is
how one instance tells a crashed owner of a ``PrepareStarted`` record from a live one.

Owner names become file names: they must match the claim UID rule
(:data:`drakit.plugin.names.UID`).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import threading
import uuid
from pathlib import Path

from drakit.plugin.names import UID


class OwnerError(Exception):
    """This instance's owner lock cannot be taken (another live instance holds it)."""


class OwnerLocks:
    """The owner locks in ``directory``; ``owner`` names this instance (default: a random
    id). Raises ValueError for an owner name that breaks the rule. Thread-safe."""

    def __init__(self, directory: Path, owner: str | None = None) -> None:
        if owner is not None and not UID.fullmatch(owner):
            raise ValueError(f"checkpoint owner {owner!r}: must match {UID.pattern}")
        self.directory = directory
        self.name = owner or uuid.uuid4().hex[:16]
        self._fd: int | None = None
        self._lock = threading.Lock()

    def path(self, owner: str) -> Path:
        if not UID.fullmatch(owner):
            raise ValueError(f"checkpoint owner {owner!r}: not a valid owner name")
        return self.directory / f"{owner}.lock"

    def take(self) -> str:
        """Take this instance's lock (once; held until :meth:`close` or process exit) and
        return its name. Raises OwnerError when another instance holds it."""
        with self._lock:
            if self._fd is None:
                self.directory.mkdir(parents=True, exist_ok=True, mode=0o700)
                final = self.path(self.name)
                # Locked under a hidden name first, so a probe never sees it unlocked.
                tmp = final.with_name(f".{final.name}.{os.getpid()}")
                fd = os.open(tmp, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    if final.exists():
                        raise OSError(f"{final} exists")
                    os.rename(tmp, final)
                except OSError:
                    os.close(fd)
                    with contextlib.suppress(OSError):
                        tmp.unlink()
                    raise OwnerError(f"checkpoint owner {self.name} is already held by "
                                     "another instance") from None
                self._fd = fd
            return self.name

    def alive(self, owner: str | None) -> bool:
        """True when ``owner`` is this instance (its lock taken) or another live one (its
        lock is held). None, an unknown or a crashed owner is not alive."""
        if owner is None:
            return False
        if owner == self.name:
            return self._fd is not None
        try:
            fd = os.open(self.path(owner), os.O_RDWR | os.O_CLOEXEC)
        except (OSError, ValueError):
            return False
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            return True
        finally:
            os.close(fd)  # closing drops the probe's lock
        return False

    def forget_dead(self) -> list[str]:
        """Remove the lock files of instances that are gone; returns their names."""
        removed = []
        with contextlib.suppress(FileNotFoundError):
            for path in self.directory.iterdir():
                name = path.name.removesuffix(".lock")
                if path.suffix != ".lock" or not UID.fullmatch(name) or name == self.name:
                    continue
                if not self.alive(name):
                    with contextlib.suppress(FileNotFoundError):
                        path.unlink()
                    removed.append(name)
        return removed

    def close(self) -> None:
        """Release this instance's lock and remove its file."""
        with self._lock:
            if self._fd is not None:
                with contextlib.suppress(FileNotFoundError):
                    self.path(self.name).unlink()
                os.close(self._fd)
                self._fd = None
