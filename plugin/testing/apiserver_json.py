"""JSON-tree helpers for the embedded API server (objects are plain dict/list/scalar
trees; copies use :func:`drakit.plugin.jsontree.clone`, much cheaper than ``copy.deepcopy``)."""

from __future__ import annotations

import json
from typing import Any

from drakit.plugin.jsontree import clone

__all__ = ["clone", "equal_ignoring_resource_version", "strip_nulls"]


def strip_nulls(value: Any) -> Any:
    """Copy without ``null`` map values (recursively), as decoding into Go structs with
    omitempty fields does: clients that serialize unset fields as null store nothing.

    Most objects hold no null at all: their JSON text (C encoder) without ``null`` in it
    is decoded back as the copy; otherwise (or for a value JSON cannot encode) the tree is
    walked."""
    try:
        text = json.dumps(value)
    except (TypeError, ValueError):
        return _strip_nulls(value)
    if "null" not in text:
        return json.loads(text)
    return _strip_nulls(value)


def _strip_nulls(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _strip_nulls(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_strip_nulls(v) for v in value]
    return value


def equal_ignoring_resource_version(a: dict[str, Any], b: dict[str, Any]) -> bool:
    """True when ``a`` and ``b`` differ at most in ``metadata.resourceVersion``."""
    def meta(o: dict[str, Any]) -> dict[str, Any]:
        return {k: v for k, v in (o.get("metadata") or {}).items() if k != "resourceVersion"}

    def rest(o: dict[str, Any]) -> dict[str, Any]:
        return {k: v for k, v in o.items() if k != "metadata"}

    return meta(a) == meta(b) and rest(a) == rest(b)
