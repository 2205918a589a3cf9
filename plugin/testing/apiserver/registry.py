"""Verb semantics of the embedded API server (what kube-apiserver's registry and
resource strategies do), on objects in their stored v1 shape.

* create: ``metadata.name`` or ``generateName`` (5 random characters appended);
  ``uid``, ``creationTimestamp``, ``resourceVersion`` and (ResourceSlices, DeviceClasses,
  Pods) ``generation`` set by the server; a ResourceClaim's status is cleared (claims get
  status only through the ``status`` subresource); a set ``resourceVersion`` is a 400.
* update/patch of the object: a stale ``metadata.resourceVersion`` is a 409 Conflict; for
  resources with a status subresource the status is kept as it was; ``generation`` rises
  when anything outside metadata/status changes; a write that changes nothing keeps the
  resourceVersion and sends no watch event.
* update/patch of ``status``: only ``status`` changes (nodes and pods: labels and
  annotations too). A Pod update follows ValidatePodUpdate
  (:mod:`~drakit.plugin.testing.apiserver.podrules`).
* delete: DeleteOptions preconditions (uid, resourceVersion) are honoured; resource.k8s.io
  kinds answer the deleted object, nodes a ``Status`` Success. A Pod gets its
  ``deletionTimestamp`` first (a MODIFIED event) and then goes at once (kube-apiserver
  keeps a scheduled pod until its kubelet confirms); no finalizer handling.
"""

from __future__ import annotations

import json
import random
import uuid
from collections.abc import Callable, Mapping
from typing import Any

import yaml

from drakit.plugin.testing.apiserver import apply as ssa
from drakit.plugin.testing.apiserver import errors as errors
from drakit.plugin.testing.apiserver import schema as schema
from drakit.plugin.testing.apiserver.admission import admit_node_allocatable
from drakit.plugin.testing.apiserver.convert import from_internal, to_internal
from drakit.plugin.testing.apiserver.decode import check_type, decode, now
from drakit.plugin.testing.apiserver.jsondoc import clone, equal_ignoring_resource_version
from drakit.plugin.testing.apiserver.patch import json_patch, merge_patch
from drakit.plugin.testing.apiserver.podrules import validate_pod_update
from drakit.plugin.testing.apiserver.resources import (
    NODES,
    PODS,
    RESOURCE_CLAIMS,
    RESOURCE_SLICES,
    ResourceInfo,
)
from drakit.plugin.testing.apiserver.store import Key, Store
from drakit.plugin.testing.apiserver.validation import (
    drop_stale_device_status,
    validate_claim_status,
    validate_object_name,
    validate_resource_slice,
)

__all__ = [
    "APPLY_PATCH",
    "JSON_PATCH",
    "MERGE_PATCH",
    "STRATEGIC_MERGE_PATCH",
    "Registry",
    "list_maps_for",
]

MERGE_PATCH = "application/merge-patch+json"
STRATEGIC_MERGE_PATCH = "application/strategic-merge-patch+json"
JSON_PATCH = "application/json-patch+json"
APPLY_PATCH = "application/apply-patch+yaml"


def _decode_patch(raw: bytes) -> Any:
    """A patch or apply body: JSON (what clients send, a YAML subset) decoded with the
    json module (much faster than a YAML parser), anything else as YAML. None when
    empty."""
    if not raw:
        return None
    try:
        return json.loads(raw)
    except ValueError:
        return yaml.safe_load(raw)


def list_maps_for(info: ResourceInfo) -> ssa.ListMaps:
    if info is RESOURCE_CLAIMS:
        return ssa.CLAIM_LIST_MAPS
    if info is NODES:
        return ssa.NODE_LIST_MAPS
    return ssa.DEFAULT_LIST_MAPS


_GENERATE_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"
_SERVER_METADATA = ("uid", "creationTimestamp", "resourceVersion", "generation")


def _spec_part(obj: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in obj.items() if k not in ("metadata", "status", "apiVersion", "kind")}


class Registry:
    """get / create / update / patch / apply / delete / deletecollection on a :class:`Store`.

    ``version`` arguments name the API version the body is written in; bodies are
    decoded into the stored shape (:mod:`~drakit.plugin.testing.apiserver.decode`) before
    anything else looks at them, then validated
    (:mod:`~drakit.plugin.testing.apiserver.validation`) and admitted
    (:mod:`~drakit.plugin.testing.apiserver.admission`). PUT semantics (:meth:`update`) are
    also the last step of patch and apply.
    """

    def __init__(self, store: Store, rng: random.Random,
                 schema_version: str | None = schema.SCHEMA_VERSION, *,
                 counter_sets_beside_devices: bool = False) -> None:
        self.store = store
        self._rng = rng
        self.schema_version = schema_version
        self.counter_sets_beside_devices = counter_sets_beside_devices

    @staticmethod
    def key(info: ResourceInfo, namespace: str, name: str) -> Key:
        return (info.plural, namespace if info.namespaced else "", name)

    def get(self, info: ResourceInfo, namespace: str, name: str) -> dict[str, Any]:
        obj = self.store.get(self.key(info, namespace, name))
        if obj is None:
            raise errors.not_found(info.plural, info.group, name)
        return obj

    def _decode(self, info: ResourceInfo, version: str, body: Any) -> dict[str, Any]:
        return decode(info, version, body, self.schema_version)

    def _validate(
        self, info: ResourceInfo, obj: dict[str, Any], old: dict[str, Any] | None
    ) -> None:
        name = obj["metadata"].get("name", "")
        causes = validate_object_name(name) if old is None else []
        if info is RESOURCE_SLICES:
            causes += validate_resource_slice(
                obj, old, counter_sets_beside_devices=self.counter_sets_beside_devices)
        elif info is PODS and old is not None and obj.get("spec") != old.get("spec"):
            causes += validate_pod_update(obj, old)
        elif info is RESOURCE_CLAIMS and (
            old is None or obj.get("status") != old.get("status")
        ):
            causes += validate_claim_status(obj, old)
        if causes:
            raise errors.invalid_object(info.kind, info.group, name, causes)
        if info is RESOURCE_SLICES:
            admit_node_allocatable(self.store, obj)

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
            meta["creationTimestamp"] = now()
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
                if not info.group:
                    # The node and pod status strategies (Kubernetes 1.37) reset the spec
                    # only: labels and annotations sent to .../status are written too
                    # (resource.k8s.io status strategies reset all of the metadata).
                    for field in ("labels", "annotations"):
                        if field in meta:
                            merged["metadata"][field] = meta[field]
                        else:
                            merged["metadata"].pop(field, None)
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
            removed = self._remove(info, key)
            assert removed is not None
            return removed

    def _remove(self, info: ResourceInfo, key: Key) -> dict[str, Any] | None:
        """Remove one object. A Pod is deleted gracefully as kube-apiserver 1.37 does: its
        ``deletionTimestamp`` and ``deletionGracePeriodSeconds`` are set first (a MODIFIED
        event), then it goes. kube-apiserver removes an unscheduled pod at once (grace 0)
        and keeps a scheduled one until its kubelet confirms; this server, whose kubelet
        is fake, removes both at once."""
        if info.plural == "pods":
            current = self.store.get(key)
            if current is not None:
                self.store.put(key, {**current, "metadata": {
                    **current["metadata"], "deletionTimestamp": now(),
                    "deletionGracePeriodSeconds": 0}})
        return self.store.remove(key)

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
                removed = self._remove(
                    info, self.key(info, meta.get("namespace", ""), meta["name"]))
                if removed is not None:
                    deleted.append(removed)
            return deleted

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
            patch = _decode_patch(raw)
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
            config = _decode_patch(raw)
        except yaml.YAMLError as exc:
            raise errors.bad_request(f"error decoding YAML: {exc}") from None
        if not isinstance(config, dict):
            raise errors.bad_request("an apply configuration must be an object")
        if not config.get("apiVersion") or not config.get("kind"):
            raise errors.bad_request("apiVersion and kind must be set in an apply configuration")
        check_type(info, version, config)
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
