"""A fault-injecting HTTP proxy for API-server tests: put it between a client and any API
server (the embedded one, a real kube-apiserver over TLS) and make chosen requests fail the
way an overloaded or broken server does.

Faults (:class:`Fault`) match requests by method and a regular expression on the path, and
can, alone or together:

- ``delay`` the answer by some seconds (a slow server; the request is forwarded afterwards);
- answer ``status`` (e.g. 429 or 503) with an optional ``Retry-After`` without forwarding,
  with a ``metav1.Status`` body as kube-apiserver sends (API Priority and Fairness answers
  429 + Retry-After under load);
- ``truncate`` the upstream answer: its full Content-Length is announced, only the first N
  bytes are sent, then the connection is closed;
- answer an ``oversize`` body of that many bytes (Content-Length announced, or chunked with
  ``chunked=True``), streamed so the proxy itself never holds it.

``times`` limits how often a fault fires (then requests pass again). Everything else is
forwarded unchanged (method, path, query, headers, body; streaming answers such as watches
are relayed as they come). The proxy listens on 127.0.0.1 with a free port; ``url`` is
plain http. Vendors use it the same way::

    with EmbeddedAPIServer() as api, FaultProxy(api.url) as proxy:
        proxy.add(Fault(method="GET", path=r"/resourceclaims/", status=429, retry_after=100000))
        client = proxy.api_client(api.token)   # a kubernetes ApiClient through the proxy
"""

from __future__ import annotations

import http.client
import json
import re
import ssl
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any
from urllib.parse import urlsplit

_HOP_HEADERS = frozenset({"connection", "keep-alive", "proxy-connection", "transfer-encoding",
                          "te", "trailer", "upgrade", "host", "content-length"})
_CHUNK = 64 * 1024


@dataclass
class Fault:
    """One fault. ``method`` (None: any) and ``path`` (a regular expression searched in the
    request path without the query; None: any) select requests. ``delay`` seconds are
    waited first; then ``status`` is answered (with ``Retry-After: retry_after`` when
    given; ``body``: its JSON body instead of a generated ``Status``), or ``oversize``
    bytes are answered with 200, or the request is forwarded and its answer cut after
    ``truncate`` body bytes. ``times``: how many requests it hits
    (None: all). ``hits`` counts them."""

    method: str | None = None
    path: str | None = None
    delay: float = 0.0
    status: int | None = None
    retry_after: int | None = None
    body: bytes | None = None
    truncate: int | None = None
    oversize: int | None = None
    chunked: bool = False
    times: int | None = None
    hits: int = field(default=0, compare=False)

    def matches(self, method: str, path: str) -> bool:
        if self.times is not None and self.hits >= self.times:
            return False
        if self.method is not None and self.method.upper() != method:
            return False
        return self.path is None or re.search(self.path, path) is not None


def _status_body(code: int, retry_after: int | None) -> bytes:
    reason = {429: "TooManyRequests", 500: "InternalError", 503: "ServiceUnavailable",
              504: "Timeout"}.get(code, "Unknown")
    body: dict[str, Any] = {"kind": "Status", "apiVersion": "v1", "metadata": {},
                            "status": "Failure", "code": code, "reason": reason,
                            "message": f"injected by FaultProxy: HTTP {code}"}
    if retry_after is not None:
        body["details"] = {"retryAfterSeconds": retry_after}
    return json.dumps(body).encode()


class FaultProxy:
    """The proxy. ``upstream``: the server's base URL (http or https); ``ca_file``: the CA
    to verify an https upstream with (None: not verified, loopback test servers only)."""

    def __init__(self, upstream: str, ca_file: str | None = None) -> None:
        parts = urlsplit(upstream)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"upstream {upstream!r}: expected http(s)://host:port")
        self.upstream = upstream
        self._scheme = parts.scheme
        self._host = parts.hostname
        self._port = parts.port or (443 if parts.scheme == "https" else 80)
        self._ssl: ssl.SSLContext | None = None
        if parts.scheme == "https":
            self._ssl = ssl.create_default_context(cafile=ca_file)
            if ca_file is None:
                self._ssl.check_hostname = False
                self._ssl.verify_mode = ssl.CERT_NONE
        self._lock = threading.Lock()
        self._faults: list[Fault] = []
        self.requests: list[tuple[str, str]] = []
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # -- faults --------------------------------------------------------------------------

    def add(self, fault: Fault) -> Fault:
        """Add a fault (the first matching fault of a request applies); returns it."""
        with self._lock:
            self._faults.append(fault)
        return fault

    def clear(self) -> None:
        """Remove every fault: requests pass unchanged from now on."""
        with self._lock:
            self._faults = []

    def _take(self, method: str, path: str) -> Fault | None:
        with self._lock:
            self.requests.append((method, path))
            for f in self._faults:
                if f.matches(method, path):
                    f.hits += 1
                    return f
        return None

    # -- lifecycle -----------------------------------------------------------------------

    @property
    def url(self) -> str:
        if self._server is None:
            raise RuntimeError("FaultProxy is not started")
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def start(self) -> FaultProxy:
        proxy = self

        class Handler(_Handler):
            owner = proxy

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever,
                                        kwargs={"poll_interval": 0.05},
                                        name="fault-proxy", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._server is None:
            return
        self._server.shutdown()
        self._server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=10)
        self._server = None

    def __enter__(self) -> FaultProxy:
        return self.start()

    def __exit__(self, t: type[BaseException] | None, e: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()

    def api_client(self, token: str | None = None) -> Any:
        """A ``kubernetes.client.ApiClient`` that talks to the upstream through this proxy
        (bearer ``token`` when given; its own Configuration)."""
        from kubernetes import client

        configuration = client.Configuration(host=self.url)
        if token:
            configuration.api_key = {"BearerToken": token}
            configuration.api_key_prefix = {"BearerToken": "Bearer"}
        return client.ApiClient(configuration)

    def _connect(self, timeout: float) -> http.client.HTTPConnection:
        if self._ssl is not None:
            return http.client.HTTPSConnection(self._host, self._port, timeout=timeout,
                                               context=self._ssl)
        return http.client.HTTPConnection(self._host, self._port, timeout=timeout)


class _Handler(BaseHTTPRequestHandler):
    owner: FaultProxy
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def _any(self) -> None:
        method = self.command
        path = self.path.split("?", 1)[0]
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        fault = self.owner._take(method, path)
        try:
            if fault is not None and fault.delay:
                time.sleep(fault.delay)
            if fault is not None and fault.status is not None:
                self._answer_status(fault.status, fault.retry_after, fault.body)
            elif fault is not None and fault.oversize is not None:
                self._answer_oversize(fault.oversize, fault.chunked)
            else:
                self._forward(method, body, fault.truncate if fault else None)
        except (TimeoutError, BrokenPipeError, ConnectionResetError):
            self.close_connection = True

    do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = do_HEAD = _any

    def _answer_status(self, code: int, retry_after: int | None, body: bytes | None) -> None:
        data = body if body is not None else _status_body(code, retry_after)
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        if retry_after is not None:
            self.send_header("Retry-After", str(retry_after))
        self.end_headers()
        self.wfile.write(data)

    def _answer_oversize(self, size: int, chunked: bool) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        if chunked:
            self.send_header("Transfer-Encoding", "chunked")
        else:
            self.send_header("Content-Length", str(size))
        self.send_header("Connection", "close")
        self.end_headers()
        self.close_connection = True
        head = b'{"kind":"ResourceClaim","pad":"'
        pad = b"x" * _CHUNK
        sent = 0
        while sent < size:
            piece = (head if sent == 0 else pad)[: size - sent]
            if chunked:
                self.wfile.write(f"{len(piece):x}\r\n".encode() + piece + b"\r\n")
            else:
                self.wfile.write(piece)
            sent += len(piece)
        if chunked:
            self.wfile.write(b"0\r\n\r\n")

    def _forward(self, method: str, body: bytes, truncate: int | None) -> None:
        conn = self.owner._connect(timeout=600)
        try:
            headers = {k: v for k, v in self.headers.items() if k.lower() not in _HOP_HEADERS}
            headers["Host"] = f"{self.owner._host}:{self.owner._port}"
            try:
                conn.request(method, self.path, body=body or None, headers=headers)
                resp = conn.getresponse()
            except OSError as e:  # the upstream is down: what a real proxy answers
                data = f"FaultProxy: upstream {self.owner.upstream}: {e}".encode()
                self.send_response(502)
                self.send_header("Content-Type", "text/plain")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
                return
            self.send_response(resp.status, resp.reason)
            for k, v in resp.getheaders():
                if k.lower() not in _HOP_HEADERS:
                    self.send_header(k, v)
            length = resp.getheader("Content-Length")
            if length is not None and truncate is None:
                data = resp.read()
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
                return
            if length is not None:  # truncated: the full length announced, less sent
                data = resp.read()
                self.send_header("Content-Length", str(len(data)))
                self.send_header("Connection", "close")
                self.end_headers()
                self.wfile.write(data[:truncate])
                self.close_connection = True
                return
            # streaming (a watch) or chunked: relayed as it comes, then the connection closes
            self.send_header("Connection", "close")
            self.end_headers()
            self.close_connection = True
            sent = 0
            while True:
                try:
                    chunk = resp.read1(_CHUNK)
                except (http.client.HTTPException, ValueError, OSError):
                    return  # the upstream cut the stream (a server or watch ending)
                if not chunk:
                    return
                if truncate is not None:
                    chunk = chunk[: max(0, truncate - sent)]
                self.wfile.write(chunk)
                self.wfile.flush()
                sent += len(chunk)
                if truncate is not None and sent >= truncate:
                    return
        finally:
            conn.close()
