"""Split a validated pool into ResourceSlice specs within the API's limits.

Rules (the limits of k8s.io/api resource/v1 types.go, Kubernetes 1.35+, e.g.
ResourceSliceMaxDevices and ResourceSliceMaxCounterSets):

* counter sets go into slices of their own, never together with devices (1.35+), at most 8
  counter sets per slice; they come first. For Kubernetes ≤ 1.34 (``with_devices``), where a
  device may only consume from counter sets of its own slice, each counter set instead
  shares a slice with the devices that consume it (:func:`combined_bodies`);
* devices fill slices in a deterministic order (natural sort by name: ``gpu-2`` before
  ``gpu-10``), at most 128 per slice, or 64 when any device of the slice has taints,
  consumes counters or has a list-typed attribute;
* a pool with neither devices nor counter sets is one slice without devices, so the pool
  still exists;
* every slice of a pool carries the same ``pool.generation`` and ``resourceSliceCount``;
* ``partitionTypeAttribute`` goes into the slices with devices that consume counters,
  ``skipNodeOperations`` into every slice of the pool (Kubernetes 1.37).

The returned specs are resource.k8s.io/v1 ``spec`` objects; the publisher sets the
generation.
"""

from __future__ import annotations

import re
from typing import Any

from drakit.plugin.slices import rules
from drakit.plugin.slices.validate import ValidatedPool

_DIGITS = re.compile(r"(\d+)")


def natural_key(name: str) -> tuple[tuple[int, int | str], ...]:
    """Sort key that orders embedded numbers numerically (``dev-2`` < ``dev-10``)."""
    parts = _DIGITS.split(name)
    return tuple((1, int(p)) if i % 2 else (0, p) for i, p in enumerate(parts))


def sort_devices(devices: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return sorted(devices, key=lambda d: (natural_key(d.get("name", "")), d.get("name", "")))


def chunk_devices(devices: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    """Greedy chunking in the given order: a device joins the current slice if the slice,
    with it, stays within its limit (128, or 64 with a restricted device)."""
    chunks: list[list[dict[str, Any]]] = []
    current: list[dict[str, Any]] = []
    restricted = False
    for dev in devices:
        dev_restricted = rules.is_restricted_device(dev)
        limit = rules.MAX_DEVICES_RESTRICTED if (restricted or dev_restricted) \
            else rules.MAX_DEVICES
        if current and len(current) + 1 > limit:
            chunks.append(current)
            current, restricted = [], False
        current.append(dev)
        restricted = restricted or dev_restricted
    if current:
        chunks.append(current)
    return chunks


def chunk_counter_sets(counter_sets: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    ordered = sorted(counter_sets, key=lambda c: (natural_key(c["name"]), c["name"]))
    step = rules.MAX_COUNTER_SETS
    return [ordered[i:i + step] for i in range(0, len(ordered), step)]


def node_selection(pool: ValidatedPool, node_name: str) -> dict[str, Any]:
    """The pool-level node selection fields of its slices."""
    if pool.node_selector is not None:
        return {"nodeSelector": pool.node_selector}
    if pool.all_nodes:
        return {"allNodes": True}
    if pool.per_device_node_selection:
        return {"perDeviceNodeSelection": True}
    return {"nodeName": node_name}


def _consumed_sets(device: dict[str, Any]) -> list[str]:
    return [str(c.get("counterSet")) for c in device.get("consumesCounters") or ()]


def _counter_count(counter_set: dict[str, Any]) -> int:
    return len(counter_set.get("counters") or {})


def _consumed_counters(device: dict[str, Any]) -> int:
    return sum(len(c.get("counters") or {}) for c in device.get("consumesCounters") or ())


def combined_bodies(pool: ValidatedPool) -> list[dict[str, Any]]:
    """Slice bodies for Kubernetes ≤ 1.34: counter sets beside the devices consuming them.

    The counter sets and their consuming devices form groups (a device consuming two sets
    joins their groups); groups are packed in natural name order into slices within the
    1.34 limits of resource/v1 (128 devices, 32 shared counters summed over the slice's
    sets, 1,024 consumed counters summed over its devices). A group over a limit by itself
    gets a slice of its own (the server says which limit). Devices consuming no counters
    fill the slices after them as in the 1.35+ layout."""
    by_name = {c["name"]: c for c in pool.counter_sets}
    parent = {name: name for name in by_name}

    def find(name: str) -> str:
        while parent[name] != name:
            parent[name] = parent[parent[name]]
            name = parent[name]
        return name

    plain: list[dict[str, Any]] = []
    consuming: list[tuple[str, dict[str, Any]]] = []  # (a set it consumes, device)
    for dev in sort_devices(pool.devices):
        names = [n for n in _consumed_sets(dev) if n in by_name]
        if not names:
            plain.append(dev)
            continue
        consuming.append((names[0], dev))
        root = find(names[0])
        for other in names[1:]:
            parent[find(other)] = root
    groups: dict[str, tuple[list[dict[str, Any]], list[dict[str, Any]]]] = {}
    for name in sorted(by_name, key=lambda n: (natural_key(n), n)):
        groups.setdefault(find(name), ([], []))[0].append(by_name[name])
    for set_name, dev in consuming:
        groups[find(set_name)][1].append(dev)

    bodies: list[dict[str, Any]] = []
    sets: list[dict[str, Any]] = []
    devices: list[dict[str, Any]] = []
    for group_sets, group_devices in groups.values():
        fits = (len(devices) + len(group_devices) <= rules.MAX_DEVICES
                and sum(map(_counter_count, sets + group_sets))
                <= rules.MAX_SHARED_COUNTERS_1_34
                and sum(map(_consumed_counters, devices + group_devices))
                <= rules.MAX_DEVICE_COUNTERS_PER_SLICE_1_34)
        if sets and not fits:
            bodies.append({"sharedCounters": sets, **({"devices": devices} if devices else {})})
            sets, devices = [], []
        sets, devices = sets + group_sets, devices + group_devices
    if sets:
        bodies.append({"sharedCounters": sets, **({"devices": devices} if devices else {})})
    for chunk in chunk_devices(plain):
        bodies.append({"devices": chunk})
    return bodies


def split_pool(pool: ValidatedPool, driver: str, node_name: str,
               generation: int = 0, *, with_devices: bool = False) -> list[dict[str, Any]]:
    """The slice specs for one pool, counter set slices first, then device slices;
    ``with_devices`` (Kubernetes ≤ 1.34, :attr:`~drakit.plugin.slices.rules.RuleOptions.
    counter_sets_with_devices`): each counter set in the slice of the devices consuming it."""
    bodies: list[dict[str, Any]] = []
    if with_devices and pool.counter_sets:
        bodies = combined_bodies(pool)
    else:
        for sets in chunk_counter_sets(pool.counter_sets):
            bodies.append({"sharedCounters": sets})
        for devices in chunk_devices(sort_devices(pool.devices)):
            bodies.append({"devices": devices})
    if not bodies:
        bodies.append({})
    selection = node_selection(pool, node_name)
    specs = []
    for body in bodies:
        spec: dict[str, Any] = {
            "driver": driver,
            "pool": {"name": pool.name, "generation": generation,
                     "resourceSliceCount": len(bodies)},
            **selection,
            **body,
        }
        # partitionTypeAttribute only where a device consumes counters (the API refuses it
        # elsewhere); skipNodeOperations on every slice of the pool.
        if pool.partition_type_attribute is not None and any(
                d.get("consumesCounters") for d in body.get("devices") or ()):
            spec["partitionTypeAttribute"] = pool.partition_type_attribute
        if pool.skip_node_operations:
            spec["skipNodeOperations"] = list(pool.skip_node_operations)
        specs.append(spec)
    return specs
