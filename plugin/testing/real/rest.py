"""The REST client layer of :class:`~drakit.plugin.testing.real.controlplane.RealAPIServer`: one
HTTPS call as a bearer token (JSON or text), the paths of the kinds the helpers know, and the
conversion between the helpers' v1 shape and the version the server serves.

Errors: :class:`~drakit.plugin.testing.apiserver.errors.ApiError` (the server's ``code``,
``reason``, ``message``, ``details``) on a non-2xx answer; ValueError for an unknown resource.
"""

from __future__ import annotations

import json
import ssl
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from drakit.plugin.api.convert import (
    claim_from_version,
    claim_to_version,
    slice_from_version,
    slice_to_version,
)
from drakit.plugin.testing.apiserver.errors import ApiError

__all__ = ["RESOURCE_GROUP_VERSIONS", "ClusterREST"]

#: The resource.k8s.io versions the helpers can speak, most preferred first.
RESOURCE_GROUP_VERSIONS = ("v1", "v1beta2", "v1beta1")

_CORE = {"nodes": False, "namespaces": False, "pods": True, "serviceaccounts": True}
_RESOURCE_K8S = {"resourceslices": False, "deviceclasses": False, "resourceclaims": True,
                 "resourceclaimtemplates": True}


class ClusterREST:
    """HTTPS calls to the real kube-apiserver on ``127.0.0.1:port`` as the admin (or another
    token). The control plane that owns it sets ``port``, ``pki``, ``ssl_context`` and
    ``helper_version`` when it starts."""

    def __init__(self, workdir: Path, bin_dir: Path, admin_token: str) -> None:
        self.workdir = workdir
        self.bin_dir = bin_dir
        self.admin_token = admin_token
        self.port = 0
        self.ssl_context: ssl.SSLContext | None = None
        self.pki: dict[str, Path] = {}
        #: The resource.k8s.io version the helpers write and read (the first one served).
        self.helper_version = "v1"

    @property
    def url(self) -> str:
        """``https://127.0.0.1:<port>`` of kube-apiserver."""
        return f"https://127.0.0.1:{self.port}"

    @property
    def ca_file(self) -> Path:
        """The CA certificate (PEM) that signed the serving certificate."""
        return self.pki["ca"]


    def request(self, method: str, path: str, body: Any = None, *, token: str | None = None,
                content_type: str = "application/json",
                query: Mapping[str, str] | None = None) -> Any:
        """One HTTPS call as ``token`` (default admin); the decoded JSON answer. Raises
        :class:`ApiError` with the server's code, reason and message on a non-2xx answer."""
        url = self.url + path + (f"?{urllib.parse.urlencode(query)}" if query else "")
        data = None
        if body is not None:
            data = body.encode() if isinstance(body, str) else json.dumps(body).encode()
        req = urllib.request.Request(url, data=data, method=method)
        req.add_header("Authorization", f"Bearer {token or self.admin_token}")
        req.add_header("Accept", "application/json")
        if data is not None:
            req.add_header("Content-Type", content_type)
        try:
            with urllib.request.urlopen(req, timeout=30, context=self.ssl_context) as r:
                raw = r.read()
        except urllib.error.HTTPError as e:
            raw = e.read()
            try:
                status = json.loads(raw)
            except ValueError:
                status = {"message": raw.decode(errors="replace")}
            raise ApiError(e.code, status.get("reason", ""), status.get("message", ""),
                           status.get("details") or {}) from None
        return json.loads(raw) if raw else None

    def request_text(self, path: str, *, token: str | None = None) -> str:
        """GET a non-JSON path (``/metrics``, ``/readyz?verbose``) as ``token`` (default
        admin); the body as text. Raises :class:`ApiError` on a non-2xx answer."""
        req = urllib.request.Request(self.url + path)
        req.add_header("Authorization", f"Bearer {token or self.admin_token}")
        try:
            with urllib.request.urlopen(req, timeout=30, context=self.ssl_context) as r:
                return str(r.read().decode("utf-8", errors="replace"))
        except urllib.error.HTTPError as e:
            raise ApiError(e.code, "", e.read().decode(errors="replace")) from None

    def path(self, resource: str, namespace: str = "", name: str = "",
              version: str | None = None) -> str:
        if resource in _CORE:
            namespaced = _CORE[resource]
            base = "/api/v1"
        elif resource in _RESOURCE_K8S:
            namespaced = _RESOURCE_K8S[resource]
            base = f"/apis/resource.k8s.io/{version or self.helper_version}"
        else:
            raise ValueError(f"unknown resource {resource!r}; known: "
                             f"{', '.join(sorted([*_CORE, *_RESOURCE_K8S]))}")
        path = base
        if namespaced and namespace:
            path += f"/namespaces/{namespace}"
        path += f"/{resource}"
        return path + (f"/{name}" if name else "")

    def to_server(self, resource: str, obj: Mapping[str, Any]) -> dict[str, Any]:
        v = self.helper_version
        if resource == "resourceslices":
            return slice_to_version(dict(obj), v)
        if resource in ("resourceclaims",):
            return claim_to_version(dict(obj), v)
        out = dict(obj)
        if resource in _CORE:
            out.setdefault("apiVersion", "v1")
            out.setdefault("kind", {"nodes": "Node", "namespaces": "Namespace", "pods": "Pod",
                                    "serviceaccounts": "ServiceAccount"}[resource])
        else:
            out.setdefault("apiVersion", f"resource.k8s.io/{v}")
            out.setdefault("kind", {"deviceclasses": "DeviceClass",
                                    "resourceclaimtemplates": "ResourceClaimTemplate"}[resource])
        return out

    def from_server(self, resource: str, obj: dict[str, Any]) -> dict[str, Any]:
        v = self.helper_version
        if resource == "resourceslices":
            obj = slice_from_version(obj, v)
        elif resource == "resourceclaims":
            obj = claim_from_version(obj, v)
        return {k: val for k, val in obj.items() if k not in ("apiVersion", "kind")}
