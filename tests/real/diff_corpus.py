"""A seeded corpus for the differential test of drakit.allocator against kube-scheduler:
one world per node (a pool of whole GPUs, partitions on a shared counter, a device with
consumable capacity, some tainted devices; sometimes a claim already holding a device) and
one claim per world (exact counts, allocationMode All, firstAvailable, matchAttribute /
distinctAttribute, tolerations, capacity requests; class and request selectors, some of
which fail on some devices: a missing attribute is an error, not false)."""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any

D = "diff.drakit.test"
A = f'device.attributes["{D}"]'
CAP = f'device.capacity["{D}"]'

#: DeviceClasses: name -> selector expression
CLASSES: dict[str, str] = {
    "diff-any": f'device.driver == "{D}"',
    "diff-gpu": f'device.driver == "{D}" && {A}.kind == "gpu"',
    "diff-part": f'{A}.kind == "part"',
    "diff-shared": f'{A}.kind == "shared"',
    "diff-new": f'{A}.version.isGreaterThan(semver("1.1.0"))',
    "diff-mem": f'{CAP}.memory.compareTo(quantity("16Gi")) >= 0',
}

SELECTORS: list[str | None] = [
    None, None,
    f'{A}.model == "a"',
    f'{A}.numa == 1',
    f'{A}.?profile.orValue("") == "2g"',
    f'{A}.profile == "1g"',
    f'{CAP}.memory.isGreaterThan(quantity("10Gi"))',
    f'cel.bind(a, {A}, a.kind == "gpu" && a.index % 2 == 0)',
    f'{A}.version.major() >= 2',
    f'"{D}" in device.attributes && {A}.?model.orValue("") in ["b", "c"]',
    f'{A}.kind.startsWith("s") || {A}.kind.matches("^g")',
]


@dataclass
class World:
    node: str
    slices: list[dict[str, Any]]
    claim: dict[str, Any]
    holder: dict[str, Any] | None = None
    notes: list[str] = field(default_factory=list)


def _slice(name: str, node: str, count: int, **spec: Any) -> dict[str, Any]:
    return {"metadata": {"name": name},
            "spec": {"driver": D, "nodeName": node,
                     "pool": {"name": node, "generation": 1, "resourceSliceCount": count},
                     **spec}}


def _devices(rnd: random.Random) -> tuple[list[dict[str, Any]], list[dict[str, Any]],
                                          dict[str, Any] | None]:
    gpus: list[dict[str, Any]] = []
    parts: list[dict[str, Any]] = []
    for i in range(rnd.randint(1, 5)):
        d: dict[str, Any] = {"name": f"gpu-{i}", "attributes": {
            "kind": {"string": "gpu"}, "model": {"string": rnd.choice("abc")},
            "numa": {"int": rnd.randint(0, 1)}, "index": {"int": i},
            "version": {"version": rnd.choice(["1.0.0", "1.2.0", "1.3.0-rc.1", "2.0.0"])}},
            "capacity": {"memory": {"value": rnd.choice(["8Gi", "16Gi", "40Gi"])}}}
        roll = rnd.random()
        if roll < 0.2:
            d["taints"] = [{"key": "diff/broken", "value": "fan", "effect": "NoSchedule"}]
        elif roll < 0.3:
            d["taints"] = [{"key": "diff/note", "effect": "None"}]
        gpus.append(d)
    counters = None
    if rnd.random() < 0.6:
        total = rnd.choice([20, 30, 40])
        counters = {"name": "mem", "counters": {"memory": {"value": f"{total}Gi"}}}
        for i in range(rnd.randint(2, 5)):
            size = rnd.choice([10, 20])
            parts.append({"name": f"part-{i}", "attributes": {
                "kind": {"string": "part"}, "profile": {"string": f"{size // 10}g"},
                "numa": {"int": rnd.randint(0, 1)}, "index": {"int": 10 + i}},
                "capacity": {"memory": {"value": f"{size}Gi"}},
                "consumesCounters": [{"counterSet": "mem", "counters": {
                    "memory": {"value": f"{size}Gi"}}}]})
    if rnd.random() < 0.5:
        parts.append({"name": "shared-0", "allowMultipleAllocations": True, "attributes": {
            "kind": {"string": "shared"}, "numa": {"int": 0}, "index": {"int": 20}},
            "capacity": {"bandwidth": {"value": "10G", "requestPolicy": {
                "default": "1G", "validRange": {"min": "1G", "step": "1G"}}}}})
    if rnd.random() < 0.3:
        parts.append({"name": "shared-1", "allowMultipleAllocations": True, "attributes": {
            "kind": {"string": "shared"}, "numa": {"int": 1}, "index": {"int": 21}},
            "capacity": {"bandwidth": {"value": "8G", "requestPolicy": {
                "default": "2G", "validValues": ["2G", "4G", "8G"]}}}})
    return gpus, parts, counters


def _request(rnd: random.Random, name: str, sub: bool = False) -> dict[str, Any]:
    cls = rnd.choice(list(CLASSES))
    spec: dict[str, Any] = {"deviceClassName": cls}
    if not sub and rnd.random() < 0.15:
        spec["allocationMode"] = "All"
    else:
        spec["allocationMode"] = "ExactCount"
        spec["count"] = rnd.choice([1, 1, 1, 2, 3])
    sel = rnd.choice(SELECTORS)
    if sel:
        spec["selectors"] = [{"cel": {"expression": sel}}]
    if rnd.random() < 0.3:
        spec["tolerations"] = [{"key": "diff/broken", "operator": "Exists"}]
    if cls == "diff-shared" and rnd.random() < 0.7:
        spec["capacity"] = {"requests": {"bandwidth": rnd.choice(["1G", "2500M", "4G", "6G"])}}
    if sub:
        return {"name": name, **spec}
    if rnd.random() < 0.08:
        spec["adminAccess"] = True  # the corpus namespace has the admin-access label
    return {"name": name, "exactly": spec}


def _claim(rnd: random.Random, name: str, namespace: str) -> dict[str, Any]:
    requests = []
    for r in range(rnd.choice([1, 1, 2])):
        if rnd.random() < 0.15:
            requests.append({"name": f"r{r}", "firstAvailable": [
                _request(rnd, "first", sub=True), _request(rnd, "second", sub=True)]})
        else:
            requests.append(_request(rnd, f"r{r}"))
    devices: dict[str, Any] = {"requests": requests}
    if rnd.random() < 0.25:
        key = rnd.choice(["matchAttribute", "distinctAttribute"])
        devices["constraints"] = [{key: f"{D}/{rnd.choice(['numa', 'index'])}"}]
    return {"metadata": {"name": name, "namespace": namespace}, "spec": {"devices": devices}}


def worlds(seed: int, n: int, prefix: str, namespace: str) -> list[World]:
    rnd = random.Random(seed)
    out = []
    for i in range(n):
        node = f"{prefix}-{i}"
        gpus, parts, counters = _devices(rnd)
        slices: list[dict[str, Any]] = []
        if counters:
            slices.append({"counters": {"sharedCounters": [counters]}})
        if len(gpus) > 2 and rnd.random() < 0.3:
            slices += [{"a": {"devices": gpus[:2]}}, {"b": {"devices": gpus[2:] + parts}}]
        else:
            slices.append({"devs": {"devices": gpus + parts}})
        per_device = rnd.random() < 0.2
        count = len(slices) + per_device
        built = [_slice(f"{node}-{k}", node, count, **spec)
                 for s in slices for k, spec in s.items()]
        if per_device:  # perDeviceNodeSelection: one device for this node, one for another
            built.append({"metadata": {"name": f"{node}-pernode"}, "spec": {
                "driver": D, "perDeviceNodeSelection": True,
                "pool": {"name": node, "generation": 1, "resourceSliceCount": count},
                "devices": [
                    {"name": "local-0", "nodeName": node, "attributes": {
                        "kind": {"string": "gpu"}, "model": {"string": "a"},
                        "numa": {"int": 0}, "index": {"int": 30},
                        "version": {"version": "2.1.0"}},
                     "capacity": {"memory": {"value": "16Gi"}}},
                    {"name": "remote-0", "nodeName": f"{node}-elsewhere", "attributes": {
                        "kind": {"string": "gpu"}, "model": {"string": "a"},
                        "numa": {"int": 1}, "index": {"int": 31},
                        "version": {"version": "2.1.0"}},
                     "capacity": {"memory": {"value": "16Gi"}}}]}})
        claim = _claim(rnd, f"c-{i}", namespace)
        holder = None
        if rnd.random() < 0.25:
            holder = {"metadata": {"name": f"h-{i}", "namespace": namespace},
                      "spec": {"devices": {"requests": [{"name": "h", "exactly": {
                          "deviceClassName": "diff-any", "allocationMode": "ExactCount",
                          "count": 1, "tolerations": [
                              {"key": "diff/broken", "operator": "Exists"}]}}]}}}
        out.append(World(node, built, claim, holder))
    return out


def expression_worlds(seed: int, prefix: str, namespace: str) -> list[World]:
    """One claim per DeviceClass and per request selector of the corpus, asking for all
    devices of a fixed world that passes them: the scheduler's allocation is then the set of
    devices on which the expression is true (or its first error)."""
    rnd = random.Random(seed + 1)
    gpus, parts, counters = _devices(rnd)
    while not (len(gpus) >= 3 and counters):
        gpus, parts, counters = _devices(rnd)
    out = []
    exprs = [(c, None) for c in CLASSES] + [("diff-any", s) for s in SELECTORS if s]
    for i, (cls, sel) in enumerate(exprs):
        node = f"{prefix}-{i}"
        spec = {"deviceClassName": cls, "allocationMode": "All",
                "tolerations": [{"key": "diff/broken", "operator": "Exists"}]}
        if sel:
            spec["selectors"] = [{"cel": {"expression": sel}}]
        claim = {"metadata": {"name": f"x-{i}", "namespace": namespace},
                 "spec": {"devices": {"requests": [{"name": "all", "exactly": spec}]}}}
        slices = [_slice(f"{node}-counters", node, 2, sharedCounters=[counters]),
                  _slice(f"{node}-devs", node, 2, devices=gpus + parts)]
        out.append(World(node, slices, claim))
    return out
