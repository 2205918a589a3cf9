"""The object helpers of :class:`~drakit.plugin.testing.real.controlplane.RealAPIServer`, over HTTPS
as the admin, with the embedded server's names and v1 shapes (``create_object``,
``get_object``, ``list_objects``, ``update_object``, ``delete_object``, ``apply``,
``apply_manifests``, ``reset``, ``create_node``, ``ensure_namespace``, ``create_claim``), so
:class:`~drakit.plugin.testing.harness.DriverHarness` and the suites run unchanged against
either server.

Errors: :class:`~drakit.plugin.testing.apiserver.errors.ApiError` for a failed call;
ValueError for an unknown resource or kind.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from drakit.plugin.testing.apiserver.claims import AllocatedDevice, allocated_claim
from drakit.plugin.testing.apiserver.errors import ApiError
from drakit.plugin.testing.real.rest import ClusterREST

__all__ = ["ADMIN_ACCESS_LABEL", "ClusterObjects"]

#: The namespace label without which the server refuses adminAccess requests (DRAAdminAccess).
ADMIN_ACCESS_LABEL = {"resource.kubernetes.io/admin-access": "true"}

_KIND_PATHS: dict[str, tuple[str, str, bool]] = {
    "Namespace": ("/api/v1", "namespaces", False),
    "ServiceAccount": ("/api/v1", "serviceaccounts", True),
    "ConfigMap": ("/api/v1", "configmaps", True),
    "ResourceQuota": ("/api/v1", "resourcequotas", True),
    "ClusterRole": ("/apis/rbac.authorization.k8s.io/v1", "clusterroles", False),
    "ClusterRoleBinding": ("/apis/rbac.authorization.k8s.io/v1", "clusterrolebindings", False),
    "Role": ("/apis/rbac.authorization.k8s.io/v1", "roles", True),
    "RoleBinding": ("/apis/rbac.authorization.k8s.io/v1", "rolebindings", True),
    "ValidatingAdmissionPolicy": ("/apis/admissionregistration.k8s.io/v1",
                                  "validatingadmissionpolicies", False),
    "ValidatingAdmissionPolicyBinding": ("/apis/admissionregistration.k8s.io/v1",
                                         "validatingadmissionpolicybindings", False),
    "DaemonSet": ("/apis/apps/v1", "daemonsets", True),
    "DeviceClass": ("/apis/resource.k8s.io/v1", "deviceclasses", False),
    "ResourceClaimTemplate": ("/apis/resource.k8s.io/v1", "resourceclaimtemplates", True),
    "ResourceClaim": ("/apis/resource.k8s.io/v1", "resourceclaims", True),
    "Pod": ("/api/v1", "pods", True),
}


class ClusterObjects:
    """Create, read, list, update, delete and apply objects as the admin (v1 shapes)."""

    def __init__(self, rest: ClusterREST) -> None:
        self._rest = rest

    def create_object(self, resource: str, obj: Mapping[str, Any],
                      namespace: str = "") -> dict[str, Any]:
        """POST ``obj`` (v1 shape) as the admin; a given ``status`` is then written to the
        status subresource (nodes, resourceclaims). Returns the stored object (v1 shape)."""
        namespace = namespace or (obj.get("metadata") or {}).get("namespace", "")
        body = self._rest.to_server(resource, {k: v for k, v in obj.items() if k != "status"})
        created = self._rest.from_server(resource, self._rest.request(
            "POST", self._rest.path(resource, namespace), body))
        if obj.get("status") and resource in ("nodes", "resourceclaims", "pods"):
            created["status"] = obj["status"]
            created = self.update_object(resource, created, subresource="status")
        return created

    def get_object(self, resource: str, name: str, namespace: str = "") -> dict[str, Any] | None:
        """The object (v1 shape, no apiVersion/kind) or None when absent."""
        try:
            return self._rest.from_server(resource, self._rest.request(
                "GET", self._rest.path(resource, namespace, name)))
        except ApiError as e:
            if e.code == 404:
                return None
            raise

    def list_objects(self, resource: str, namespace: str | None = None, *,
                     label_selector: str | None = None, field_selector: str | None = None,
                     copy: bool = True) -> list[dict[str, Any]]:
        """Objects sorted by namespace/name (v1 shape); selectors as the API takes them.
        ``copy`` is accepted as :class:`~drakit.plugin.testing.EmbeddedAPIServer` takes it;
        the objects read here are always the caller's own."""
        query = {k: v for k, v in (("labelSelector", label_selector),
                                   ("fieldSelector", field_selector)) if v}
        answer = self._rest.request("GET", self._rest.path(resource, namespace or ""), query=query)
        items = [self._rest.from_server(resource, i) for i in answer.get("items") or []]
        return sorted(items, key=lambda o: (o["metadata"].get("namespace", ""),
                                            o["metadata"]["name"]))

    def update_object(self, resource: str, obj: Mapping[str, Any], *,
                      subresource: str = "") -> dict[str, Any]:
        """PUT ``obj`` (v1 shape); a set resourceVersion must be current (else 409)."""
        meta = obj.get("metadata") or {}
        path = self._rest.path(resource, meta.get("namespace", ""), meta.get("name", ""))
        if subresource:
            path += f"/{subresource}"
        return self._rest.from_server(resource, self._rest.request(
            "PUT", path, self._rest.to_server(resource, obj)))

    def delete_object(self, resource: str, name: str, namespace: str = "") -> bool:
        """DELETE (foreground-free, immediate for the kinds used here); False when absent."""
        try:
            self._rest.request("DELETE", self._rest.path(resource, namespace, name),
                         {"kind": "DeleteOptions", "apiVersion": "v1", "gracePeriodSeconds": 0})
            return True
        except ApiError as e:
            if e.code == 404:
                return False
            raise

    def apply(self, resource: str, obj: Mapping[str, Any], *, field_manager: str = "drakit-test",
              namespace: str = "", subresource: str = "", token: str | None = None) -> Any:
        """Server-side apply ``obj`` (server's JSON shape, apiVersion/kind set)."""
        namespace = namespace or (obj.get("metadata") or {}).get("namespace", "")
        path = self._rest.path(resource, namespace, obj["metadata"]["name"])
        if subresource:
            path += f"/{subresource}"
        return self._rest.request("PATCH", path, dict(obj), token=token,
                            content_type="application/apply-patch+yaml",
                            query={"fieldManager": field_manager, "force": "true"})

    def apply_manifests(self, docs: Iterable[Mapping[str, Any]], *,
                        field_manager: str = "drakit-test", dry_run: bool = False) -> None:
        """Server-side apply every manifest (kinds of :data:`_KIND_PATHS`: the ones deploy/
        uses) as the admin, each at its own ``apiVersion`` (the kind's usual version without
        one); ``dry_run`` sends ``dryRun=All``. kubectl is not needed."""
        for doc in docs:
            kind = doc.get("kind", "")
            if kind not in _KIND_PATHS:
                raise ValueError(f"apply_manifests: no path known for kind {kind!r} "
                                 f"(known: {', '.join(sorted(_KIND_PATHS))}); use kubectl")
            prefix, plural, namespaced = _KIND_PATHS[kind]
            api_version = doc.get("apiVersion")
            if api_version:  # the document's own version (v1beta1 on a 1.32 server)
                prefix = "/api/v1" if api_version == "v1" else f"/apis/{api_version}"
            meta = doc.get("metadata") or {}
            path = prefix
            if namespaced:
                path += f"/namespaces/{meta.get('namespace') or 'default'}"
            path += f"/{plural}/{meta['name']}"
            query = {"fieldManager": field_manager, "force": "true"}
            if dry_run:
                query["dryRun"] = "All"
            self._rest.request("PATCH", path, dict(doc),
            content_type="application/apply-patch+yaml",
                         query=query)

    def reset(self, namespaces: Sequence[str] = ("default",)) -> None:
        """Delete every ResourceSlice and the ResourceClaims of ``namespaces`` (as the
        admin), so a test written for a fresh embedded server (node-1, claim c1) can run on
        this shared one. Nodes, RBAC, policies and DeviceClasses stay."""
        base = f"/apis/resource.k8s.io/{self._rest.helper_version}"
        self._rest.request("DELETE", f"{base}/resourceslices")
        for namespace in namespaces:
            self._rest.request("DELETE", f"{base}/namespaces/{namespace}/resourceclaims")

    def create_node(self, name: str, labels: Mapping[str, str] | None = None) -> dict[str, Any]:
        """A Node, Ready and without taints (so the scheduler binds pods to it): the
        ``node.kubernetes.io/not-ready`` taint admission puts on a new Node is removed."""
        now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        node = {
            "metadata": {"name": name,
                         "labels": {"kubernetes.io/hostname": name,
                                    "kubernetes.io/os": "linux", **(labels or {})}},
            "spec": {},
            "status": {
                "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady",
                                "message": "kubelet is posting ready status",
                                "lastHeartbeatTime": now, "lastTransitionTime": now}],
                "capacity": {"cpu": "8", "memory": "16Gi", "pods": "110"},
                "allocatable": {"cpu": "8", "memory": "16Gi", "pods": "110"},
            },
        }
        created = self.create_object("nodes", node)
        if created.get("spec", {}).get("taints"):
            # admission (TaintNodesByCondition) adds node.kubernetes.io/not-ready; only the
            # node-lifecycle controller, not running here, would take it off again
            created["spec"]["taints"] = []
            created = self.update_object("nodes", created)
        return created

    def ensure_namespace(self, name: str, labels: Mapping[str, str] | None = None) -> None:
        """Create the namespace unless it exists (labels are merged in when given), with its
        ``default`` ServiceAccount (no controller-manager makes it here; pods need it)."""
        existing = self.get_object("namespaces", name)
        if existing is None:
            self.create_object("namespaces", {"metadata": {"name": name,
                                                           "labels": dict(labels or {})}})
        elif labels:
            self._rest.request("PATCH", f"/api/v1/namespaces/{name}",
                         {"metadata": {"labels": dict(labels)}},
                         content_type="application/merge-patch+json")
        if self.get_object("serviceaccounts", "default", name) is None:
            with contextlib.suppress(ApiError):  # 409: made meanwhile
                self.create_object("serviceaccounts", {"metadata": {"name": "default",
                                                                    "namespace": name}})

    def create_claim(
        self, namespace: str, name: str,
        devices: Sequence[AllocatedDevice | Mapping[str, Any]] = (), *,
        uid: str | None = None, node_name: str | None = None,
        device_class_name: str = "drakit.example.com",
        config: Sequence[Mapping[str, Any]] | None = None,
        reserved_for: Sequence[Mapping[str, Any]] | None = None,
        labels: Mapping[str, str] | None = None,
    ) -> dict[str, Any]:
        """Create a ResourceClaim allocated to ``devices``, as the embedded server's
        ``create_claim`` does (same arguments; the allocation is written to the status
        subresource as the admin). The real server picks the UID, so ``uid`` must be None.
        With an ``admin_access`` device the namespace gets the label DRAAdminAccess asks
        for (:data:`ADMIN_ACCESS_LABEL`)."""
        if uid is not None:
            raise ValueError("the real API server assigns metadata.uid; pass uid=None")
        admin = any(isinstance(d, AllocatedDevice) and d.admin_access for d in devices)
        # DRAAdminAccess: only namespaces labelled so may hold adminAccess requests
        self.ensure_namespace(namespace, ADMIN_ACCESS_LABEL if admin else None)
        claim = allocated_claim(
            namespace, name, devices, device_class_name=device_class_name,
            node_name=node_name, config=config, reserved_for=reserved_for, labels=labels,
            admin_access_requests=True)
        return self.create_object("resourceclaims", claim)
