"""Watches of the embedded API server (:mod:`drakit.plugin.testing.apiserver_http`): a chunked
stream of newline-delimited ``{"type": ADDED|MODIFIED|DELETED|BOOKMARK, "object": ...}``
events. Without ``resourceVersion`` (or ``0``) it starts with ADDED events for the existing
objects, with ``resourceVersion=N`` it replays what happened after N (410 Expired when that
history is gone); objects moving in or out of the selector appear as ADDED / DELETED;
``timeoutSeconds`` (default 1800) ends the stream; ``sendInitialEvents`` with
``allowWatchBookmarks`` ends the initial events with the KEP-3157 BOOKMARK.
"""

from __future__ import annotations

import json
import time
from typing import Any

from . import apiserver_errors as errors
from .apiserver_convert import from_internal
from .apiserver_http_base import HandlerBase
from .apiserver_resources import ResourceInfo
from .apiserver_routes import Route, query_flag, query_param
from .apiserver_store import WatchEvent

__all__ = ["DEFAULT_WATCH_TIMEOUT_SECONDS", "WatchHandler"]

DEFAULT_WATCH_TIMEOUT_SECONDS = 1800
_WATCH_POLL_SECONDS = 0.5


class WatchHandler(HandlerBase):
    """The watch verb of the request handler."""

    def _write_chunk(self, data: bytes) -> None:
        self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
        self.wfile.flush()

    def _watch(self, route: Route, query: dict[str, list[str]], predicate: Any) -> None:
        assert route.info is not None
        info, version = route.info, route.version
        store = self.server.ctx.registry.store
        start = query_param(query, "resourceVersion")
        timeout_text = query_param(query, "timeoutSeconds")
        timeout = float(timeout_text) if timeout_text.isdigit() else DEFAULT_WATCH_TIMEOUT_SECONDS
        deadline = time.monotonic() + timeout
        initial: list[dict[str, Any]] = []
        send_initial = query_flag(query, "sendInitialEvents")
        bookmarks = query_flag(query, "allowWatchBookmarks")
        with store.locked():
            if start in ("", "0") or send_initial:
                initial, last = store.select(info.plural, route.namespace, predicate,
                                             copy=False)
            else:
                if not start.isdigit():
                    raise errors.bad_request(f"invalid resource version {start!r}")
                last = int(start)
                if store.is_compacted(last):
                    raise errors.gone(f"too old resource version: {last} "
                                      f"({store.resource_version})")
        self._log_once(200)
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Transfer-Encoding", "chunked")
        self.send_header("Cache-Control", "no-cache, private")
        self.end_headers()
        for obj in initial:
            self._send_event("ADDED", info, version, obj)
        if send_initial and bookmarks:
            # The watch-list protocol (KEP-3157): a bookmark marks the end of the initial state.
            self._send_event("BOOKMARK", info, version, {"metadata": {
                "resourceVersion": str(last),
                "annotations": {"k8s.io/initial-events-end": "true"}}})
        stopping = self.server.ctx.stopping
        while not stopping.is_set():
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            events = store.events_after(last, min(remaining, _WATCH_POLL_SECONDS))
            for event in events:
                last = event.resource_version
                self._forward(event, route, predicate)
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()

    def _forward(self, event: WatchEvent, route: Route, predicate: Any) -> None:
        assert route.info is not None
        plural, namespace, _ = event.key
        if plural != route.info.plural:
            return
        if route.namespace is not None and namespace != route.namespace:
            return
        was = event.old is not None and predicate(event.old)
        now = predicate(event.new)
        if event.type == "DELETED":
            kind = "DELETED" if was else None
        elif was and now:
            kind = "MODIFIED"
        elif now:
            kind = "ADDED"
        elif was:
            kind = "DELETED"
        else:
            kind = None
        if kind is not None:
            self._send_event(kind, route.info, route.version, event.new)

    def _send_event(self, kind: str, info: ResourceInfo, version: str,
                    obj: dict[str, Any]) -> None:
        line = json.dumps({"type": kind,
                           "object": from_internal(info, version, obj, copy=False)},
                          separators=(",", ":"))
        self._write_chunk(line.encode("utf-8") + b"\n")
