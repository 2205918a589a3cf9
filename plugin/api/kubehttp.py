"""Requests to the API server with the ``kubernetes`` client's configuration.

:class:`Transport` sends a request with the ApiClient's default headers, cookie and auth
settings (bearer token) and skips the generated per-call machinery (argument validation,
parameter and body serialisation, response deserialisation): a ResourceClaim GET costs
~205 µs of client CPU through ``CustomObjectsApi`` and ~150 µs through the urllib3 pool.

- :meth:`Transport.request` and :meth:`Transport.json` read the answer whole. Over a direct
  connection they use :class:`drakit.plugin.api.kubeconn.Connections` (http.client, keep-alive;
  about half the client CPU of the urllib3 pool, figures there); through a proxy, or with
  settings only urllib3 has (:func:`~drakit.plugin.api.kubeconn.direct_supported`), the
  ApiClient's urllib3 pool manager.
- :meth:`Transport.send` hands back the unread urllib3 response of a watch, on the
  ApiClient's pool manager (``api_client.rest_client.pool_manager``: its TLS, proxy and
  socket settings).

Two tricks stay because they pay (client CPU per call against ``EmbeddedAPIServer`` with a
kubeconfig-loaded ApiClient, minimum of 3 x 6 rounds of 600 calls):

- the auth settings are computed at most once per :data:`AUTH_REUSE_SECONDS`: the
  kubeconfig loader's refresh hook re-applies the kubeconfig on every call (GET 146 →
  ~200 µs, apply 166 → ~220 µs without the reuse);
- the host's urllib3 connection pool is asked directly instead of the pool manager, which
  parses the URL and looks the pool up on every call (GET 146 → ~165 µs, apply 166 →
  ~188 µs without it).

Headers and queries are built per request: the caches of prebuilt header dicts and apply
queries saved ~5 % of a GET's client CPU, < 1 % of the agent's CPU per prepare +
unprepare pair, below the bench's noise.

Errors: a non-2xx answer raises ``kubernetes.client.ApiException`` (status, reason, body of
at most :data:`MAX_ERROR_BYTES`, headers) as the generated client does; connection errors
are urllib3's on either path. Nothing retries here (urllib3's retries are off):
:mod:`drakit.plugin.api.retry` is the one retry policy.
"""

from __future__ import annotations

import http.client
import json
import threading
import time
from collections.abc import Callable
from functools import partial
from typing import Any, Final
from urllib.parse import quote, urlencode

import urllib3
from kubernetes.client import ApiClient, ApiException

from drakit.plugin.api.kubeconn import (
    DEFAULT_MAX_IDLE,
    Connections,
    Reply,
    direct_supported,
    read_reply,
    tls_context,
)
from drakit.plugin.api.retry import ResponseTooLarge

JSON: Final = "application/json"
#: Seconds the auth settings computed from the ApiClient's configuration are reused.
AUTH_REUSE_SECONDS: Final = 1.0
#: Largest answer read for one object (bytes). etcd stores at most 1.5 MiB per object; a
#: bigger answer is refused with :class:`ResponseTooLarge` before it is read whole.
MAX_OBJECT_BYTES: Final = 8 * 1024 * 1024
#: Largest answer read for one page of a list (bytes; pages hold at most 500 objects).
MAX_LIST_BYTES: Final = 256 * 1024 * 1024
#: Largest body of an error answer read (bytes; a Status object is a few hundred bytes).
MAX_ERROR_BYTES: Final = 64 * 1024

#: Request bodies as compact JSON (``json.dumps`` with separators builds an encoder a call).
_encode_json: Final = json.JSONEncoder(separators=(",", ":")).encode

Timeout = float | tuple[float, float] | None
"""Seconds for the whole request, (connect, read) seconds, or None for the default."""


def segment(value: str) -> str:
    """One URL path segment, percent-encoded as the generated client does (no safe chars)."""
    return quote(value, safe="")


def encode_query(query: dict[str, Any]) -> str:
    """``query`` URL-encoded: booleans become ``true``/``false``, None is left out."""
    return urlencode([(key, ("true" if value else "false") if isinstance(value, bool)
                       else str(value)) for key, value in query.items() if value is not None])


def _error(reply: Reply) -> ApiException:
    exc = ApiException(status=reply.status, reason=reply.reason,
                       body=reply.data.decode("utf-8", "replace"))
    exc.headers = reply.headers
    return exc


class Transport:
    """HTTP requests to the API server ``api_client`` is configured for.

    ``request_timeout`` (seconds) bounds every request without its own ``timeout``;
    ``auth_reuse_seconds`` is how long one computation of the auth settings is reused
    (0: every request asks the configuration, running its refresh hook).
    """

    def __init__(self, api_client: ApiClient, request_timeout: float = 30.0, *,
                 auth_reuse_seconds: float = AUTH_REUSE_SECONDS) -> None:
        self.api_client = api_client
        self.request_timeout = request_timeout
        self.auth_reuse_seconds = auth_reuse_seconds
        self._default_timeout = urllib3.Timeout(total=request_timeout)
        self._lock = threading.Lock()
        # (monotonic time computed, auth headers, auth query parameters)
        self._auth: tuple[float, dict[str, str], list[tuple[str, str]]] | None = None
        # (host, pool manager, the host's pool, the host's path prefix)
        self._pool: tuple[str, Any, urllib3.HTTPConnectionPool, str] | None = None
        # (host, its direct connections or None: the configuration needs urllib3)
        self._connections: tuple[str, Connections | None] | None = None
        #: Called after every request with (method, path, answer): the HTTP status as a
        #: string, "too_large" for an answer over its size limit, or "error" when no answer
        #: came (connection refused, reset, timeout). The method of a watch is "WATCH".
        #: The agent's metrics count API requests through it (drakit.plugin.ops.metrics).
        self.observer: Callable[[str, str, str], None] | None = None

    def request(self, method: str, path: str, *, query: dict[str, Any] | None = None,
                body: object = None, content_type: str = JSON, timeout: Timeout = None,
                max_bytes: int = MAX_OBJECT_BYTES) -> Reply:
        """``method`` ``path`` (``/apis/...``, segments already encoded) with ``query``
        (see :func:`encode_query`) and ``body`` sent as compact JSON (also for apply
        patches: JSON is YAML) of ``content_type``; the answer read whole. Raises
        ``ApiException`` for a non-2xx answer and :class:`ResponseTooLarge` for one over
        ``max_bytes`` (by its Content-Length, or once that much was read)."""
        try:
            reply = self._request(method, path, query, body, content_type, timeout, max_bytes)
        except ApiException as e:
            self._observe(method, path, query, str(e.status))
            raise
        except ResponseTooLarge:
            self._observe(method, path, query, "too_large")
            raise
        except Exception:
            self._observe(method, path, query, "error")
            raise
        self._observe(method, path, query, str(reply.status))
        return reply

    def _observe(self, method: str, path: str, query: dict[str, Any] | None,
                 answer: str) -> None:
        if self.observer is not None:
            watch = method == "GET" and bool((query or {}).get("watch"))
            self.observer("WATCH" if watch else method, path, answer)

    def _request(self, method: str, path: str, query: dict[str, Any] | None, body: object,
                 content_type: str, timeout: Timeout, max_bytes: int) -> Reply:
        target, headers, payload = self._prepare(method, path, query, body, content_type)
        direct = self._direct()
        if direct is not None:
            reply = direct.request(method, target, payload, headers,
                                   self.request_timeout if timeout is None else timeout,
                                   limit=max_bytes, error_limit=MAX_ERROR_BYTES)
        else:
            resp = self._urlopen(method, target, body=payload, headers=headers,
                                 preload_content=False, timeout=self._timeout(timeout))
            try:
                reply, whole = read_reply(resp, max_bytes, MAX_ERROR_BYTES)
            except http.client.IncompleteRead as e:  # urllib3 raises its own first, normally
                whole = False
                raise urllib3.exceptions.ProtocolError("Connection broken.", e) from e
            except BaseException:
                whole = False
                raise
            finally:
                if not whole:
                    resp.close()  # unread bytes left: the connection cannot be reused
                resp.release_conn()
        if not reply.ok:
            raise _error(reply)
        if reply.declared is not None and reply.declared > max_bytes:
            raise ResponseTooLarge(f"{method} {path}: the answer is {reply.declared} bytes, "
                                   f"more than the {max_bytes} accepted; refused")
        if len(reply.data) > max_bytes:
            raise ResponseTooLarge(f"{method} {path}: the answer is more than the "
                                   f"{max_bytes} bytes accepted; refused")
        return reply

    def json(self, method: str, path: str, **kwargs: Any) -> dict[str, Any]:
        """:meth:`request` and the answer's JSON object; an answer that is not a JSON
        object raises ``TypeError``."""
        reply = self.request(method, path, **kwargs)
        obj = json.loads(reply.data)
        if not isinstance(obj, dict):
            raise TypeError(f"{method} {path}: expected a JSON object from the API server, "
                            f"got {type(obj).__name__}")
        return obj

    def send(self, method: str, path: str, *, query: dict[str, Any] | None = None,
             timeout: Timeout = None) -> urllib3.BaseHTTPResponse:
        """``method`` ``path`` with ``query`` on the ApiClient's urllib3 pool, for an answer
        read as a stream (a watch). Returns the unread response of a 2xx answer; raises
        ``ApiException`` for any other."""
        target, headers, _ = self._prepare(method, path, query, None, JSON)
        try:
            resp = self._urlopen(method, target, body=None, headers=headers,
                                 preload_content=False, timeout=self._timeout(timeout))
        except Exception:
            self._observe(method, path, query, "error")
            raise
        self._observe(method, path, query, str(resp.status))
        if not 200 <= resp.status <= 299:
            try:
                reply, _ = read_reply(resp, 0, MAX_ERROR_BYTES)
            finally:
                resp.close()
                resp.release_conn()
            raise _error(reply)
        return resp

    def close(self) -> None:
        """Close the idle direct connections (the urllib3 pool is the ApiClient's); a later
        request opens new ones."""
        with self._lock:
            cached, self._connections = self._connections, None
        if cached is not None and cached[1] is not None:
            cached[1].close()

    def _prepare(self, method: str, path: str, query: dict[str, Any] | None, body: object,
                 content_type: str) -> tuple[str, dict[str, str], bytes | None]:
        """(path with the query string, headers, encoded body) of a request."""
        auth_headers, auth_query = self._auth_settings()
        client = self.api_client
        headers = {"Accept": JSON, **client.default_headers}
        if client.cookie:
            headers["Cookie"] = client.cookie
        headers.update(auth_headers)
        payload = None
        if body is not None:
            headers["Content-Type"] = content_type
            payload = _encode_json(body).encode()
        qs = "&".join(q for q in (urlencode(auth_query), encode_query(query or {})) if q)
        return (path + "?" + qs if qs else path), headers, payload

    def _direct(self) -> Connections | None:
        """The direct connections to the configured host, or None when the configuration
        needs urllib3 (:func:`~drakit.plugin.api.kubeconn.direct_supported`)."""
        configuration = self.api_client.configuration
        host = configuration.host
        cached = self._connections
        if cached is not None and cached[0] == host:
            return cached[1]
        with self._lock:
            cached = self._connections
            if cached is not None and cached[0] == host:
                return cached[1]
            direct = None
            if direct_supported(configuration):
                # a context per new connection: CA and certificate files rotated in place
                tls = partial(tls_context, configuration) if host.startswith("https:") else None
                direct = Connections(host, tls,
                                     server_name=configuration.tls_server_name or None,
                                     max_idle=configuration.connection_pool_maxsize
                                     or DEFAULT_MAX_IDLE)
            if cached is not None and cached[1] is not None:
                cached[1].close()
            self._connections = (host, direct)
            return direct

    def _auth_settings(self) -> tuple[dict[str, str], list[tuple[str, str]]]:
        """Auth headers and query parameters from the ApiClient's auth settings (the
        configuration's refresh hook, set by the kubeconfig loader, runs inside), reused
        for :attr:`auth_reuse_seconds`."""
        now = time.monotonic()
        with self._lock:
            cached = self._auth
            if cached is not None and now - cached[0] < self.auth_reuse_seconds:
                return cached[1], cached[2]
        headers: dict[str, str] = {}
        queries: list[tuple[str, str]] = []
        self.api_client.update_params_for_auth(headers, queries, ["BearerToken"], "", "GET",
                                               None)
        with self._lock:
            self._auth = (now, headers, queries)
        return headers, queries

    def _urlopen(self, method: str, path: str, **kwargs: Any) -> urllib3.BaseHTTPResponse:
        """``path`` (with query) on the configured host. Without a proxy the host's
        connection pool is asked directly; through a proxy the pool manager does it all."""
        host = self.api_client.configuration.host
        manager = self.api_client.rest_client.pool_manager
        kwargs["retries"] = False  # urllib3's Retry would sleep for any Retry-After
        if type(manager) is not urllib3.PoolManager:
            return manager.urlopen(method, host + path, **kwargs)
        pool = self._pool
        if pool is None or pool[0] != host or pool[1] is not manager:
            # host may carry a path prefix (an API server behind a proxy path)
            prefix = (urllib3.util.parse_url(host).path or "").rstrip("/")
            pool = self._pool = (host, manager, manager.connection_from_url(host), prefix)
        try:
            return pool[2].urlopen(method, pool[3] + path, redirect=False, **kwargs)
        except urllib3.exceptions.ClosedPoolError:  # the manager dropped it: look it up
            self._pool = None
            return manager.urlopen(method, host + path, **kwargs)

    def _timeout(self, timeout: Timeout) -> urllib3.Timeout:
        if timeout is None:
            return self._default_timeout
        if isinstance(timeout, tuple):
            return urllib3.Timeout(connect=timeout[0], read=timeout[1])
        return urllib3.Timeout(total=timeout)

