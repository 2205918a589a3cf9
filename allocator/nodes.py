"""Does a node match a ResourceSlice's (or device's) ``nodeName`` / ``allNodes`` /
``nodeSelector`` (core/v1 NodeSelector: terms ORed, requirements ANDed; operators In, NotIn,
Exists, DoesNotExist, Gt, Lt; matchFields on ``metadata.name``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def _requirement(req: Mapping[str, Any], values: Mapping[str, str]) -> bool:
    key, op, vals = req.get("key", ""), req.get("operator", ""), req.get("values") or []
    present = key in values
    if op == "In":
        return present and values[key] in vals
    if op == "NotIn":
        return not present or values[key] not in vals
    if op == "Exists":
        return present
    if op == "DoesNotExist":
        return not present
    if op in ("Gt", "Lt") and present and len(vals) == 1:
        try:
            a, b = int(values[key]), int(vals[0])
        except ValueError:
            return False
        return a > b if op == "Gt" else a < b
    return False


def selector_matches(selector: Mapping[str, Any], node: Mapping[str, Any]) -> bool:
    meta = node.get("metadata") or {}
    labels = meta.get("labels") or {}
    fields = {"metadata.name": meta.get("name", "")}
    for term in selector.get("nodeSelectorTerms") or []:
        exprs, mfields = term.get("matchExpressions") or [], term.get("matchFields") or []
        if not exprs and not mfields:
            continue
        if all(_requirement(r, labels) for r in exprs) and all(
                _requirement(r, fields) for r in mfields):
            return True
    return False


def node_matches(node: Mapping[str, Any], node_name: str, all_nodes: bool,
                 selector: Mapping[str, Any] | None) -> bool:
    if node_name:
        return (node.get("metadata") or {}).get("name") == node_name
    if all_nodes:
        return True
    if selector is not None:
        return selector_matches(selector, node)
    return False
