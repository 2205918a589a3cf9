"""HTTP layer of the embedded API server: Kubernetes REST paths → registry verbs.

Paths served (``{v}`` is a served resource.k8s.io version; others answer 404)::

    GET /version /api /api/v1 /apis
    GET /apis/resource.k8s.io  /apis/resource.k8s.io/{v}
    /api/v1/nodes[/{name}[/status]]
    /apis/resource.k8s.io/{v}/resourceslices[/{name}]
    /apis/resource.k8s.io/{v}/deviceclasses[/{name}]
    /apis/resource.k8s.io/{v}/resourceclaims                       (list/watch, all namespaces)
    /apis/resource.k8s.io/{v}/namespaces/{ns}/resourceclaims[/{name}[/status]]
    (and the legacy ``.../watch/...`` forms of the list paths)

Methods map to RBAC verbs: GET → get/list/watch (``?watch=true``), POST → create,
PUT → update, PATCH → patch, DELETE → delete/deletecollection.
"""

from __future__ import annotations

import contextlib
import functools
import json
import socket
import sys
import threading
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

import yaml

from . import apiserver_errors as errors
from . import apiserver_schema as schema
from .apiserver_convert import from_internal
from .apiserver_faults import FaultInjector
from .apiserver_log import RequestLog, RequestRecord
from .apiserver_registry import Registry, RequestOptions, current_request, set_request
from .apiserver_resources import (
    CORE_RESOURCES,
    DRA_RESOURCES,
    RESOURCE_GROUP,
    ResourceInfo,
    api_group,
    api_group_list,
    api_version_of,
    api_versions,
    core_resource_list,
    group_resource_list,
    version_info,
)
from .apiserver_selectors import parse_field_selector, parse_label_selector
from .apiserver_store import WatchEvent

DEFAULT_WATCH_TIMEOUT_SECONDS = 1800
_WATCH_POLL_SECONDS = 0.5


@dataclass
class Route:
    """A parsed request path. ``info`` is None for discovery documents."""

    info: ResourceInfo | None
    version: str
    namespace: str | None
    name: str
    subresource: str
    watch_path: bool
    document: dict[str, Any] | None = None


@dataclass
class ServerContext:
    """What every handler thread shares."""

    registry: Registry
    faults: FaultInjector
    log: RequestLog
    served_versions: tuple[str, ...]
    kubernetes_minor: int | None
    address: str
    stopping: threading.Event


def _resource_route(info: ResourceInfo, version: str, rest: list[str],
                    namespace: str | None, watch_path: bool) -> Route:
    if len(rest) > 2 or (len(rest) == 2 and (rest[1] != "status" or not info.has_status)):
        raise errors.path_not_found()
    name = rest[0] if rest else ""
    subresource = rest[1] if len(rest) == 2 else ""
    if watch_path and subresource:
        raise errors.path_not_found()
    if info.namespaced and namespace is None and name:
        raise errors.path_not_found()
    return Route(info, version, namespace, name, subresource, watch_path)


def parse_path(path: str, ctx: ServerContext) -> Route:
    """Route for ``path``; raises a 404 ApiError for anything not served."""
    parts = [p for p in path.split("/") if p]
    served = ctx.served_versions
    docs: dict[tuple[str, ...], Any] = {
        ("version",): lambda: version_info(served, ctx.kubernetes_minor),
        ("api",): lambda: api_versions(ctx.address),
        ("api", "v1"): core_resource_list,
        ("apis",): lambda: api_group_list(served),
        ("apis", RESOURCE_GROUP): lambda: api_group(served),
    }
    for v in served:
        docs[("apis", RESOURCE_GROUP, v)] = lambda v=v: group_resource_list(v)
    schema_version = schema.schema_version_for(served, ctx.kubernetes_minor)
    if schema.definitions(schema_version) is not None:
        groups = _openapi_groups(served, schema_version)
        docs[("openapi", "v2")] = lambda: _openapi_v2(served, schema_version)
        docs[("openapi", "v3")] = lambda: schema.openapi_v3_root(groups)
        for gv_path in groups:
            docs[("openapi", "v3", *gv_path.split("/"))] = lambda p=gv_path: groups[p]
    if tuple(parts) in docs:
        return Route(None, "", None, "", "", False, docs[tuple(parts)]())
    if len(parts) >= 3 and parts[:2] == ["api", "v1"]:
        version, rest, table = "v1", parts[2:], CORE_RESOURCES
    elif len(parts) >= 4 and parts[:2] == ["apis", RESOURCE_GROUP] and parts[2] in served:
        version, rest, table = parts[2], parts[3:], DRA_RESOURCES
    else:
        raise errors.path_not_found()
    watch_path = rest[0] == "watch"
    if watch_path:
        rest = rest[1:]
    namespace: str | None = None
    if len(rest) >= 3 and rest[0] == "namespaces":
        namespace, rest = rest[1], rest[2:]
    if not rest or rest[0] not in table:
        raise errors.path_not_found()
    info = table[rest[0]]
    if namespace is not None and not info.namespaced:
        raise errors.path_not_found()
    return _resource_route(info, version, rest[1:], namespace, watch_path)


def openapi_resources(served: tuple[str, ...]) -> list[schema.OpenAPIResource]:
    """Every resource of every served version, for the OpenAPI documents."""
    out = [schema.OpenAPIResource("", "v1", i.kind, i.plural, i.namespaced)
           for i in CORE_RESOURCES.values()]
    out += [schema.OpenAPIResource(RESOURCE_GROUP, v, i.kind, i.plural, i.namespaced)
            for v in served for i in DRA_RESOURCES.values()]
    return out


@functools.cache
def _openapi_v2(served: tuple[str, ...], schema_version: str | None) -> dict[str, Any] | None:
    return schema.openapi_v2_document(openapi_resources(served), schema_version)


@functools.cache
def _openapi_groups(served: tuple[str, ...], schema_version: str | None) -> dict[str, Any]:
    """``/openapi/v3`` documents by group-version path (``api/v1``, ``apis/<g>/<v>``)."""
    resources = openapi_resources(served)
    out: dict[str, Any] = {}
    for group, version in dict.fromkeys((r.group, r.version) for r in resources):
        doc = schema.openapi_v3_document(
            group, version, [r for r in resources if (r.group, r.version) == (group, version)],
            schema_version)
        if doc is not None:
            out[schema.gv_path(group, version)] = doc
    return out


def _flag(query: dict[str, list[str]], key: str) -> bool:
    return (query.get(key) or [""])[0].lower() in ("true", "1")


def _param(query: dict[str, list[str]], key: str) -> str:
    return (query.get(key) or [""])[0]


def rbac_verb(method: str, route: Route, query: dict[str, list[str]]) -> str:
    collection = route.info is not None and not route.name
    if method == "GET":
        if route.info is None:
            return "get"
        if route.watch_path or (collection and _flag(query, "watch")):
            return "watch"
        return "list" if collection else "get"
    if method == "POST":
        return "create"
    if method == "PUT":
        return "update"
    if method == "PATCH":
        return "patch"
    if method == "DELETE":
        return "deletecollection" if collection else "delete"
    return method.lower()


class EmbeddedHTTPServer(ThreadingHTTPServer):
    """ThreadingHTTPServer that knows its open connections so stop() can end them."""

    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, address: tuple[str, int], ctx: ServerContext) -> None:
        self.ctx = ctx
        self.connections: set[socket.socket] = set()
        self.connections_lock = threading.Lock()
        if ":" in address[0]:
            self.address_family = socket.AF_INET6
        super().__init__(address, APIRequestHandler)

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that went away (killed agent, closed pool) is normal for a test
        server: no traceback for it; anything else is printed as usual."""
        exc = sys.exc_info()[1]
        if isinstance(exc, ConnectionError | TimeoutError):
            return
        super().handle_error(request, client_address)

    def close_connections(self) -> None:
        with self.connections_lock:
            conns = list(self.connections)
        for conn in conns:
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)


class _Dropped(Exception):
    """A fault plan asked to close the connection without an answer."""


class APIRequestHandler(BaseHTTPRequestHandler):
    """One HTTP/1.1 connection (keep-alive)."""

    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # headers and body go out in two writes
    server: EmbeddedHTTPServer
    server_version = "drakit-embedded-apiserver"
    _record: dict[str, Any] | None = None

    def setup(self) -> None:
        super().setup()
        with self.server.connections_lock:
            self.server.connections.add(self.connection)

    def finish(self) -> None:
        try:
            super().finish()
        finally:
            with self.server.connections_lock:
                self.server.connections.discard(self.connection)

    def log_message(self, format: str, *args: Any) -> None:
        """Silenced; the request log records every request."""

    def do_GET(self) -> None:
        self._handle("GET")

    def do_POST(self) -> None:
        self._handle("POST")

    def do_PUT(self) -> None:
        self._handle("PUT")

    def do_PATCH(self) -> None:
        self._handle("PATCH")

    def do_DELETE(self) -> None:
        self._handle("DELETE")

    # ------------------------------------------------------------------ plumbing

    def _read_body(self) -> bytes:
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length > 0 else b""

    def _log_once(self, code: int) -> None:
        """Record the request (once), before its answer leaves, so a client that got the
        answer always finds the record."""
        record = self._record
        if record is not None:
            self._record = None
            self.server.ctx.log.add(RequestRecord(**{**record, "status_code": code}))

    def _send_json(self, code: int, payload: Any, headers: dict[str, str] | None = None) -> None:
        data = json.dumps(payload, separators=(",", ":")).encode("utf-8")
        self._log_once(code)
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.send_header("Cache-Control", "no-cache, private")
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        for text in current_request().warnings:
            self.send_header("Warning", "299 - " + json.dumps(text))
        self.end_headers()
        self.wfile.write(data)

    def _handle(self, method: str) -> None:
        ctx = self.server.ctx
        url = urlsplit(self.path)
        query = parse_qs(url.query, keep_blank_values=True)
        body = self._read_body()
        record: dict[str, Any] = {
            "verb": method.lower(), "resource": "", "subresource": "", "namespace": "",
            "name": "", "api_group": "", "api_version": "",
            "user_agent": self.headers.get("User-Agent", ""), "status_code": 0,
            "method": method, "path": url.path, "query": url.query,
            "field_manager": _param(query, "fieldManager"),
            "content_type": (self.headers.get("Content-Type") or "").split(";")[0].strip(),
            "received_at": time.monotonic(),
        }
        self._record = record
        set_request(RequestOptions(strict=_param(query, "fieldValidation") == "Strict"))
        code = 500
        try:
            try:
                route = parse_path(url.path, ctx)
                verb = rbac_verb(method, route, query)
                record["verb"] = verb
                if route.info is not None:
                    record.update(
                        resource=route.info.plural, subresource=route.subresource,
                        namespace=route.namespace or "", name=route.name,
                        api_group=route.info.group, api_version=route.version,
                    )
                    full = route.info.plural + (f"/{route.subresource}" if route.subresource
                                                else "")
                    decision = ctx.faults.decide(verb, full, route.info.group, route.name)
                    if decision.latency_seconds:
                        time.sleep(decision.latency_seconds)
                    if decision.drop:
                        record["fault"] = True
                        raise _Dropped()
                    if decision.error is not None:
                        record["fault"] = True
                        raise decision.error
                code = self._dispatch(method, verb, route, query, body, record)
            except errors.ApiError as exc:
                code = exc.code
                self._send_json(exc.code, exc.to_status(), exc.headers)
        except _Dropped:
            code = 0
            self._log_once(0)
            self.close_connection = True
            with contextlib.suppress(OSError):
                self.connection.shutdown(socket.SHUT_RDWR)
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True
        except Exception as exc:  # a bug in the test double: answer 500, keep serving
            err = errors.internal_error(f"{type(exc).__name__}: {exc}")
            code = 500
            try:
                self._send_json(500, err.to_status())
            except OSError:
                self.close_connection = True
        finally:
            self._log_once(code)
            set_request(None)

    # ------------------------------------------------------------------ verbs

    def _dispatch(self, method: str, verb: str, route: Route, query: dict[str, list[str]],
                  body: bytes, record: dict[str, Any]) -> int:
        ctx = self.server.ctx
        if route.info is None:
            if method != "GET":
                raise errors.method_not_allowed()
            self._send_json(200, route.document)
            return 200
        info, version, ns = route.info, route.version, route.namespace or ""
        registry = ctx.registry
        dry_run = "All" in query.get("dryRun", [])
        if verb in ("list", "watch", "deletecollection"):
            if route.subresource:
                raise errors.method_not_allowed()
            fields = parse_field_selector(_param(query, "fieldSelector"), info.field_labels)
            labels = parse_label_selector(_param(query, "labelSelector"))

            def predicate(obj: Any) -> bool:
                return fields(obj) and labels(obj)

            if verb == "watch":
                self._watch(route, query, predicate)
                return 200
            if verb == "list":
                return self._list(route, query, predicate)
            removed = registry.delete_collection(info, route.namespace, predicate,
                                                 dry_run=dry_run)
            self._send_json(200, self._list_body(info, version, removed,
                                                 registry.store.resource_version))
            return 200
        if verb in ("update", "patch") and not route.name:
            raise errors.method_not_allowed()
        if verb == "create":
            if route.name:
                raise errors.method_not_allowed()
            if info.namespaced and route.namespace is None:
                raise errors.method_not_allowed()
            new_obj = registry.create(info, ns, version, _body(record, body), dry_run=dry_run)
            self._send_json(201, from_internal(info, version, new_obj, copy=False))
            return 201
        if verb == "get":
            current = registry.get(info, ns, route.name)
            self._send_json(200, from_internal(info, version, current, copy=False))
            return 200
        if verb == "update":
            updated = registry.update(info, ns, route.name, version, _body(record, body),
                                      subresource=route.subresource, dry_run=dry_run)
            self._send_json(200, from_internal(info, version, updated, copy=False))
            return 200
        if verb == "patch":
            patched, created = registry.patch(
                info, ns, route.name, version, record["content_type"], body,
                subresource=route.subresource, field_manager=record["field_manager"],
                force=_flag(query, "force"), dry_run=dry_run,
            )
            code = 201 if created else 200
            self._send_json(code, from_internal(info, version, patched, copy=False))
            return code
        if verb == "delete":
            if route.subresource:
                raise errors.method_not_allowed()
            options = _json_body(body) if body.strip() else None
            deleted = registry.delete(info, ns, route.name, options, dry_run=dry_run)
            if info.returns_deleted_object:
                self._send_json(200, from_internal(info, version, deleted, copy=False))
            else:
                self._send_json(200, {
                    "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success",
                    "details": {"name": route.name, "kind": info.plural,
                                "uid": deleted["metadata"].get("uid", "")},
                })
            return 200
        raise errors.method_not_allowed()

    @staticmethod
    def _list_body(info: ResourceInfo, version: str, items: list[dict[str, Any]],
                   rv: int, continue_token: str = "") -> dict[str, Any]:
        meta: dict[str, Any] = {"resourceVersion": str(rv)}
        if continue_token:
            meta["continue"] = continue_token
        return {
            "kind": f"{info.kind}List",
            "apiVersion": api_version_of(info, version),
            "metadata": meta,
            "items": [from_internal(info, version, i, with_type=False, copy=False)
                      for i in items],
        }

    def _list(self, route: Route, query: dict[str, list[str]], predicate: Any) -> int:
        assert route.info is not None
        info = route.info
        # The stored objects are only encoded: no copies.
        items, rv = self.server.ctx.registry.store.select(info.plural, route.namespace, predicate,
                                                          copy=False)
        token = _param(query, "continue")
        if token:
            start = token.split("/", 1)[1] if "/" in token else token
            items = [i for i in items if _sort_key(i) > start]
        limit_text = _param(query, "limit")
        next_token = ""
        if limit_text.isdigit() and 0 < int(limit_text) < len(items):
            items = items[: int(limit_text)]
            next_token = f"{rv}/{_sort_key(items[-1])}"
        self._send_json(200, self._list_body(info, route.version, items, rv, next_token))
        return 200

    # ------------------------------------------------------------------ watch

    def _write_chunk(self, data: bytes) -> None:
        self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
        self.wfile.flush()

    def _watch(self, route: Route, query: dict[str, list[str]], predicate: Any) -> None:
        assert route.info is not None
        info, version = route.info, route.version
        store = self.server.ctx.registry.store
        start = _param(query, "resourceVersion")
        timeout_text = _param(query, "timeoutSeconds")
        timeout = float(timeout_text) if timeout_text.isdigit() else DEFAULT_WATCH_TIMEOUT_SECONDS
        deadline = time.monotonic() + timeout
        initial: list[dict[str, Any]] = []
        send_initial = _flag(query, "sendInitialEvents")
        bookmarks = _flag(query, "allowWatchBookmarks")
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


def _sort_key(obj: dict[str, Any]) -> str:
    meta = obj.get("metadata", {})
    return f"{meta.get('namespace', '')}/{meta.get('name', '')}"


def _json_body(body: bytes) -> Any:
    if not body.strip():
        raise errors.bad_request("the request body is empty")
    try:
        return json.loads(body)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise errors.bad_request(f"error decoding JSON body: {exc}") from None


def _body(record: dict[str, Any], body: bytes) -> Any:
    """A POST or PUT body: JSON, or YAML when sent as ``application/yaml``; any other
    content type (``application/vnd.kubernetes.protobuf``, client-go's default for built-in
    types) is a 415 that names the JSON and YAML types."""
    content_type = record["content_type"]
    if content_type in ("", "application/json"):
        return _json_body(body)
    if content_type == "application/yaml":
        try:
            return yaml.safe_load(body)
        except yaml.YAMLError as exc:
            raise errors.bad_request(f"error decoding YAML body: {exc}") from None
    raise errors.unsupported_media_type(errors.BODY_MEDIA_TYPES)


__all__ = ["EmbeddedHTTPServer", "ServerContext", "parse_path"]
