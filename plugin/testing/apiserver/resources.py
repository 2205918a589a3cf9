"""The resources the embedded API server knows, and its discovery documents.

Resource facts (names, kinds, scopes, subresources, field selectors) follow
kube-apiserver: core ``nodes`` and the ``resource.k8s.io`` kinds ``ResourceSlice``
(cluster-scoped), ``ResourceClaim`` (namespaced, ``status`` subresource) and
``DeviceClass`` (cluster-scoped), and a minimal core ``pods``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

RESOURCE_GROUP = "resource.k8s.io"
RESOURCE_VERSIONS = ("v1", "v1beta2", "v1beta1")
"""resource.k8s.io versions in preference order (v1 is GA since Kubernetes 1.34)."""

_VERBS = ["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"]


@dataclass(frozen=True)
class ResourceInfo:
    """One REST resource: ``plural`` (URL segment), ``kind``, ``group`` ("" for core),
    ``namespaced``, whether it has a ``status`` subresource, whether the server bumps
    ``metadata.generation`` on spec changes, and the field selector labels it accepts."""

    plural: str
    singular: str
    kind: str
    group: str
    namespaced: bool
    has_status: bool
    tracks_generation: bool
    field_labels: tuple[str, ...]
    returns_deleted_object: bool

    def qualified(self) -> str:
        """``resourceslices.resource.k8s.io`` (group-qualified plural, as in messages)."""
        return f"{self.plural}.{self.group}" if self.group else self.plural


NODES = ResourceInfo(
    plural="nodes",
    singular="node",
    kind="Node",
    group="",
    namespaced=False,
    has_status=True,
    tracks_generation=False,
    field_labels=("metadata.name", "spec.unschedulable"),
    returns_deleted_object=False,
)
RESOURCE_SLICES = ResourceInfo(
    plural="resourceslices",
    singular="resourceslice",
    kind="ResourceSlice",
    group=RESOURCE_GROUP,
    namespaced=False,
    has_status=False,
    tracks_generation=True,
    field_labels=("metadata.name", "spec.nodeName", "spec.driver", "spec.pool.name"),
    returns_deleted_object=True,
)
RESOURCE_CLAIMS = ResourceInfo(
    plural="resourceclaims",
    singular="resourceclaim",
    kind="ResourceClaim",
    group=RESOURCE_GROUP,
    namespaced=True,
    has_status=True,
    tracks_generation=False,  # kube-apiserver 1.37 sets no generation on claims
    field_labels=("metadata.name", "metadata.namespace"),
    returns_deleted_object=True,
)
DEVICE_CLASSES = ResourceInfo(
    plural="deviceclasses",
    singular="deviceclass",
    kind="DeviceClass",
    group=RESOURCE_GROUP,
    namespaced=False,
    has_status=False,
    tracks_generation=True,
    field_labels=("metadata.name",),
    returns_deleted_object=True,
)

#: Core ``pods``, minimally: stored as given (no validation, no defaulting), namespaced, a
#: ``status`` subresource, and the field selectors a node agent lists its node's pods by. Enough
#: for the orphan sweep's "which claims do pods on this node still use" (``spec.resourceClaims``,
#: ``status.resourceClaimStatuses``).
PODS = ResourceInfo(
    plural="pods",
    singular="pod",
    kind="Pod",
    group="",
    namespaced=True,
    has_status=True,
    tracks_generation=True,  # metadata.generation of pods (KEP-5067), as in 1.37
    field_labels=("metadata.name", "metadata.namespace", "spec.nodeName", "status.phase"),
    returns_deleted_object=True,
)

CORE_RESOURCES = {NODES.plural: NODES, PODS.plural: PODS}
DRA_RESOURCES = {
    r.plural: r for r in (RESOURCE_SLICES, RESOURCE_CLAIMS, DEVICE_CLASSES)
}
ALL_RESOURCES = {**CORE_RESOURCES, **DRA_RESOURCES}


def api_version_of(info: ResourceInfo, version: str) -> str:
    """``apiVersion`` string for ``info`` in ``version`` (``v1`` or ``resource.k8s.io/v1``)."""
    return f"{info.group}/{version}" if info.group else version


def _resource_entries(resources: list[ResourceInfo]) -> list[dict[str, Any]]:
    entries: list[dict[str, Any]] = []
    for info in resources:
        entries.append(
            {
                "name": info.plural,
                "singularName": info.singular,
                "namespaced": info.namespaced,
                "kind": info.kind,
                "verbs": list(_VERBS),
            }
        )
        if info.has_status:
            entries.append(
                {
                    "name": f"{info.plural}/status",
                    "singularName": "",
                    "namespaced": info.namespaced,
                    "kind": info.kind,
                    "verbs": ["get", "patch", "update"],
                }
            )
    return entries


def core_resource_list() -> dict[str, Any]:
    """``GET /api/v1``: the APIResourceList of the core group."""
    return {
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": "v1",
        "resources": _resource_entries(list(CORE_RESOURCES.values())),
    }


def group_resource_list(version: str) -> dict[str, Any]:
    """``GET /apis/resource.k8s.io/{version}``: the APIResourceList of that version."""
    return {
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": f"{RESOURCE_GROUP}/{version}",
        "resources": _resource_entries(list(DRA_RESOURCES.values())),
    }


def api_group(served: tuple[str, ...]) -> dict[str, Any]:
    """``GET /apis/resource.k8s.io``: the APIGroup with the served versions, preferred first."""
    versions = [{"groupVersion": f"{RESOURCE_GROUP}/{v}", "version": v} for v in served]
    return {
        "kind": "APIGroup",
        "apiVersion": "v1",
        "name": RESOURCE_GROUP,
        "versions": versions,
        "preferredVersion": versions[0],
    }


def api_group_list(served: tuple[str, ...]) -> dict[str, Any]:
    """``GET /apis``: the APIGroupList (only resource.k8s.io)."""
    group = api_group(served)
    del group["kind"], group["apiVersion"]
    return {"kind": "APIGroupList", "apiVersion": "v1", "groups": [group]}


def api_versions(server_address: str) -> dict[str, Any]:
    """``GET /api``: the APIVersions object of the core group."""
    return {
        "kind": "APIVersions",
        "versions": ["v1"],
        "serverAddressByClientCIDRs": [
            {"clientCIDR": "0.0.0.0/0", "serverAddress": server_address}
        ],
    }


def version_info(minor: int | None) -> dict[str, Any]:
    """``GET /version``. Without an explicit ``minor``: 1.37, the release whose validation
    rules the embedded server applies whatever resource.k8s.io versions it serves (like a
    1.37 kube-apiserver with ``--runtime-config`` limiting them)."""
    if minor is None:
        minor = 37
    return {
        "major": "1",
        "minor": str(minor),
        "gitVersion": f"v1.{minor}.0-drakit-embedded",
        "gitCommit": "0000000000000000000000000000000000000000",
        "gitTreeState": "clean",
        "buildDate": "2025-01-01T00:00:00Z",
        "goVersion": "none",
        "compiler": "none",
        "platform": "linux/amd64",
    }
