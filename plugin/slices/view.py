"""The publisher's local view of its ResourceSlices: what a LIST returned, kept current by
the watch and by the answers of the publisher's own writes.

The view plays the part of the Go controller's informer store plus its mutation cache
(``k8s.io/dynamic-resource-allocation/resourceslice``: ``NewIntegerResourceVersionMutationCache``):
slices are kept by name; an object replaces the stored one only when its resourceVersion is
not older (resourceVersions compared as integers, as that cache does, because a watch may
deliver an event that is older than the answer of a write the publisher already stored).
Thread-safe: the sync, the writes and the watch threads all use one view.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from typing import Any


def _rv(obj: dict[str, Any]) -> int | None:
    raw = str((obj.get("metadata") or {}).get("resourceVersion", ""))
    return int(raw) if raw.isdigit() else None


def _name(obj: dict[str, Any]) -> str:
    return str((obj.get("metadata") or {}).get("name", ""))


def _uid(obj: dict[str, Any]) -> str:
    return str((obj.get("metadata") or {}).get("uid", ""))


def newer_rv(a: str, b: str) -> str:
    """The newer of two resourceVersions (integers on every API server; a non-integer one,
    or an empty one, loses to the other)."""
    if not a:
        return b
    if not b:
        return a
    if a.isdigit() and b.isdigit():
        return a if int(a) >= int(b) else b
    return b


class SliceView:
    """ResourceSlices by name, in the v1 shape."""

    def __init__(self) -> None:
        self._objs: dict[str, dict[str, Any]] = {}
        self._lock = threading.Lock()

    def __len__(self) -> int:
        with self._lock:
            return len(self._objs)

    def slices(self, selected: Callable[[dict[str, Any]], bool] | None = None
               ) -> list[dict[str, Any]]:
        """The stored slices (all, or those ``selected`` accepts), sorted by name."""
        with self._lock:
            objs = dict(self._objs)
        return [objs[n] for n in sorted(objs) if selected is None or selected(objs[n])]

    def replace(self, selected: Callable[[dict[str, Any]], bool],
                items: Iterable[dict[str, Any]]) -> None:
        """A LIST's answer: the stored slices ``selected`` accepts (the LIST's scope) are
        replaced by ``items``."""
        with self._lock:
            self._objs = {n: o for n, o in self._objs.items() if not selected(o)}
            for obj in items:
                self._objs[_name(obj)] = obj

    def stored(self, obj: dict[str, Any]) -> bool:
        """An object as the server stored it (watch ADDED/MODIFIED, or a write's answer);
        ignored when the view already holds a newer version. True when the view changed."""
        name = _name(obj)
        with self._lock:
            held = self._objs.get(name)
            if held is not None and _uid(held) == _uid(obj):
                old, new = _rv(held), _rv(obj)
                if old is not None and new is not None and new <= old:
                    return False
            self._objs[name] = obj
            return True

    def deleted(self, obj: dict[str, Any]) -> bool:
        """A watch DELETED event (the object's last state): removed unless the view holds
        another object of that name (a newer one with another UID). True when removed."""
        name = _name(obj)
        with self._lock:
            held = self._objs.get(name)
            if held is None or (_uid(obj) and _uid(held) and _uid(held) != _uid(obj)):
                return False
            del self._objs[name]
            return True

    def removed(self, name: str) -> None:
        """The publisher deleted ``name`` (or found it gone)."""
        with self._lock:
            self._objs.pop(name, None)
