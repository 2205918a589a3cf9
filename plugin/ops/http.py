"""The operator's HTTP endpoint: ``/metrics`` (Prometheus), ``/healthz`` (the process serves)
and ``/readyz`` (registered with the kubelet, slices published, checkpoint readable).

``/readyz`` means "serving the kubelet": it does not follow the API server, since the agent
keeps answering the kubelet through an outage (unprepare needs no API call). An unreachable
API server shows in ``drakit_api_unreachable_seconds`` (:mod:`drakit.plugin.ops.metrics`).

``/metrics`` is prometheus-client's own WSGI application (:func:`make_wsgi_app`): it picks
the OpenMetrics format when the scraper's ``Accept`` asks for it
(``application/openmetrics-text``), the text format 0.0.4 otherwise, gzip when accepted,
and ``?name[]=`` filters. ``HEAD`` is answered like ``GET`` without a body (that
application itself only knows GET and OPTIONS). The endpoint has no authentication: bind it
to the pod IP (the DaemonSet passes ``$(POD_IP):8080``), not to every address of a node.
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable, Iterable
from typing import Any, Protocol
from wsgiref.simple_server import WSGIRequestHandler, make_server

from prometheus_client import make_wsgi_app
from prometheus_client.exposition import ThreadingWSGIServer


class _Readiness(Protocol):
    metrics: Any

    def readiness(self) -> tuple[bool, list[str]]: ...


def parse_endpoint(endpoint: str) -> tuple[str, int]:
    """``host:port``, ``:port`` (all IPv4 addresses), ``[v6addr]:port`` or ``v6addr:port``
    (the last colon separates the port) → (host, port). Raises ValueError naming the flag for
    anything else (port 0 picks a free one)."""
    host, sep, port = endpoint.rpartition(":")
    if not sep or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ValueError(
            f"--http-endpoint {endpoint!r}: expected HOST:PORT, :PORT or [IPv6]:PORT "
            "with a port from 0 to 65535"
        )
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    return host or "0.0.0.0", int(port)


class _IPv6Server(ThreadingWSGIServer):
    address_family = socket.AF_INET6


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        return


StartResponse = Callable[..., Any]


def endpoint_app(app: _Readiness) -> Callable[[dict[str, Any], StartResponse], Iterable[bytes]]:
    """The WSGI application behind the endpoint (routes above; 404 elsewhere, 405 for a
    method other than GET and HEAD)."""
    metrics_app = make_wsgi_app(app.metrics.registry)

    def plain(start: StartResponse, status: str, body: bytes,
              extra: list[tuple[str, str]] | None = None) -> list[bytes]:
        start(status, [("Content-Type", "text/plain; charset=utf-8"),
                       ("Content-Length", str(len(body))), *(extra or [])])
        return [body]

    def serve(environ: dict[str, Any], start: StartResponse) -> Iterable[bytes]:
        path, method = environ.get("PATH_INFO", "/"), environ["REQUEST_METHOD"]
        if path not in ("/metrics", "/healthz", "/readyz"):
            return plain(start, "404 Not Found", b"not found\n")
        if path == "/metrics" and method == "OPTIONS":
            return list(metrics_app(environ, start))
        if method not in ("GET", "HEAD"):
            return plain(start, "405 Method Not Allowed", b"use GET or HEAD\n",
                         [("Allow", "GET, HEAD")])
        if path == "/metrics":
            answer: list[Any] = []
            body = b"".join(metrics_app({**environ, "REQUEST_METHOD": "GET"},
                                        lambda status, headers, *_: answer.extend(
                                            (status, headers))))
            status, headers = answer
            if not any(k.lower() == "content-length" for k, _ in headers):
                headers = [*headers, ("Content-Length", str(len(body)))]
            start(status, headers)
        elif path == "/healthz":
            body = plain(start, "200 OK", b"ok\n")[0]
        else:
            ok, reasons = app.readiness()
            text = "ok\n" if ok else "\n".join(reasons) + "\n"
            body = plain(start, "200 OK" if ok else "503 Service Unavailable", text.encode())[0]
        return [b""] if method == "HEAD" else [body]

    return serve


class HTTPEndpoint:
    """Serves on ``host:port`` (``:8080`` means all IPv4 addresses); ``port`` 0 picks one.
    Binding happens in the constructor, so a bad or busy endpoint fails start-up; OSError
    names ``--http-endpoint``."""

    def __init__(self, endpoint: str, app: _Readiness) -> None:
        host, port = parse_endpoint(endpoint)
        self.app = app
        server_cls = _IPv6Server if ":" in host else ThreadingWSGIServer
        try:
            self.server = make_server(host, port, endpoint_app(app), server_class=server_cls,
                                      handler_class=_QuietHandler)
        except OSError as e:
            msg = f"--http-endpoint {endpoint}: cannot listen: {e.strerror}"
            raise OSError(e.errno, msg) from None
        self.port = self.server.server_address[1]
        self._thread = threading.Thread(target=self.server.serve_forever, name="http", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        """Stop serving and release the port (also when never started)."""
        if self._thread.is_alive():
            self.server.shutdown()
        self.server.server_close()
