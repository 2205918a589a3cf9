"""resource.k8s.io objects in one shape: v1. ResourceSlices, DeviceClasses and ResourceClaims
arrive as the API server or a file gives them, in v1, v1beta2 or v1beta1; v1beta1 differs
from v1 in two places (resource.k8s.io/v1beta1 types.go, Kubernetes 1.32-1.34):

- a ResourceSlice device keeps its fields under ``basic`` (``devices[].basic.attributes``);
- a claim's request carries the exact-request fields itself (``deviceClassName``,
  ``selectors``, ``allocationMode``, ``count``, ``adminAccess``, ``tolerations``,
  ``capacity``) where v1 and v1beta2 have them under ``exactly``.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any, Final

_EXACT_FIELDS: Final = ("deviceClassName", "selectors", "allocationMode", "count",
                        "adminAccess", "tolerations", "capacity")


class ObjectError(ValueError):
    """An object the allocator cannot read; the message names object and field."""


def _name(obj: Mapping[str, Any]) -> str:
    meta = obj.get("metadata") or {}
    ns = meta.get("namespace")
    return f"{ns}/{meta.get('name', '?')}" if ns else str(meta.get("name", "?"))


def _require_mapping(value: Any, what: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise ObjectError(f"{what}: must be an object, not {type(value).__name__}")
    return value


def slice_v1(obj: Mapping[str, Any]) -> dict[str, Any]:
    """A ResourceSlice in v1 shape: new dicts down to each device, whose values are shared
    with ``obj`` (the allocator only reads them)."""
    out = dict(_require_mapping(obj, "ResourceSlice"))
    spec = _require_mapping(out.get("spec") or {}, f"ResourceSlice {_name(out)}: spec")
    devices = []
    for i, dev in enumerate(spec.get("devices") or []):
        dev = dict(_require_mapping(dev, f"ResourceSlice {_name(out)}: spec.devices[{i}]"))
        basic = dev.pop("basic", None)
        if basic is not None:
            dev.update(_require_mapping(basic, f"ResourceSlice {_name(out)}: "
                                               f"spec.devices[{i}].basic"))
        if not dev.get("name"):
            raise ObjectError(f"ResourceSlice {_name(out)}: spec.devices[{i}].name: required")
        devices.append(dev)
    spec = dict(spec)
    spec["devices"] = devices
    for field in ("driver", "pool"):
        if not spec.get(field):
            raise ObjectError(f"ResourceSlice {_name(out)}: spec.{field}: required")
    out["spec"] = spec
    return out


def _request_v1(req: Mapping[str, Any], where: str) -> dict[str, Any]:
    req = dict(_require_mapping(req, where))
    if "exactly" in req or "firstAvailable" in req:
        return req
    exactly = {k: req.pop(k) for k in _EXACT_FIELDS if k in req}
    if exactly:
        req["exactly"] = exactly
    return req


def claim_v1(obj: Mapping[str, Any]) -> dict[str, Any]:
    """A ResourceClaim (or the ``spec`` of a ResourceClaimTemplate made into a claim) in v1
    shape (a copy)."""
    out = copy.deepcopy(dict(_require_mapping(obj, "ResourceClaim")))
    kind = out.get("kind")
    if kind == "ResourceClaimTemplate":
        tmpl = out.get("spec") or {}
        meta = dict(out.get("metadata") or {})
        out = {"apiVersion": out.get("apiVersion"), "kind": "ResourceClaim",
               "metadata": {**(tmpl.get("metadata") or {}),
                            "name": meta.get("name", "template") + "-claim",
                            "namespace": meta.get("namespace", "default")},
               "spec": copy.deepcopy(tmpl.get("spec") or {})}
    spec = dict(_require_mapping(out.get("spec") or {}, f"ResourceClaim {_name(out)}: spec"))
    devices = dict(_require_mapping(spec.get("devices") or {},
                                    f"ResourceClaim {_name(out)}: spec.devices"))
    requests = []
    for i, req in enumerate(devices.get("requests") or []):
        where = f"ResourceClaim {_name(out)}: spec.devices.requests[{i}]"
        r = _request_v1(req, where)
        if not r.get("name"):
            raise ObjectError(f"{where}.name: required")
        if "firstAvailable" in r:
            r["firstAvailable"] = [
                dict(_require_mapping(s, f"{where}.firstAvailable[{j}]"))
                for j, s in enumerate(r["firstAvailable"] or [])]
        elif "exactly" not in r:
            raise ObjectError(f"{where}: one of exactly and firstAvailable is required")
        requests.append(r)
    devices["requests"] = requests
    spec["devices"] = devices
    out["spec"] = spec
    return out


def class_v1(obj: Mapping[str, Any]) -> dict[str, Any]:
    """A DeviceClass (the same shape in every version; a copy)."""
    out = copy.deepcopy(dict(_require_mapping(obj, "DeviceClass")))
    if not (out.get("metadata") or {}).get("name"):
        raise ObjectError("DeviceClass: metadata.name: required")
    return out
