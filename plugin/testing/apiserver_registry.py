"""Verb semantics of the embedded API server (what kube-apiserver's registry and
resource strategies do), on objects in their stored v1 shape.

* create: ``metadata.name`` or ``generateName`` (5 random characters appended);
  ``uid``, ``creationTimestamp``, ``resourceVersion`` and (resource.k8s.io) ``generation``
  set by the server; a ResourceClaim's status is cleared (claims get status only through
  the ``status`` subresource); a set ``resourceVersion`` is a 400.
* update/patch of the object: a stale ``metadata.resourceVersion`` is a 409 Conflict; for
  resources with a status subresource the status is kept as it was; ``generation`` rises
  when anything outside metadata/status changes; a write that changes nothing keeps the
  resourceVersion and sends no watch event.
* update/patch of ``status``: only ``status`` changes.
* delete: DeleteOptions preconditions (uid, resourceVersion) are honoured; resource.k8s.io
  kinds answer the deleted object, nodes a ``Status`` Success. There is no graceful
  deletion and no finalizer handling.
"""

from __future__ import annotations

import contextvars
import datetime
import json
import random
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from dataclasses import field as dataclass_field
from typing import Any

import yaml

from . import apiserver_apply as ssa
from . import apiserver_errors as errors
from . import apiserver_schema as schema
from .apiserver_convert import from_internal, to_internal
from .apiserver_json import clone, equal_ignoring_resource_version
from .apiserver_patch import json_patch, merge_patch
from .apiserver_resources import (
    NODES,
    RESOURCE_CLAIMS,
    RESOURCE_SLICES,
    ResourceInfo,
    api_version_of,
)
from .apiserver_store import Key, Store
from .apiserver_validate import (
    drop_stale_device_status,
    validate_claim_status,
    validate_object_name,
    validate_resource_slice,
)

MERGE_PATCH = "application/merge-patch+json"
STRATEGIC_MERGE_PATCH = "application/strategic-merge-patch+json"
JSON_PATCH = "application/json-patch+json"
APPLY_PATCH = "application/apply-patch+yaml"

NODE_ALLOCATABLE_FEATURE = "DRANodeAllocatableResources"
"""The node feature (``Node.status.declaredFeatures``) nodeAllocatableResources needs."""
_GENERATE_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"
_SERVER_METADATA = ("uid", "creationTimestamp", "resourceVersion", "generation")


def _decode(raw: bytes) -> Any:
    """A patch or apply body: JSON (what clients send, a YAML subset) decoded with the
    json module (much faster than a YAML parser), anything else as YAML. None when
    empty."""
    if not raw:
        return None
    try:
        return json.loads(raw)
    except ValueError:
        return yaml.safe_load(raw)


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
                stamp = stamp or _now()
                taint["timeAdded"] = stamp


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _spec_part(obj: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in obj.items() if k not in ("metadata", "status", "apiVersion", "kind")}


def list_maps_for(info: ResourceInfo) -> ssa.ListMaps:
    if info is RESOURCE_CLAIMS:
        return ssa.CLAIM_LIST_MAPS
    if info is NODES:
        return ssa.NODE_LIST_MAPS
    return ssa.DEFAULT_LIST_MAPS


class Registry:
    """Implements get/list/create/update/patch/apply/delete on a :class:`Store`.

    ``version`` arguments name the API version the body is written in; bodies are
    converted to the stored shape before anything else looks at them.
    """

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

    # ------------------------------------------------------------------ create

    def create(
        self, info: ResourceInfo, namespace: str, version: str, body: Any, *, dry_run: bool
    ) -> dict[str, Any]:
        obj = self._decode(info, version, body)
        meta = obj["metadata"]
        if info.namespaced:
            if meta.get("namespace") not in (None, "", namespace):
                raise errors.bad_request(
                    "the namespace of the provided object does not match the namespace sent "
                    "on the request"
                )
            meta["namespace"] = namespace
        else:
            meta.pop("namespace", None)
        if meta.get("resourceVersion"):
            raise errors.bad_request("resourceVersion should not be set on objects to be created")
        for field in ("uid", "creationTimestamp", "generation", "managedFields",
                      "deletionTimestamp"):
            meta.pop(field, None)
        if info.has_status and info.group:
            obj.pop("status", None)
        with self.store.locked():
            if not meta.get("name") and meta.get("generateName"):
                meta["name"] = self._generate_name(info, namespace, meta["generateName"])
            self._validate(info, obj, None)
            key = self.key(info, namespace, meta["name"])
            if self.store.get(key) is not None:
                raise errors.already_exists(info.plural, info.group, meta["name"])
            meta["uid"] = str(uuid.uuid4())
            meta["creationTimestamp"] = _now()
            if info.tracks_generation:
                meta["generation"] = 1
            if dry_run:
                meta["resourceVersion"] = ""
                return obj
            return self.store.put(key, obj)

    def _generate_name(self, info: ResourceInfo, namespace: str, prefix: str) -> str:
        prefix = prefix[: 253 - 5]
        for _ in range(100):
            suffix = "".join(self._rng.choice(_GENERATE_ALPHABET) for _ in range(5))
            if self.store.get(self.key(info, namespace, prefix + suffix)) is None:
                return prefix + suffix
        raise errors.ApiError(
            409, "AlreadyExists", f"could not generate a unique name for {prefix!r}"
        )

    # ------------------------------------------------------------------ update

    def update(
        self,
        info: ResourceInfo,
        namespace: str,
        name: str,
        version: str,
        body: Any,
        *,
        subresource: str,
        dry_run: bool,
        owners: ssa.Owners | None = None,
    ) -> dict[str, Any]:
        """PUT semantics; also the last step of patch and apply."""
        new = self._decode(info, version, body)
        meta = new["metadata"]
        if meta.get("name") not in (None, "", name):
            raise errors.bad_request(
                f"the name of the object ({meta.get('name')}) does not match the name on the "
                f"URL ({name})"
            )
        if info.namespaced and meta.get("namespace") not in (None, "", namespace):
            raise errors.bad_request(
                "the namespace of the provided object does not match the namespace sent on "
                "the request"
            )
        with self.store.locked():
            key = self.key(info, namespace, name)
            old = self.store.get(key)
            if old is None:
                raise errors.not_found(info.plural, info.group, name)
            old_meta = old["metadata"]
            sent_rv = meta.get("resourceVersion")
            if sent_rv and sent_rv != old_meta.get("resourceVersion"):
                raise errors.conflict(info.plural, info.group, name)
            if meta.get("uid") and meta["uid"] != old_meta.get("uid"):
                raise errors.conflict(
                    info.plural, info.group, name,
                    f"Precondition failed: UID in precondition: {meta['uid']}, UID in object "
                    f"meta: {old_meta.get('uid')}",
                )
            if subresource == "status":
                merged = clone(old)
                if "status" in new:
                    merged["status"] = new["status"]
                else:
                    merged.pop("status", None)
                new = merged
            else:
                for field in _SERVER_METADATA:
                    if field in old_meta:
                        meta[field] = old_meta[field]
                    else:
                        meta.pop(field, None)
                meta["name"] = name
                if info.namespaced:
                    meta["namespace"] = namespace
                if info.has_status:
                    if "status" in old:
                        new["status"] = old["status"]
                    else:
                        new.pop("status", None)
                if info.tracks_generation and _spec_part(new) != _spec_part(old):
                    meta["generation"] = int(old_meta.get("generation", 1)) + 1
            if info is RESOURCE_CLAIMS:
                drop_stale_device_status(new, old)
            self._validate(info, new, old)
            unchanged = equal_ignoring_resource_version(new, old)
            if dry_run:
                return new
            if unchanged:
                if owners is not None:
                    self.store.set_owners(key, owners)
                return old
            return self.store.put(key, new, owners)

    # ------------------------------------------------------------------ patch

    def patch(
        self,
        info: ResourceInfo,
        namespace: str,
        name: str,
        version: str,
        content_type: str,
        raw: bytes,
        *,
        subresource: str,
        field_manager: str,
        force: bool,
        dry_run: bool,
    ) -> tuple[dict[str, Any], bool]:
        """Merge/strategic/JSON patch or server-side apply. Returns (object, created).
        Any other content type (``application/apply-patch+json`` too) is a 415."""
        if content_type not in errors.PATCH_MEDIA_TYPES:
            raise errors.unsupported_media_type()
        if content_type == APPLY_PATCH:
            return self.apply(
                info, namespace, name, version, raw,
                subresource=subresource, field_manager=field_manager, force=force,
                dry_run=dry_run,
            )
        try:
            patch = _decode(raw)
        except yaml.YAMLError as exc:
            raise errors.bad_request(f"error decoding patch: {exc}") from None
        with self.store.locked():
            current = from_internal(info, version, self.get(info, namespace, name))
            if content_type == JSON_PATCH:
                patched = json_patch(current, patch)
            elif content_type in (MERGE_PATCH, STRATEGIC_MERGE_PATCH):
                if not isinstance(patch, dict):
                    raise errors.bad_request("a merge patch must be a JSON object")
                patched = merge_patch(current, patch)
            else:
                raise errors.unsupported_media_type()
            result = self.update(
                info, namespace, name, version, patched, subresource=subresource,
                dry_run=dry_run,
            )
            return result, False

    def apply(
        self,
        info: ResourceInfo,
        namespace: str,
        name: str,
        version: str,
        raw: bytes,
        *,
        subresource: str,
        field_manager: str,
        force: bool,
        dry_run: bool,
    ) -> tuple[dict[str, Any], bool]:
        """Server-side apply (see apiserver_apply). Creates the object when the main
        resource does not exist yet."""
        if not field_manager:   # PatchOptions validation: 422, as kube-apiserver answers
            raise errors.invalid_object("PatchOptions", "meta.k8s.io", "", [
                errors.required("fieldManager", "is required for apply patch")])
        try:
            config = _decode(raw)
        except yaml.YAMLError as exc:
            raise errors.bad_request(f"error decoding YAML: {exc}") from None
        if not isinstance(config, dict):
            raise errors.bad_request("an apply configuration must be an object")
        if not config.get("apiVersion") or not config.get("kind"):
            raise errors.bad_request("apiVersion and kind must be set in an apply configuration")
        self._check_type(info, version, config)
        config_meta = config.get("metadata") or {}
        if config_meta.get("name") != name:
            raise errors.bad_request(
                f"the name of the object ({config_meta.get('name')}) does not match the name "
                f"on the URL ({name})"
            )
        internal = to_internal(info, version, config)
        applied = ssa.scope(internal, subresource, info.has_status)
        list_maps = list_maps_for(info)
        with self.store.locked():
            key = self.key(info, namespace, name)
            live = self.store.get(key)
            if live is None:
                if subresource:
                    raise errors.not_found(info.plural, info.group, name)
                outcome = ssa.apply(
                    {}, applied, manager=field_manager, subresource="", owners={},
                    list_maps=list_maps, force=force,
                )
                body = from_internal(info, version, {**outcome.obj, "metadata": {
                    **outcome.obj.get("metadata", {}), "name": name}})
                created = self.create(info, namespace, version, body, dry_run=dry_run)
                if not dry_run:
                    self.store.set_owners(key, outcome.owners)
                return created, True
            sent_rv = config_meta.get("resourceVersion")
            if sent_rv and sent_rv != live["metadata"].get("resourceVersion"):
                raise errors.conflict(info.plural, info.group, name)
            sent_uid = config_meta.get("uid")
            if sent_uid and sent_uid != live["metadata"].get("uid"):
                # The applied uid becomes part of the merged object, and ObjectMeta update
                # validation refuses a changed uid: 422 (a PUT's uid precondition is a 409).
                raise errors.invalid_object(info.kind, info.group, name, [
                    errors.invalid("metadata.uid", sent_uid, "field is immutable")])
            outcome = ssa.apply(
                live, applied, manager=field_manager, subresource=subresource,
                owners=self.store.owners(key), list_maps=list_maps, force=force,
            )
            if outcome.conflicts:
                raise errors.apply_conflict(name, info.group, info.kind, outcome.conflicts)
            body = from_internal(info, version, outcome.obj)
            body["metadata"].pop("resourceVersion", None)
            result = self.update(
                info, namespace, name, version, body, subresource=subresource,
                dry_run=dry_run, owners=outcome.owners,
            )
            return result, False

    # ------------------------------------------------------------------ delete

    def delete(
        self, info: ResourceInfo, namespace: str, name: str, options: Any, *, dry_run: bool
    ) -> dict[str, Any]:
        preconditions = (options or {}).get("preconditions") or {} \
            if isinstance(options, dict) else {}
        with self.store.locked():
            key = self.key(info, namespace, name)
            old = self.get(info, namespace, name)
            meta = old["metadata"]
            if preconditions.get("uid") and preconditions["uid"] != meta.get("uid"):
                raise errors.conflict(
                    info.plural, info.group, name,
                    f"Precondition failed: UID in precondition: {preconditions['uid']}, UID in "
                    f"object meta: {meta.get('uid')}",
                )
            rv = preconditions.get("resourceVersion")
            if rv and rv != meta.get("resourceVersion"):
                raise errors.conflict(
                    info.plural, info.group, name,
                    f"Precondition failed: ResourceVersion in precondition: {rv}, "
                    f"ResourceVersion in object meta: {meta.get('resourceVersion')}",
                )
            if dry_run:
                return old
            removed = self.store.remove(key)
            assert removed is not None
            return removed

    def delete_collection(
        self,
        info: ResourceInfo,
        namespace: str | None,
        predicate: Callable[[Mapping[str, Any]], bool],
        *,
        dry_run: bool,
    ) -> list[dict[str, Any]]:
        with self.store.locked():
            items, _ = self.store.select(info.plural, namespace, predicate)
            if dry_run:
                return items
            deleted = []
            for item in items:
                meta = item["metadata"]
                removed = self.store.remove(
                    self.key(info, meta.get("namespace", ""), meta["name"])
                )
                if removed is not None:
                    deleted.append(removed)
            return deleted
