"""The write verbs of the embedded API server's registry
(:mod:`drakit.plugin.testing.apiserver_registry`): create (names, ``generateName``,
server-set metadata), update (PUT: resourceVersion and UID preconditions, status kept or
alone, ``generation``, no-op writes) and delete (DeleteOptions preconditions) of one object
or a collection.

Errors: :class:`~drakit.plugin.testing.apiserver_errors.ApiError` (400, 404, 409 conflict or
already exists, 422 invalid).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping
from typing import Any

from . import apiserver_apply as ssa
from . import apiserver_errors as errors
from .apiserver_json import clone, equal_ignoring_resource_version
from .apiserver_registry_base import RegistryBase, now
from .apiserver_resources import RESOURCE_CLAIMS, ResourceInfo
from .apiserver_validate import drop_stale_device_status

__all__ = ["RegistryWrites"]

_GENERATE_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"
_SERVER_METADATA = ("uid", "creationTimestamp", "resourceVersion", "generation")


def _spec_part(obj: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in obj.items() if k not in ("metadata", "status", "apiVersion", "kind")}


class RegistryWrites(RegistryBase):
    """create / update / delete / delete_collection (PUT semantics are also the last step
    of patch and apply)."""

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
