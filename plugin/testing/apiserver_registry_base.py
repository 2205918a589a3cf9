"""What every verb of the embedded API server's registry
(:mod:`drakit.plugin.testing.apiserver_registry`) does first: read a stored object, decode a
body into the stored v1 shape the way kube-apiserver decodes into its Go types (type check,
unknown fields, quantities, defaults), validate it and run the admission kube-apiserver runs
for ResourceSlices (NodeDeclaredFeatures). The per-request options (``fieldValidation``,
warnings) travel in a context variable.

Errors: :class:`~drakit.plugin.testing.apiserver_errors.ApiError` (400 bad request, 404,
422 invalid, 403 admission).
"""

from __future__ import annotations

import contextvars
import datetime
import random
from collections.abc import Mapping
from dataclasses import dataclass
from dataclasses import field as dataclass_field
from typing import Any

from . import apiserver_errors as errors
from . import apiserver_schema as schema
from .apiserver_convert import to_internal
from .apiserver_resources import (
    NODES,
    RESOURCE_CLAIMS,
    RESOURCE_SLICES,
    ResourceInfo,
    api_version_of,
)
from .apiserver_store import Key, Store
from .apiserver_validate import (
    validate_claim_status,
    validate_object_name,
    validate_resource_slice,
)

__all__ = [
    "NODE_ALLOCATABLE_FEATURE",
    "RegistryBase",
    "RequestOptions",
    "current_request",
    "now",
    "set_request",
]

NODE_ALLOCATABLE_FEATURE = "DRANodeAllocatableResources"
"""The node feature (``Node.status.declaredFeatures``) nodeAllocatableResources needs."""

@dataclass
class RequestOptions:
    """Per-request decoding options and results: ``strict`` is ``fieldValidation=Strict``;
    ``warnings`` collects the texts for ``Warning: 299`` answer headers."""

    strict: bool = False
    warnings: list[str] = dataclass_field(default_factory=list)


_REQUEST: contextvars.ContextVar[RequestOptions | None] = contextvars.ContextVar(
    "embedded_apiserver_request", default=None)


def current_request() -> RequestOptions:
    """The options of the request being handled (defaults for in-process helpers)."""
    options = _REQUEST.get()
    return options if options is not None else RequestOptions()


def set_request(options: RequestOptions | None) -> None:
    """Set the options of the request the calling thread handles (None: none)."""
    _REQUEST.set(options)


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


class RegistryBase:
    """Reading, decoding, validation and admission on a :class:`Store` (the verbs are in
    :class:`~drakit.plugin.testing.apiserver_registry_writes.RegistryWrites` and
    :class:`~drakit.plugin.testing.apiserver_registry.Registry`)."""

    def __init__(self, store: Store, rng: random.Random,
                 schema_version: str | None = schema.SCHEMA_VERSION) -> None:
        self.store = store
        self._rng = rng
        self.schema_version = schema_version

    # ------------------------------------------------------------------ helpers

    @staticmethod
    def key(info: ResourceInfo, namespace: str, name: str) -> Key:
        return (info.plural, namespace if info.namespaced else "", name)

    def get(self, info: ResourceInfo, namespace: str, name: str) -> dict[str, Any]:
        obj = self.store.get(self.key(info, namespace, name))
        if obj is None:
            raise errors.not_found(info.plural, info.group, name)
        return obj

    def _check_type(self, info: ResourceInfo, version: str, body: Mapping[str, Any]) -> None:
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

    def _decode(self, info: ResourceInfo, version: str, body: Any) -> dict[str, Any]:
        """The stored shape of a body, decoded the way kube-apiserver decodes into its Go
        types: unknown fields dropped (400 under ``fieldValidation=Strict``), quantities
        checked (400) and rendered canonically, defaults set (taints' ``timeAdded``)."""
        if not isinstance(body, dict):
            raise errors.bad_request("the request body must be a JSON object")
        self._check_type(info, version, body)
        obj = to_internal(info, version, body)
        obj.pop("kind", None)
        if not isinstance(obj.get("metadata", {}), dict):
            raise errors.bad_request("metadata must be an object")
        obj.setdefault("metadata", {})
        stored_version = "v1" if info.group else version
        found = schema.decode(obj, info.group, stored_version, info.kind, self.schema_version)
        if found.bad_quantities:
            raise errors.bad_request(schema.quantity_error(info.kind, version))
        request = current_request()
        if found.unknown:
            if request.strict:
                raise errors.bad_request("strict decoding error: " + ", ".join(
                    f'unknown field "{p}"' for p in found.unknown))
            request.warnings.extend(f'unknown field "{p}"' for p in found.unknown)
        if info is RESOURCE_SLICES:
            _default_time_added(obj)
        return obj

    def _validate(
        self, info: ResourceInfo, obj: dict[str, Any], old: dict[str, Any] | None
    ) -> None:
        name = obj["metadata"].get("name", "")
        causes = validate_object_name(name) if old is None else []
        if info is RESOURCE_SLICES:
            causes += validate_resource_slice(obj, old)
        elif info is RESOURCE_CLAIMS and (
            old is None or obj.get("status") != old.get("status")
        ):
            causes += validate_claim_status(obj, old)
        if causes:
            raise errors.invalid_object(info.kind, info.group, name, causes)
        if info is RESOURCE_SLICES:
            self._admit_node_allocatable(obj)

    def _admit_node_allocatable(self, obj: dict[str, Any]) -> None:
        """The NodeDeclaredFeatures admission plugin (kube-apiserver 1.37, with the
        DRANodeAllocatableResources gate): a device with ``nodeAllocatableResources`` on one
        node (``spec.nodeName``, or the device's ``nodeName`` under perDeviceNodeSelection)
        needs that Node to exist and to list ``DRANodeAllocatableResources`` in
        ``status.declaredFeatures``; otherwise 403. Devices on several nodes (nodeSelector,
        allNodes) are not checked here."""
        spec = obj.get("spec") or {}
        name = obj["metadata"].get("name", "")
        per_device = spec.get("perDeviceNodeSelection") is True
        for dev in spec.get("devices") or []:
            if not isinstance(dev, dict) or not dev.get("nodeAllocatableResources"):
                continue
            node_name = dev.get("nodeName") if per_device else spec.get("nodeName")
            if not node_name:
                continue
            node = self.store.get(self.key(NODES, "", node_name))
            refused = None
            if node is None:
                refused = f'node "{node_name}" not found for device "{dev.get("name")}"'
            elif NODE_ALLOCATABLE_FEATURE not in ((node.get("status") or {}).get(
                    "declaredFeatures") or []):
                refused = f'node "{node_name}" does not support {NODE_ALLOCATABLE_FEATURE} feature'
            if refused is not None:
                raise errors.admission_forbidden(RESOURCE_SLICES.plural, RESOURCE_SLICES.group,
                                                 name, refused)
