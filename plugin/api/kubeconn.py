"""Keep-alive HTTP/1.1 connections to one API server on the standard library's http.client.

:class:`Connections` sends a request whose answer is read whole (every request but a
watch) and keeps the connection for the next one. It is what
:class:`drakit.plugin.api.kubehttp.Transport` uses for a direct connection (no proxy); urllib3's
connection pool, under the kubernetes client, carries the watch and every request through
a proxy.

Why not urllib3 for these too: its per-request layer (URL re-encoding, ``Retry`` objects,
the dropped-connection check, its response wrapper) costs about as much client CPU as the
request itself. A ResourceClaim GET against ``EmbeddedAPIServer``, median client CPU of
600 calls: 228 to 304 µs through the urllib3 pool, 114 to 150 µs here; an agent
sends three such requests per prepare + unprepare pair (the claim GET and two status
applies).

TLS follows the kubernetes client's configuration as its ``RESTClientObject`` hands it to
urllib3 (:func:`tls_context`): ``verify_ssl``, ``ssl_ca_cert`` / ``ca_cert_data`` (else the
system's CAs), ``cert_file`` / ``key_file``, ``tls_server_name`` (SNI and the name the
certificate must carry), ``assert_hostname=False``. :func:`direct_supported` says when a
configuration needs urllib3 instead (a proxy, socket options, an ``assert_hostname``
name).

Errors are raised as urllib3 raises them, so :mod:`drakit.plugin.api.retry` sorts and words
them the same whichever path a request took: ``NewConnectionError`` (cannot connect),
``ConnectTimeoutError``, ``SSLError`` (the TLS handshake failed), ``ReadTimeoutError`` and
``ProtocolError`` (the connection broke).
Nothing is retried here.
"""

from __future__ import annotations

import contextlib
import http.client
import select
import socket
import ssl
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Final

import urllib3
from kubernetes.client.rest import should_bypass_proxies
from urllib3.exceptions import (
    ConnectTimeoutError,
    NewConnectionError,
    ProtocolError,
    ReadTimeoutError,
    SSLError,
)

#: Idle connections kept when the configuration does not say (``connection_pool_maxsize``).
DEFAULT_MAX_IDLE: Final = 10


@dataclass(frozen=True)
class Reply:
    """An answer: HTTP ``status``, ``reason``, ``headers`` (case-insensitive ``get``),
    ``data`` (its first bytes, see :func:`read_reply`) and ``declared``, its
    Content-Length (None: not given)."""

    status: int
    reason: str
    headers: Any
    data: bytes
    declared: int | None

    @property
    def ok(self) -> bool:
        """A 2xx answer."""
        return 200 <= self.status <= 299


def read_reply(resp: Any, limit: int, error_limit: int) -> tuple[Reply, bool]:
    """Read the answer ``resp`` (an ``http.client`` or urllib3 response) for a
    :class:`Reply`: at most ``limit + 1`` bytes of a 2xx answer (nothing when its
    Content-Length is already over ``limit``), at most ``error_limit`` bytes of any other.
    Also returns whether it was read whole (else its connection cannot carry another
    request). An answer shorter than its Content-Length raises ``http.client.IncompleteRead``
    (urllib3's own responses raise ``ProtocolError`` first)."""
    status, reason, headers = resp.status, resp.reason or "", resp.headers
    if status in (204, 304) or 100 <= status < 200:  # no body, whatever the headers say
        return Reply(status, reason, headers, resp.read(), None), True
    declared = headers.get("Content-Length")
    size = int(declared) if declared is not None and declared.isdigit() else None
    ok = 200 <= status <= 299
    if ok and size is not None and size > limit:
        return Reply(status, reason, headers, b"", size), False  # refused unread
    cap = limit if ok else error_limit
    want = (limit + 1 if ok else error_limit) if size is None else min(size, cap)
    data = _read_at_most(resp, want)
    if size is not None and len(data) < want:
        # the connection ended early (http.client returns what came)
        raise http.client.IncompleteRead(data, size - len(data))
    whole = size == len(data) if size is not None else resp.isclosed()
    return Reply(status, reason, headers, data, size), whole


#: Bytes asked for at a time from an answer without a Content-Length (a read of n bytes
#: allocates n up front).
READ_PIECE: Final = 1 << 20


def _read_at_most(resp: Any, n: int) -> bytes:
    """Up to ``n`` bytes of the answer, fewer when it ends first."""
    if n <= READ_PIECE:
        return bytes(resp.read(n))
    pieces: list[bytes] = []
    left = n
    while left > 0:
        piece = resp.read(min(left, READ_PIECE))
        if not piece:
            break
        pieces.append(piece)
        left -= len(piece)
    return b"".join(pieces)


def direct_supported(configuration: Any) -> bool:
    """True when :class:`Connections` can do what urllib3 would for ``configuration`` (a
    ``kubernetes.client.Configuration``): no proxy in use, no socket options (nor
    ``keep_alive``), ``assert_hostname`` None or a boolean."""
    proxy = configuration.proxy
    if proxy and not should_bypass_proxies(configuration.host, configuration.no_proxy or ""):
        return False
    if configuration.socket_options is not None or getattr(configuration, "keep_alive", False):
        return False
    return configuration.assert_hostname in (None, True, False)


def tls_context(configuration: Any) -> ssl.SSLContext:
    """The client TLS context of ``configuration``: TLS 1.2 or newer; with ``verify_ssl``
    the server's chain is checked against ``ssl_ca_cert`` / ``ca_cert_data`` (the system's
    CAs when neither is set) and its name, from the certificate's subjectAltName only,
    unless ``assert_hostname`` is False; without it nothing is checked. ``cert_file`` /
    ``key_file`` are the client certificate. Raises ``ValueError`` naming the setting (and
    file) that cannot be read or is not valid."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.hostname_checks_common_name = False  # names come from subjectAltName (as urllib3)
    if not configuration.verify_ssl:
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    else:
        cafile = configuration.ssl_ca_cert or None
        cadata = getattr(configuration, "ca_cert_data", None) or None
        if cafile or cadata:
            with _naming("ssl_ca_cert " + cafile if cafile else "ca_cert_data"):
                ctx.load_verify_locations(cafile=cafile, cadata=cadata)
        else:
            ctx.load_default_certs()
        if configuration.assert_hostname is False:
            ctx.check_hostname = False
    if configuration.cert_file:
        with _naming(f"cert_file {configuration.cert_file} / key_file "
                     f"{configuration.key_file}"):
            ctx.load_cert_chain(configuration.cert_file, configuration.key_file or None)
    return ctx


@contextlib.contextmanager
def _naming(what: str) -> Iterator[None]:
    try:
        yield
    except (OSError, ValueError) as e:
        raise ValueError(f"{what}: {getattr(e, 'strerror', None) or e}") from e


class _Connection(http.client.HTTPConnection):
    """One connection; with ``tls`` (a context factory) the socket is wrapped after
    connecting, naming ``server_name`` (SNI, and the name the certificate is checked
    for)."""

    def __init__(self, host: str, port: int, tls: Callable[[], ssl.SSLContext] | None,
                 server_name: str) -> None:
        super().__init__(host, port)
        self._tls = tls
        self._server_name = server_name

    def connect(self) -> None:
        tls = None
        if self._tls is not None:
            try:
                tls = self._tls()
            except (OSError, ValueError) as e:  # a missing or invalid CA or certificate file
                raise SSLError(f"TLS settings: {e}") from e
        super().connect()  # TCP, TCP_NODELAY, self.timeout
        if tls is not None:
            self.sock = tls.wrap_socket(self.sock, server_hostname=self._server_name)


class Connections:
    """Keep-alive connections to ``url`` (``http://`` or ``https://host[:port][/prefix]``).

    ``tls`` makes the TLS context of each new https connection (e.g. :func:`tls_context` of
    a configuration; as urllib3 does, the CA and certificate files are read again for every
    new connection, so files rotated in place, like a projected service-account ``ca.crt``,
    are picked up); ``server_name`` the TLS server name (default: the URL's host); at most
    ``max_idle`` idle connections are kept. Thread-safe: each request takes a connection of
    its own.
    """

    def __init__(self, url: str, tls: Callable[[], ssl.SSLContext] | None = None, *,
                 server_name: str | None = None, max_idle: int = DEFAULT_MAX_IDLE) -> None:
        parts = urllib3.util.parse_url(url)
        if parts.scheme not in ("http", "https") or not parts.host:
            raise ValueError(f"API server URL {url!r}: expected http(s)://host[:port]")
        self.https = parts.scheme == "https"
        if self.https and tls is None:
            raise ValueError(f"API server URL {url!r}: https needs a TLS context")
        self.host = parts.host.strip("[]")
        if server_name is None:  # an IPv6 zone id is not part of the name (urllib3 alike)
            server_name = self.host.split("%", 1)[0]
        self.port = parts.port or (443 if self.https else 80)
        self.prefix = (parts.path or "").rstrip("/")
        self._tls = tls if self.https else None
        self._server_name = server_name
        self.max_idle = max_idle
        self._idle: list[_Connection] = []
        self._lock = threading.Lock()
        self._closed = False

    def request(self, method: str, target: str, body: bytes | None, headers: dict[str, str],
                timeout: float | tuple[float, float], *, limit: int,
                error_limit: int) -> Reply:
        """``method`` ``target`` (path and query, after the URL's prefix) with ``body``.
        ``timeout``: (connect, read) seconds, or one number of seconds for both together,
        as urllib3's ``Timeout(total=...)``: the read timeout is what connecting left. A
        read timeout holds per socket operation, as in urllib3. The answer is read as
        :func:`read_reply` says; a connection whose answer was not read whole is closed,
        the others are kept."""
        conn = self._take()
        started = time.monotonic()
        connect, read = timeout if isinstance(timeout, tuple) else (timeout, timeout)
        try:
            if conn.sock is None:
                self._connect(conn, connect)
            if not isinstance(timeout, tuple):
                read = timeout - (time.monotonic() - started)
                if read <= 0:
                    raise TimeoutError("no time left after connecting")
            conn.sock.settimeout(read)
            conn.request(method, self.prefix + target, body=body, headers=headers)
            resp = conn.getresponse()
            reply, whole = read_reply(resp, limit, error_limit)
        except (OSError, http.client.HTTPException) as e:
            conn.close()
            if isinstance(e, TimeoutError):
                # urllib3 names its pool here; retry.describe reads its host and port
                raise ReadTimeoutError(self, target,  # type: ignore[arg-type]
                                       f"Read timed out. (read timeout={read:.3g})") from e
            raise ProtocolError("Connection aborted.", e) from e
        except BaseException:
            conn.close()
            raise
        if whole and not resp.will_close:
            self._give(conn)
        else:
            conn.close()
        return reply

    def close(self) -> None:
        """Close the idle connections; connections in use are closed when returned."""
        with self._lock:
            self._closed = True
            idle, self._idle = self._idle, []
        for conn in idle:
            conn.close()

    def _take(self) -> _Connection:
        """An idle connection the server has not closed, else a new (unconnected) one."""
        while True:
            with self._lock:
                conn = self._idle.pop() if self._idle else None
            if conn is None:
                return _Connection(self.host, self.port, self._tls, self._server_name)
            if conn.sock is not None and not _readable(conn.sock):
                return conn
            conn.close()  # closed by the server (or it sent what nobody asked for)

    def _give(self, conn: _Connection) -> None:
        with self._lock:
            if not self._closed and len(self._idle) < self.max_idle:
                self._idle.append(conn)
                return
        conn.close()

    def _connect(self, conn: _Connection, timeout: float) -> None:
        conn.timeout = timeout
        try:
            conn.connect()
        except TimeoutError as e:
            raise ConnectTimeoutError(conn, f"Connection to {self.host} timed out. (connect "
                                      f"timeout={timeout})") from e
        except ssl.SSLError as e:
            raise SSLError(e) from e
        except OSError as e:
            raise NewConnectionError(conn,  # type: ignore[arg-type]  # http.client's: host, port
                                     f"Failed to establish a new connection: {e}") from e


def _readable(sock: socket.socket) -> bool:
    """True when an idle connection has something to read: the server closed it (or sent
    bytes nobody asked for); either way it cannot carry a request."""
    if isinstance(sock, ssl.SSLSocket) and sock.pending():
        return True
    poller = select.poll()  # select() fails for descriptors of 1024 and above
    poller.register(sock, select.POLLIN)
    return bool(poller.poll(0))
