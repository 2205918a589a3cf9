"""Builders of resource.k8s.io/v1 objects for the allocator tests."""

from __future__ import annotations

from typing import Any

DRIVER = "gpu.example.com"


def device(name: str, attrs: dict[str, Any] | None = None, caps: dict[str, Any] | None = None,
           **extra: Any) -> dict[str, Any]:
    d: dict[str, Any] = {"name": name}
    if attrs:
        d["attributes"] = {k: (v if isinstance(v, dict) else _attr(v)) for k, v in attrs.items()}
    if caps:
        d["capacity"] = {k: (v if isinstance(v, dict) else {"value": v}) for k, v in caps.items()}
    d.update(extra)
    return d


def _attr(v: Any) -> dict[str, Any]:
    if isinstance(v, bool):
        return {"bool": v}
    if isinstance(v, int):
        return {"int": v}
    return {"string": v}


def rslice(devices: list[dict[str, Any]], pool: str = "pool-a", node: str = "node-1",
           name: str | None = None, driver: str = DRIVER, generation: int = 1, count: int = 1,
           **spec: Any) -> dict[str, Any]:
    s: dict[str, Any] = {"driver": driver, "pool": {"name": pool, "generation": generation,
                                                    "resourceSliceCount": count},
                         "devices": devices}
    if node:
        s["nodeName"] = node
    s.update(spec)
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
            "metadata": {"name": name or f"{node}-{pool}"}, "spec": s}


def dclass(name: str = DRIVER, *exprs: str, **spec: Any) -> dict[str, Any]:
    if not exprs:
        exprs = (f'device.driver == "{DRIVER}"',)
    return {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass",
            "metadata": {"name": name},
            "spec": {"selectors": [{"cel": {"expression": e}} for e in exprs], **spec}}


def request(name: str = "gpu", cls: str = DRIVER, *exprs: str, **exactly: Any) -> dict[str, Any]:
    ex: dict[str, Any] = {"deviceClassName": cls, **exactly}
    if exprs:
        ex["selectors"] = [{"cel": {"expression": e}} for e in exprs]
    return {"name": name, "exactly": ex}


def claim(*requests: dict[str, Any], name: str = "c1", constraints: Any = None,
          config: Any = None, uid: str = "") -> dict[str, Any]:
    devices: dict[str, Any] = {"requests": list(requests)}
    if constraints:
        devices["constraints"] = constraints
    if config:
        devices["config"] = config
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
            "metadata": {"name": name, "namespace": "default", "uid": uid or f"uid-{name}"},
            "spec": {"devices": devices}}
