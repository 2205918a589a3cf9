"""The embedded API server's in-process helpers (``create_object``, ``get_object``,
``list_objects``, ``update_object``, ``delete_object``, ``field_managers``, ``create_node``,
``create_claim``): they work on the store directly in the v1 shape, with the registry's
semantics for writes; they are neither logged nor subject to faults, but they do produce
watch events.

Errors: :class:`~drakit.plugin.testing.apiserver.errors.ApiError` as the API would answer;
ValueError for an unknown resource.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from typing import Any

from drakit.plugin.testing.apiserver import errors as errors
from drakit.plugin.testing.apiserver.apply import render_path
from drakit.plugin.testing.apiserver.claims import AllocatedDevice, allocated_claim
from drakit.plugin.testing.apiserver.jsondoc import clone
from drakit.plugin.testing.apiserver.registry import Registry
from drakit.plugin.testing.apiserver.resources import ALL_RESOURCES, RESOURCE_CLAIMS, ResourceInfo
from drakit.plugin.testing.apiserver.selectors import parse_field_selector, parse_label_selector
from drakit.plugin.testing.apiserver.store import Store
from drakit.plugin.testing.apiserver.validation import validate_claim_status

__all__ = ["InProcessAccess"]


def _resource(resource: str) -> ResourceInfo:
    try:
        return ALL_RESOURCES[resource]
    except KeyError:
        raise ValueError(
            f"unknown resource {resource!r}; known: {', '.join(sorted(ALL_RESOURCES))}"
        ) from None


class InProcessAccess:
    """Direct access to a store and its registry (the in-process helpers an
    :class:`~drakit.plugin.testing.apiserver.server.EmbeddedAPIServer` has)."""

    def __init__(self, store: Store, registry: Registry) -> None:
        self._store = store
        self._registry = registry

    @property
    def resource_version(self) -> str:
        """The current global resourceVersion."""
        return str(self._store.resource_version)

    def create_object(
        self, resource: str, obj: Mapping[str, Any], namespace: str = ""
    ) -> dict[str, Any]:
        """Create ``obj`` (v1 shape) as a POST would; a given ``status`` is then written
        as a status update would. Raises :class:`ApiError` like the API would answer."""
        info = _resource(resource)
        namespace = namespace or (obj.get("metadata") or {}).get("namespace", "")
        created = self._registry.create(info, namespace, "v1", clone(dict(obj)),
                                        dry_run=False)
        if info.has_status and obj.get("status") and "status" not in created:
            body = {**created, "status": clone(obj["status"])}
            created = self._registry.update(
                info, namespace, created["metadata"]["name"], "v1", body,
                subresource="status", dry_run=False,
            )
        return created

    def get_object(self, resource: str, name: str, namespace: str = "") -> dict[str, Any] | None:
        """The stored object (v1 shape, no apiVersion/kind) or None."""
        info = _resource(resource)
        return self._store.get(self._registry.key(info, namespace, name))

    def list_objects(
        self,
        resource: str,
        namespace: str | None = None,
        *,
        label_selector: str | None = None,
        field_selector: str | None = None,
        copy: bool = True,
    ) -> list[dict[str, Any]]:
        """Stored objects sorted by namespace/name; selectors as the API takes them.
        ``copy=False`` returns the stored objects themselves, which must not be changed:
        for wait loops that only read (copying 79 ResourceSlices of 10,000 devices takes
        ~25 ms, under the interpreter lock this server's request threads need)."""
        info = _resource(resource)
        fields = parse_field_selector(field_selector, info.field_labels)
        labels = parse_label_selector(label_selector)
        items, _ = self._store.select(info.plural, namespace, lambda o: fields(o) and labels(o),
                                      copy=copy)
        return items

    def update_object(
        self, resource: str, obj: Mapping[str, Any], *, subresource: str = ""
    ) -> dict[str, Any]:
        """PUT ``obj`` (v1 shape); a set resourceVersion must be current (else ApiError 409)."""
        info = _resource(resource)
        meta = obj.get("metadata") or {}
        return self._registry.update(
            info, meta.get("namespace", ""), meta.get("name", ""), "v1",
            clone(dict(obj)), subresource=subresource, dry_run=False,
        )

    def delete_object(self, resource: str, name: str, namespace: str = "") -> bool:
        """Delete; False when it did not exist."""
        info = _resource(resource)
        return self._store.remove(self._registry.key(info, namespace, name)) is not None

    def field_managers(
        self, resource: str, name: str, namespace: str = ""
    ) -> dict[str, list[str]]:
        """Server-side apply ownership: ``{"manager" or "manager/status": [field paths]}``."""
        info = _resource(resource)
        owners = self._store.owners(self._registry.key(info, namespace, name))
        return {
            (manager + (f"/{sub}" if sub else "")): sorted(render_path(p) for p in paths)
            for (manager, sub), paths in owners.items()
        }

    def create_node(
        self, name: str, labels: Mapping[str, str] | None = None,
        declared_features: Sequence[str] = ("DRANodeAllocatableResources",),
    ) -> dict[str, Any]:
        """Create a Node (Ready, with a hostname label) and return it.
        ``declared_features`` go to ``status.declaredFeatures`` (what a kubelet 1.37 with
        the DRA gates on reports; slices with nodeAllocatableResources need
        ``DRANodeAllocatableResources`` there)."""
        node: dict[str, Any] = {
            "metadata": {
                "name": name,
                "labels": {"kubernetes.io/hostname": name, **(labels or {})},
            },
            "spec": {},
            "status": {
                "conditions": [
                    {
                        "type": "Ready",
                        "status": "True",
                        "reason": "KubeletReady",
                        "message": "kubelet is posting ready status",
                        "lastHeartbeatTime": "2025-01-01T00:00:00Z",
                        "lastTransitionTime": "2025-01-01T00:00:00Z",
                    }
                ],
            },
        }
        if declared_features:
            node["status"]["declaredFeatures"] = list(declared_features)
        return self.create_object("nodes", node)

    def create_claim(
        self,
        namespace: str,
        name: str,
        devices: Sequence[AllocatedDevice | Mapping[str, Any]] = (),
        *,
        uid: str | None = None,
        node_name: str | None = None,
        device_class_name: str = "drakit.example.com",
        config: Sequence[Mapping[str, Any]] | None = None,
        reserved_for: Sequence[Mapping[str, Any]] | None = None,
        labels: Mapping[str, str] | None = None,
    ) -> dict[str, Any]:
        """Create a ResourceClaim (v1) allocated to ``devices``.

        One request per distinct request name (``req/sub`` becomes a ``firstAvailable``
        subrequest); ``status.allocation.devices.results`` lists the devices,
        ``allocation.config`` the given opaque configs (``{"source": "FromClaim",
        "requests": [...], "opaque": {"driver": ..., "parameters": {...}}}``),
        ``allocation.nodeSelector`` selects ``node_name``; ``reservedFor`` defaults to one
        pod. With no devices the claim is created unallocated. Returns the stored claim.
        """
        claim = allocated_claim(
            namespace, name, devices, device_class_name=device_class_name,
            node_name=node_name, config=config, reserved_for=reserved_for, labels=labels)
        # no metadata.generation: kube-apiserver 1.37 sets none on ResourceClaims
        claim["metadata"].update({"uid": uid or str(uuid.uuid4()),
                                  "creationTimestamp": "2025-01-01T00:00:00Z"})
        causes = validate_claim_status(claim, None)
        if causes:
            raise errors.invalid_object("ResourceClaim", RESOURCE_CLAIMS.group, name, causes)
        key = self._registry.key(RESOURCE_CLAIMS, namespace, name)
        with self._store.locked():
            if self._store.get(key) is not None:
                raise errors.already_exists(RESOURCE_CLAIMS.plural, RESOURCE_CLAIMS.group, name)
            return self._store.put(key, claim)
