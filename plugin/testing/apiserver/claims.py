"""Allocated ResourceClaims for tests, the same for the embedded and the real API server:
:class:`AllocatedDevice` (one DeviceRequestAllocationResult) and :func:`allocated_claim`
(a v1 ResourceClaim whose spec asks for exactly the given devices and whose
``status.allocation`` holds them).
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from drakit.plugin.testing.apiserver.jsondoc import clone

__all__ = ["AllocatedDevice", "allocated_claim"]


@dataclass(frozen=True)
class AllocatedDevice:
    """One allocation result of a claim (DeviceRequestAllocationResult): ``request`` is
    the request name (``req`` or ``req/subrequest``), ``share_id`` a lowercase UUID for
    devices that allow multiple allocations."""

    driver: str
    pool: str
    device: str
    request: str = "req-0"
    share_id: str | None = None
    admin_access: bool | None = None

    def to_result(self) -> dict[str, Any]:
        result: dict[str, Any] = {
            "request": self.request,
            "driver": self.driver,
            "pool": self.pool,
            "device": self.device,
        }
        if self.share_id is not None:
            result["shareID"] = self.share_id
        if self.admin_access is not None:
            result["adminAccess"] = self.admin_access
        return result


def allocated_claim(
    namespace: str,
    name: str,
    devices: Sequence[AllocatedDevice | Mapping[str, Any]],
    *,
    device_class_name: str,
    node_name: str | None,
    config: Sequence[Mapping[str, Any]] | None,
    reserved_for: Sequence[Mapping[str, Any]] | None,
    labels: Mapping[str, str] | None,
    admin_access_requests: bool = False,
) -> dict[str, Any]:
    """A ResourceClaim (v1 shape, metadata ``name``, ``namespace`` and ``labels`` only)
    allocated to ``devices``.

    One request per distinct request name (``req/sub`` becomes a ``firstAvailable``
    subrequest) asking for ``ExactCount`` of ``device_class_name``; no devices: one request
    ``req-0`` and no status. ``status.allocation.devices.results`` lists the devices,
    ``allocation.config`` the given opaque configs, ``allocation.nodeSelector`` selects
    ``node_name``; ``reservedFor`` defaults to one pod (``<name>-pod``). With
    ``admin_access_requests`` a request whose results have ``adminAccess`` asks for it
    (the real server's validation wants that; DRAAdminAccess).
    """
    results = [
        d.to_result() if isinstance(d, AllocatedDevice) else clone(dict(d))
        for d in devices
    ]
    counts: dict[str, int] = {}
    for result in results:
        counts[result["request"]] = counts.get(result["request"], 0) + 1
    requests: dict[str, dict[str, Any]] = {}
    for request_name, count in counts.items():
        base, _, sub = request_name.partition("/")
        exact = {"deviceClassName": device_class_name, "allocationMode": "ExactCount",
                 "count": count}
        if admin_access_requests and any(
                r.get("adminAccess") for r in results if r["request"] == request_name):
            exact["adminAccess"] = True
        if sub:
            entry = requests.setdefault(base, {"name": base, "firstAvailable": []})
            entry["firstAvailable"].append({"name": sub, **exact})
        else:
            requests[base] = {"name": base, "exactly": exact}
    if not requests:
        requests["req-0"] = {"name": "req-0", "exactly": {
            "deviceClassName": device_class_name, "allocationMode": "ExactCount",
            "count": 1}}
    claim: dict[str, Any] = {
        "metadata": {"name": name, "namespace": namespace,
                     **({"labels": dict(labels)} if labels else {})},
        "spec": {"devices": {"requests": list(requests.values())}},
    }
    if results:
        allocation: dict[str, Any] = {"devices": {"results": results}}
        if config:
            allocation["devices"]["config"] = [clone(dict(c)) for c in config]
        if node_name:
            allocation["nodeSelector"] = {"nodeSelectorTerms": [{"matchFields": [
                {"key": "metadata.name", "operator": "In", "values": [node_name]}]}]}
        pods = reserved_for if reserved_for is not None else [
            {"resource": "pods", "name": f"{name}-pod", "uid": str(uuid.uuid4())}]
        claim["status"] = {"allocation": allocation}
        if pods:
            claim["status"]["reservedFor"] = [clone(dict(p)) for p in pods]
    return claim
