"""The resource pools one node sees (GatherPools of k8s.io/dynamic-resource-allocation
``structured``, Kubernetes 1.37): slices of the pool's newest generation that target the
node; a pool with fewer slices than ``resourceSliceCount`` is incomplete (not used); duplicate
device names or counter sets make it invalid; pools sorted by driver and pool name, those
whose devices have binding conditions last; slices in a pool sorted by name."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from drakit.allocator.nodes import node_matches
from drakit.plugin.slices import quantity as qty


@dataclass
class Pool:
    driver: str
    name: str
    slices: list[dict[str, Any]] = field(default_factory=list)  # targeting the node
    other_slices: list[dict[str, Any]] = field(default_factory=list)
    counter_sets: dict[str, dict[str, qty.Quantity]] = field(default_factory=dict)
    # the counters' values as published (their text, for reasons: qty.as_published)
    counter_texts: dict[str, dict[str, Any]] = field(default_factory=dict)
    incomplete: bool = False
    invalid: str = ""

    @property
    def id(self) -> str:
        return f"{self.driver}/{self.name}"


def _spec(s: Mapping[str, Any]) -> Mapping[str, Any]:
    return s.get("spec") or {}


def _relevant(s: Mapping[str, Any], node: Mapping[str, Any]) -> bool:
    spec = _spec(s)
    if spec.get("nodeName") or spec.get("allNodes") or spec.get("nodeSelector") is not None:
        return node_matches(node, spec.get("nodeName") or "", bool(spec.get("allNodes")),
                            spec.get("nodeSelector"))
    if spec.get("perDeviceNodeSelection"):
        return any(node_matches(node, d.get("nodeName") or "", bool(d.get("allNodes")),
                                d.get("nodeSelector")) for d in spec.get("devices") or [])
    return False


def _generation(s: Mapping[str, Any]) -> int:
    return int((_spec(s).get("pool") or {}).get("generation") or 0)


def _count(s: Mapping[str, Any]) -> int:
    return int((_spec(s).get("pool") or {}).get("resourceSliceCount") or 0)


def _key(s: Mapping[str, Any]) -> tuple[str, str]:
    spec = _spec(s)
    return (spec.get("driver", ""), (spec.get("pool") or {}).get("name", ""))


def _sname(s: Mapping[str, Any]) -> str:
    return str((s.get("metadata") or {}).get("name", ""))


def gather(slices: Sequence[dict[str, Any]], node: Mapping[str, Any]) -> list[Pool]:
    by_pool: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for s in slices:
        if not _relevant(s, node):
            continue
        k = _key(s)
        have = by_pool.get(k)
        if have is None or _generation(s) > _generation(have[0]):
            by_pool[k] = [s]
        elif _generation(s) == _generation(have[0]):
            have.append(s)
    plain: list[Pool] = []
    binding: list[Pool] = []
    for (driver, name), mine in by_pool.items():
        gen, want = _generation(mine[0]), _count(mine[0])
        others: list[dict[str, Any]] = []
        if len(mine) != want:
            same = [s for s in slices if _key(s) == (driver, name)]
            if any(_generation(s) > gen for s in same):
                continue  # obsolete: a newer generation exists elsewhere
            at_gen = [s for s in same if _generation(s) == gen]
            if len(at_gen) != want:
                plain.append(Pool(driver, name, incomplete=True))
                continue
            names = {_sname(s) for s in mine}
            others = [s for s in at_gen if _sname(s) not in names]
        pool = _build(driver, name, mine, others)
        has_binding = any(d.get("bindingConditions") for s in pool.slices
                          for d in _spec(s).get("devices") or [])
        (binding if has_binding else plain).append(pool)
    plain.sort(key=lambda p: (p.driver, p.name))
    binding.sort(key=lambda p: (p.driver, p.name))
    return plain + binding


def _build(driver: str, name: str, mine: list[dict[str, Any]],
           others: list[dict[str, Any]]) -> Pool:
    pool = Pool(driver, name)
    counter_slices: list[dict[str, Any]] = []
    for s in sorted(mine, key=_sname):
        (counter_slices if _spec(s).get("sharedCounters") else pool.slices).append(s)
    for s in others:
        (counter_slices if _spec(s).get("sharedCounters") else pool.other_slices).append(s)
    seen: set[str] = set()
    for s in pool.slices:
        for d in _spec(s).get("devices") or []:
            if d["name"] in seen:
                pool.invalid = f"duplicate device name {d['name']}"
                return pool
            seen.add(d["name"])
    for s in counter_slices:
        for cs in _spec(s).get("sharedCounters") or []:
            if cs.get("name") in pool.counter_sets:
                pool.invalid = f"duplicate counter set name {cs.get('name')}"
                return pool
            pool.counter_sets[cs.get("name", "")] = {
                k: qty.parse((v or {}).get("value", "0"))
                for k, v in (cs.get("counters") or {}).items()}
            pool.counter_texts[cs.get("name", "")] = {
                k: (v or {}).get("value", "0") for k, v in (cs.get("counters") or {}).items()}
    for s in pool.slices + pool.other_slices:
        for d in _spec(s).get("devices") or []:
            for use in d.get("consumesCounters") or []:
                cs = pool.counter_sets.get(use.get("counterSet", ""))
                if cs is None:
                    pool.invalid = (f"device {d['name']} consumes counters of counter set "
                                    f"{use.get('counterSet')}, which does not exist")
                    return pool
                for cname in use.get("counters") or {}:
                    if cname not in cs:
                        pool.invalid = (f"device {d['name']} consumes counter {cname} of "
                                        f"counter set {use.get('counterSet')}, which does "
                                        "not exist")
                        return pool
    return pool
