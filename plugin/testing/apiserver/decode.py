"""Decoding a request body into the stored v1 shape the way kube-apiserver decodes into its
Go types: the type checked against the URL, unknown fields dropped (a ``Warning: 299``, or a
400 under ``fieldValidation=Strict``), quantities checked (400) and rendered canonically,
defaults set (a ResourceSlice taint's ``timeAdded``, a ResourceClaim request's
``allocationMode`` and ``count``).

Errors: :class:`~drakit.plugin.testing.apiserver.errors.ApiError` (400 bad request).
"""

from __future__ import annotations

import datetime
from collections.abc import Mapping
from typing import Any

from drakit.plugin.testing.apiserver import errors as errors
from drakit.plugin.testing.apiserver import schema as schema
from drakit.plugin.testing.apiserver.convert import to_internal
from drakit.plugin.testing.apiserver.request import current_request
from drakit.plugin.testing.apiserver.resources import (
    RESOURCE_CLAIMS,
    RESOURCE_SLICES,
    ResourceInfo,
    api_version_of,
)

__all__ = ["check_type", "decode", "now"]


def _default_time_added(obj: dict[str, Any]) -> None:
    """The v1 defaulting of ``spec.devices[].taints[].timeAdded``: now, whole seconds."""
    devices = (obj.get("spec") or {}).get("devices")
    if not isinstance(devices, list):
        return
    stamp = ""
    for device in devices:
        taints = device.get("taints") if isinstance(device, dict) else None
        for taint in taints if isinstance(taints, list) else ():
            if isinstance(taint, dict) and not taint.get("timeAdded"):
                stamp = stamp or now()
                taint["timeAdded"] = stamp


def now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def check_type(info: ResourceInfo, version: str, body: Mapping[str, Any]) -> None:
    expected = api_version_of(info, version)
    api_version = body.get("apiVersion")
    if api_version and api_version != expected:
        raise errors.bad_request(
            f"the API version in the data ({api_version}) does not match the expected "
            f"API version ({expected})"
        )
    kind = body.get("kind")
    if kind and kind != info.kind:
        raise errors.bad_request(
            f"the kind in the data ({kind}) does not match the expected kind ({info.kind})"
        )


def decode(info: ResourceInfo, version: str, body: Any,
           schema_version: str | None) -> dict[str, Any]:
    """The stored shape of a body, decoded the way kube-apiserver decodes into its Go
    types: unknown fields dropped (400 under ``fieldValidation=Strict``), quantities
    checked (400) and rendered canonically, defaults set (taints' ``timeAdded``)."""
    if not isinstance(body, dict):
        raise errors.bad_request("the request body must be a JSON object")
    check_type(info, version, body)
    obj = to_internal(info, version, body)
    obj.pop("kind", None)
    if not isinstance(obj.get("metadata", {}), dict):
        raise errors.bad_request("metadata must be an object")
    obj.setdefault("metadata", {})
    stored_version = "v1" if info.group else version
    found = schema.decode(obj, info.group, stored_version, info.kind, schema_version)
    if found.bad_quantities:
        raise errors.bad_request(schema.quantity_error(info.kind, version))
    request = current_request()
    if found.unknown:
        if request.strict:
            raise errors.bad_request("strict decoding error: " + ", ".join(
                f'unknown field "{p}"' for p in found.unknown))
        request.warnings.extend(f'unknown field "{p}"' for p in found.unknown)
    meta = obj["metadata"]
    for key in _OMITTED_WHEN_EMPTY:  # omitempty in ObjectMeta: never stored empty
        if key in meta and not meta[key]:
            del meta[key]
    if info is RESOURCE_SLICES:
        _default_time_added(obj)
    elif info is RESOURCE_CLAIMS:
        _default_requests(obj)
    return obj


_OMITTED_WHEN_EMPTY = ("labels", "annotations", "finalizers", "ownerReferences")


def _default_exact(request: Any) -> None:
    """SetDefaults_ExactDeviceRequest / SetDefaults_DeviceSubRequest (resource.k8s.io/v1,
    Kubernetes 1.37): ``allocationMode`` ExactCount, then ``count`` 1 for ExactCount;
    SetDefaults_DeviceToleration: a toleration's ``operator`` Equal."""
    if not isinstance(request, dict):
        return
    if not request.get("allocationMode"):
        request["allocationMode"] = "ExactCount"
    if request["allocationMode"] == "ExactCount" and not request.get("count"):
        request["count"] = 1
    for toleration in request.get("tolerations") or []:
        if isinstance(toleration, dict) and not toleration.get("operator"):
            toleration["operator"] = "Equal"


def _default_requests(obj: dict[str, Any]) -> None:
    """The v1 defaults of a ResourceClaim's ``spec.devices.requests[]``: of ``exactly``
    and of each ``firstAvailable`` subrequest (:func:`_default_exact`)."""
    devices = (obj.get("spec") or {}).get("devices")
    requests = devices.get("requests") if isinstance(devices, dict) else None
    for request in requests if isinstance(requests, list) else []:
        if not isinstance(request, dict):
            continue
        _default_exact(request.get("exactly"))
        for sub in request.get("firstAvailable") or []:
            _default_exact(sub)
