"""Checks the API server does not make, so a published device can be allocated at all.

kube-apiserver accepts a ResourceSlice whose device consumes more of a counter than its
counter set holds (``spec.devices[].consumesCounters[].counters`` against
``spec.sharedCounters[].counters``, resource.k8s.io/v1 in Kubernetes 1.34+; KEP-4815): the
scheduler's allocator then never finds room for it, and the device is dead without a word.
It also accepts quantities of one counter, or of one capacity and its request policy, in
units of two kinds (``16Gi`` held, ``4G`` consumed): both parse, but a vendor who mixes
binary (``Ki``…``Ei``, powers of 2) and decimal SI suffixes (``k``…``E``, ``m``, powers of 10)
for the same amount almost always meant one of them, and the arithmetic is off by 7 % at
``G``.

Each finding is a :class:`~drakit.plugin.slices.fielderrors.FieldError` ending in
``(drakit rule)``; the validator drops the device (``--strict`` refuses the publish).
"""

from __future__ import annotations

import re
from typing import Any, Literal

from drakit.plugin.slices import fielderrors as fe
from drakit.plugin.slices.fielderrors import FieldError
from drakit.plugin.slices.quantity import QuantityError, parse
from drakit.plugin.slices.rules import COUNTER_KEY_PATH_MAX, QUALIFIED_NAME_PATH_MAX

UnitKind = Literal["binary", "decimal"]

_SUFFIX = re.compile(r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)([A-Za-z]*)", re.ASCII)
_BINARY = frozenset({"Ki", "Mi", "Gi", "Ti", "Pi", "Ei"})
_DECIMAL = frozenset({"n", "u", "m", "k", "M", "G", "T", "P", "E"})


def unit_kind(text: Any) -> UnitKind | None:
    """``binary`` for a ``Ki``…``Ei`` suffix, ``decimal`` for an SI suffix (``n`` … ``E``),
    None for a plain number, an exponent (``1e9``) or text that is not a quantity."""
    m = _SUFFIX.fullmatch(str(text)) if isinstance(text, str | int) else None
    if m is None:
        return None
    suffix = m.group(1)
    if suffix in _BINARY:
        return "binary"
    if suffix in _DECIMAL:
        return "decimal"
    return None


def _mixed_units(path: str, value: Any, other: Any, what: str) -> FieldError | None:
    a, b = unit_kind(value), unit_kind(other)
    if a is None or b is None or a == b:
        return None
    return fe.invalid(path, str(value), f"a {a} unit cannot be compared with the {b} unit of "
                      f"{what} ({other}): give both in one kind of unit (drakit rule)")


def counter_errors(device: dict[str, Any], path: str,
                   counter_sets: dict[str, dict[str, Any]]) -> list[FieldError]:
    """``device`` (API JSON at ``path``) against the pool's valid ``counter_sets`` (by
    name): every consumed counter fits in what its set holds and is in the same kind of
    unit. Entries the structural rules already refuse (unknown set or counter, a value
    that is not a quantity) are left to them."""
    errors: list[FieldError] = []
    consumes = device.get("consumesCounters")
    if not isinstance(consumes, list):
        return errors
    for j, item in enumerate(consumes):
        if not isinstance(item, dict):
            continue
        cs = counter_sets.get(str(item.get("counterSet")))
        counters = item.get("counters")
        if cs is None or not isinstance(counters, dict):
            continue
        held_counters = cs.get("counters") or {}
        ipath = fe.index(fe.child(path, "consumesCounters"), j)
        for name in sorted(counters):
            held_raw = (held_counters.get(name) or {}).get("value")
            used_raw = (counters[name] or {}).get("value") \
                if isinstance(counters[name], dict) else None
            if held_raw is None or used_raw is None:
                continue
            try:
                held, used = parse(held_raw), parse(used_raw)
            except QuantityError:
                continue
            vpath = fe.child(fe.key(fe.child(ipath, "counters"), name, COUNTER_KEY_PATH_MAX),
                             "value")
            mixed = _mixed_units(vpath, used_raw, held_raw,
                                 f"counter {name} in counter set {cs['name']}")
            if mixed is not None:
                errors.append(mixed)
            elif used.value > held.value:
                errors.append(fe.invalid(
                    vpath, str(used_raw),
                    f"consumes more than counter set {cs['name']} holds ({name}: "
                    f"{held_raw}): the device could never be allocated (drakit rule)"))
    return errors


def capacity_errors(device: dict[str, Any], path: str) -> list[FieldError]:
    """Each capacity's ``requestPolicy`` quantities (default, validValues, validRange) in
    the same kind of unit as its ``value``."""
    errors: list[FieldError] = []
    capacity = device.get("capacity")
    if not isinstance(capacity, dict):
        return errors
    for key in sorted(capacity):
        cap = capacity[key]
        if not isinstance(cap, dict) or not isinstance(cap.get("requestPolicy"), dict):
            continue
        value = cap.get("value")
        ppath = fe.child(fe.key(fe.child(path, "capacity"), key, QUALIFIED_NAME_PATH_MAX),
                         "requestPolicy")
        policy = cap["requestPolicy"]
        found: list[tuple[str, Any]] = []
        if policy.get("default") is not None:
            found.append((fe.child(ppath, "default"), policy["default"]))
        for i, v in enumerate(policy.get("validValues") or []):
            found.append((fe.index(fe.child(ppath, "validValues"), i), v))
        vr = policy.get("validRange")
        if isinstance(vr, dict):
            for part in ("min", "max", "step"):
                if vr.get(part) is not None:
                    found.append((fe.child(fe.child(ppath, "validRange"), part), vr[part]))
        for where, raw in found:
            mixed = _mixed_units(where, raw, value, f"capacity {key}'s value")
            if mixed is not None:
                errors.append(mixed)
    return errors
