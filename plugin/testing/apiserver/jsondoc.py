"""JSON-tree helpers for the embedded API server (objects are plain dict/list/scalar
trees; :func:`clone` copies them much more cheaply than ``copy.deepcopy``)."""

from __future__ import annotations

import json
import marshal
from typing import Any

__all__ = ["clone", "equal_ignoring_resource_version", "strip_nulls"]


def clone(value: Any) -> Any:
    """Deep copy of a JSON tree, by ``marshal`` (C code; ``copy.deepcopy`` walks every
    object in Python and keeps a memo). Values ``marshal`` cannot take (a dict or list
    subclass, an object inside) are copied by a recursive walk that copies dicts and lists
    and shares everything else."""
    try:
        return marshal.loads(marshal.dumps(value))
    except ValueError:
        return _walk(value)


def _walk(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _walk(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_walk(v) for v in value]
    return value


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
