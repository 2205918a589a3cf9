"""A small model of server-side apply (``application/apply-patch+yaml``).

What it does, following the structured-merge-diff rules kube-apiserver uses:

* Each field manager (``?fieldManager=``) owns the set of fields it applied, per
  subresource (main object, ``status``).
* Lists declared as ``listType=map`` are merged item by item by their key fields; for
  a ResourceClaim that is ``status.devices`` keyed by (driver, pool, device, shareID),
  ``status.devices[].conditions`` keyed by type and ``status.reservedFor`` keyed by uid;
  ``metadata.ownerReferences`` is keyed by uid. Other lists are atomic (replaced whole).
* A field or list-map entry the manager owned before but leaves out of its new apply
  is removed, unless another manager still owns it (or something inside it).
* Applying a different value to a field another manager owns is a 409 ``Conflict``
  (causes of type ``FieldManagerConflict``) unless ``?force=true``, which moves the
  ownership to the applier.

Simplifications: only apply requests record ownership (create/update/patch do not);
metadata ownership covers labels, annotations, ownerReferences and finalizers only.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from drakit.plugin.testing.apiserver.errors import CAUSE_CONFLICT, Cause
from drakit.plugin.testing.apiserver.jsondoc import clone

ListMaps = Mapping[tuple[str, ...], tuple[str, ...]]
"""List-map schema: path pattern (``"*"`` stands for a list item) → key field names."""

CLAIM_LIST_MAPS: ListMaps = {
    ("status", "devices"): ("driver", "pool", "device", "shareID"),
    ("status", "devices", "*", "conditions"): ("type",),
    ("status", "reservedFor"): ("uid",),
    ("metadata", "ownerReferences"): ("uid",),
}
NODE_LIST_MAPS: ListMaps = {
    ("status", "conditions"): ("type",),
    ("metadata", "ownerReferences"): ("uid",),
}
DEFAULT_LIST_MAPS: ListMaps = {("metadata", "ownerReferences"): ("uid",)}

_METADATA_FIELDS = ("labels", "annotations", "ownerReferences", "finalizers")


@dataclass(frozen=True)
class ItemKey:
    """Path segment naming one list-map item by its key fields (absent key → None)."""

    fields: tuple[tuple[str, Any], ...]

    def matches(self, item: Any) -> bool:
        return isinstance(item, dict) and all(item.get(k) == v for k, v in self.fields)

    def __str__(self) -> str:
        inner = ",".join(f"{k}={v}" for k, v in self.fields if v is not None)
        return "{" + inner + "}"


Segment = str | ItemKey
FieldPath = tuple[Segment, ...]
Owners = dict[tuple[str, str], set[FieldPath]]
"""(field manager, subresource) → owned field paths; subresource ``""`` is the object."""

_MISSING = object()


def render_path(path: FieldPath) -> str:
    """``.status.devices[driver=a,pool=p,device=d].data`` style text for messages."""
    out = ""
    for seg in path:
        out += f"[{str(seg)[1:-1]}]" if isinstance(seg, ItemKey) else f".{seg}"
    return out


def _pattern(path: FieldPath) -> tuple[str, ...]:
    return tuple("*" if isinstance(s, ItemKey) else s for s in path)


def scope(config: Mapping[str, Any], subresource: str, has_status: bool) -> dict[str, Any]:
    """The part of an apply configuration a request may change: ``status`` for the status
    subresource; everything else (without status when the resource has a status
    subresource) for the object; in both, metadata reduced to labels/annotations/
    ownerReferences/finalizers (kube-apiserver 1.37 applies a status request's labels
    too)."""
    out: dict[str, Any] = {}
    for key, value in config.items():
        if key in ("apiVersion", "kind"):
            continue
        if key == "metadata" and isinstance(value, dict):
            meta = {k: clone(v) for k, v in value.items() if k in _METADATA_FIELDS}
            if meta:
                out["metadata"] = meta
            continue
        if subresource == "status":
            if key == "status":
                out[key] = clone(value)
            continue
        if key == "status" and has_status:
            continue
        out[key] = clone(value)
    return out


def field_set(value: Any, list_maps: ListMaps, path: FieldPath = ()) -> set[FieldPath]:
    """Every field path ``value`` sets: leaves, plus one path per list-map item."""
    if isinstance(value, dict):
        if not value:
            return {path} if path else set()
        out: set[FieldPath] = set()
        for key, sub in value.items():
            out |= field_set(sub, list_maps, (*path, key))
        return out
    keys = list_maps.get(_pattern(path))
    if isinstance(value, list) and keys is not None:
        out = {path} if not value else set()
        for item in value:
            if not isinstance(item, dict):
                continue
            item_path = (*path, ItemKey(tuple((k, item.get(k)) for k in keys)))
            out.add(item_path)
            out |= field_set(item, list_maps, item_path)
        return out
    return {path}


def _lookup(doc: Any, path: FieldPath) -> Any:
    current = doc
    for seg in path:
        if isinstance(seg, ItemKey):
            if not isinstance(current, list):
                return _MISSING
            current = next((i for i in current if seg.matches(i)), _MISSING)
        elif isinstance(current, dict) and seg in current:
            current = current[seg]
        else:
            return _MISSING
        if current is _MISSING:
            return _MISSING
    return current


def _delete(doc: Any, path: FieldPath) -> bool:
    parent = _lookup(doc, path[:-1])
    last = path[-1]
    if isinstance(last, ItemKey) and isinstance(parent, list):
        for i, item in enumerate(parent):
            if last.matches(item):
                del parent[i]
                return True
    elif isinstance(parent, dict) and last in parent:
        del parent[last]
        return True
    return False


def merge(live: Any, config: Any, list_maps: ListMaps, path: FieldPath = ()) -> Any:
    """``config`` merged into a copy of ``live``: maps recursively, list-maps by key,
    anything else replaced."""
    if isinstance(live, dict) and isinstance(config, dict):
        out = clone(live)
        for key, value in config.items():
            out[key] = merge(live.get(key, _MISSING), value, list_maps, (*path, key))
        return out
    keys = list_maps.get(_pattern(path))
    if keys is not None and isinstance(live, list) and isinstance(config, list):
        merged = clone(live)
        for item in config:
            if not isinstance(item, dict):
                merged.append(clone(item))
                continue
            key = ItemKey(tuple((k, item.get(k)) for k in keys))
            for i, existing in enumerate(merged):
                if key.matches(existing):
                    merged[i] = merge(existing, item, list_maps, (*path, key))
                    break
            else:
                merged.append(clone(item))
        return merged
    return clone(config)


def _owned_by_others(path: FieldPath, others: Iterable[set[FieldPath]]) -> bool:
    n = len(path)
    return any(q[:n] == path for s in others for q in s)


@dataclass
class ApplyResult:
    """Outcome of :func:`apply`: the new object, the new ownership, conflicts found."""

    obj: dict[str, Any]
    owners: Owners
    conflicts: list[Cause]


def apply(
    live: Mapping[str, Any],
    config: Mapping[str, Any],
    *,
    manager: str,
    subresource: str,
    owners: Owners,
    list_maps: ListMaps,
    force: bool,
) -> ApplyResult:
    """Apply ``config`` (already reduced by :func:`scope`) by ``manager`` to ``live``.

    With conflicts and no ``force`` the result carries the conflicts and the unchanged
    object; the caller answers 409.
    """
    me = (manager, subresource)
    new_set = field_set(config, list_maps)
    owners = {k: set(v) for k, v in owners.items()}
    conflicts: list[Cause] = []
    for (other, other_sub), owned in owners.items():
        if other == manager:
            continue
        for path in sorted(new_set & owned, key=render_path):
            if isinstance(path[-1], ItemKey):
                continue
            current = _lookup(live, path)
            if current is _MISSING or current == _lookup(config, path):
                continue
            if force:
                owned.discard(path)
            else:
                conflicts.append(
                    Cause(render_path(path)[1:], CAUSE_CONFLICT,
                          f'conflict with "{other}"'
                          + (f" with subresource \"{other_sub}\"" if other_sub else "")
                          + f": {render_path(path)}")
                )
    if conflicts:
        return ApplyResult(clone(dict(live)), owners, conflicts)
    removed = owners.get(me, set()) - new_set
    result = merge(dict(live), dict(config), list_maps)
    owners[me] = new_set
    others = [s for k, s in owners.items() if k != me]
    for path in sorted(removed, key=len):
        if _owned_by_others(path, [*others, new_set]) or _is_item_key_field(path):
            continue
        if _delete(result, path):
            _prune_empty(result, path[:-1], [*others, new_set])
    return ApplyResult(result, {k: v for k, v in owners.items() if v}, [])


def _is_item_key_field(path: FieldPath) -> bool:
    """A key field of a list-map item goes only with its item."""
    if len(path) < 2 or not isinstance(path[-2], ItemKey):
        return False
    item = path[-2]
    assert isinstance(item, ItemKey)
    return any(path[-1] == name for name, _ in item.fields)


def _prune_empty(doc: dict[str, Any], path: FieldPath, owned: list[set[FieldPath]]) -> None:
    """Remove containers a removal left empty, unless someone owns them."""
    while path:
        value = _lookup(doc, path)
        if value not in ({}, []) or _owned_by_others(path, owned):
            return
        _delete(doc, path)
        path = path[:-1]
