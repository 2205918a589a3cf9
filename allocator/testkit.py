"""Allocate a ResourceClaim on a test API server as kube-scheduler would: the allocation
drakit.allocator computes from the server's ResourceSlices, DeviceClasses and the other
claims' allocations, written to the claim's ``status`` (``allocation`` and a ``reservedFor``
pod), so a vendor's test checks its DeviceClass selectors, partitions and capacities without
Go binaries.

``server`` is anything with the test kit's object access (``get_object``, ``list_objects``,
``create_object``, ``update_object``): drakit's EmbeddedAPIServer or RealAPIServer.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from typing import Any, Protocol

from drakit.allocator import allocate


class ObjectServer(Protocol):
    def get_object(self, resource: str, name: str, namespace: str = "") -> dict[str, Any] | None:
        ...

    def list_objects(self, resource: str, namespace: str | None = None) -> list[dict[str, Any]]:
        ...

    def create_object(self, resource: str, obj: Mapping[str, Any], namespace: str = ""
                      ) -> dict[str, Any]:
        ...

    def update_object(self, resource: str, obj: Mapping[str, Any], *, subresource: str = ""
                      ) -> dict[str, Any]:
        ...


def allocate_claim(server: ObjectServer, claim: Mapping[str, Any], node_name: str,
                   reserved_for: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """Create ``claim`` (v1 shape) unless it exists, allocate it on ``node_name`` and return
    the stored claim. Raises :class:`drakit.allocator.AllocationFailed` (its
    ``explanation`` says why, per request and device) when the scheduler could not."""
    meta = claim.get("metadata") or {}
    ns = meta.get("namespace") or "default"
    stored = server.get_object("resourceclaims", meta.get("name", ""), ns)
    if stored is None:
        stored = server.create_object("resourceclaims",
                                      {**claim, "metadata": {**meta, "namespace": ns}}, ns)
    node = server.get_object("nodes", node_name) or {"metadata": {"name": node_name}}
    [allocation] = allocate([stored], server.list_objects("resourceslices"),
                            server.list_objects("deviceclasses"), node,
                            server.list_objects("resourceclaims"))
    pods = reserved_for if reserved_for is not None else [
        {"resource": "pods", "name": f"{stored['metadata']['name']}-pod",
         "uid": str(uuid.uuid4())}]
    status = {**(stored.get("status") or {}), "allocation": allocation}
    if pods:
        status["reservedFor"] = pods
    return server.update_object("resourceclaims", {**stored, "status": status},
                                subresource="status")
