"""Every rule the API server applies to a ResourceSlice, checked on resource.k8s.io/v1 JSON.

The functions take the JSON a slice is sent as (``Device.to_api()``, ``CounterSet.to_api()``
or a whole slice) and return :class:`~drakit.plugin.slices.fielderrors.FieldError` lists with the
server's paths, types and wording. Rules, limits and texts: k8s.io/kubernetes
pkg/apis/resource/validation/validation.go and the limits of k8s.io/api resource/v1
types.go (Kubernetes 1.35+; of the 1.34 differences, :func:`for_server` carries the slice
layout of counter sets and the taint limit, the rest is not modelled). Like the server, a
list or map over its size limit reports only ``Too many`` and its items are not checked.

:func:`validate_slice` checks a whole slice; :mod:`drakit.plugin.slices.validate` uses the device,
attribute and counter set checks one by one to drop only what is broken.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, replace
from typing import Any, Final

from drakit.plugin.slices import fielderrors as fe
from drakit.plugin.slices import formats
from drakit.plugin.slices.fielderrors import FieldError
from drakit.plugin.slices.quantity import (
    MAX_INT64,
    QUANTITY_ERROR,
    Quantity,
    QuantityError,
    parse,
)

MAX_DEVICES: Final = 128
MAX_DEVICES_RESTRICTED: Final = 64
MAX_ATTRIBUTES_AND_CAPACITIES: Final = 32
MAX_ATTRIBUTE_VALUES: Final = 48
MAX_TAINTS: Final = 16
MAX_COUNTER_SETS: Final = 8
MAX_COUNTERS_PER_SET: Final = 32
MAX_CONSUMPTIONS_PER_DEVICE: Final = 2
MAX_COUNTERS_PER_CONSUMPTION: Final = 32
MAX_BINDING_CONDITIONS: Final = 4
MAX_VALID_VALUES: Final = 10
MAX_COMPATIBILITY_GROUPS: Final = 2
#: Entries of a request's ``capacity.requests`` and of an allocation result's
#: ``consumedCapacity`` (resource.k8s.io ``MaxCapacityRequirements``, Kubernetes 1.38).
MAX_CAPACITY_REQUIREMENTS: Final = 32
SKIP_NODE_OPERATIONS: Final = ("NodePrepareResources", "NodeUnprepareResources", "*")
QUALIFIED_NAME_PATH_MAX: Final = 63 + 1 + 32
COUNTER_KEY_PATH_MAX: Final = 63
TAINT_EFFECTS: Final = ("NoSchedule", "NoExecute", "None")
NODE_SELECTION_FIELDS: Final = ("nodeName", "nodeSelector", "allNodes", "perDeviceNodeSelection")
LIST_ATTRIBUTE_MEMBERS: Final = ("ints", "bools", "strings", "versions")
ATTRIBUTE_MEMBERS: Final = ("int", "bool", "string", "version", *LIST_ATTRIBUTE_MEMBERS)
_ATTRIBUTE_MEMBER_SET: Final = frozenset(ATTRIBUTE_MEMBERS)
INT64_MIN: Final = -(2**63)
UNION_DV_DETAIL: Final = ("must specify one of: `int`, `bool`, `string`, `version`, `ints`, "
                          "`bools`, `strings`, `versions`")
"""The declarative union error of DeviceAttribute (kube-apiserver 1.37)."""


@dataclass(frozen=True)
class RuleOptions:
    """Knobs for rules that differ between servers or that drakit adds.

    ``fractional_capacity_range``: the DRAFractionalCapacityRange gate (beta in 1.37, off in
    released servers). ``reject_negative_quantities``: drakit's own rule that capacity and
    counter values are ≥ 0 (the server accepts negatives; a negative inventory is always a
    discovery bug). ``max_taints``: 16 (1.35+; 1.34 allowed 4).
    ``reject_driver_qualified_names``: an attribute or capacity name qualified with the
    driver's own domain (``<driver>/foo``) is refused, the driver's domain being implicit:
    the rule of k8s.io/dynamic-resource-allocation v0.38 (``resourceslice``
    ``Options.ValidateQualifiedNames``, on by default); the server does not check it.
    """

    fractional_capacity_range: bool = False
    reject_negative_quantities: bool = False
    max_taints: int = MAX_TAINTS
    reject_driver_qualified_names: bool = False
    counter_sets_with_devices: bool = False
    """Kubernetes ≤ 1.34 (KEP-4815 alpha, gate DRAPartitionableDevices): a device's
    ``consumesCounters[].counterSet`` must name a counter set in the *same* ResourceSlice
    (``must reference a counterSet defined in the ResourceSlice sharedCounters``), so the
    counter sets go into the slices of the devices that consume them. 1.35+ forbids the two
    in one slice (``only one of `sharedCounters` or `devices` is allowed``)."""


MAX_TAINTS_1_34: Final = 4
MAX_SHARED_COUNTERS_1_34: Final = 32
"""Kubernetes ≤ 1.34 (resource/v1 ``ResourceSliceMaxSharedCounters``): counters summed over
all counter sets of one slice."""
MAX_DEVICE_COUNTERS_PER_SLICE_1_34: Final = 1024
"""Kubernetes ≤ 1.34 (``ResourceSliceMaxDeviceCountersPerSlice``): counters summed over the
``consumesCounters`` of every device of one slice."""


def server_minor(git_version: str) -> int | None:
    """The minor release of a ``GET /version`` ``gitVersion`` (``v1.33.13`` → 33,
    ``v1.38.0-beta.0`` → 38); None when it is not of that form (``unknown``)."""
    match = re.match(r"^v?1\.(\d+)(?:\.|$)", git_version)
    return int(match.group(1)) if match else None


def for_server(options: RuleOptions, git_version: str) -> RuleOptions:
    """``options`` with the rules of the Kubernetes release ``git_version`` names: up to 1.34
    the counter sets share the slices of their devices and at most 4 taints per device
    (resource/v1 validation of that release); 1.35+ and an unknown version: ``options``."""
    minor = server_minor(git_version)
    if minor is None or minor > 34:
        return options
    return replace(options, counter_sets_with_devices=True,
                   max_taints=min(options.max_taints, MAX_TAINTS_1_34))


SERVER_PARITY: Final = RuleOptions()
"""Exactly the server's rules (for test vectors)."""
DRAKIT_DEFAULT: Final = RuleOptions(reject_negative_quantities=True,
                                    reject_driver_qualified_names=True)
"""The server's rules plus drakit's stricter ones; what the publisher uses."""


# ---------------------------------------------------------------------------------------------
# helpers

def _quantity(value: Any, path: str, errs: list[FieldError]) -> Quantity | None:
    """Parse a quantity or record the decode error the server would give (400)."""
    if value is None:
        errs.append(fe.required(path))
        return None
    try:
        return parse(value)
    except QuantityError:
        errs.append(fe.invalid(path, value if isinstance(value, str) else str(value),
                               QUANTITY_ERROR))
        return None


def _non_negative(q: Quantity | None, path: str, opts: RuleOptions,
                  errs: list[FieldError]) -> None:
    if q is not None and opts.reject_negative_quantities and q.value < 0:
        errs.append(fe.invalid(path, str(q), "must be greater than or equal to 0 (drakit rule)"))


def is_restricted_device(device: dict[str, Any]) -> bool:
    """True when the device lowers its slice's limit to 64 devices: a non-empty ``taints``,
    a non-empty ``consumesCounters``, or any list-typed attribute (even an empty list)."""
    if device.get("taints") or device.get("consumesCounters"):
        return True
    for attr in (device.get("attributes") or {}).values():
        if isinstance(attr, dict) and any(attr.get(m) is not None for m in LIST_ATTRIBUTE_MEMBERS):
            return True
    return False


def device_limit(devices: list[dict[str, Any]]) -> int:
    """Maximum number of devices for a slice holding these devices (128 or 64)."""
    return MAX_DEVICES_RESTRICTED if any(map(is_restricted_device, devices)) else MAX_DEVICES


# ---------------------------------------------------------------------------------------------
# attributes and capacity

def validate_attribute(key: str, attr: Any, map_path: str) -> list[FieldError]:
    """One ``attributes`` entry: key errors at the map path, value errors at ``[key]``."""
    errs = formats.qualified_name(key, map_path)
    path = fe.key(map_path, key, QUALIFIED_NAME_PATH_MAX)
    if not isinstance(attr, dict):
        attr = {}
    present = [m for m in ATTRIBUTE_MEMBERS if attr.get(m) is not None]
    unknown = sorted(set(attr) - set(ATTRIBUTE_MEMBERS))
    for m in unknown:
        errs.append(fe.invalid(fe.child(path, m), attr[m], "unknown attribute member"))
    if "int" in present:
        v = attr["int"]
        if isinstance(v, bool) or not isinstance(v, int) or not INT64_MIN <= v <= MAX_INT64:
            errs.append(fe.invalid(fe.child(path, "int"), v, "must be a 64-bit signed integer"))
    if "bool" in present and not isinstance(attr["bool"], bool):
        errs.append(fe.invalid(fe.child(path, "bool"), attr["bool"], "must be a boolean"))
    if "string" in present:
        v = attr["string"]
        if not isinstance(v, str):
            errs.append(fe.invalid(fe.child(path, "string"), v, "must be a string"))
        elif formats.nbytes(v) > formats.ATTRIBUTE_VALUE_MAX:
            errs.append(fe.too_long(fe.child(path, "string"), formats.ATTRIBUTE_VALUE_MAX))
    if "version" in present:
        v = attr["version"]
        if not isinstance(v, str):
            errs.append(fe.invalid(fe.child(path, "version"), v, "must be a string"))
        else:
            errs.extend(formats.semver(v, fe.child(path, "version")))
    for m in LIST_ATTRIBUTE_MEMBERS:
        if m not in present:
            continue
        values = attr[m]
        lpath = fe.child(path, m)
        if not isinstance(values, list):
            errs.append(fe.invalid(lpath, values, "must be a list"))
            continue
        if not values:
            errs.append(fe.invalid(lpath, [], "must not be empty if specified"))
        for j, v in enumerate(values):
            ipath = fe.index(lpath, j)
            if m == "strings":
                if not isinstance(v, str):
                    errs.append(fe.invalid(ipath, v, "must be a string"))
                elif formats.nbytes(v) > formats.ATTRIBUTE_VALUE_MAX:
                    errs.append(fe.too_long(ipath, formats.ATTRIBUTE_VALUE_MAX))
            elif m == "versions":
                if not isinstance(v, str):
                    errs.append(fe.invalid(ipath, v, "must be a string"))
                else:
                    errs.extend(formats.semver(v, ipath))
            elif m == "ints" and (isinstance(v, bool) or not isinstance(v, int)
                                  or not INT64_MIN <= v <= MAX_INT64):
                errs.append(fe.invalid(ipath, v, "must be a 64-bit signed integer"))
            elif m == "bools" and not isinstance(v, bool):
                errs.append(fe.invalid(ipath, v, "must be a boolean"))
    if present and all(isinstance(attr[m], list) and not attr[m] for m in present):
        # declarative union validation (1.37) counts an empty list as unset
        errs.append(fe.invalid(path, "", UNION_DV_DETAIL))
    if not present:
        errs.append(fe.invalid(path, "", "exactly one value must be specified"))
    elif len(present) > 1:
        errs.append(fe.invalid(path, {m: attr[m] for m in present},
                               "exactly one value must be specified"))
    return errs


def attribute_value_count(attr: Any) -> int:
    """Values an attribute adds to the per-device limit of 48 (a list counts its length)."""
    if not isinstance(attr, dict):
        return 0
    n = 0
    for m, v in attr.items():
        if v is not None and m in _ATTRIBUTE_MEMBER_SET:
            n += len(v) if isinstance(v, list) else 1
    return n


def validate_capacity(key: str, cap: Any, map_path: str, allow_multiple: bool,
                      opts: RuleOptions = SERVER_PARITY) -> list[FieldError]:
    """One ``capacity`` entry: key, ``value`` and ``requestPolicy`` (DeviceCapacity,
    DRAConsumableCapacity, Kubernetes 1.34+)."""
    errs = formats.qualified_name(key, map_path)
    path = fe.key(map_path, key, QUALIFIED_NAME_PATH_MAX)
    if not isinstance(cap, dict):
        cap = {}
    value = _quantity(cap.get("value"), fe.child(path, "value"), errs)
    _non_negative(value, fe.child(path, "value"), opts, errs)
    policy = cap.get("requestPolicy")
    if policy is not None:
        ppath = fe.child(path, "requestPolicy")
        if not allow_multiple:
            errs.append(fe.forbidden(ppath, "allowMultipleAllocations must be true"))
        if value is not None and isinstance(policy, dict):
            errs.extend(_request_policy(value, policy, ppath, opts))
    return errs


def validate_capacity_amounts(amounts: Any, path: str) -> list[FieldError]:
    """A map of capacity name → quantity: a request's ``capacity.requests`` or an allocation
    result's ``consumedCapacity``. At most :data:`MAX_CAPACITY_REQUIREMENTS` entries
    (Kubernetes 1.38: ``MaxCapacityRequirements``, validated as ``maxProperties=32``), keys
    qualified names, values quantities that are not negative."""
    if not isinstance(amounts, dict):
        return [fe.invalid(path, amounts, "must be a map")]
    if len(amounts) > MAX_CAPACITY_REQUIREMENTS:
        return [fe.too_many(path, len(amounts), MAX_CAPACITY_REQUIREMENTS)]
    errs: list[FieldError] = []
    for key in sorted(amounts, key=str):
        errs.extend(formats.qualified_name(str(key), path))
        kpath = fe.key(path, str(key), QUALIFIED_NAME_PATH_MAX)
        q = _quantity(amounts[key], kpath, errs)
        if q is not None and q.value < 0:
            errs.append(fe.invalid(kpath, amounts[key], "must be greater than or equal to 0"))
    return errs


def _request_policy(value: Quantity, policy: dict[str, Any], p: str,
                    opts: RuleOptions) -> list[FieldError]:
    errs: list[FieldError] = []
    valid_values = policy.get("validValues")
    valid_range = policy.get("validRange")
    if valid_values and valid_range is not None:
        return [fe.forbidden(p, "exactly one policy can be specified, cannot specify "
                                '"validValues" and "validRange" at the same time')]
    default = None
    if policy.get("default") is not None:
        default = _quantity(policy["default"], fe.child(p, "default"), errs)
        if default is None:
            return errs
    if valid_values:
        return errs + _valid_values(value, default, valid_values, p, opts)
    if valid_range is not None:
        return errs + _valid_range(value, default, valid_range, p, opts)
    return errs


def _valid_values(value: Quantity, default: Quantity | None, raw: list[Any], p: str,
                  opts: RuleOptions) -> list[FieldError]:
    errs: list[FieldError] = []
    vpath = fe.child(p, "validValues")
    if default is None:
        errs.append(fe.required(fe.child(p, "default"), "required when validValues is defined"))
    options: list[Quantity | None] = []
    for j, r in enumerate(raw):
        sub: list[FieldError] = []
        options.append(_quantity(r, fe.index(vpath, j), sub))
        errs.extend(sub)
    for j in range(len(options) - 1):
        a, b = options[j], options[j + 1]
        if a is not None and b is not None and a.value > b.value:
            errs.append(fe.invalid(fe.index(vpath, j + 1), str(b),
                                   "values must be sorted in ascending order"))
    found = False
    if len(options) > MAX_VALID_VALUES:
        errs.append(fe.too_many(vpath, len(options), MAX_VALID_VALUES))
    else:
        seen: set[Any] = set()
        for j, q in enumerate(options):
            if q is None:
                continue
            if q.value > value.value:
                errs.append(fe.invalid(fe.index(vpath, j), str(q),
                                       f"option is larger than capacity value: {value}"))
            dup_key: Any = q.value if opts.fractional_capacity_range else q.ceil_int()
            if dup_key in seen:
                errs.append(fe.duplicate(fe.index(vpath, j), str(q)))
            seen.add(dup_key)
            if default is not None and q.value == default.value:
                found = True
    if default is not None and not found:
        errs.append(fe.invalid(vpath, str(default),
                               "default value is not valid according to the requestPolicy"))
    return errs


def _valid_range(value: Quantity, default: Quantity | None, vr: Any, p: str,
                 opts: RuleOptions) -> list[FieldError]:
    errs: list[FieldError] = []
    rpath = fe.child(p, "validRange")
    if default is None:
        errs.append(fe.required(fe.child(p, "default"), "required when validRange is defined"))
    if not isinstance(vr, dict) or vr.get("min") is None:
        errs.append(fe.required(fe.child(rpath, "min"), "required when validRange is defined"))
        return errs
    decode: list[FieldError] = []
    mn = _quantity(vr["min"], fe.child(rpath, "min"), decode)
    mx = _quantity(vr["max"], fe.child(rpath, "max"), decode) if vr.get("max") is not None \
        else None
    step = (_quantity(vr["step"], fe.child(rpath, "step"), decode)
            if vr.get("step") is not None else None)
    errs.extend(decode)
    if mn is None or decode:
        return errs
    if mn.value > value.value:
        errs.append(fe.invalid(fe.child(rpath, "min"), str(mn),
                               f"min is larger than capacity value: {value}"))
    if default is not None and default.value < mn.value:
        errs.append(fe.invalid(fe.child(rpath, "default"), str(default),
                               f"default is less than min: {mn}"))
    if mx is not None:
        if mn.value > mx.value:
            errs.append(fe.invalid(fe.child(rpath, "max"), str(mn),
                                   f"min is larger than max: {mx}"))
        if mx.value > value.value:
            errs.append(fe.invalid(fe.child(rpath, "max"), str(mx),
                                   f"max is larger than capacity value: {value}"))
        if default is not None and default.value > mx.value:
            errs.append(fe.invalid(fe.child(rpath, "default"), str(default),
                                   f"default is more than max: {mx}"))
    named = {"default": default, "min": mn, "max": mx, "step": step}
    milli = opts.fractional_capacity_range and any(
        q is not None and not q.is_integer() for q in named.values())
    if milli:
        bad = False
        for name, q in named.items():
            if q is None:
                continue
            scaled = q.milli()
            if scaled != scaled.to_integral_value() or abs(scaled) > MAX_INT64:
                errs.append(fe.invalid(fe.child(rpath, name), str(q),
                                       "value cannot be represented as a milli value"))
                bad = True
        if bad:
            return errs
    if step is None:
        return errs
    spath = fe.child(rpath, "step")
    if step.value <= 0:
        errs.append(fe.invalid(spath, str(step), "must be greater than zero"))
        return errs
    one_step = Quantity(mn.value + step.value, mn.format)
    if one_step.value > value.value:
        errs.append(fe.invalid(spath, str(step),
                               f"one step {one_step} is larger than capacity value: {value}"))
    if not milli:
        out_of_range = False
        for name, q in named.items():
            if q is None:
                continue
            if q.value < 0:
                errs.append(fe.invalid(fe.child(rpath, name), str(q),
                                       "must be greater than or equal to 0"))
                out_of_range = True
            elif q.value > MAX_INT64:
                errs.append(fe.invalid(fe.child(rpath, name), str(q),
                                       f"must not be larger than {MAX_INT64}"))
                out_of_range = True
        if out_of_range:
            return errs

    def units(q: Quantity) -> int:
        return q.ceil_milli() if milli else q.ceil_int()

    for q in (default, mx):
        if q is not None and units(step) and (units(q) - units(mn)) % units(step):
            errs.append(fe.invalid(spath, str(q), f"value is not a multiple of a given step "
                                                  f"({step}) from ({mn})"))
    return errs


# ---------------------------------------------------------------------------------------------
# counters

def validate_counters(counters: Any, path: str, opts: RuleOptions = SERVER_PARITY,
                      limit: int = MAX_COUNTERS_PER_SET) -> list[FieldError]:
    """A counters map (counter set or consumption): required, non-empty, ≤ 32 keys, DNS-label
    keys (errors at the map path), ``{value: quantity}`` values."""
    if not counters or not isinstance(counters, dict):
        return [fe.required(path)]
    if len(counters) > limit:
        return [fe.too_many(path, len(counters), limit)]
    errs: list[FieldError] = []
    for name in sorted(counters):
        errs.extend(formats.dns_label(name, path))
        counter = counters[name]
        cpath = fe.child(fe.key(path, name, COUNTER_KEY_PATH_MAX), "value")
        raw = counter.get("value") if isinstance(counter, dict) else None
        q = _quantity(raw, cpath, errs)
        _non_negative(q, cpath, opts, errs)
    return errs


def validate_counter_set(counter_set: dict[str, Any], path: str,
                         opts: RuleOptions = SERVER_PARITY) -> list[FieldError]:
    """One ``spec.sharedCounters[i]``: DNS-label ``name`` and its ``counters``."""
    errs: list[FieldError] = []
    name = counter_set.get("name")
    if not name:
        errs.append(fe.required(fe.child(path, "name")))
    else:
        errs.extend(formats.dns_label(name, fe.child(path, "name")))
    errs.extend(validate_counters(counter_set.get("counters"), fe.child(path, "counters"), opts))
    return errs


def validate_consumes_counters(items: Any, path: str,
                               opts: RuleOptions = SERVER_PARITY) -> list[FieldError]:
    """``devices[i].consumesCounters``: ≤ 2 entries, unique ``counterSet``, each with counters."""
    if not isinstance(items, list):
        return [fe.invalid(path, items, "must be a list")]
    if len(items) > MAX_CONSUMPTIONS_PER_DEVICE:
        return [fe.too_many(path, len(items), MAX_CONSUMPTIONS_PER_DEVICE)]
    errs: list[FieldError] = []
    seen: set[str] = set()
    for j, item in enumerate(items):
        ipath = fe.index(path, j)
        item = item if isinstance(item, dict) else {}
        cs = item.get("counterSet")
        if not cs:
            errs.append(fe.required(fe.child(ipath, "counterSet")))
        else:
            errs.extend(formats.dns_label(cs, fe.child(ipath, "counterSet")))
            if cs in seen:
                errs.append(fe.duplicate(ipath, cs))
            seen.add(cs)
        errs.extend(validate_counters(item.get("counters"), fe.child(ipath, "counters"), opts,
                                      MAX_COUNTERS_PER_CONSUMPTION))
        if item.get("compatibilityGroups") is not None:
            errs.extend(validate_compatibility_groups(item["compatibilityGroups"],
                                                      fe.child(ipath, "compatibilityGroups")))
    return errs


def validate_compatibility_groups(groups: Any, path: str) -> list[FieldError]:
    """``consumesCounters[j].compatibilityGroups`` (DRADeviceCompatibilityGroups, 1.37): at
    most 2 names, unique, each a DNS label (declarative maxItems, unique=set,
    format=k8s-short-name in k8s.io/api resource/v1 types.go)."""
    if not isinstance(groups, list):
        return [fe.invalid(path, groups, "must be a list")]
    if len(groups) > MAX_COMPATIBILITY_GROUPS:
        return [fe.too_many(path, len(groups), MAX_COMPATIBILITY_GROUPS)]
    errs: list[FieldError] = []
    seen: set[Any] = set()
    for j, group in enumerate(groups):
        if not isinstance(group, str):
            errs.append(fe.invalid(fe.index(path, j), group, "must be a string"))
            continue
        errs.extend(formats.dns_label(group, fe.index(path, j)))
        if group in seen:
            errs.append(fe.duplicate(fe.index(path, j), group))
        seen.add(group)
    return errs


# ---------------------------------------------------------------------------------------------
# node allocatable resources (DRANodeAllocatableResources)

def is_node_allocatable_resource_name(name: str) -> bool:
    """``cpu``, ``memory`` or ``hugepages-<size>`` (core helper
    IsNodeAllocatableResourceName; not ephemeral-storage, not extended resources)."""
    return name in ("cpu", "memory") or name.startswith("hugepages-")


def _positive_quantity(raw: Any, path: str, detail: str, strict: bool,
                       errs: list[FieldError]) -> None:
    q = _quantity(raw, path, errs)
    if q is not None and (q.value <= 0 if strict else q.value < 0):
        errs.append(fe.invalid(path, str(q), detail))


def validate_node_allocatable_resources(resources: Any, capacity: Any,
                                        path: str) -> list[FieldError]:
    """``devices[i].nodeAllocatableResources`` (1.36+ alpha): node resource name → ``mapping``
    and/or ``overhead``. mapping: ``capacityKey`` (a key of this device's ``capacity``) and
    ``capacityMultiplier`` (> 0) together, or ``deviceMultiplier`` (> 0); overhead: ``perPod``
    and/or ``perContainer`` (≥ 0). Wording from validateNodeAllocatableResources in
    pkg/apis/resource/validation (Kubernetes 1.37)."""
    if not isinstance(resources, dict):
        return [fe.invalid(path, resources, "must be a map")]
    caps = capacity if isinstance(capacity, dict) else {}
    errs: list[FieldError] = []
    for name in sorted(resources):
        entry = resources[name]
        kpath = f"{path}[{name}]"
        if not is_node_allocatable_resource_name(name):
            errs.append(fe.invalid(kpath, name, "must be a node allocatable resource name"))
        entry = entry if isinstance(entry, dict) else {}
        mapping, overhead = entry.get("mapping"), entry.get("overhead")
        if mapping is None and overhead is None:
            errs.append(fe.required(kpath, "at least one of mapping or overhead must be set"))
        if isinstance(mapping, dict):
            mpath = fe.child(kpath, "mapping")
            key = mapping.get("capacityKey")
            multiplier = mapping.get("capacityMultiplier")
            if key is not None:
                if key == "":
                    errs.append(fe.invalid(fe.child(mpath, "capacityKey"), "",
                                           "capacityKey must not be an empty string"))
                elif key not in caps:
                    errs.append(FieldError(fe.NOT_FOUND, fe.child(mpath, "capacityKey"), key))
                if multiplier is None:
                    errs.append(fe.required(fe.child(mpath, "capacityMultiplier"),
                                            "capacityMultiplier is required when capacityKey "
                                            "is set"))
                else:
                    _positive_quantity(multiplier, fe.child(mpath, "capacityMultiplier"),
                                       "must be positive", True, errs)
            if mapping.get("deviceMultiplier") is not None:
                _positive_quantity(mapping["deviceMultiplier"],
                                   fe.child(mpath, "deviceMultiplier"), "must be positive",
                                   True, errs)
            if multiplier is not None and key is None:
                errs.append(fe.required(fe.child(mpath, "capacityKey"),
                                        "capacityKey is required when capacityMultiplier is set"))
        if isinstance(overhead, dict):
            opath = fe.child(kpath, "overhead")
            if overhead.get("perPod") is None and overhead.get("perContainer") is None:
                errs.append(fe.invalid(opath, "", "at least one of perPod or perContainer must "
                                                  "be set"))
                continue
            for part in ("perPod", "perContainer"):
                if overhead.get(part) is not None:
                    _positive_quantity(overhead[part], fe.child(opath, part),
                                       "must be non-negative", False, errs)
    return errs


# ---------------------------------------------------------------------------------------------
# slice-level 1.37 fields

def validate_partition_type_attribute(spec: dict[str, Any],
                                      device_path: str | None = None) -> list[FieldError]:
    """``spec.partitionTypeAttribute`` (DRAPartitionableDevicesType, 1.37 alpha): a fully
    qualified name, only on a slice whose devices consume counters, and every such device
    carries it as a string attribute (bare in the driver's own domain, or fully qualified;
    the fully qualified spelling wins). ``device_path`` names the one device of ``spec``
    being checked when it is not ``spec.devices[0]`` (a pool's device before splitting)."""
    name = spec["partitionTypeAttribute"]
    path = "spec.partitionTypeAttribute"
    if not isinstance(name, str):
        return [fe.invalid(path, name, "must be a string")]
    devices = [d for d in spec.get("devices") or [] if isinstance(d, dict)]
    if not any(d.get("consumesCounters") for d in devices):
        return [fe.invalid(path, name, "may only be set on a slice which declares devices "
                                       "that consume counters")]
    errs = formats.fully_qualified_name(name, path)
    if errs:
        return errs
    driver = spec.get("driver") or ""
    bare = name[len(driver) + 1:] if name.startswith(driver + "/") else ""
    for i, device in enumerate(spec.get("devices") or []):
        if not isinstance(device, dict) or not device.get("consumesCounters"):
            continue
        attrs = device.get("attributes") or {}
        apath = f"{device_path or f'spec.devices[{i}]'}.attributes[{name}]"
        attr = attrs.get(name, attrs.get(bare) if bare else None)
        if attr is None:
            errs.append(fe.required(apath, "device consumes counters and "
                                           "`partitionTypeAttribute` names this attribute, so "
                                           "it must be set"))
        elif not isinstance(attr, dict) or attr.get("string") is None:
            errs.append(fe.invalid(apath, attr, "must be a string value because "
                                                "`partitionTypeAttribute` names this attribute"))
    return errs


def validate_skip_node_operations(ops: Any, path: str = "spec.skipNodeOperations"
                                  ) -> list[FieldError]:
    """``spec.skipNodeOperations`` (DRAOptionalNodeOperations, 1.37 alpha): a set of
    ``NodePrepareResources``, ``NodeUnprepareResources``, ``*``; skipping prepare needs
    unprepare (or ``*``) skipped too."""
    if not isinstance(ops, list):
        return [fe.invalid(path, ops, "must be a list")]
    errs: list[FieldError] = []
    seen: set[Any] = set()
    for j, op in enumerate(ops):
        if op not in SKIP_NODE_OPERATIONS:
            errs.append(fe.not_supported(fe.index(path, j), op, list(SKIP_NODE_OPERATIONS)))
        elif op in seen:
            errs.append(fe.duplicate(fe.index(path, j), op))
        seen.add(op)
    if "NodePrepareResources" in seen and not seen & {"NodeUnprepareResources", "*"}:
        errs.append(fe.invalid(path, ops, "NodePrepareResources cannot be skipped unless "
                                          "NodeUnprepareResources is also skipped"))
    return errs


# ---------------------------------------------------------------------------------------------
# node selection

def validate_node_selector(sel: Any, path: str, exactly_one_term: bool) -> list[FieldError]:
    """A core NodeSelector (core/v1 ``NodeSelector`` rules, k8s.io/kubernetes
    pkg/apis/core/validation). ``exactly_one_term`` applies to ``spec.nodeSelector`` only."""
    errs: list[FieldError] = []
    sel = sel if isinstance(sel, dict) else {}
    tpath = fe.child(path, "nodeSelectorTerms")
    terms = sel.get("nodeSelectorTerms")
    if not terms:
        errs.append(fe.required(tpath, "must have at least one node selector term"))
    for i, term in enumerate(terms or []):
        term = term if isinstance(term, dict) else {}
        ipath = fe.index(tpath, i)
        for j, expr in enumerate(term.get("matchExpressions") or []):
            errs.extend(_match_expression(expr, fe.index(fe.child(ipath, "matchExpressions"), j)))
        for j, expr in enumerate(term.get("matchFields") or []):
            errs.extend(_match_field(expr, fe.index(fe.child(ipath, "matchFields"), j)))
    if exactly_one_term and (not isinstance(terms, list) or len(terms) != 1):
        errs.append(fe.invalid(tpath, terms, "must have exactly one node selector term"))
    return errs


def _match_expression(expr: Any, path: str) -> list[FieldError]:
    expr = expr if isinstance(expr, dict) else {}
    errs = formats.label_key(expr.get("key") or "", fe.child(path, "key"))
    op = expr.get("operator")
    values = expr.get("values") or []
    vpath = fe.child(path, "values")
    if op in ("In", "NotIn"):
        if not values:
            errs.append(fe.required(vpath, "must be specified when `operator` is 'In' or 'NotIn'"))
    elif op in ("Exists", "DoesNotExist"):
        if values:
            errs.append(fe.forbidden(
                vpath, "may not be specified when `operator` is 'Exists' or 'DoesNotExist'"))
    elif op in ("Gt", "Lt"):
        if len(values) != 1:
            errs.append(fe.required(
                vpath, "must be specified single value when `operator` is 'Lt' or 'Gt'"))
    else:
        errs.append(fe.invalid(fe.child(path, "operator"), op, "not a valid selector operator"))
    for k, v in enumerate(values):
        errs.extend(formats.label_value(str(v), fe.index(vpath, k)))
    return errs


def _match_field(expr: Any, path: str) -> list[FieldError]:
    expr = expr if isinstance(expr, dict) else {}
    errs: list[FieldError] = []
    if expr.get("key") != "metadata.name":
        errs.append(fe.invalid(fe.child(path, "key"), expr.get("key"),
                               "not a valid field selector key"))
    op = expr.get("operator")
    values = expr.get("values") or []
    vpath = fe.child(path, "values")
    if op in ("In", "NotIn"):
        if len(values) != 1:
            errs.append(fe.required(vpath, "must be only one value when `operator` is 'In' or "
                                           "'NotIn' for node field selector"))
    else:
        errs.append(fe.invalid(fe.child(path, "operator"), op, "not a valid selector operator"))
    for k, v in enumerate(values):
        errs.extend(formats.node_name(str(v), fe.index(vpath, k)))
    return errs


_DEVICE_NODE_ONE_OF: Final = ("exactly one of `nodeName`, `nodeSelector`, or `allNodes` is "
                              "required when `perDeviceNodeSelection` is set to true in the "
                              "ResourceSlice spec")
_SPEC_NODE_ONE_OF: Final = ("exactly one of `nodeName`, `nodeSelector`, `allNodes`, "
                            "`perDeviceNodeSelection` is required")


def _set_list(names: list[str]) -> str:
    return "{" + ", ".join(f"`{n}`" for n in names) + "}"


def validate_spec_node_selection(spec: dict[str, Any], path: str = "spec") -> list[FieldError]:
    """Exactly one of ``nodeName`` (non-empty), ``nodeSelector``, ``allNodes: true``,
    ``perDeviceNodeSelection: true`` (ResourceSliceSpec)."""
    errs: list[FieldError] = []
    chosen: list[str] = []
    if "nodeName" in spec and spec["nodeName"] is not None:
        if spec["nodeName"] == "":
            errs.append(fe.invalid(fe.child(path, "nodeName"), "",
                                   "must be either unset or set to a non-empty string"))
        else:
            chosen.append("nodeName")
            errs.extend(formats.node_name(spec["nodeName"], fe.child(path, "nodeName")))
    if spec.get("nodeSelector") is not None:
        chosen.append("nodeSelector")
        errs.extend(validate_node_selector(spec["nodeSelector"], fe.child(path, "nodeSelector"),
                                           exactly_one_term=True))
    for flag in ("allNodes", "perDeviceNodeSelection"):
        if spec.get(flag) is True:
            chosen.append(flag)
        elif spec.get(flag) is not None:
            errs.append(fe.invalid(fe.child(path, flag), spec[flag],
                                   "must be either unset or set to true"))
    if not chosen:
        errs.append(fe.required(path, _SPEC_NODE_ONE_OF))
    elif len(chosen) > 1:
        errs.append(fe.invalid(path, _set_list(chosen),
                               _SPEC_NODE_ONE_OF + ", but multiple fields are set"))
    return errs


def _device_node_selection(device: dict[str, Any], path: str,
                           per_device: bool) -> list[FieldError]:
    if not per_device:
        if device.get("nodeName") is not None or device.get("nodeSelector") is not None \
                or device.get("allNodes") is not None:
            return [fe.invalid(path, None, "`nodeName`, `nodeSelector` and `allNodes` can only be "
                                           "set if `perDeviceNodeSelection` is set to true in the "
                                           "ResourceSlice spec")]
        return []
    errs: list[FieldError] = []
    chosen: list[str] = []
    if device.get("nodeName") is not None:
        if device["nodeName"] == "":
            errs.append(fe.invalid(fe.child(path, "nodeName"), "", "must not be empty"))
        else:
            chosen.append("nodeName")
            errs.extend(formats.node_name(device["nodeName"], fe.child(path, "nodeName")))
    if device.get("nodeSelector") is not None:
        chosen.append("nodeSelector")
        errs.extend(validate_node_selector(device["nodeSelector"],
                                           fe.child(path, "nodeSelector"), exactly_one_term=False))
    if device.get("allNodes") is True:
        chosen.append("allNodes")
    elif device.get("allNodes") is not None:
        errs.append(fe.invalid(fe.child(path, "allNodes"), device["allNodes"],
                               "must be either unset or set to true"))
    if not chosen:
        errs.append(fe.required(path, _DEVICE_NODE_ONE_OF))
    elif len(chosen) > 1:
        errs.append(fe.invalid(path, _set_list(chosen), _DEVICE_NODE_ONE_OF))
    return errs


# ---------------------------------------------------------------------------------------------
# taints and binding conditions

def validate_taints(taints: Any, path: str, opts: RuleOptions = SERVER_PARITY) -> list[FieldError]:
    """``devices[i].taints`` (DeviceTaint, KEP-5055): ≤ 16; label-key ``key``, label-value
    ``value``, ``effect`` one of NoSchedule, NoExecute, None."""
    if not isinstance(taints, list):
        return [fe.invalid(path, taints, "must be a list")]
    if len(taints) > opts.max_taints:
        return [fe.too_many(path, len(taints), opts.max_taints)]
    errs: list[FieldError] = []
    for j, taint in enumerate(taints):
        taint = taint if isinstance(taint, dict) else {}
        tpath = fe.index(path, j)
        errs.extend(formats.label_key(taint.get("key") or "", fe.child(tpath, "key")))
        if taint.get("value"):
            errs.extend(formats.label_value(taint["value"], fe.child(tpath, "value")))
        effect = taint.get("effect")
        if not effect:
            errs.append(fe.required(fe.child(tpath, "effect")))
        elif effect not in TAINT_EFFECTS:
            errs.append(fe.not_supported(fe.child(tpath, "effect"), effect, list(TAINT_EFFECTS)))
    return errs


def _conditions(values: Any, path: str) -> list[FieldError]:
    if not isinstance(values, list):
        return [fe.invalid(path, values, "must be a list")]
    if len(values) > MAX_BINDING_CONDITIONS:
        return [fe.too_many(path, len(values), MAX_BINDING_CONDITIONS)]
    errs: list[FieldError] = []
    seen: set[str] = set()
    for j, v in enumerate(values):
        errs.extend(formats.label_key(str(v), fe.index(path, j)))
        if v in seen:
            errs.append(fe.duplicate(fe.index(path, j), v))
        seen.add(v)
    return errs


def validate_binding_conditions(device: dict[str, Any], path: str) -> list[FieldError]:
    """``bindingConditions`` / ``bindingFailureConditions``: ≤ 4 label keys each, unique, no
    overlap, both set or both empty."""
    bc = device.get("bindingConditions")
    bfc = device.get("bindingFailureConditions")
    if bc is None and bfc is None:
        return []
    bc_path = fe.child(path, "bindingConditions")
    bfc_path = fe.child(path, "bindingFailureConditions")
    errs: list[FieldError] = []
    if bc is not None:
        errs.extend(_conditions(bc, bc_path))
    if bfc is not None:
        errs.extend(_conditions(bfc, bfc_path))
        if isinstance(bc, list) and isinstance(bfc, list):
            for j, v in enumerate(bfc):
                if v in bc:
                    errs.append(fe.invalid(fe.index(bfc_path, j), v, "bindingFailureConditions "
                                           "must not overlap with bindingConditions"))
    if bfc and not bc:
        errs.append(fe.invalid(bc_path, None,
                               "bindingConditions are required to use bindingFailureConditions"))
    if bc and not bfc:
        errs.append(fe.invalid(bfc_path, None,
                               "bindingFailureConditions are required to use bindingConditions"))
    return errs


# ---------------------------------------------------------------------------------------------
# device and slice

_DEVICE_FIELDS: Final = frozenset({
    "name", "attributes", "capacity", "consumesCounters", "nodeName", "nodeSelector", "allNodes",
    "taints", "bindsToNode", "bindingConditions", "bindingFailureConditions",
    "allowMultipleAllocations", "nodeAllocatableResources"})


def validate_device_structure(device: dict[str, Any], path: str, *, per_device: bool,
                              opts: RuleOptions = SERVER_PARITY) -> list[FieldError]:
    """Every device rule except the per-attribute ones (see :func:`validate_attribute`):
    name, capacity, combined limits, counters, node selection, taints, binding conditions."""
    errs: list[FieldError] = []
    name = device.get("name")
    if not name:
        errs.append(fe.required(fe.child(path, "name")))
    elif not (type(name) is str and formats.is_dns_label(name)):
        errs.extend(formats.dns_label(name, fe.child(path, "name")))
    if not _DEVICE_FIELDS.issuperset(device):
        for f in sorted(set(device) - _DEVICE_FIELDS):
            errs.append(fe.invalid(fe.child(path, f), device[f], "unknown device field"))
    attributes = device.get("attributes") or {}
    capacity = device.get("capacity") or {}
    if capacity:
        allow_multiple = device.get("allowMultipleAllocations") is True
        cmap = fe.child(path, "capacity")
        for k in sorted(capacity):
            errs.extend(validate_capacity(k, capacity[k], cmap, allow_multiple, opts))
    total = len(attributes) + len(capacity)
    if total > MAX_ATTRIBUTES_AND_CAPACITIES:
        errs.append(fe.invalid(path, total, "the total number of attributes and capacities must "
                                            f"not exceed {MAX_ATTRIBUTES_AND_CAPACITIES}"))
    values = sum(attribute_value_count(a) for a in attributes.values())
    if values > MAX_ATTRIBUTE_VALUES:
        errs.append(fe.invalid(path, values, "the total number of attribute values must not "
                                             f"exceed {MAX_ATTRIBUTE_VALUES}"))
    if device.get("consumesCounters") is not None:
        errs.extend(validate_consumes_counters(device["consumesCounters"],
                                               fe.child(path, "consumesCounters"), opts))
    errs.extend(_device_node_selection(device, path, per_device))
    if device.get("taints") is not None:
        errs.extend(validate_taints(device["taints"], fe.child(path, "taints"), opts))
    errs.extend(validate_binding_conditions(device, path))
    if device.get("nodeAllocatableResources") is not None:
        errs.extend(validate_node_allocatable_resources(
            device["nodeAllocatableResources"], device.get("capacity"),
            fe.child(path, "nodeAllocatableResources")))
    return errs


def validate_device(device: dict[str, Any], path: str, *, per_device: bool,
                    opts: RuleOptions = SERVER_PARITY) -> list[FieldError]:
    """All rules for one ``spec.devices[i]`` (``Device``: attributes, capacity, counters,
    taints, node selection)."""
    errs: list[FieldError] = []
    amap = fe.child(path, "attributes")
    attributes = device.get("attributes") or {}
    for k in sorted(attributes):
        errs.extend(validate_attribute(k, attributes[k], amap))
    return errs + validate_device_structure(device, path, per_device=per_device, opts=opts)


def validate_slice(obj: dict[str, Any], opts: RuleOptions = SERVER_PARITY) -> list[FieldError]:
    """All server rules for one ResourceSlice object (v1 JSON with ``metadata`` and ``spec``).

    Pool-wide checks (device names unique across slices, counter references) are not server
    rules; :mod:`drakit.plugin.slices.validate` does them per pool.
    """
    errs: list[FieldError] = []
    meta = obj.get("metadata") or {}
    if not meta.get("name") and not meta.get("generateName"):
        errs.append(fe.required("metadata.name", "name or generateName is required"))
    elif meta.get("name"):
        errs.extend(formats.dns_subdomain(meta["name"], "metadata.name"))
    spec = obj.get("spec")
    if not isinstance(spec, dict):
        return [*errs, fe.required("spec")]
    return errs + validate_spec(spec, opts)


def validate_spec(spec: dict[str, Any], opts: RuleOptions = SERVER_PARITY) -> list[FieldError]:
    """All server rules for a ResourceSlice ``spec`` (``ResourceSliceSpec`` and below)."""
    errs = formats.driver_name(spec.get("driver") or "", "spec.driver")
    raw_pool = spec.get("pool")
    pool: dict[str, Any] = raw_pool if isinstance(raw_pool, dict) else {}
    errs.extend(formats.pool_name(pool.get("name") or "", "spec.pool.name"))
    gen = pool.get("generation", 0)
    if not isinstance(gen, int) or gen < 0:
        errs.append(fe.invalid("spec.pool.generation", gen,
                               "must be greater than or equal to zero"))
    count = pool.get("resourceSliceCount")
    if not isinstance(count, int) or count <= 0:
        errs.append(fe.invalid("spec.pool.resourceSliceCount", count or 0,
                               "must be greater than zero"))
    errs.extend(validate_spec_node_selection(spec))
    per_device = spec.get("perDeviceNodeSelection") is True
    devices = spec.get("devices")
    if devices is not None:
        limit = device_limit(devices)
        if len(devices) > limit:
            errs.append(fe.too_many("spec.devices", len(devices), limit))
        else:
            seen: set[str] = set()
            for i, dev in enumerate(devices):
                dpath = fe.index("spec.devices", i)
                errs.extend(validate_device(dev, dpath, per_device=per_device, opts=opts))
                if dev.get("name") in seen:
                    errs.append(fe.duplicate(dpath, dev.get("name")))
                seen.add(dev.get("name"))
    counter_sets = spec.get("sharedCounters")
    if counter_sets is not None:
        if len(counter_sets) > MAX_COUNTER_SETS:
            errs.append(fe.too_many("spec.sharedCounters", len(counter_sets), MAX_COUNTER_SETS))
        else:
            names: set[str] = set()
            for i, cs in enumerate(counter_sets):
                cpath = fe.index("spec.sharedCounters", i)
                errs.extend(validate_counter_set(cs, cpath, opts))
                if cs.get("name") in names:
                    errs.append(fe.duplicate(cpath, cs.get("name")))
                names.add(cs.get("name"))
    if devices is not None and counter_sets is not None:
        errs.append(fe.invalid("spec", "",
                               "only one of `sharedCounters` or `devices` is allowed"))
    if spec.get("partitionTypeAttribute") is not None:
        errs.extend(validate_partition_type_attribute(spec))
    if spec.get("skipNodeOperations") is not None:
        errs.extend(validate_skip_node_operations(spec["skipNodeOperations"]))
    return errs


def driver_qualified_name(driver: str, key: str, path: str) -> list[FieldError]:
    """``<driver>/<id>`` as an attribute or capacity name of ``driver``'s own devices: refused
    (k8s.io/dynamic-resource-allocation v0.38 ``validateUnqualifiedName``: the driver's domain
    is implicit, so the name means ``<id>``, and publishing both spellings makes CEL lookups
    pick one at random). ``path`` is the map's path; the error names the key."""
    domain, sep, ident = key.partition("/")
    if sep and domain == driver:
        return [fe.invalid(path, key, f"use unqualified {json.dumps(ident)}, the driver name "
                                      "is added implicitly")]
    return []
