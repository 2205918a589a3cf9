"""Convert ResourceSlice and ResourceClaim JSON between resource.k8s.io versions.

drakit works in the v1 shape internally (drakit.discovery.model ``to_api()``). Servers before
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

import re
from dataclasses import dataclass
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


# ---------------------------------------------------------------------------------------------
# fields newer than the server


@dataclass(frozen=True)
class NewField:
    """A ResourceSlice field newer than resource.k8s.io/v1 of Kubernetes 1.34: ``name`` as
    written in messages, the ``definition`` (suffix after ``io.k8s.api.resource.<version>.``)
    and ``property`` that declare it in the server's OpenAPI, its feature ``gate`` and the
    Kubernetes version that added it."""

    name: str
    definition: str
    property: str
    gate: str
    since: str


NEW_SLICE_FIELDS: Final = (
    NewField("spec.partitionTypeAttribute", "ResourceSliceSpec", "partitionTypeAttribute",
             "DRAPartitionableDevicesType", "1.37"),
    NewField("spec.skipNodeOperations", "ResourceSliceSpec", "skipNodeOperations",
             "DRAOptionalNodeOperations", "1.37"),
    # (1.36 had the alpha field under another name, nodeAllocatableResourceMappings)
    NewField("spec.devices[].nodeAllocatableResources", "Device", "nodeAllocatableResources",
             "DRANodeAllocatableResources", "1.37"),
    NewField("spec.devices[].consumesCounters[].compatibilityGroups",
             "DeviceCounterConsumption", "compatibilityGroups", "DRADeviceCompatibilityGroups",
             "1.37"),
    NewField("spec.devices[].attributes[].ints|bools|strings|versions", "DeviceAttribute",
             "ints", "DRAListTypeAttributes", "1.36"),
)
"""Every field of :data:`NEW_SLICE_FIELDS` is dropped (with a message) before a write to a
server whose schema lacks it."""


def served_new_fields(openapi_v3: dict[str, Any] | None, version: str) -> frozenset[str]:
    """Names of the :data:`NEW_SLICE_FIELDS` the server declares for ``version``, from its
    ``/openapi/v3/apis/resource.k8s.io/<version>`` document. Without a document (the server
    serves no OpenAPI, or it could not be read): all of them for v1, none for v1beta1 and
    v1beta2 (servers that serve only those predate the fields; a 1.37 server that serves
    v1 is asked in v1)."""
    _check(version)
    if openapi_v3 is None:
        return frozenset(f.name for f in NEW_SLICE_FIELDS) if version == "v1" else frozenset()
    schemas = (openapi_v3.get("components") or {}).get("schemas") or {}
    served = set()
    for f in NEW_SLICE_FIELDS:
        definition = f.definition
        if version == "v1beta1" and definition == "Device":
            definition = "BasicDevice"
        props = (schemas.get(f"io.k8s.api.resource.{version}.{definition}") or {}).get(
            "properties") or {}
        if f.property in props:
            served.add(f.name)
    return frozenset(served)


def drop_unserved_fields(obj: dict[str, Any], served: frozenset[str]
                         ) -> tuple[dict[str, Any], list[str]]:
    """A v1-shaped ResourceSlice without the :data:`NEW_SLICE_FIELDS` not in ``served``, and
    one message per field dropped (``spec.devices[3].nodeAllocatableResources: not served
    by this API server (Kubernetes 1.36+, feature gate DRANodeAllocatableResources)``).
    The input is not changed; an object without such fields is returned as is."""
    spec = obj.get("spec")
    if not isinstance(spec, dict) or len(served) == len(NEW_SLICE_FIELDS):
        return obj, []
    names = {f.name: f for f in NEW_SLICE_FIELDS if f.name not in served}
    dropped: list[str] = []

    def note(path: str, f: NewField) -> None:
        dropped.append(f"{path}: not served by this API server (Kubernetes {f.since}+, "
                       f"feature gate {f.gate}); left out")

    out_spec = dict(spec)
    for f in NEW_SLICE_FIELDS[:2]:
        if f.name in names and out_spec.get(f.property) is not None:
            del out_spec[f.property]
            note(f.name, f)
    nar, groups, lists = (names.get(NEW_SLICE_FIELDS[i].name) for i in (2, 3, 4))
    devices = spec.get("devices")
    if isinstance(devices, list) and (nar or groups or lists):
        new_devices = []
        for i, device in enumerate(devices):
            if not isinstance(device, dict):
                new_devices.append(device)
                continue
            d = dict(device)
            path = f"spec.devices[{i}]"
            if nar and d.get("nodeAllocatableResources") is not None:
                del d["nodeAllocatableResources"]
                note(f"{path}.nodeAllocatableResources", nar)
            if groups and isinstance(d.get("consumesCounters"), list):
                consumes = []
                for j, c in enumerate(d["consumesCounters"]):
                    if isinstance(c, dict) and c.get("compatibilityGroups") is not None:
                        c = {k: v for k, v in c.items() if k != "compatibilityGroups"}
                        note(f"{path}.consumesCounters[{j}].compatibilityGroups", groups)
                    consumes.append(c)
                d["consumesCounters"] = consumes
            if lists and isinstance(d.get("attributes"), dict):
                kept = {}
                for key, attr in d["attributes"].items():
                    if isinstance(attr, dict) and any(attr.get(m) is not None for m in (
                            "ints", "bools", "strings", "versions")):
                        note(f"{path}.attributes[{key}]", lists)
                        continue
                    kept[key] = attr
                if kept:
                    d["attributes"] = kept
                else:
                    d.pop("attributes", None)
            new_devices.append(d)
        out_spec["devices"] = new_devices
    if not dropped:
        return obj, []
    return {**obj, "spec": out_spec}, dropped


def unserved_field_key(message: str) -> str:
    """The field a :func:`drop_unserved_fields` message is about, without indexes and keys
    (``spec.devices[].attributes[]``): to report each field once, not once per device."""
    return re.sub(r"\[[^\]]*\]", "[]", message.split(": ", 1)[0])


# ---------------------------------------------------------------------------------------------
# fields older servers lack (Kubernetes 1.32 and 1.33)


@dataclass(frozen=True)
class GatedField:
    """A ResourceSlice field that resource.k8s.io gained after Kubernetes 1.32: ``name`` as
    written in messages, the OpenAPI ``definition`` (``Device``; ``BasicDevice`` in v1beta1)
    and ``property`` that declare it, its feature ``gate``, the Kubernetes version that
    added it, and whether a device that has it must be left out (``device``: publishing it
    without the field would promise what the device cannot keep, e.g. counters shared with
    other devices, a taint, a binding condition) or only the field (``field``)."""

    name: str
    definition: str
    property: str
    gate: str
    since: str
    leave_out: str


OLDER_SLICE_FIELDS: Final = (
    GatedField("spec.sharedCounters", "ResourceSliceSpec", "sharedCounters",
               "DRAPartitionableDevices", "1.33", "field"),
    GatedField("spec.devices[].consumesCounters", "Device", "consumesCounters",
               "DRAPartitionableDevices", "1.33", "device"),
    GatedField("spec.devices[].taints", "Device", "taints", "DRADeviceTaints", "1.33",
               "device"),
    GatedField("spec.devices[].bindingConditions", "Device", "bindingConditions",
               "DRADeviceBindingConditions", "1.34", "device"),
    GatedField("spec.devices[].allowMultipleAllocations", "Device", "allowMultipleAllocations",
               "DRAConsumableCapacity", "1.34", "field"),
    GatedField("spec.devices[].capacity[].requestPolicy", "DeviceCapacity", "requestPolicy",
               "DRAConsumableCapacity", "1.34", "field"),
)
"""Fields of the v1 shape a Kubernetes 1.32/1.33 server does not have: sent there, they are
dropped without an error (unknown fields). They are left out before the write instead, with
a message (:func:`drop_older_unserved_fields`)."""

def served_older_fields(openapi_v3: dict[str, Any] | None, version: str) -> frozenset[str]:
    """Names of the :data:`OLDER_SLICE_FIELDS` the server declares for ``version`` in its
    OpenAPI v3 document. Without one nothing is known (every kube-apiserver of 1.32+ serves
    one; a stand-in without it keeps what it is sent): all of them, as before."""
    _check(version)
    if openapi_v3 is None:
        return frozenset(f.name for f in OLDER_SLICE_FIELDS)
    schemas = (openapi_v3.get("components") or {}).get("schemas") or {}
    served = set()
    for f in OLDER_SLICE_FIELDS:
        definition = "BasicDevice" if version == "v1beta1" and f.definition == "Device" \
            else f.definition
        props = (schemas.get(f"io.k8s.api.resource.{version}.{definition}") or {}).get(
            "properties") or {}
        if f.property in props:
            served.add(f.name)
    return frozenset(served)


def drop_older_unserved_fields(obj: dict[str, Any], served: frozenset[str], server: str
                               ) -> tuple[dict[str, Any], list[str]]:
    """A v1-shaped ResourceSlice without what of :data:`OLDER_SLICE_FIELDS` is not in
    ``served``: a device that has a ``device`` field is left out, a ``field`` field is
    removed. One message per thing left out, naming ``server`` (e.g. ``Kubernetes
    v1.32.13``), the field, the version that added it and its feature gate. The input is
    not changed."""
    spec = obj.get("spec")
    missing = [f for f in OLDER_SLICE_FIELDS if f.name not in served]
    if not isinstance(spec, dict) or not missing:
        return obj, []
    by_prop = {f.property: f for f in missing}
    dropped: list[str] = []

    def note(path: str, f: GatedField, what: str) -> None:
        dropped.append(f"{path}: not served by {server} (Kubernetes {f.since}+, feature gate "
                       f"{f.gate}); {what}")

    out_spec = dict(spec)
    counters = by_prop.get("sharedCounters")
    if counters is not None and out_spec.get("sharedCounters"):
        del out_spec["sharedCounters"]
        note("spec.sharedCounters", counters, "left out")
    devices = spec.get("devices")
    if isinstance(devices, list):
        kept: list[Any] = []
        for i, device in enumerate(devices):
            if not isinstance(device, dict):
                kept.append(device)
                continue
            path = f"spec.devices[{i}]"
            blocker = next((f for f in missing if f.leave_out == "device"
                            and device.get(f.property)), None)
            if blocker is not None:
                note(f"{path}.{blocker.property}", blocker, f"device {device.get('name')!r} "
                                                            "left out")
                continue
            d = device
            multi = by_prop.get("allowMultipleAllocations")
            if multi is not None and d.get("allowMultipleAllocations") is not None:
                d = {k: v for k, v in d.items() if k != "allowMultipleAllocations"}
                note(f"{path}.allowMultipleAllocations", multi,
                     "left out (the device is allocated whole)")
            policy = by_prop.get("requestPolicy")
            capacity = d.get("capacity")
            if policy is not None and isinstance(capacity, dict):
                new_cap = {}
                for key, cap in capacity.items():
                    if isinstance(cap, dict) and cap.get("requestPolicy") is not None:
                        cap = {k: v for k, v in cap.items() if k != "requestPolicy"}
                        note(f"{path}.capacity[{key}].requestPolicy", policy, "left out")
                    new_cap[key] = cap
                d = {**d, "capacity": new_cap}
            kept.append(d)
        out_spec["devices"] = kept
    if not dropped:
        return obj, []
    return {**obj, "spec": out_spec}, dropped
