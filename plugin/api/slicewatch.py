"""A watch on ResourceSlices: the stream of :class:`WatchEvent` in the v1 shape.

:meth:`drakit.plugin.api.resourceapi.ResourceAPI.watch_slices` opens it; the server sends one
JSON event per line (``ADDED``, ``MODIFIED``, ``DELETED``, ``BOOKMARK``, ``ERROR``).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from kubernetes.client import ApiException

from drakit.plugin.api import convert


@dataclass(frozen=True)
class WatchEvent:
    """One watch event: ``type`` ADDED, MODIFIED, DELETED or BOOKMARK; ``object`` in the v1
    shape; ``resource_version`` of the object (the position to resume from)."""

    type: str
    object: dict[str, Any]
    resource_version: str


class SliceWatch:
    """An open watch on ResourceSlices; iterate for :class:`WatchEvent`s. The iteration ends
    when the server closes the stream (``timeoutSeconds``) or :meth:`close` is called from
    another thread. An ``ERROR`` event is raised as ``ApiException`` (410 when the
    resourceVersion is too old: list again)."""

    def __init__(self, response: Any, version: str | None) -> None:
        """``version``: the resource.k8s.io version the slices come in (converted to v1);
        None for another kind (a Node), whose objects are passed on as they came."""
        self._resp = response
        self._version = version
        self._closed = threading.Event()

    def __iter__(self) -> Iterator[WatchEvent]:
        buf = b""
        try:
            while not self._closed.is_set():
                try:
                    chunk = self._resp.read1(65536)
                except Exception:
                    if self._closed.is_set():
                        return
                    raise
                if not chunk:
                    return
                buf += chunk
                while b"\n" in buf:
                    line, buf = buf.split(b"\n", 1)
                    if line.strip():
                        yield self._event(json.loads(line))
        finally:
            self.close()

    def _event(self, raw: dict[str, Any]) -> WatchEvent:
        kind = raw.get("type", "")
        obj = raw.get("object") or {}
        if kind == "ERROR":
            raise ApiException(status=obj.get("code", 500), reason=obj.get("message", ""))
        rv = str((obj.get("metadata") or {}).get("resourceVersion", ""))
        if kind != "BOOKMARK" and self._version is not None:
            obj = convert.slice_from_version(obj, self._version)
        return WatchEvent(kind, obj, rv)

    def close(self) -> None:
        """Stop the watch (safe from any thread, idempotent)."""
        if self._closed.is_set():
            return
        self._closed.set()
        try:
            shutdown = getattr(self._resp, "shutdown", None)
            if shutdown is not None:
                shutdown()
            self._resp.close()
            self._resp.release_conn()
        except Exception:  # pragma: no cover - best effort on a dying connection
            pass
