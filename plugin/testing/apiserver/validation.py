"""The validation rules the embedded API server enforces (a test double, not
drakit's validator).

It rejects, with kube-apiserver's field paths and wording (resource.k8s.io/v1 validation
of Kubernetes 1.37, pkg/apis/resource/validation), what a node plugin could plausibly get
wrong: a ResourceSlice's required fields, node selection, device count, device names,
attribute shape, semver versions and list attributes, capacity request policies, taints
(key, value, effect enum), counter consumption (with compatibilityGroups),
nodeAllocatableResources, partitionTypeAttribute, skipNodeOperations, immutable fields; a
ResourceClaim's ``status.devices[]`` entries (allocated device, uniqueness, conditions, data,
networkData) and the immutable ``status.allocation``. The rules that drakit's own validator
(:mod:`drakit.plugin.slices.rules`) already writes from the same upstream sources are reused, not
written twice; tests/real/test_real_differential.py holds both to kube-apiserver 1.37.2's
answers. Everything else is accepted as sent.
"""

from __future__ import annotations

import ipaddress
import json
import re
from collections.abc import Mapping
from typing import Any

from drakit.plugin.slices import fielderrors as fe
from drakit.plugin.slices import formats, rules
from drakit.plugin.testing.apiserver.errors import (
    CAUSE_DUPLICATE,
    CAUSE_FORBIDDEN,
    CAUSE_INVALID,
    CAUSE_NOT_SUPPORTED,
    CAUSE_REQUIRED,
    CAUSE_TOO_LONG,
    CAUSE_TOO_MANY,
    Cause,
    duplicate,
    invalid,
    not_supported,
    required,
    too_long,
    too_many,
)

DNS_LABEL = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
DNS_SUBDOMAIN = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*"
UUID = r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"
LABEL_NAME = r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]"
COND_REASON = r"[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?"

MAX_DEVICES = 128
MAX_DEVICES_WITH_TAINTS_OR_COUNTERS = 64
MAX_ATTRIBUTES_AND_CAPACITIES = 32
MAX_ATTRIBUTE_VALUE_LENGTH = 64
MAX_TAINTS = 16
MAX_CONDITIONS = 8
MAX_DATA_BYTES = 10240
MAX_IPS = 16
MAX_INTERFACE_NAME = 256
MAX_HARDWARE_ADDRESS = 128

LABEL_MSG = (
    "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', "
    "and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', "
    f"regex used for validation is '{DNS_LABEL}')"
)
SUBDOMAIN_MSG = (
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, "
    "'-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', "
    f"regex used for validation is '{DNS_SUBDOMAIN}')"
)
NODE_SELECTION_FIELDS = "`nodeName`, `nodeSelector`, `allNodes`, `perDeviceNodeSelection`"
_ATTRIBUTE_MEMBERS = ("int", "bool", "string", "version", "ints", "bools", "strings", "versions")
_LIST_MEMBERS = ("ints", "bools", "strings", "versions")
_LIST_MEMBER_SET = frozenset(_LIST_MEMBERS)
_ATTRIBUTE_MEMBER_SET = frozenset(_ATTRIBUTE_MEMBERS)
_DNS_LABEL_RE = re.compile(DNS_LABEL, re.ASCII)


_CAUSE_OF_TYPE = {
    fe.REQUIRED: CAUSE_REQUIRED, fe.INVALID: CAUSE_INVALID, fe.NOT_SUPPORTED: CAUSE_NOT_SUPPORTED,
    fe.DUPLICATE: CAUSE_DUPLICATE, fe.FORBIDDEN: CAUSE_FORBIDDEN, fe.TOO_LONG: CAUSE_TOO_LONG,
    fe.TOO_MANY: CAUSE_TOO_MANY, fe.NOT_FOUND: "FieldValueNotFound",
}


def _causes(errors: list[fe.FieldError]) -> list[Cause]:
    """drakit's field errors (drakit.plugin.slices.rules, written from the same upstream rules) as
    Status causes."""
    out = []
    for err in errors:
        text = str(err)
        prefix = f"{err.field}: "
        out.append(Cause(err.field, _CAUSE_OF_TYPE.get(err.type, CAUSE_INVALID),
                         text[len(prefix):] if text.startswith(prefix) else text))
    return out


def _nbytes(value: str) -> int:
    return len(value.encode("utf-8"))


def _full(pattern: str, value: str) -> bool:
    return re.fullmatch(pattern, value, re.ASCII) is not None


def check_label(path: str, value: Any) -> list[Cause]:
    if not isinstance(value, str) or not value:
        return [required(path)]
    if _nbytes(value) > 63:
        return [invalid(path, value, "must be no more than 63 characters")]
    if not _full(DNS_LABEL, value):
        detail = "must not contain dots" if _full(DNS_SUBDOMAIN, value) else LABEL_MSG
        return [invalid(path, value, detail)]
    return []


def check_subdomain(path: str, value: str) -> list[Cause]:
    if _nbytes(value) > 253:
        return [invalid(path, value, "must be no more than 253 characters")]
    return [] if _full(DNS_SUBDOMAIN, value) else [invalid(path, value, SUBDOMAIN_MSG)]


def check_driver(path: str, value: Any) -> list[Cause]:
    if not isinstance(value, str) or not value:
        return [required(path)]
    if _nbytes(value) > 63:
        return [too_long(path, 63)]
    # The server lower-cases a driver name before the subdomain check (upper case passes).
    return [] if _full(DNS_SUBDOMAIN, value.lower()) else [invalid(path, value, SUBDOMAIN_MSG)]


def check_pool_name(path: str, value: Any) -> list[Cause]:
    if not isinstance(value, str) or not value:
        return [required(path)]
    if _nbytes(value) > 253:
        return [too_long(path, 253)]
    return [
        invalid(path, value, SUBDOMAIN_MSG)
        for part in value.split("/")
        if not _full(DNS_SUBDOMAIN, part)
    ]


def validate_object_name(name: Any) -> list[Cause]:
    """``metadata.name`` of every resource here is a DNS subdomain (≤253)."""
    if not isinstance(name, str) or not name:
        return [required("metadata.name", "name or generateName is required")]
    return check_subdomain("metadata.name", name)


# --------------------------------------------------------------------------- ResourceSlice


def _node_selection(spec: Mapping[str, Any]) -> list[Cause]:
    causes: list[Cause] = []
    chosen: list[str] = []
    node_name = spec.get("nodeName")
    if node_name is not None:
        if node_name == "":
            causes.append(invalid("spec.nodeName", "", "must be either unset or set to a "
                                  "non-empty string"))
        else:
            chosen.append("nodeName")
            causes += check_subdomain("spec.nodeName", str(node_name))
    if spec.get("nodeSelector") is not None:
        chosen.append("nodeSelector")
        terms = (spec.get("nodeSelector") or {}).get("nodeSelectorTerms")
        if not terms:
            causes.append(required("spec.nodeSelector.nodeSelectorTerms",
                                   "must have at least one node selector term"))
        if not isinstance(terms, list) or len(terms) != 1:
            causes.append(invalid("spec.nodeSelector.nodeSelectorTerms", terms,
                                  "must have exactly one node selector term"))
    for flag in ("allNodes", "perDeviceNodeSelection"):
        value = spec.get(flag)
        if value is True:
            chosen.append(flag)
        elif value is not None:
            causes.append(invalid(f"spec.{flag}", value, "must be either unset or set to true"))
    if not chosen:
        causes.append(required("spec", f"exactly one of {NODE_SELECTION_FIELDS} is required"))
    elif len(chosen) > 1:
        fields = "{" + ", ".join(f"`{c}`" for c in chosen) + "}"
        causes.append(invalid("spec", fields, f"exactly one of {NODE_SELECTION_FIELDS} is "
                              "required, but multiple fields are set"))
    return causes


def _is_label(value: Any) -> bool:
    """True for a valid DNS label (the fast path of :func:`check_label`: a pattern match
    means ASCII, so the length is the byte count)."""
    return type(value) is str and 0 < len(value) <= 63 and _DNS_LABEL_RE.fullmatch(value) \
        is not None


def _is_map(value: Any) -> bool:
    return type(value) is dict or isinstance(value, Mapping)


def _device(path: str, device: Any, old: Any = None) -> list[Cause]:
    """One device; ``old`` is the stored device of the same name on an update (its
    unchanged ``capacity`` and ``taints`` are not validated again, as upstream)."""
    if not _is_map(device):
        return [invalid(path, device, "must be an object")]
    old = old if _is_map(old) else {}
    name = device.get("name")
    causes = [] if _is_label(name) else check_label(f"{path}.name", name)
    attributes = device.get("attributes") or {}
    capacity = device.get("capacity") or {}
    total = len(attributes) + len(capacity)
    if total > MAX_ATTRIBUTES_AND_CAPACITIES:
        causes.append(invalid(path, total, "the total number of attributes and capacities "
                              f"must not exceed {MAX_ATTRIBUTES_AND_CAPACITIES}"))
    for key, attr in attributes.items() if _is_map(attributes) else []:
        if type(attr) is dict and len(attr) == 1:
            # the usual shape, one member: checked without building paths
            [(member, value)] = attr.items()
            if member in _ATTRIBUTE_MEMBER_SET and not (
                    member in ("string", "version") and isinstance(value, str)
                    and _nbytes(value) > MAX_ATTRIBUTE_VALUE_LENGTH):
                continue
        apath = f"{path}.attributes[{key}]"
        members = [m for m in _ATTRIBUTE_MEMBERS if isinstance(attr, Mapping) and m in attr]
        if len(members) != 1:
            shown = attr if members else ""
            causes.append(invalid(apath, shown, "exactly one value must be specified"))
            continue
        member = members[0]
        value = attr[member]
        if member in ("string", "version") and isinstance(value, str) \
                and _nbytes(value) > MAX_ATTRIBUTE_VALUE_LENGTH:
            causes.append(too_long(f"{apath}.{member}", MAX_ATTRIBUTE_VALUE_LENGTH))
    for key, attr in attributes.items() if _is_map(attributes) else []:
        if not _is_map(attr):
            continue
        apath = f"{path}.attributes[{key}]"
        if isinstance(attr.get("version"), str):   # (its length is checked above)
            causes += _causes([e for e in formats.semver(attr["version"], f"{apath}.version")
                               if e.type != fe.TOO_LONG])
        for member in _LIST_MEMBERS:
            if attr.get(member) is not None:
                causes += _causes(_list_attribute(member, attr[member], f"{apath}.{member}"))
        if all(v == [] for v in attr.values()) and any(m in attr for m in _LIST_MEMBERS):
            # declarative union validation counts an empty list as unset
            causes.append(invalid(apath, "", rules.UNION_DV_DETAIL))
    if capacity and capacity != old.get("capacity") and _is_map(capacity):
        allow = device.get("allowMultipleAllocations") is True
        for key in sorted(capacity):
            found = rules.validate_capacity(key, capacity[key], f"{path}.capacity", allow)
            causes += _causes([e for e in found if not e.field.endswith("].value")
                               or "quantities must match" not in e.detail])
    taints = device.get("taints") or []
    if taints != (old.get("taints") or []):
        causes += _causes(rules.validate_taints(taints, f"{path}.taints"))
    if device.get("consumesCounters") is not None:
        causes += _causes(rules.validate_consumes_counters(device["consumesCounters"],
                                                           f"{path}.consumesCounters"))
    if device.get("nodeAllocatableResources") is not None:
        causes += _causes(rules.validate_node_allocatable_resources(
            device["nodeAllocatableResources"], capacity, f"{path}.nodeAllocatableResources"))
    return causes


def _list_attribute(member: str, values: Any, path: str) -> list[fe.FieldError]:
    """A list-typed attribute (DRAListTypeAttributes): non-empty; strings ≤ 64 bytes,
    versions semver."""
    if not isinstance(values, list):
        return [fe.invalid(path, values, "must be a list")]
    if not values:
        return [fe.invalid(path, [], "must not be empty if specified")]
    errs: list[fe.FieldError] = []
    for j, v in enumerate(values):
        if member == "versions" and isinstance(v, str):
            errs += formats.semver(v, f"{path}[{j}]")
        elif member == "strings" and isinstance(v, str) \
                and _nbytes(v) > MAX_ATTRIBUTE_VALUE_LENGTH:
            errs.append(fe.too_long(f"{path}[{j}]", MAX_ATTRIBUTE_VALUE_LENGTH))
    return errs


def _needs_small_slice(device: Any) -> bool:
    if not _is_map(device):
        return False
    if device.get("taints") or device.get("consumesCounters"):
        return True
    attrs = device.get("attributes") or {}
    if not _is_map(attrs):
        return False
    return any(_is_map(a) and not _LIST_MEMBER_SET.isdisjoint(a) for a in attrs.values())


def _counter_sets_of_this_slice(spec: Mapping[str, Any]) -> list[Cause]:
    """Kubernetes ≤ 1.34: a device consumes only from the counter sets of its own slice."""
    sets = {c.get("name"): c.get("counters") or {} for c in spec.get("sharedCounters") or ()
            if _is_map(c)}
    causes: list[Cause] = []
    for i, device in enumerate(spec.get("devices") or ()):
        if not _is_map(device):
            continue
        for j, use in enumerate(device.get("consumesCounters") or ()):
            if not _is_map(use):
                continue
            path = f"spec.devices[{i}].consumesCounters[{j}]"
            name = use.get("counterSet")
            if name not in sets:
                causes.append(invalid(f"{path}.counterSet", name, "must reference a counterSet "
                                      "defined in the ResourceSlice sharedCounters"))
                continue
            for counter in use.get("counters") or {}:
                if counter not in sets[name]:
                    causes.append(invalid(f"{path}.counters", counter, "must reference a "
                                          "counter defined in the ResourceSlice sharedCounters"))
    return causes


def validate_resource_slice(
    obj: Mapping[str, Any], old: Mapping[str, Any] | None, *,
    counter_sets_beside_devices: bool = False,
) -> list[Cause]:
    """Causes for a ResourceSlice create (``old`` None) or update, in v1 shape.
    ``counter_sets_beside_devices``: the rule of Kubernetes ≤ 1.34 (KEP-4815 alpha) instead
    of 1.35+'s "only one of": devices and sharedCounters may share a slice, and every
    ``consumesCounters[].counterSet`` must name a counter set of that slice."""
    spec = obj.get("spec")
    if not isinstance(spec, Mapping):
        return [required("spec")]
    causes = check_driver("spec.driver", spec.get("driver"))
    pool = spec.get("pool")
    if not isinstance(pool, Mapping):
        causes.append(required("spec.pool"))
    else:
        causes += check_pool_name("spec.pool.name", pool.get("name"))
        generation = pool.get("generation", 0)
        if not isinstance(generation, int) or generation < 0:
            causes.append(invalid("spec.pool.generation", generation,
                                  "must be greater than or equal to zero"))
        count = pool.get("resourceSliceCount", 0)
        if not isinstance(count, int) or count <= 0:
            causes.append(invalid("spec.pool.resourceSliceCount", count,
                                  "must be greater than zero"))
    causes += _node_selection(spec)
    devices = spec.get("devices")
    if counter_sets_beside_devices:
        causes += _counter_sets_of_this_slice(spec)
    elif devices is not None and spec.get("sharedCounters") is not None:
        causes.append(invalid("spec", "", "only one of `sharedCounters` or `devices` is allowed"))
    if isinstance(devices, list):
        limit = MAX_DEVICES_WITH_TAINTS_OR_COUNTERS if any(
            _needs_small_slice(d) for d in devices) else MAX_DEVICES
        if len(devices) > limit:
            causes.append(too_many("spec.devices", len(devices), limit))
        else:
            seen: set[str] = set()
            old_devices = {d.get("name"): d for d in ((old or {}).get("spec") or {}).get(
                "devices") or [] if _is_map(d)}
            for i, device in enumerate(devices):
                old_device = old_devices.get(device.get("name")) if _is_map(device) else None
                causes += _device(f"spec.devices[{i}]", device, old_device)
                name = device.get("name") if _is_map(device) else None
                if isinstance(name, str) and name:
                    if name in seen:
                        causes.append(duplicate(f"spec.devices[{i}]", name))
                    seen.add(name)
    if spec.get("partitionTypeAttribute") is not None:
        causes += _causes(rules.validate_partition_type_attribute(dict(spec)))
    if spec.get("skipNodeOperations") is not None:
        causes += _causes(rules.validate_skip_node_operations(spec["skipNodeOperations"]))
    if old is not None:
        old_spec = old.get("spec") or {}
        for label, new_v, old_v in (
            ("spec.driver", spec.get("driver"), old_spec.get("driver")),
            ("spec.pool.name", (spec.get("pool") or {}).get("name"),
             (old_spec.get("pool") or {}).get("name")),
            ("spec.nodeName", spec.get("nodeName"), old_spec.get("nodeName")),
        ):
            if new_v != old_v:
                causes.append(invalid(label, new_v, "field is immutable"))
    return causes


# --------------------------------------------------------------------------- claim status


def device_key(entry: Mapping[str, Any]) -> tuple[Any, Any, Any, Any]:
    """(driver, pool, device, shareID) — the identity of a result or a status entry."""
    return (entry.get("driver"), entry.get("pool"), entry.get("device"), entry.get("shareID"))


def _key_json(entry: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "Driver": entry.get("driver") or "",
        "Pool": entry.get("pool") or "",
        "Device": entry.get("device") or "",
        "ShareID": entry.get("shareID") or "",
    }


def allocated_keys(claim: Mapping[str, Any]) -> set[tuple[Any, Any, Any, Any]]:
    allocation = (claim.get("status") or {}).get("allocation") or {}
    results = (allocation.get("devices") or {}).get("results") or []
    return {device_key(r) for r in results if isinstance(r, Mapping)}


def check_interface_address(path: str, value: Any) -> list[Cause]:
    """networkData.ips[] entry: an address in CIDR form, equal to its canonical form."""
    bad = invalid(path, value, "must be a valid address in CIDR form, (e.g. 10.9.8.7/24 or "
                  "2001:db8::1/64)")
    if not isinstance(value, str) or "/" not in value:
        return [bad]
    addr_text, prefix_text = value.rsplit("/", 1)
    if not prefix_text.isdigit() or not prefix_text.isascii():
        return [bad]
    if "." in addr_text and ":" not in addr_text:
        parts = addr_text.split(".")
        if len(parts) == 4 and all(p.isdigit() and p.isascii() for p in parts):
            addr_text = ".".join(str(int(p)) for p in parts)
    try:
        address = ipaddress.ip_address(addr_text)
    except ValueError:
        return [bad]
    prefix = int(prefix_text)
    if prefix > address.max_prefixlen:
        return [bad]
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        if prefix < 96:
            return [bad]
        address, prefix = address.ipv4_mapped, prefix - 96
    canonical = f"{address}/{prefix}"
    if canonical != value:
        return [invalid(path, value, f'must be in canonical form ("{canonical}")')]
    return []


def _condition(path: str, cond: Any) -> list[Cause]:
    if not isinstance(cond, Mapping):
        return [invalid(path, cond, "must be an object")]
    causes: list[Cause] = []
    ctype = cond.get("type")
    if not ctype:
        causes.append(required(f"{path}.type"))
    elif not _full(r"(" + DNS_SUBDOMAIN + r"/)?" + LABEL_NAME, str(ctype)):
        causes.append(invalid(f"{path}.type", ctype, "name part must consist of alphanumeric "
                              "characters, '-', '_' or '.', and must start and end with an "
                              "alphanumeric character"))
    if cond.get("status") not in ("True", "False", "Unknown"):
        causes.append(not_supported(f"{path}.status", cond.get("status"),
                                    ["False", "True", "Unknown"]))
    if not cond.get("lastTransitionTime"):
        causes.append(required(f"{path}.lastTransitionTime"))
    reason = cond.get("reason")
    if not reason:
        causes.append(required(f"{path}.reason"))
    else:
        if _nbytes(str(reason)) > 1024:
            causes.append(too_long(f"{path}.reason", 1024))
        if not _full(COND_REASON, str(reason)):
            causes.append(invalid(f"{path}.reason", reason, "a condition reason must start "
                                  "with alphabetic character, optionally followed by a string "
                                  "of alphanumeric characters or '_,:', and must end with an "
                                  "alphanumeric character or '_'"))
    message = cond.get("message")
    if isinstance(message, str) and _nbytes(message) > 32768:
        causes.append(too_long(f"{path}.message", 32768))
    generation = cond.get("observedGeneration")
    if isinstance(generation, int) and generation < 0:
        causes.append(invalid(f"{path}.observedGeneration", generation,
                              "must be greater than or equal to zero"))
    return causes


def _network_data(path: str, data: Any) -> list[Cause]:
    if not isinstance(data, Mapping):
        return [invalid(path, data, "must be an object")]
    causes: list[Cause] = []
    name = data.get("interfaceName")
    if isinstance(name, str) and _nbytes(name) > MAX_INTERFACE_NAME:
        causes.append(too_long(f"{path}.interfaceName", MAX_INTERFACE_NAME))
    hw = data.get("hardwareAddress")
    if isinstance(hw, str) and _nbytes(hw) > MAX_HARDWARE_ADDRESS:
        causes.append(too_long(f"{path}.hardwareAddress", MAX_HARDWARE_ADDRESS))
    ips = data.get("ips") or []
    if len(ips) > MAX_IPS:
        causes.append(too_many(f"{path}.ips", len(ips), MAX_IPS))
        return causes
    seen: set[str] = set()
    for k, ip in enumerate(ips):
        found = check_interface_address(f"{path}.ips[{k}]", ip)
        causes += found
        if not found and ip in seen:
            causes.append(duplicate(f"{path}.ips[{k}]", ip))
        if isinstance(ip, str):
            seen.add(ip)
    return causes


def _status_entry(path: str, entry: Mapping[str, Any]) -> list[Cause]:
    causes = check_driver(f"{path}.driver", entry.get("driver"))
    causes += check_pool_name(f"{path}.pool", entry.get("pool"))
    causes += check_label(f"{path}.device", entry.get("device"))
    share_id = entry.get("shareID")
    if share_id is not None and not (isinstance(share_id, str) and _full(UUID, share_id)):
        causes.append(invalid(f"{path}.shareID", share_id,
                              "must be a lowercase UUID in 8-4-4-4-12 format"))
    conditions = entry.get("conditions") or []
    if len(conditions) > MAX_CONDITIONS:
        causes.append(too_many(f"{path}.conditions", len(conditions), MAX_CONDITIONS))
    types: set[str] = set()
    for k, cond in enumerate(conditions):
        causes += _condition(f"{path}.conditions[{k}]", cond)
        ctype = cond.get("type") if isinstance(cond, Mapping) else None
        if isinstance(ctype, str) and ctype:
            if ctype in types:
                causes.append(duplicate(f"{path}.conditions[{k}]", ctype))
            types.add(ctype)
    if "data" in entry and entry["data"] is not None:
        data = entry["data"]
        size = len(json.dumps(data, separators=(",", ":")).encode("utf-8"))
        if size > MAX_DATA_BYTES:
            causes.append(too_long(f"{path}.data", MAX_DATA_BYTES))
        elif not isinstance(data, Mapping):
            causes.append(invalid(f"{path}.data", "<value omitted>",
                                  "must be a valid JSON object"))
    if entry.get("networkData") is not None:
        causes += _network_data(f"{path}.networkData", entry["networkData"])
    return causes


def validate_claim_status(
    obj: Mapping[str, Any], old: Mapping[str, Any] | None
) -> list[Cause]:
    """Causes for a ResourceClaim status write (v1 shape): ``status.devices[]`` and the
    immutability of ``status.allocation``."""
    status = obj.get("status") or {}
    causes: list[Cause] = []
    old_allocation = ((old or {}).get("status") or {}).get("allocation")
    new_allocation = status.get("allocation")
    if old_allocation is not None and new_allocation is not None \
            and old_allocation != new_allocation:
        # kube-apiserver 1.37.2's words (the value printed is null)
        causes.append(invalid("status.allocation", None, "field cannot be modified once set"))
    allocated = allocated_keys(obj)
    seen: set[tuple[Any, Any, Any, Any]] = set()
    for i, entry in enumerate(status.get("devices") or []):
        path = f"status.devices[{i}]"
        if not isinstance(entry, Mapping):
            causes.append(invalid(path, entry, "must be an object"))
            continue
        causes += _status_entry(path, entry)
        key = device_key(entry)
        if key not in allocated:
            causes.append(invalid(path, _key_json(entry), "must be an allocated device in "
                                  "the claim"))
        if key in seen:
            causes.append(duplicate(path, _key_json(entry)))
        seen.add(key)
    return causes


def drop_stale_device_status(
    new: dict[str, Any], old: Mapping[str, Any] | None
) -> None:
    """The claim strategy's side effect: status entries of devices that were in the old
    allocation but are not in the new one are removed (in place)."""
    if old is None:
        return
    gone = allocated_keys(old) - allocated_keys(new)
    status = new.get("status")
    if not gone or not isinstance(status, dict) or not status.get("devices"):
        return
    kept = [e for e in status["devices"] if not (isinstance(e, Mapping)
                                                  and device_key(e) in gone)]
    if kept:
        status["devices"] = kept
    else:
        status.pop("devices")
