"""Convert ResourceSlice and ResourceClaim JSON between resource.k8s.io versions.

drakit works in the v1 shape internally (discovery.model ``to_api()``). Servers before
Kubernetes 1.34 serve only older versions:

* ``v1beta1`` (1.32; also served by 1.33/1.34): a slice device is ``{name, basic: {…}}``
  with every other device field (attributes, capacity, consumesCounters, taints, node
  selection, binding conditions, allowMultipleAllocations) under ``basic`` (seed 004);
  a claim request carries its exact-request fields (``deviceClassName``, ``selectors``,
  ``allocationMode``, ``count``, ``adminAccess``, ``tolerations``, ``capacity``) directly
  instead of under ``exactly``.
* ``v1beta2`` (1.33): the same shape as v1 for both kinds.

Allocation results (``status.allocation.devices.results``), opaque ``config`` and
``status.devices`` (AllocatedDeviceStatus) have the same shape in all three versions.
Conversion never mutates its input; the result shares the sub-objects it does not change
with the input (copy it before mutating it).
"""

from __future__ import annotations

from typing import Any, Final

GROUP: Final = "resource.k8s.io"
VERSIONS: Final = ("v1", "v1beta2", "v1beta1")
"""Versions drakit speaks, in preference order."""


def api_version(version: str) -> str:
    return f"{GROUP}/{version}"


def _check(version: str) -> None:
    if version not in VERSIONS:
        raise ValueError(f"unsupported {GROUP} version {version!r}; known: {', '.join(VERSIONS)}")


def _device_to_v1beta1(device: dict[str, Any]) -> dict[str, Any]:
    if "basic" in device:
        return device
    return {"name": device.get("name"), "basic": {k: v for k, v in device.items() if k != "name"}}


def _device_from_v1beta1(device: dict[str, Any]) -> dict[str, Any]:
    out = {k: v for k, v in device.items() if k != "basic"}
    basic = device.get("basic")
    if isinstance(basic, dict):
        out.update(basic)
    return out


def _with_devices(obj: dict[str, Any], api: str, kind: str, fn: Any) -> dict[str, Any]:
    out = {**obj, "apiVersion": api}
    out.setdefault("kind", kind)
    spec = out.get("spec")
    if fn is not None and isinstance(spec, dict) and isinstance(spec.get("devices"), list):
        out["spec"] = {**spec, "devices": [fn(d) if isinstance(d, dict) else d
                                           for d in spec["devices"]]}
    return out


def slice_to_version(obj: dict[str, Any], version: str) -> dict[str, Any]:
    """A v1-shaped ResourceSlice (object or list item) in ``version``'s shape."""
    _check(version)
    fn = _device_to_v1beta1 if version == "v1beta1" else None
    return _with_devices(obj, api_version(version), "ResourceSlice", fn)


def slice_from_version(obj: dict[str, Any], version: str) -> dict[str, Any]:
    """A ResourceSlice read in ``version`` in the v1 shape."""
    _check(version)
    fn = _device_from_v1beta1 if version == "v1beta1" else None
    return _with_devices(obj, api_version("v1"), "ResourceSlice", fn)


def _request_from_v1beta1(request: dict[str, Any]) -> dict[str, Any]:
    if "exactly" in request or "firstAvailable" in request:
        return request
    exactly = {k: v for k, v in request.items() if k != "name"}
    out: dict[str, Any] = {"name": request.get("name")}
    if exactly:
        out["exactly"] = exactly
    return out


def _request_to_v1beta1(request: dict[str, Any]) -> dict[str, Any]:
    out = {k: v for k, v in request.items() if k != "exactly"}
    exactly = request.get("exactly")
    if isinstance(exactly, dict):
        out.update(exactly)
    return out


def _with_requests(obj: dict[str, Any], api: str, fn: Any) -> dict[str, Any]:
    out = {**obj, "apiVersion": api}
    out.setdefault("kind", "ResourceClaim")
    spec = out.get("spec")
    devices = spec.get("devices") if isinstance(spec, dict) else None
    if fn is not None and isinstance(devices, dict) and isinstance(devices.get("requests"), list):
        requests = [fn(r) if isinstance(r, dict) else r for r in devices["requests"]]
        out["spec"] = {**spec, "devices": {**devices, "requests": requests}}  # type: ignore[dict-item]
    return out


def claim_from_version(obj: dict[str, Any], version: str) -> dict[str, Any]:
    """A ResourceClaim read in ``version`` in the v1 shape."""
    _check(version)
    return _with_requests(obj, api_version("v1"),
                          _request_from_v1beta1 if version == "v1beta1" else None)


def claim_to_version(obj: dict[str, Any], version: str) -> dict[str, Any]:
    """A v1-shaped ResourceClaim in ``version``'s shape."""
    _check(version)
    return _with_requests(obj, api_version(version),
                          _request_to_v1beta1 if version == "v1beta1" else None)
