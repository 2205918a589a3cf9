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
import socket
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

from drakit.plugin.testing.apiserver import errors as errors
from drakit.plugin.testing.apiserver.http.answer import Answer
from drakit.plugin.testing.apiserver.http.routes import (
    ServerContext,
    parse_path,
    query_param,
    rbac_verb,
)
from drakit.plugin.testing.apiserver.http.verbs import dispatch
from drakit.plugin.testing.apiserver.request import RequestOptions, set_request

__all__ = ["APIRequestHandler", "EmbeddedHTTPServer"]


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
    """One HTTP/1.1 connection (keep-alive).

    It reads a request, routes it (:mod:`.routes`), records it, applies the fault plan,
    hands it to its verb (:func:`.verbs.dispatch`) with an :class:`~.answer.Answer` and
    answers errors.
    """

    server: EmbeddedHTTPServer

    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # headers and body go out in two writes
    server_version = "drakit-embedded-apiserver"

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

    def _handle(self, method: str) -> None:
        ctx = self.server.ctx
        url = urlsplit(self.path)
        query = parse_qs(url.query, keep_blank_values=True)
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length > 0 else b""
        record: dict[str, Any] = {
            "verb": method.lower(), "resource": "", "subresource": "", "namespace": "",
            "name": "", "api_group": "", "api_version": "",
            "user_agent": self.headers.get("User-Agent", ""), "status_code": 0,
            "method": method, "path": url.path, "query": url.query,
            "field_manager": query_param(query, "fieldManager"),
            "content_type": (self.headers.get("Content-Type") or "").split(";")[0].strip(),
            "received_at": time.monotonic(),
        }
        answer = Answer(self, ctx.log, record)
        set_request(RequestOptions(strict=query_param(query, "fieldValidation") == "Strict"))
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
                code = dispatch(answer, ctx, method, verb, route, query, body, record)
            except errors.ApiError as exc:
                code = exc.code
                answer.send_json(exc.code, exc.to_status(), exc.headers)
        except _Dropped:
            code = 0
            answer.log_once(0)
            self.close_connection = True
            with contextlib.suppress(OSError):
                self.connection.shutdown(socket.SHUT_RDWR)
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True
        except Exception as exc:  # a bug in the test double: answer 500, keep serving
            err = errors.internal_error(f"{type(exc).__name__}: {exc}")
            code = 500
            try:
                answer.send_json(500, err.to_status())
            except OSError:
                self.close_connection = True
        finally:
            answer.log_once(code)
            set_request(None)
