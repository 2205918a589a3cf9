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

import json
from typing import Any

import yaml

from . import apiserver_apply as ssa
from . import apiserver_errors as errors
from .apiserver_convert import from_internal, to_internal
from .apiserver_patch import json_patch, merge_patch
from .apiserver_registry_base import (
    NODE_ALLOCATABLE_FEATURE,
    RegistryBase,
    RequestOptions,
    current_request,
    set_request,
)
from .apiserver_registry_writes import RegistryWrites
from .apiserver_resources import NODES, RESOURCE_CLAIMS, ResourceInfo

__all__ = [
    "APPLY_PATCH",
    "JSON_PATCH",
    "MERGE_PATCH",
    "NODE_ALLOCATABLE_FEATURE",
    "STRATEGIC_MERGE_PATCH",
    "Registry",
    "RegistryBase",
    "RegistryWrites",
    "RequestOptions",
    "current_request",
    "list_maps_for",
    "set_request",
]

MERGE_PATCH = "application/merge-patch+json"
STRATEGIC_MERGE_PATCH = "application/strategic-merge-patch+json"
JSON_PATCH = "application/json-patch+json"
APPLY_PATCH = "application/apply-patch+yaml"


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


def list_maps_for(info: ResourceInfo) -> ssa.ListMaps:
    if info is RESOURCE_CLAIMS:
        return ssa.CLAIM_LIST_MAPS
    if info is NODES:
        return ssa.NODE_LIST_MAPS
    return ssa.DEFAULT_LIST_MAPS


class Registry(RegistryWrites):
    """Implements get/list/create/update/patch/apply/delete on a :class:`Store`.

    ``version`` arguments name the API version the body is written in; bodies are
    converted to the stored shape before anything else looks at them.

    This class adds patch and server-side apply; reading, decoding, validation and
    admission are in :class:`~drakit.plugin.testing.apiserver_registry_base.RegistryBase`,
    create/update/delete in
    :class:`~drakit.plugin.testing.apiserver_registry_writes.RegistryWrites`.
    """

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
