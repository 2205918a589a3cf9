"""Split a validated pool into ResourceSlice specs within the API's limits.

Rules (resource-api-validation.md §3, §4; issue 4):

* counter sets go into slices of their own, never together with devices (1.35+), at most 8
  counter sets per slice; they come first;
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


def split_pool(pool: ValidatedPool, driver: str, node_name: str,
               generation: int = 0) -> list[dict[str, Any]]:
    """The slice specs for one pool, counter set slices first, then device slices."""
    bodies: list[dict[str, Any]] = []
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
