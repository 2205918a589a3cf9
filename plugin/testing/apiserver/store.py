"""Thread-safe object store of the embedded API server, with watch history.

Objects are kept in their resource.k8s.io/v1 (core v1 for nodes) shape without
``apiVersion``/``kind``, keyed by (plural, namespace, name); namespace is ``""`` for
cluster-scoped resources. One global counter gives every write its
``metadata.resourceVersion`` (a decimal string, as etcd revisions are). Every write
appends a :class:`WatchEvent` to a bounded history that watchers read from.
"""

from __future__ import annotations

import bisect
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from drakit.plugin.testing.apiserver.apply import Owners
from drakit.plugin.testing.apiserver.jsondoc import clone

Key = tuple[str, str, str]
"""(plural, namespace, name)."""

FIRST_RESOURCE_VERSION = 1000


@dataclass(frozen=True)
class WatchEvent:
    """One write: ``type`` ADDED/MODIFIED/DELETED, the object before (``old``) and after
    (``new``; for DELETED the last state with the deletion's resourceVersion)."""

    resource_version: int
    type: str
    key: Key
    old: dict[str, Any] | None
    new: dict[str, Any]


class Store:
    """Objects, ownership of applied fields, the resourceVersion counter and the watch
    history. Compound read-modify-write sequences run under :meth:`locked`."""

    def __init__(self, history_limit: int = 50_000) -> None:
        self._cond = threading.Condition(threading.RLock())
        self._objects: dict[Key, dict[str, Any]] = {}
        self._owners: dict[Key, Owners] = {}
        self._rv = FIRST_RESOURCE_VERSION
        self._history: list[WatchEvent] = []
        self._history_limit = history_limit
        self._compacted_through = FIRST_RESOURCE_VERSION
        self._closed = False

    @contextmanager
    def locked(self) -> Iterator[None]:
        with self._cond:
            yield

    # ------------------------------------------------------------------ reads

    @property
    def resource_version(self) -> int:
        with self._cond:
            return self._rv

    def get(self, key: Key) -> dict[str, Any] | None:
        with self._cond:
            obj = self._objects.get(key)
        # Stored objects are never changed in place: copy outside the lock.
        return clone(obj) if obj is not None else None

    def select(
        self,
        plural: str,
        namespace: str | None,
        predicate: Callable[[Mapping[str, Any]], bool] | None = None,
        *,
        copy: bool = True,
    ) -> tuple[list[dict[str, Any]], int]:
        """Matching objects sorted by (namespace, name) and the current resourceVersion.

        The objects are taken under the lock and filtered and copied after it is released
        (stored objects are never changed in place), so a big list never holds up writers.
        ``copy=False`` returns the stored objects themselves, for callers that only read
        them (encoding an answer): they must not be changed."""
        with self._cond:
            snapshot = [
                (key, obj)
                for key, obj in self._objects.items()
                if key[0] == plural and (namespace is None or key[1] == namespace)
            ]
            rv = self._rv
        snapshot.sort(key=lambda item: item[0])
        items = [obj for _, obj in snapshot if predicate is None or predicate(obj)]
        return ([clone(obj) for obj in items] if copy else items), rv

    def owners(self, key: Key) -> Owners:
        with self._cond:
            return {k: set(v) for k, v in self._owners.get(key, {}).items()}

    # ------------------------------------------------------------------ writes

    def _record(self, event: WatchEvent) -> None:
        self._history.append(event)
        if len(self._history) > self._history_limit:
            drop = len(self._history) - self._history_limit
            self._compacted_through = self._history[drop - 1].resource_version
            del self._history[:drop]
        self._cond.notify_all()

    def put(self, key: Key, obj: dict[str, Any], owners: Owners | None = None) -> dict[str, Any]:
        """Store ``obj`` (create or replace) with a new resourceVersion; returns a copy."""
        with self._cond:
            self._rv += 1
            # Stored objects are never changed in place (readers get clones), so the
            # watch history can share them.
            stored = clone(obj)
            stored.setdefault("metadata", {})["resourceVersion"] = str(self._rv)
            old = self._objects.get(key)
            self._objects[key] = stored
            if owners is not None:
                self._owners[key] = {k: set(v) for k, v in owners.items() if v}
            kind = "MODIFIED" if old else "ADDED"
            self._record(WatchEvent(self._rv, kind, key, old, stored))
            return clone(stored)

    def set_owners(self, key: Key, owners: Owners) -> None:
        with self._cond:
            if key in self._objects:
                self._owners[key] = {k: set(v) for k, v in owners.items() if v}

    def remove(self, key: Key) -> dict[str, Any] | None:
        """Delete; returns the last state (with the deletion's resourceVersion) or None."""
        with self._cond:
            old = self._objects.pop(key, None)
            self._owners.pop(key, None)
            if old is None:
                return None
            self._rv += 1
            last = {**old, "metadata": {**old["metadata"], "resourceVersion": str(self._rv)}}
            self._record(WatchEvent(self._rv, "DELETED", key, old, last))
            return clone(last)

    # ------------------------------------------------------------------ watch

    def is_compacted(self, resource_version: int) -> bool:
        """True when events after ``resource_version`` are no longer all in the history."""
        with self._cond:
            return resource_version < self._compacted_through

    def events_after(self, resource_version: int, timeout: float) -> list[WatchEvent]:
        """Events newer than ``resource_version``; waits up to ``timeout`` seconds for one.
        Returns [] on timeout or when the store is closed."""
        deadline = time.monotonic() + max(timeout, 0.0)
        with self._cond:
            while True:
                if self._closed:
                    return []
                if self._rv > resource_version:
                    start = bisect.bisect_right(
                        self._history, resource_version, key=lambda e: e.resource_version
                    )
                    return self._history[start:]
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return []
                self._cond.wait(remaining)

    @property
    def closed(self) -> bool:
        return self._closed

    def close(self) -> None:
        """Wake and end every watcher."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()

    def reopen(self) -> None:
        with self._cond:
            self._closed = False
