"""A version-aware client for resource.k8s.io ResourceSlices and ResourceClaims.

:class:`ResourceAPI` wraps a ``kubernetes.client.ApiClient``. On first use it asks the API
server which resource.k8s.io versions it serves (``GET /apis/resource.k8s.io``) and picks
the first of v1 (Kubernetes 1.34+), v1beta2 (1.33), v1beta1 (1.32). Callers always see and
hand over the v1 shape; :mod:`drakit.plugin.api.convert` translates at the boundary.
Objects travel as plain dicts over :class:`drakit.plugin.api.kubehttp.Transport` (the
ApiClient's own connection pool, headers and auth settings); a watch is a
:class:`drakit.plugin.api.slicewatch.SliceWatch`.

Errors surface as ``kubernetes.client.ApiException`` (or urllib3 / OS connection errors);
:func:`classify` sorts them into retryable (429, 5xx, connection errors), conflict (409),
not found (404), expired (410) and fatal, and :func:`call_with_retries` retries the
retryable ones with exponential backoff and jitter, honouring ``Retry-After``.
:class:`ClaimReader` is the claim read of a prepare: a GET retried until the kubelet call's
deadline, None for 404.
"""

from __future__ import annotations

import json
import logging
import threading
from dataclasses import dataclass, field
from typing import Any, Final

from kubernetes.client import ApiClient, ApiException

from drakit.plugin.api import convert
from drakit.plugin.api.kubehttp import (
    AUTH_REUSE_SECONDS,
    MAX_LIST_BYTES,
    Transport,
    segment,
)
from drakit.plugin.api.retry import (
    CLAIM_READS,
    DEFAULT_CALL_SECONDS,
    Backoff,
    Deadline,
    ErrorKind,
    ResponseTooLarge,
    call_with_retries,
    classify,
    describe,
    retry_after_seconds,
)
from drakit.plugin.api.slicewatch import SliceWatch, WatchEvent

GROUP: Final = convert.GROUP
SLICES: Final = "resourceslices"
CLAIMS: Final = "resourceclaims"
APPLY_PATCH: Final = "application/apply-patch+yaml"

log = logging.getLogger(__name__)

# The one retry policy (drakit.plugin.api.retry) and the watch types, re-exported for callers of
# this module.
__all__ = ["Backoff", "ErrorKind", "ResourceAPI", "ResourceAPIUnavailable",
           "ResponseTooLarge", "SliceList", "SliceWatch", "WatchEvent", "call_with_retries",
           "classify", "describe", "retry_after_seconds"]


class ResourceAPIUnavailable(RuntimeError):
    """The API server serves none of the resource.k8s.io versions drakit speaks."""


@dataclass
class SliceList:
    """ResourceSlices in the v1 shape and the list's resourceVersion (to watch from)."""

    items: list[dict[str, Any]] = field(default_factory=list)
    resource_version: str = ""


def _selector(**fields: str | None) -> str | None:
    parts = [f"{k}={v}" for k, v in fields.items() if v is not None]
    return ",".join(parts) if parts else None


def _meta(name: str, namespace: str, uid: str | None) -> dict[str, str]:
    meta = {"name": name, "namespace": namespace}
    if uid:
        meta["uid"] = uid  # a precondition: the server answers 409 for another object
    return meta


def _path(version: str, plural: str, name: str | None = None, namespace: str | None = None,
          subresource: str | None = None) -> str:
    path = f"/apis/{GROUP}/{version}"
    if namespace is not None:
        path += f"/namespaces/{segment(namespace)}"
    path += f"/{plural}"
    if name is not None:
        path += f"/{segment(name)}"
    if subresource is not None:
        path += f"/{subresource}"
    return path


def _status_devices_in(data: bytes) -> bool:
    """Whether a ResourceClaim in JSON has a non-empty ``status.devices``."""
    try:
        obj = json.loads(data)
    except ValueError:
        return True  # not a claim: nothing can be concluded, so no complaint
    status = obj.get("status") if isinstance(obj, dict) else None
    return bool(isinstance(status, dict) and status.get("devices"))


class ResourceAPI:
    """resource.k8s.io ResourceSlices and ResourceClaims in the v1 shape, on any server.

    ``versions`` is the preference order (default v1, v1beta2, v1beta1);
    ``request_timeout`` (seconds) bounds every non-watch request; ``auth_reuse_seconds``
    is how long one computation of the auth settings is reused (see
    :class:`~drakit.plugin.api.kubehttp.Transport`). The served version is detected once,
    lazily, on the first call (:attr:`version`); a failed detection is retried on the next
    call.
    """

    def __init__(self, api_client: ApiClient, *, versions: tuple[str, ...] = convert.VERSIONS,
                 request_timeout: float = 30.0,
                 auth_reuse_seconds: float = AUTH_REUSE_SECONDS) -> None:
        self.api_client = api_client
        self.http = Transport(api_client, request_timeout,
                              auth_reuse_seconds=auth_reuse_seconds)
        self._preference = versions
        self._version: str | None = None
        self._lock = threading.Lock()
        self._new_fields: frozenset[str] | None = None
        self._older_fields: frozenset[str] | None = None
        self._status_devices_served = False
        self._server_version: str | None = None
        self._warned_fields: set[str] = set()

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
            group = self.http.json("GET", f"/apis/{GROUP}")
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
            f"the API server serves {GROUP} versions {', '.join(served)}, none of "
            f"{', '.join(self._preference)}")

    def served_new_fields(self) -> frozenset[str]:
        """Which of the slice fields newer than Kubernetes 1.34 (``convert.NEW_SLICE_FIELDS``)
        the server declares, read once from its OpenAPI v3 document of the version in use
        (``convert.served_new_fields`` decides when there is none)."""
        if self._new_fields is None:
            version = self.version
            try:
                doc: dict[str, Any] | None = self.http.json(
                    "GET", f"/openapi/v3/apis/{GROUP}/{version}")
            except Exception as exc:  # any failure: decide by version (documented fallback)
                log.info("no OpenAPI v3 document for %s/%s (%s); assuming the fields of %s",
                         GROUP, version, describe(exc), version)
                doc = None
            self._older_fields = convert.served_older_fields(doc, version)
            self._new_fields = convert.served_new_fields(doc, version)
        return self._new_fields

    def served_older_fields(self) -> frozenset[str]:
        """Which of the fields added after Kubernetes 1.32 (``convert.OLDER_SLICE_FIELDS``)
        the server declares (read with :meth:`served_new_fields`)."""
        self.served_new_fields()
        assert self._older_fields is not None
        return self._older_fields

    def served_slice_spec(self, spec: dict[str, Any]) -> dict[str, Any]:
        """What is sent of a v1-shaped slice ``spec`` to this server: without the fields it
        does not serve (as :meth:`create_slice` and :meth:`update_slice` send it), no
        messages."""
        out, _ = convert.drop_unserved_fields({"spec": spec}, self.served_new_fields())
        older = self.served_older_fields()
        if len(older) < len(convert.OLDER_SLICE_FIELDS):
            out, _ = convert.drop_older_unserved_fields(out, older, "")
        return dict(out["spec"])

    def _served_slice(self, obj: dict[str, Any]) -> dict[str, Any]:
        """``obj`` without the fields the server does not serve, each named once in a
        warning (they would be refused or silently lost)."""
        out, dropped = convert.drop_unserved_fields(obj, self.served_new_fields())
        older = self.served_older_fields()
        if len(older) < len(convert.OLDER_SLICE_FIELDS):
            out, more = convert.drop_older_unserved_fields(
                out, older, f"Kubernetes {self.server_version()} "
                            f"({GROUP}/{self.version})")
            dropped += more
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
        obj = self.http.json("GET", _path(version, CLAIMS, name, namespace),
                         timeout=timeout)
        return convert.claim_from_version(obj, version)

    def _apply_status(self, namespace: str, name: str, body: dict[str, Any],
                      field_manager: str) -> bytes:
        """Apply ``body`` to the claim's status; returns the answer's bytes (the claim as
        the server stored it), unparsed."""
        path = _path(self.version, CLAIMS, name, namespace, "status")
        query = {"fieldManager": field_manager, "force": True}
        return self.http.request("PATCH", path, query=query, body=body,
                                 content_type=APPLY_PATCH).data

    def server_version(self) -> str:
        """The API server's ``gitVersion`` (``GET /version``, asked once; ``"unknown"``
        when it cannot be read)."""
        if self._server_version is None:
            try:
                self._server_version = str(self.http.json("GET", "/version").get("gitVersion")
                                           or "unknown")
            except Exception as exc:  # only used in messages: never fail a caller for it
                log.debug("GET /version failed: %s", describe(exc))
                return "unknown"
        return self._server_version

    def apply_claim_status_devices(self, namespace: str, name: str,
                                   entries: list[dict[str, Any]],
                                   field_manager: str, uid: str | None = None) -> bool:
        """Server-side apply ``status.devices`` (AllocatedDeviceStatus entries, v1 JSON:
        driver, pool, device, optional shareID, conditions, data, networkData) on the
        claim's status subresource as ``field_manager`` with force. The manager then owns
        exactly these entries: entries it applied before and leaves out now are removed.
        With ``uid`` the server refuses (409) a claim re-created under the same name.
        Errors raise ``ApiException`` (404: no such claim).

        Returns whether the server kept ``status.devices``: False when the answer to an
        apply of entries has none, i.e. the server does not have the field (Kubernetes 1.32
        with the DRAResourceClaimDeviceStatus feature gate at its default, off, drops it
        without an error). Once an answer kept it, later answers are not parsed."""
        body: dict[str, Any] = {
            "apiVersion": convert.api_version(self.version),
            "kind": "ResourceClaim",
            "metadata": _meta(name, namespace, uid),
            "status": {"devices": entries},
        }
        data = self._apply_status(namespace, name, body, field_manager)
        if not entries or self._status_devices_served:
            return True
        kept = _status_devices_in(data)
        self._status_devices_served = kept
        return kept

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
            page = self.http.json("GET", _path(version, SLICES), query=query,
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
        out = self.http.json("POST", _path(version, SLICES),
                         body=convert.slice_to_version(self._served_slice(obj), version))
        return convert.slice_from_version(out, version)

    def update_slice(self, obj: dict[str, Any]) -> dict[str, Any]:
        """Replace a ResourceSlice (PUT; ``metadata.resourceVersion`` makes it conditional:
        409 when the object changed meanwhile)."""
        version = self.version
        name = obj["metadata"]["name"]
        out = self.http.json("PUT", _path(version, SLICES, name),
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
        self.http.request("DELETE", _path(version, SLICES, name), body=body)

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
        resp = self.http.send("GET", _path(version, SLICES), query=query,
                          timeout=(self.http.request_timeout, timeout_seconds + 30))
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
            page = self.http.json("GET", "/api/v1/pods", query=query, max_bytes=MAX_LIST_BYTES,
                              timeout=timeout)
            items.extend(i for i in page.get("items") or [] if isinstance(i, dict))
            token = (page.get("metadata") or {}).get("continue") or None
            if not token:
                return items

    def watch_node(self, name: str, resource_version: str | None,
                   timeout_seconds: int = 300) -> SliceWatch:
        """Open a watch on Node ``name`` (core/v1 ``fieldSelector=metadata.name=<name>``)
        from ``resource_version`` (None: its current state first, as an ``ADDED`` event);
        the server ends it after ``timeout_seconds``. Events carry the Node as the server
        sent it. Needs ``list``/``watch`` on ``nodes`` (deploy/ grants it)."""
        query: dict[str, Any] = {
            "fieldSelector": f"metadata.name={name}",
            "resourceVersion": resource_version or None,
            "watch": True, "allowWatchBookmarks": True, "timeoutSeconds": timeout_seconds,
        }
        resp = self.http.send("GET", "/api/v1/nodes", query=query,
                              timeout=(self.http.request_timeout, timeout_seconds + 30))
        return SliceWatch(resp, None)

    def get_node_uid(self, name: str) -> str:
        """The UID of Node ``name`` (for owner references)."""
        node = self.http.json("GET", f"/api/v1/nodes/{segment(name)}")
        uid = (node.get("metadata") or {}).get("uid")
        if not uid:
            raise ValueError(f"node {name!r} has no metadata.uid")
        return str(uid)


class ClaimReadError(RuntimeError):
    """A ResourceClaim GET failed; the message is one line (HTTP status, reason, the API's
    message), not the client's multi-line dump with headers. ``status`` is the HTTP status
    (None for a connection error)."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


class ClaimReader:
    """GET ResourceClaims through :class:`ResourceAPI` (None for 404; other failures raise
    :class:`ClaimReadError`), retried by :data:`drakit.plugin.api.retry.CLAIM_READS` until
    ``deadline`` (monotonic seconds; default:
    :data:`drakit.plugin.api.retry.DEFAULT_CALL_SECONDS` from now), each attempt's HTTP timeout
    bounded by what is left."""

    def __init__(self, api: ResourceAPI, request_timeout: float = 30.0) -> None:
        self.api = api
        self.request_timeout = request_timeout

    def get_claim(self, namespace: str, name: str,
                  deadline: float | None = None) -> dict[str, Any] | None:
        dl = Deadline(deadline) if deadline is not None else Deadline.after(DEFAULT_CALL_SECONDS)
        try:
            return call_with_retries(
                lambda: self.api.get_claim(namespace, name,
                                           timeout=dl.timeout(self.request_timeout)),
                CLAIM_READS, deadline=dl, what=f"GET ResourceClaim {namespace}/{name}")
        except Exception as e:
            status = getattr(e, "status", None)
            if status == 404:
                return None
            raise ClaimReadError(describe(e), status) from e
