"""Conversion between the stored (resource.k8s.io/v1) shape and older API versions.

The embedded API server stores every object in its v1 shape and converts at the
HTTP boundary. The differences that matter (Kubernetes API reference, resource.k8s.io):

* ResourceSlice ``spec.devices[]``: v1 and v1beta2 put a device's fields next to its
  ``name``; v1beta1 wraps them in ``basic`` (``{"name": ..., "basic": {attributes, capacity,
  consumesCounters, taints, nodeName, ...}}``).
* ResourceClaim ``spec.devices.requests[]``: v1 and v1beta2 put the exact request under
  ``exactly`` (``{"name", "exactly": {deviceClassName, selectors, allocationMode, count,
  adminAccess, tolerations, capacity}, "firstAvailable"}``); v1beta1 has those fields
  directly on the request.
* Everything else these four resources carry (DeviceClass, claim status incl.
  ``allocation`` and ``devices``) has the same JSON in all three versions.

The functions accept partial objects (server-side apply configurations) and never
modify their input.
"""

from __future__ import annotations

from functools import partial
from typing import Any

from drakit.plugin.testing.apiserver.jsondoc import clone, strip_nulls
from drakit.plugin.testing.apiserver.resources import RESOURCE_CLAIMS, RESOURCE_SLICES, ResourceInfo

_REQUEST_OWN_FIELDS = ("name", "firstAvailable")


def _shared(value: Any) -> Any:
    return value


def slice_device_to_v1beta1(device: dict[str, Any], *, copy: bool = True) -> dict[str, Any]:
    """v1 device → v1beta1 device: every field except ``name`` moves under ``basic``.
    ``copy=False`` shares the field values with ``device`` (for an answer encoded at
    once)."""
    c = clone if copy else _shared
    out: dict[str, Any] = {}
    basic = {k: c(v) for k, v in device.items() if k != "name"}
    if "name" in device:
        out["name"] = device["name"]
    if basic:
        out["basic"] = basic
    return out


def _lifted(obj: dict[str, Any], key: str, c: Any) -> dict[str, Any]:
    """``obj`` with the fields of its ``key`` object moved next to its own fields (its own
    win on a clash); ``c`` copies (or shares) each value."""
    out = {k: c(v) for k, v in obj.items() if k != key}
    inner = obj.get(key)
    if isinstance(inner, dict):
        for name, value in inner.items():
            out.setdefault(name, c(value))
    return out


def slice_device_from_v1beta1(device: dict[str, Any]) -> dict[str, Any]:
    """v1beta1 device → v1 device: the ``basic`` fields are lifted next to ``name``."""
    return _lifted(device, "basic", clone)


def claim_request_to_v1beta1(request: dict[str, Any], *, copy: bool = True) -> dict[str, Any]:
    """v1 DeviceRequest → v1beta1: the ``exactly`` fields move onto the request itself.
    ``copy=False`` shares the field values with ``request``."""
    return _lifted(request, "exactly", clone if copy else _shared)


def claim_request_from_v1beta1(request: dict[str, Any]) -> dict[str, Any]:
    """v1beta1 DeviceRequest → v1: every field except ``name``/``firstAvailable`` moves
    under ``exactly`` (left out when there are none)."""
    out = {k: clone(v) for k, v in request.items() if k in _REQUEST_OWN_FIELDS}
    exactly = {
        k: clone(v) for k, v in request.items() if k not in _REQUEST_OWN_FIELDS
    }
    if exactly:
        out["exactly"] = exactly
    return out


def _map_list(obj: dict[str, Any], path: tuple[str, ...], fn: Any) -> dict[str, Any]:
    """``obj`` with ``fn`` applied to each dict item of the list at ``path``: the maps on
    the way to the list are copied (shallow), ``obj`` itself is not changed."""
    parents: list[dict[str, Any]] = [obj]
    for key in path[:-1]:
        child = parents[-1].get(key)
        if not isinstance(child, dict):
            return obj
        parents.append(child)
    items = parents[-1].get(path[-1])
    if not isinstance(items, list):
        return obj
    value: Any = [fn(i) if isinstance(i, dict) else i for i in items]
    for parent, key in zip(reversed(parents), reversed(path), strict=True):
        value = {**parent, key: value}
    out: dict[str, Any] = value
    return out


_SLICE_DEVICES = ("spec", "devices")
_CLAIM_REQUESTS = ("spec", "devices", "requests")


def to_internal(info: ResourceInfo, version: str, obj: dict[str, Any]) -> dict[str, Any]:
    """Object (or apply configuration) sent in ``version`` → stored v1 shape (a copy).
    ``apiVersion`` is removed (the server sets it on the way out) and so are ``null``
    map values (see :func:`~drakit.plugin.testing.apiserver.jsondoc.strip_nulls`)."""
    out = strip_nulls({k: v for k, v in obj.items() if k != "apiVersion"})
    if version == "v1beta1":
        if info is RESOURCE_SLICES:
            out = _map_list(out, _SLICE_DEVICES, slice_device_from_v1beta1)
        elif info is RESOURCE_CLAIMS:
            out = _map_list(out, _CLAIM_REQUESTS, claim_request_from_v1beta1)
    return out


def from_internal(
    info: ResourceInfo, version: str, obj: dict[str, Any], *, with_type: bool = True,
    copy: bool = True,
) -> dict[str, Any]:
    """Stored v1 object → ``version``; ``apiVersion``/``kind`` are set first when
    ``with_type`` (list items carry neither, as kube-apiserver writes them).

    ``copy=False`` shares everything it does not change with ``obj``: for an answer that is
    encoded at once (no deep copy of a 128-device slice per answer or watch event)."""
    body = {k: v for k, v in obj.items() if k not in ("apiVersion", "kind")}
    if copy:
        body = clone(body)
    if version == "v1beta1":
        # The body is either a fresh copy or shared for encoding only: the converted
        # items may share their values with it.
        if info is RESOURCE_SLICES:
            body = _map_list(body, _SLICE_DEVICES, partial(slice_device_to_v1beta1, copy=False))
        elif info is RESOURCE_CLAIMS:
            body = _map_list(body, _CLAIM_REQUESTS, partial(claim_request_to_v1beta1, copy=False))
    if not with_type:
        return body
    api_version = f"{info.group}/{version}" if info.group else version
    return {"apiVersion": api_version, "kind": info.kind, **body}
