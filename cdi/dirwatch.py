"""What changed in one directory since the last look, from Linux inotify (inotify_simple).

:class:`DirWatch` answers the names of the directory's entries created, removed, renamed
in or out, written, or changed in their attributes since its previous answer, so a
:class:`drakit.cdi.store.SpecStore` with claim-scoped names reads only the spec files that
changed instead of listing a directory that holds one file per prepared claim at every write.

It answers None when it cannot say, and the caller then looks at everything: at the first
call (the watch is set up then, before the caller's full look, so nothing falls between),
while the directory is missing, after it was removed or renamed (``IN_DELETE_SELF``,
``IN_MOVE_SELF``, ``IN_IGNORED``), after the kernel's event queue overflowed
(``IN_Q_OVERFLOW``), and where inotify is unavailable (no support, the
``fs.inotify.max_user_watches`` limit). Changes made by another host to a network filesystem
are not seen; a CDI spec directory is node-local (``/var/run/cdi``, ``/etc/cdi``).
"""

from __future__ import annotations

import contextlib
import os

from inotify_simple import INotify, flags

#: Every event that can change what a directory's spec files say.
WATCHED = (flags.CREATE | flags.DELETE | flags.MOVED_FROM | flags.MOVED_TO | flags.CLOSE_WRITE
           | flags.MODIFY | flags.ATTRIB | flags.DELETE_SELF | flags.MOVE_SELF | flags.ONLYDIR)
#: Events after which the watch says nothing reliable until it is set up again.
_LOST = flags.Q_OVERFLOW | flags.IGNORED | flags.DELETE_SELF | flags.MOVE_SELF


class DirWatch:
    """The changes in ``path`` (a directory) between calls of :meth:`changed`. Not
    thread-safe: the caller serializes its calls (SpecStore holds its lock)."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = os.fspath(path)
        self._inotify: INotify | None = None
        self._wd: int | None = None

    def changed(self) -> set[str] | None:
        """Names of the entries changed since the previous call (possibly empty), or None
        when that is unknown (see the module docstring): then look at every entry."""
        if self._wd is None or self._inotify is None:
            self._start()
            return None
        try:
            events = self._inotify.read(timeout=0)
        except OSError:
            self._stop()
            return None
        names: set[str] = set()
        for event in events:
            if event.mask & _LOST:
                self._stop()
                return None
            if event.name:
                names.add(event.name)
        return names

    def close(self) -> None:
        """Remove the watch and close the inotify descriptor."""
        self._stop()
        if self._inotify is not None:
            self._inotify.close()
            self._inotify = None

    def _start(self) -> None:
        try:
            if self._inotify is None:
                self._inotify = INotify(nonblocking=True)
            self._wd = self._inotify.add_watch(self.path, WATCHED)
        except OSError:  # missing directory, no inotify, the watch limit reached
            self._wd = None

    def _stop(self) -> None:
        if self._inotify is not None and self._wd is not None:
            with contextlib.suppress(OSError):  # already gone with the directory
                self._inotify.rm_watch(self._wd)
        self._wd = None
        if self._inotify is not None:  # events of the old watch are stale
            with contextlib.suppress(OSError):
                self._inotify.read(timeout=0)
