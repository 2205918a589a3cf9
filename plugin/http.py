"""The operator's HTTP endpoint: ``/metrics`` (Prometheus), ``/healthz`` (the process serves)
and ``/readyz`` (registered with the kubelet, slices published, checkpoint readable)."""

from __future__ import annotations

import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Protocol


class _Readiness(Protocol):
    metrics: Any

    def readiness(self) -> tuple[bool, list[str]]: ...


def parse_endpoint(endpoint: str) -> tuple[str, int]:
    """``host:port``, ``:port`` (all IPv4 addresses) or ``[v6addr]:port`` → (host, port).
    Raises ValueError naming the flag for anything else (port 0 picks a free one)."""
    host, sep, port = endpoint.rpartition(":")
    if not sep or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ValueError(
            f"--http-endpoint {endpoint!r}: expected HOST:PORT, :PORT or [IPv6]:PORT "
            "with a port from 0 to 65535"
        )
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    return host or "0.0.0.0", int(port)


class _IPv6Server(ThreadingHTTPServer):
    address_family = socket.AF_INET6


class HTTPEndpoint:
    """Serves on ``host:port`` (``:8080`` means all addresses); ``port`` 0 picks one."""

    def __init__(self, endpoint: str, app: _Readiness) -> None:
        host, port = parse_endpoint(endpoint)
        self.app = app
        handler = self._handler()
        server_cls = _IPv6Server if ":" in host else ThreadingHTTPServer
        try:
            self.server = server_cls((host, port), handler)
        except OSError as e:
            msg = f"--http-endpoint {endpoint}: cannot listen: {e.strerror}"
            raise OSError(e.errno, msg) from None
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        self._thread = threading.Thread(target=self.server.serve_forever, name="http", daemon=True)

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        app = self.app

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                return

            def do_GET(self) -> None:
                path = self.path.split("?", 1)[0]
                if path == "/metrics":
                    body, code, ctype = app.metrics.render(), 200, "text/plain; version=0.0.4"
                elif path == "/healthz":
                    body, code, ctype = b"ok\n", 200, "text/plain"
                elif path == "/readyz":
                    ok, reasons = app.readiness()
                    body = ("ok\n" if ok else "\n".join(reasons) + "\n").encode()
                    code, ctype = (200 if ok else 503), "text/plain"
                else:
                    body, code, ctype = b"not found\n", 404, "text/plain"
                self.send_response(code)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        return Handler

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        """Stop serving and release the port (also when never started)."""
        if self._thread.is_alive():
            self.server.shutdown()
        self.server.server_close()
