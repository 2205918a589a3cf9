"""A version-aware client for resource.k8s.io ResourceSlices and ResourceClaims.

:class:`ResourceAPI` wraps a ``kubernetes.client.ApiClient``. On first use it asks the API
server which resource.k8s.io versions it serves (``GET /apis/resource.k8s.io``) and picks
the first of v1 (Kubernetes 1.34+), v1beta2 (1.33), v1beta1 (1.32). Callers always see and
hand over the v1 shape; :mod:`drakit.plugin.slices.convert` translates at the boundary. Objects
travel as plain dicts. Requests go through the ApiClient's own urllib3 pool manager
(``api_client.rest_client.pool_manager``: its TLS, proxy and retry settings) with the
ApiClient's default headers and auth settings (bearer token, refreshed by the
configuration's hook at most once a second; the header dicts and the apply queries are
built once and reused while those stay the same), but skip the generated per-call machinery
(argument validation, parameter and body serialisation, response deserialisation), which
costs milliseconds per call.

Errors surface as ``kubernetes.client.ApiException`` (or urllib3 / OS connection errors);
:func:`classify` sorts them into retryable (429, 5xx, connection errors), conflict (409),
not found (404), expired (410) and fatal, and :func:`call_with_retries` retries the
retryable ones with exponential backoff and jitter, honouring ``Retry-After``.
"""

from __future__ import annotations

import json
import logging
import string
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, Final, NamedTuple
from urllib.parse import quote, urlencode

import urllib3
from kubernetes.client import ApiClient, ApiException

from drakit.plugin.retry import (
    Backoff,
    ErrorKind,
    ResponseTooLarge,
    call_with_retries,
    classify,
    describe,
    retry_after_seconds,
)
from drakit.plugin.slices import convert

GROUP: Final = convert.GROUP
SLICES: Final = "resourceslices"
CLAIMS: Final = "resourceclaims"
APPLY_PATCH: Final = "application/apply-patch+yaml"
JSON: Final = "application/json"
#: Seconds an auth header computed from the ApiClient's configuration is reused.
AUTH_REUSE_SECONDS: Final = 1.0
#: Largest answer read for one object (bytes). etcd stores at most 1.5 MiB per object; a
#: bigger answer is refused with :class:`ResponseTooLarge` before it is read whole.
MAX_OBJECT_BYTES: Final = 8 * 1024 * 1024
#: Largest answer read for one page of a list (bytes; pages hold at most 500 objects).
MAX_LIST_BYTES: Final = 256 * 1024 * 1024
#: Largest body of an error answer read (bytes; a Status object is a few hundred bytes).
MAX_ERROR_BYTES: Final = 64 * 1024

log = logging.getLogger(__name__)


class ResourceAPIUnavailable(RuntimeError):
    """The API server serves none of the resource.k8s.io versions drakit speaks."""


# ---------------------------------------------------------------------------------------------
# error classification and retries

# Defined in drakit.plugin.retry (the one retry policy); re-exported here for callers of this
# module.
__all__ = ["Backoff", "ErrorKind", "ResponseTooLarge", "call_with_retries", "classify",
           "describe", "retry_after_seconds"]


# ---------------------------------------------------------------------------------------------
# watch

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

    def __init__(self, response: Any, version: str) -> None:
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
        if kind != "BOOKMARK":
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


@dataclass
class SliceList:
    """ResourceSlices in the v1 shape and the list's resourceVersion (to watch from)."""

    items: list[dict[str, Any]] = field(default_factory=list)
    resource_version: str = ""


# ---------------------------------------------------------------------------------------------
# the client

def _dict(obj: object) -> dict[str, Any]:
    """The client's ``object`` answers for custom objects are JSON dicts."""
    if not isinstance(obj, dict):
        raise TypeError(f"expected a JSON object from the API server, got {type(obj).__name__}")
    return obj


#: Characters ``quote`` never encodes; object names and namespaces consist of them.
_UNRESERVED: Final = string.ascii_letters + string.digits + "_.-~"
#: Request bodies as compact JSON (one encoder: ``json.dumps`` with separators builds one
#: per call).
_encode_json: Final = json.JSONEncoder(separators=(",", ":")).encode
#: Pre-encoded apply queries kept per field manager (a handful in practice).
_MAX_APPLY_QUERIES: Final = 64


def _q(segment: str) -> str:
    """One path segment, percent-encoded (as the generated client does: no safe chars).
    Segments of unreserved characters only (every valid name) are returned as they are."""
    if not segment.strip(_UNRESERVED):
        return segment
    return quote(segment, safe="")


def _encode_query(query: dict[str, Any]) -> str:
    """``query`` URL-encoded: booleans become ``true``/``false``, None is left out."""
    return urlencode([(key, ("true" if value else "false") if isinstance(value, bool)
                       else str(value)) for key, value in query.items() if value is not None])


class _Auth(NamedTuple):
    """One computation of the ApiClient's auth settings (see :meth:`ResourceAPI._auth`)."""

    stamp: float                            # time.monotonic() when computed
    headers: dict[str, str]
    queries: tuple[tuple[str, str], ...]
    query: str                              # ``queries`` URL-encoded ("" when none)


class _Headers(NamedTuple):
    """Request headers built from one :class:`_Auth` and the ApiClient's default headers
    and cookie as they were then; ``by_type`` maps a body's content type (None: no body)
    to the complete header dict (shared: never modified once built)."""

    auth: _Auth
    defaults: dict[str, str]
    cookie: str | None
    by_type: dict[str | None, dict[str, str]]


def _discard(resp: urllib3.BaseHTTPResponse) -> None:
    """Read and drop an answer (at most :data:`MAX_OBJECT_BYTES`) so its connection is
    reused; the connection of a bigger answer is closed instead."""
    if len(resp.read(MAX_OBJECT_BYTES + 1)) > MAX_OBJECT_BYTES:
        resp.close()
    resp.release_conn()


def _selector(**fields: str | None) -> str | None:
    parts = [f"{k}={v}" for k, v in fields.items() if v is not None]
    return ",".join(parts) if parts else None


def _meta(name: str, namespace: str, uid: str | None) -> dict[str, str]:
    meta = {"name": name, "namespace": namespace}
    if uid:
        meta["uid"] = uid  # a precondition: the server answers 409 for another object
    return meta


class ResourceAPI:
    """resource.k8s.io ResourceSlices and ResourceClaims in the v1 shape, on any server.

    ``versions`` is the preference order (default v1, v1beta2, v1beta1);
    ``request_timeout`` (seconds) bounds every non-watch request. The served version is
    detected once, lazily, on the first call (:attr:`version`); a failed detection is
    retried on the next call.
    """

    def __init__(self, api_client: ApiClient, *, versions: tuple[str, ...] = convert.VERSIONS,
                 request_timeout: float = 30.0) -> None:
        self.api_client = api_client
        self._preference = versions
        self._timeout = request_timeout
        self._version: str | None = None
        self._lock = threading.Lock()
        self._default_timeout = urllib3.Timeout(total=request_timeout)
        self._auth_cache: _Auth | None = None
        self._headers_cache: _Headers | None = None
        self._apply_queries: dict[str, str] = {}
        self._pool: tuple[str, Any, urllib3.HTTPConnectionPool, str] | None = None
        self._new_fields: frozenset[str] | None = None
        self._warned_fields: set[str] = set()

    # -- transport ----------------------------------------------------------------------------

    def _send(self, method: str, path: str, *, query: dict[str, Any] | str | None = None,
              body: object = None, content_type: str = JSON,
              timeout: float | tuple[float, float] | None = None) -> urllib3.BaseHTTPResponse:
        """One request through the ApiClient's urllib3 pool manager (its TLS, proxy and
        retry settings); returns the unread urllib3 response with a 2xx status. ``body`` is
        sent as JSON (also for apply patches: JSON is YAML). ``query`` values: booleans
        become ``true``/``false``, None is left out; a string is an encoded query. A non-2xx
        answer raises ``ApiException`` (status, reason, body, headers) as the generated
        client does; connection errors surface from urllib3."""
        auth = self._auth_entry()
        payload: bytes | None = None
        if body is not None:
            headers = self._headers(auth, content_type)
            payload = _encode_json(body).encode()
        else:
            headers = self._headers(auth, None)
        qs = (query if isinstance(query, str) else _encode_query(query)) if query else ""
        if auth.query:  # the auth settings' parameters first
            qs = f"{auth.query}&{qs}" if qs else auth.query
        if qs:
            path += "?" + qs
        resp = self._urlopen(method, path, body=payload, headers=headers,
                             preload_content=False, timeout=self._timeouts(timeout))
        if not 200 <= resp.status <= 299:
            # an error's body is read up to MAX_ERROR_BYTES (a Status object is small)
            data = resp.read(MAX_ERROR_BYTES)
            resp.close()
            resp.release_conn()
            exc = ApiException(status=resp.status, reason=resp.reason,
                               body=data.decode("utf-8", "replace"))
            exc.headers = resp.headers
            raise exc
        return resp

    def _urlopen(self, method: str, path: str, **kwargs: Any) -> urllib3.BaseHTTPResponse:
        """``path`` (with query) on the configured host. Without a proxy the host's
        connection pool is asked directly (the pool manager would parse the URL and look
        the pool up on every call); through a proxy the pool manager does it all."""
        host = self.api_client.configuration.host
        manager = self.api_client.rest_client.pool_manager
        # No retries inside urllib3: its default Retry sleeps for any Retry-After, uncapped
        # and outside the caller's deadline. drakit.plugin.retry is the one retry policy.
        kwargs["retries"] = False
        if type(manager) is not urllib3.PoolManager:
            kwargs["headers"] = dict(kwargs["headers"])  # the shared dict stays untouched
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
            kwargs["headers"] = dict(kwargs["headers"])
            return manager.urlopen(method, host + path, **kwargs)

    def _auth(self) -> tuple[dict[str, str], tuple[tuple[str, str], ...]]:
        """Auth headers and query parameters from the ApiClient's auth settings (bearer
        token; the configuration's refresh hook, set by the kubeconfig loader, runs inside).
        Reused for :data:`AUTH_REUSE_SECONDS`: the hook re-reads and re-applies the whole
        kubeconfig on every call, which would cost more than the request itself."""
        auth = self._auth_entry()
        return auth.headers, auth.queries

    def _auth_entry(self) -> _Auth:
        """:meth:`_auth` with the encoded auth query, recomputed after the reuse period."""
        now = time.monotonic()
        cached = self._auth_cache
        if cached is not None and now - cached.stamp < AUTH_REUSE_SECONDS:
            return cached
        headers: dict[str, str] = {}
        queries: list[tuple[str, str]] = []
        self.api_client.update_params_for_auth(headers, queries, ["BearerToken"], "", "GET",
                                               None)
        auth = self._auth_cache = _Auth(now, headers, tuple(queries),
                                        urlencode(queries) if queries else "")
        return auth

    def _headers(self, auth: _Auth, content_type: str | None) -> dict[str, str]:
        """The request headers: Accept, the ApiClient's default headers, its cookie, the
        auth headers and, for a body, its Content-Type. Built once per auth computation
        and reused while the default headers and the cookie stay as they were."""
        client = self.api_client
        cached = self._headers_cache
        if (cached is None or cached.auth is not auth or cached.cookie != client.cookie
                or cached.defaults != client.default_headers):
            base: dict[str, str] = {"Accept": JSON}
            base.update(client.default_headers)
            if client.cookie:
                base["Cookie"] = client.cookie
            base.update(auth.headers)
            cached = self._headers_cache = _Headers(auth, dict(client.default_headers),
                                                    client.cookie, {None: base})
        headers = cached.by_type.get(content_type)
        if headers is None:
            headers = dict(cached.by_type[None])
            if content_type is not None:
                headers["Content-Type"] = content_type
            cached.by_type[content_type] = headers
        return headers

    def _apply_query(self, field_manager: str) -> str:
        """The encoded query of a forced server-side apply as ``field_manager``."""
        query = self._apply_queries.get(field_manager)
        if query is None:
            if len(self._apply_queries) >= _MAX_APPLY_QUERIES:
                self._apply_queries = {}
            query = _encode_query({"fieldManager": field_manager, "force": True})
            self._apply_queries[field_manager] = query
        return query

    def _timeouts(self, timeout: float | tuple[float, float] | None) -> urllib3.Timeout:
        if timeout is None:
            return self._default_timeout
        if isinstance(timeout, tuple):
            return urllib3.Timeout(connect=timeout[0], read=timeout[1])
        return urllib3.Timeout(total=timeout)

    def _json(self, method: str, path: str, *, max_bytes: int = MAX_OBJECT_BYTES,
              **kwargs: Any) -> dict[str, Any]:
        """:meth:`_send` and the answer's JSON object. An answer over ``max_bytes`` (by
        its Content-Length, or once that much was read) raises :class:`ResponseTooLarge`
        and its connection is dropped."""
        resp = self._send(method, path, **kwargs)
        ok = False
        try:
            length = resp.headers.get("Content-Length")
            if length is not None and length.isdigit() and int(length) > max_bytes:
                raise ResponseTooLarge(
                    f"{method} {path.split('?', 1)[0]}: the answer is {int(length)} bytes, "
                    f"more than the {max_bytes} accepted; refused")
            data = resp.read(max_bytes + 1)
            if len(data) > max_bytes:
                raise ResponseTooLarge(
                    f"{method} {path.split('?', 1)[0]}: the answer is more than the "
                    f"{max_bytes} bytes accepted; refused")
            ok = True
            return _dict(json.loads(data))
        finally:
            if ok:
                resp.release_conn()
            else:  # unread bytes left: the connection cannot be reused
                resp.close()
                resp.release_conn()

    def _path(self, version: str, plural: str, name: str | None = None,
              namespace: str | None = None, subresource: str | None = None) -> str:
        path = f"/apis/{GROUP}/{version}"
        if namespace is not None:
            path += f"/namespaces/{_q(namespace)}"
        path += f"/{plural}"
        if name is not None:
            path += f"/{_q(name)}"
        if subresource is not None:
            path += f"/{subresource}"
        return path

    # -- version ------------------------------------------------------------------------------

    @property
    def version(self) -> str:
        """The resource.k8s.io version used for every request (detected on first use).

        Raises :class:`ResourceAPIUnavailable` when the server serves none of ours, or the
        client's error when discovery fails."""
        version = self._version
        if version is not None:
            return version
        with self._lock:
            if self._version is None:
                self._version = self._detect()
            return self._version

    def _detect(self) -> str:
        try:
            group = self._json("GET", f"/apis/{GROUP}")
        except ApiException as exc:
            if exc.status == 404:
                raise ResourceAPIUnavailable(
                    f"the API server does not serve {GROUP}") from None
            raise
        served = [str(v.get("version")) for v in group.get("versions", [])
                  if isinstance(v, dict)]
        for candidate in self._preference:
            if candidate in served:
                log.info("using %s/%s (server serves %s)", GROUP, candidate, ", ".join(served))
                return candidate
        raise ResourceAPIUnavailable(
            f"the API server serves {GROUP} versions {served}, none of {list(self._preference)}")

    def served_new_fields(self) -> frozenset[str]:
        """Which of the slice fields newer than Kubernetes 1.34 (``convert.NEW_SLICE_FIELDS``)
        the server declares, read once from its OpenAPI v3 document of the version in use
        (``convert.served_new_fields`` decides when there is none)."""
        if self._new_fields is None:
            version = self.version
            try:
                doc: dict[str, Any] | None = self._json(
                    "GET", f"/openapi/v3/apis/{GROUP}/{version}")
            except Exception as exc:  # any failure: decide by version (documented fallback)
                log.info("no OpenAPI v3 document for %s/%s (%s); assuming the fields of %s",
                         GROUP, version, describe(exc), version)
                doc = None
            self._new_fields = convert.served_new_fields(doc, version)
        return self._new_fields

    def _served_slice(self, obj: dict[str, Any]) -> dict[str, Any]:
        """``obj`` without the fields the server does not serve, each named once in a
        warning (they would be refused or silently lost)."""
        out, dropped = convert.drop_unserved_fields(obj, self.served_new_fields())
        name = (obj.get("metadata") or {}).get("name") or "(new)"
        for message in dropped:
            field_name = convert.unserved_field_key(message)
            if field_name not in self._warned_fields:
                self._warned_fields.add(field_name)
                log.warning("ResourceSlice %s: %s", name, message)
        return out

    # -- claims -------------------------------------------------------------------------------

    def get_claim(self, namespace: str, name: str,
                  timeout: float | None = None) -> dict[str, Any]:
        """GET a ResourceClaim, returned in the v1 shape (404 raises ApiException).
        ``timeout`` (seconds) bounds the request instead of the client's default."""
        version = self.version
        obj = self._json("GET", self._path(version, CLAIMS, name, namespace),
                         timeout=timeout)
        return convert.claim_from_version(obj, version)

    def _apply_status(self, namespace: str, name: str, body: dict[str, Any],
                      field_manager: str) -> None:
        """Apply ``body`` to the claim's status; the answer is read (the connection is
        reused) but not parsed: no caller needs the claim back."""
        path = self._path(self.version, CLAIMS, name, namespace, "status")
        _discard(self._send("PATCH", path, query=self._apply_query(field_manager), body=body,
                            content_type=APPLY_PATCH))

    def apply_claim_status_devices(self, namespace: str, name: str,
                                   entries: list[dict[str, Any]],
                                   field_manager: str, uid: str | None = None) -> None:
        """Server-side apply ``status.devices`` (AllocatedDeviceStatus entries, v1 JSON:
        driver, pool, device, optional shareID, conditions, data, networkData) on the
        claim's status subresource as ``field_manager`` with force. The manager then owns
        exactly these entries: entries it applied before and leaves out now are removed.
        With ``uid`` the server refuses (409) a claim re-created under the same name.
        Errors raise ``ApiException`` (404: no such claim)."""
        body: dict[str, Any] = {
            "apiVersion": convert.api_version(self.version),
            "kind": "ResourceClaim",
            "metadata": _meta(name, namespace, uid),
            "status": {"devices": entries},
        }
        self._apply_status(namespace, name, body, field_manager)

    def remove_claim_status_devices(self, namespace: str, name: str,
                                    field_manager: str, uid: str | None = None) -> bool:
        """Withdraw every ``status.devices`` entry ``field_manager`` applied (apply of an
        empty configuration). Returns False when the claim no longer exists (nothing to
        withdraw), True otherwise. With ``uid`` the server refuses (409) a claim re-created
        under the same name."""
        body: dict[str, Any] = {
            "apiVersion": convert.api_version(self.version),
            "kind": "ResourceClaim",
            "metadata": _meta(name, namespace, uid),
        }
        try:
            self._apply_status(namespace, name, body, field_manager)
        except ApiException as exc:
            if exc.status == 404:
                return False
            raise
        return True

    # -- slices -------------------------------------------------------------------------------

    def list_slices(self, driver: str, node: str | None = None, *,
                    label_selector: str | None = None) -> SliceList:
        """ResourceSlices of ``driver`` (field selector ``spec.driver``), on ``node`` when
        given (``spec.nodeName``), optionally filtered by labels. Follows ``continue``."""
        version = self.version
        selector = _selector(**{"spec.driver": driver, "spec.nodeName": node})
        items: list[dict[str, Any]] = []
        token: str | None = None
        rv = ""
        while True:
            query: dict[str, Any] = {"fieldSelector": selector,
                                     "labelSelector": label_selector or None,
                                     "limit": 500, "continue": token}
            page = self._json("GET", self._path(version, SLICES), query=query,
                              max_bytes=MAX_LIST_BYTES)
            meta = page.get("metadata") or {}
            items.extend(convert.slice_from_version(i, version) for i in page.get("items") or [])
            rv = str(meta.get("resourceVersion", rv))
            token = meta.get("continue") or None
            if not token:
                return SliceList(items, rv)

    def create_slice(self, obj: dict[str, Any]) -> dict[str, Any]:
        """Create a ResourceSlice from its v1 shape (``metadata.generateName`` allowed)."""
        version = self.version
        out = self._json("POST", self._path(version, SLICES),
                         body=convert.slice_to_version(self._served_slice(obj), version))
        return convert.slice_from_version(out, version)

    def update_slice(self, obj: dict[str, Any]) -> dict[str, Any]:
        """Replace a ResourceSlice (PUT; ``metadata.resourceVersion`` makes it conditional:
        409 when the object changed meanwhile)."""
        version = self.version
        name = obj["metadata"]["name"]
        out = self._json("PUT", self._path(version, SLICES, name),
                         body=convert.slice_to_version(self._served_slice(obj), version))
        return convert.slice_from_version(out, version)

    def delete_slice(self, name: str, *, uid: str | None = None,
                     resource_version: str | None = None) -> None:
        """Delete a ResourceSlice, with UID / resourceVersion preconditions when given
        (409 when they no longer hold; 404 when it is already gone). The body is a
        ``DeleteOptions`` (meta/v1)."""
        version = self.version
        body: dict[str, Any] = {}
        if uid or resource_version:
            pre: dict[str, str] = {}
            if uid:
                pre["uid"] = uid
            if resource_version:
                pre["resourceVersion"] = resource_version
            body["preconditions"] = pre
        resp = self._send("DELETE", self._path(version, SLICES, name), body=body)
        resp.read()
        resp.release_conn()

    def watch_slices(self, driver: str, node: str | None, resource_version: str | None,
                     timeout_seconds: int = 300, *,
                     label_selector: str | None = None) -> SliceWatch:
        """Open a watch on ``driver``'s slices (on ``node`` when given) from
        ``resource_version``; the server ends it after ``timeout_seconds``."""
        version = self.version
        query: dict[str, Any] = {
            "fieldSelector": _selector(**{"spec.driver": driver, "spec.nodeName": node}),
            "labelSelector": label_selector or None,
            "resourceVersion": resource_version or None,
            "watch": True, "allowWatchBookmarks": True, "timeoutSeconds": timeout_seconds,
        }
        resp = self._send("GET", self._path(version, SLICES), query=query,
                          timeout=(self._timeout, timeout_seconds + 30))
        return SliceWatch(resp, version)

    # -- core ---------------------------------------------------------------------------------

    def list_node_pods(self, node: str, timeout: float | None = None) -> list[dict[str, Any]]:
        """Pods bound to ``node`` (core/v1, field selector ``spec.nodeName``; all pages),
        as JSON objects. Needs ``get``/``list`` on ``pods`` (deploy/ grants it)."""
        items: list[dict[str, Any]] = []
        token: str | None = None
        while True:
            query: dict[str, Any] = {"fieldSelector": f"spec.nodeName={node}", "limit": 500,
                                     "continue": token}
            page = self._json("GET", "/api/v1/pods", query=query, max_bytes=MAX_LIST_BYTES,
                              timeout=timeout)
            items.extend(i for i in page.get("items") or [] if isinstance(i, dict))
            token = (page.get("metadata") or {}).get("continue") or None
            if not token:
                return items

    def get_node_uid(self, name: str) -> str:
        """The UID of Node ``name`` (for owner references)."""
        node = self._json("GET", f"/api/v1/nodes/{_q(name)}")
        uid = (node.get("metadata") or {}).get("uid")
        if not uid:
            raise ValueError(f"node {name!r} has no metadata.uid")
        return str(uid)
