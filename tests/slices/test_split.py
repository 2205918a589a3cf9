"""Splitting tables: device counts, restricted devices, counter sets, order, pool fields."""

from __future__ import annotations

import random
from typing import Any

import pytest

from drakit.discovery.model import CounterSet, Device, Pool
from drakit.plugin.slices.rules import validate_spec
from drakit.plugin.slices.split import natural_key, split_pool
from drakit.plugin.slices.validate import ValidatedPool, validate_pool

DRIVER = "gpu.example.com"
NODE = "node-a"


def _pool(n: int, *, counters: bool = False, sets: int = 0, taints: bool = False,
          lists: bool = False) -> ValidatedPool:
    counter_sets = [CounterSet(name=f"set-{i}", counters={"mem": "80Gi"}) for i in range(sets)]
    if counters and not counter_sets:
        counter_sets = [CounterSet(name="set-0", counters={"mem": "80Gi"})]
    devices = []
    for i in range(n):
        kw: dict[str, Any] = {"name": f"dev-{i}", "attributes": {"index": i}}
        if counters:
            kw["consumes_counters"] = [{"counter_set": "set-0", "counters": {"mem": "1Gi"}}]
        if taints:
            kw["taints"] = [{"key": "example.com/t", "effect": "NoSchedule"}]
        if lists:
            kw["attributes"]["l"] = {"ints": [1, 2]}
        devices.append(Device(**kw))
    res = validate_pool(Pool(name="pool", devices=devices, counter_sets=counter_sets),
                        DRIVER, NODE)
    assert res.issues == [] and res.pool is not None
    return res.pool


def _shape(specs: list[dict[str, Any]]) -> list[tuple[str, int]]:
    return [("counters", len(s["sharedCounters"])) if "sharedCounters" in s
            else ("devices", len(s.get("devices", []))) for s in specs]


@pytest.mark.parametrize(("kw", "shape"), [
    ({"n": 0}, [("devices", 0)]),
    ({"n": 1}, [("devices", 1)]),
    ({"n": 128}, [("devices", 128)]),
    ({"n": 129}, [("devices", 128), ("devices", 1)]),
    ({"n": 256}, [("devices", 128), ("devices", 128)]),
    ({"n": 257}, [("devices", 128), ("devices", 128), ("devices", 1)]),
    ({"n": 128, "counters": True}, [("counters", 1), ("devices", 64), ("devices", 64)]),
    ({"n": 65, "taints": True}, [("devices", 64), ("devices", 1)]),
    ({"n": 65, "lists": True}, [("devices", 64), ("devices", 1)]),
    ({"n": 0, "sets": 9}, [("counters", 8), ("counters", 1)]),
    ({"n": 0, "sets": 8}, [("counters", 8)]),
])
def test_split_table(kw: dict[str, Any], shape: list[tuple[str, int]]) -> None:
    specs = split_pool(_pool(**kw), DRIVER, NODE, generation=3)
    assert _shape(specs) == shape
    for s in specs:
        assert s["pool"] == {"name": "pool", "generation": 3, "resourceSliceCount": len(specs)}
        assert s["nodeName"] == NODE and s["driver"] == DRIVER
        assert not ("devices" in s and "sharedCounters" in s)
        assert validate_spec(s) == [], [str(e) for e in validate_spec(s)]


def test_mixed_restricted_devices_respect_64() -> None:
    pool = _pool(200)
    for d in pool.devices[100:110]:
        d["taints"] = [{"key": "example.com/t", "effect": "NoSchedule"}]
    specs = split_pool(pool, DRIVER, NODE)
    for s in specs:
        assert validate_spec(s) == []
    assert sum(len(s["devices"]) for s in specs) == 200


def test_device_order_is_deterministic_and_natural() -> None:
    pool = _pool(130)
    shuffled = list(pool.devices)
    random.Random(7).shuffle(shuffled)
    pool2 = ValidatedPool(name=pool.name, devices=shuffled)
    a = split_pool(pool, DRIVER, NODE)
    b = split_pool(pool2, DRIVER, NODE)
    assert a == b
    names = [d["name"] for s in a for d in s["devices"]]
    assert names[:3] == ["dev-0", "dev-1", "dev-2"] and names[10] == "dev-10"
    assert natural_key("gpu-2") < natural_key("gpu-10")


def test_non_node_local_selection_fields() -> None:
    sel = {"nodeSelectorTerms": [{"matchFields": [
        {"key": "metadata.name", "operator": "In", "values": ["n1"]}]}]}
    assert "nodeSelector" in split_pool(ValidatedPool(name="p", node_selector=sel), DRIVER, NODE)[0]
    assert split_pool(ValidatedPool(name="p", all_nodes=True), DRIVER, NODE)[0]["allNodes"]
    sets = [{"name": "s", "counters": {"c": {"value": "1"}}}]
    specs = split_pool(ValidatedPool(name="p", per_device_node_selection=True, counter_sets=sets),
                       DRIVER, NODE)
    assert all(s["perDeviceNodeSelection"] for s in specs)
    assert all("nodeName" not in s for s in specs)
