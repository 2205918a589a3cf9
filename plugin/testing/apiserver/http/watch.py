"""The watch verb of the embedded API server: a chunked stream of newline-delimited
``{"type": ADDED|MODIFIED|DELETED|BOOKMARK, "object": ...}`` events. Without
``resourceVersion`` (or ``0``) it starts with ADDED events for the existing objects, with
``resourceVersion=N`` it replays what happened after N (410 Expired when that history is
gone); objects moving in or out of the selector appear as ADDED / DELETED;
``timeoutSeconds`` (default 1800) ends the stream; ``sendInitialEvents`` with
``allowWatchBookmarks`` ends the initial events with the KEP-3157 BOOKMARK.
"""

from __future__ import annotations

import json
import threading
import time
from typing import Any

from drakit.plugin.testing.apiserver import errors as errors
from drakit.plugin.testing.apiserver.convert import from_internal
from drakit.plugin.testing.apiserver.http.answer import Answer
from drakit.plugin.testing.apiserver.http.routes import Route, query_flag, query_param
from drakit.plugin.testing.apiserver.resources import ResourceInfo
from drakit.plugin.testing.apiserver.store import Store, WatchEvent

__all__ = ["DEFAULT_WATCH_TIMEOUT_SECONDS", "serve_watch"]

DEFAULT_WATCH_TIMEOUT_SECONDS = 1800
_WATCH_POLL_SECONDS = 0.5


def serve_watch(answer: Answer, store: Store, stopping: threading.Event, route: Route,
                query: dict[str, list[str]], predicate: Any) -> None:
    """Stream the events of ``route``'s resource that ``predicate`` selects until the
    timeout, or until the server stops."""
    assert route.info is not None
    info, version = route.info, route.version
    start = query_param(query, "resourceVersion")
    timeout_text = query_param(query, "timeoutSeconds")
    timeout = float(timeout_text) if timeout_text.isdigit() else DEFAULT_WATCH_TIMEOUT_SECONDS
    deadline = time.monotonic() + timeout
    initial: list[dict[str, Any]] = []
    send_initial = query_flag(query, "sendInitialEvents")
    bookmarks = query_flag(query, "allowWatchBookmarks")
    with store.locked():
        if start in ("", "0") or send_initial:
            initial, last = store.select(info.plural, route.namespace, predicate, copy=False)
        else:
            if not start.isdigit():
                raise errors.bad_request(f"invalid resource version {start!r}")
            last = int(start)
            if store.is_compacted(last):
                raise errors.gone(f"too old resource version: {last} "
                                  f"({store.resource_version})")
    answer.start_stream()
    for obj in initial:
        _send_event(answer, "ADDED", info, version, obj)
    if send_initial and bookmarks:
        # The watch-list protocol (KEP-3157): a bookmark marks the end of the initial state.
        _send_event(answer, "BOOKMARK", info, version, {"metadata": {
            "resourceVersion": str(last),
            "annotations": {"k8s.io/initial-events-end": "true"}}})
    while not stopping.is_set():
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            break
        for event in store.events_after(last, min(remaining, _WATCH_POLL_SECONDS)):
            last = event.resource_version
            _forward(answer, event, route, predicate)
    answer.end_stream()


def _forward(answer: Answer, event: WatchEvent, route: Route, predicate: Any) -> None:
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
        _send_event(answer, kind, route.info, route.version, event.new)


def _send_event(answer: Answer, kind: str, info: ResourceInfo, version: str,
                obj: dict[str, Any]) -> None:
    line = json.dumps({"type": kind, "object": from_internal(info, version, obj, copy=False)},
                      separators=(",", ":"))
    answer.write_chunk(line.encode("utf-8") + b"\n")
