"""Field and label selectors as kube-apiserver parses them for list, watch and
deletecollection.

Field selectors: comma-separated ``field=value``, ``field==value`` or ``field!=value``;
only the field labels a resource supports are accepted (others are a 400
``field label not supported``). A missing field reads as ``""`` (so
``spec.nodeName=`` matches slices without a node name).

Label selectors: ``k=v``, ``k==v``, ``k!=v``, ``k in (a,b)``, ``k notin (a,b)``, ``k``
(exists) and ``!k`` (does not exist), comma-separated.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

from drakit.plugin.testing.apiserver.errors import bad_request

Predicate = Callable[[Mapping[str, Any]], bool]


def field_value(obj: Mapping[str, Any], label: str) -> str:
    """The string value of dotted field ``label`` in ``obj`` (``""`` when absent;
    booleans as ``true``/``false``)."""
    current: Any = obj
    for part in label.split("."):
        if not isinstance(current, Mapping):
            return ""
        current = current.get(part)
    if current is None:
        return ""
    if isinstance(current, bool):
        return "true" if current else "false"
    return str(current)


def parse_field_selector(selector: str | None, allowed: tuple[str, ...]) -> Predicate:
    """Predicate for a field selector string; raises ApiError 400 for bad syntax or a
    field label the resource does not support."""
    terms: list[tuple[str, str, bool]] = []
    for raw in (selector or "").split(","):
        term = raw.strip()
        if not term:
            continue
        if "!=" in term:
            key, value = term.split("!=", 1)
            negate = True
        elif "==" in term:
            key, value = term.split("==", 1)
            negate = False
        elif "=" in term:
            key, value = term.split("=", 1)
            negate = False
        else:
            raise bad_request(f"invalid selector: '{selector}'; can't understand '{term}'")
        key = key.strip()
        if key not in allowed:
            raise bad_request(f'field label not supported: {key}')
        terms.append((key, value.strip(), negate))

    def match(obj: Mapping[str, Any]) -> bool:
        return all((field_value(obj, k) == v) != neg for k, v, neg in terms)

    return match


_SET_RE = re.compile(r"^\s*(\S+)\s+(in|notin)\s+\(([^)]*)\)\s*$")


def _split_terms(selector: str) -> list[str]:
    terms, depth, current = [], 0, ""
    for ch in selector:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        if ch == "," and depth == 0:
            terms.append(current)
            current = ""
        else:
            current += ch
    terms.append(current)
    return [t.strip() for t in terms if t.strip()]


def _requirement(term: str) -> Callable[[Mapping[str, str]], bool]:
    set_match = _SET_RE.match(term)
    if set_match:
        key, op, values_text = set_match.groups()
        values = {v.strip() for v in values_text.split(",") if v.strip()}
        negate = op == "notin"

        def in_set(labels: Mapping[str, str]) -> bool:
            return (labels.get(key) in values) != negate

        return in_set
    for sep, negate in (("!=", True), ("==", False), ("=", False)):
        if sep in term:
            key, value = (part.strip() for part in term.split(sep, 1))

            def equals(labels: Mapping[str, str], k: str = key, v: str = value,
                       neg: bool = negate) -> bool:
                return (labels.get(k) == v) != neg

            return equals
    exists = not term.startswith("!")
    key = term.lstrip("!").strip()
    if not re.fullmatch(r"[A-Za-z0-9_.\-/]+", key):
        raise bad_request(f"unable to parse requirement: {term!r}")

    def has_key(labels: Mapping[str, str]) -> bool:
        return (key in labels) == exists

    return has_key


def parse_label_selector(selector: str | None) -> Predicate:
    """Predicate over an object's ``metadata.labels``; raises ApiError 400 on bad syntax."""
    checks = [_requirement(term) for term in _split_terms(selector or "")]

    def match(obj: Mapping[str, Any]) -> bool:
        labels = (obj.get("metadata") or {}).get("labels") or {}
        return all(check(labels) for check in checks)

    return match
