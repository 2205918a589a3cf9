"""k8s.io/dynamic-resource-allocation v0.38 refuses, by default, attribute and capacity names
qualified with the driver's own domain (``<driver>/foo``: the domain is implicit, and both
spellings on one device make CEL lookups pick one at random). drakit's publisher does too;
the server does not check it (server parity keeps accepting it)."""

from __future__ import annotations

from drakit.discovery.model import Device, Pool
from drakit.plugin.slices import rules
from drakit.plugin.slices.rules import SERVER_PARITY
from drakit.plugin.slices.validate import validate_pool

DRIVER = "gpu.example.com"
NODE = "node-a"


def test_driver_qualified_attribute_dropped_alone_or_beside_bare() -> None:
    pool = Pool(name="p", devices=[
        Device(name="a", attributes={f"{DRIVER}/model": "y", "other.example.com/model": "z"}),
        Device(name="b", attributes={"model": "x", f"{DRIVER}/model": "y"}),
    ])
    res = validate_pool(pool, DRIVER, NODE)
    assert res.pool is not None
    a, b = res.pool.devices
    assert list(a["attributes"]) == ["other.example.com/model"]  # other domains are fine
    assert list(b["attributes"]) == ["model"]
    assert [(i.device, i.attribute, i.action, i.field) for i in res.issues] == [
        ("a", f"{DRIVER}/model", "attribute dropped", "spec.devices[0].attributes"),
        ("b", f"{DRIVER}/model", "attribute dropped", "spec.devices[1].attributes"),
    ]
    assert 'use unqualified "model", the driver name is added implicitly' in str(
        res.issues[0])


def test_driver_qualified_capacity_drops_the_device() -> None:
    pool = Pool(name="p", devices=[
        Device(name="a", capacity={f"{DRIVER}/memory": "8Gi"}),
        Device(name="b", capacity={"memory": "8Gi", "other.example.com/memory": "1Gi"}),
    ])
    res = validate_pool(pool, DRIVER, NODE)
    assert res.pool is not None
    assert [d["name"] for d in res.pool.devices] == ["b"]
    [issue] = res.issues
    assert issue.action == "device dropped" and issue.device == "a"
    assert issue.field == "spec.devices[0].capacity"
    assert f"{DRIVER}/memory" in str(issue)


def test_the_server_does_not_check_it() -> None:
    pool = Pool(name="p", devices=[Device(name="a", attributes={f"{DRIVER}/model": "y"},
                                          capacity={f"{DRIVER}/memory": "8Gi"})])
    res = validate_pool(pool, DRIVER, NODE, SERVER_PARITY)
    assert res.issues == [] and res.pool is not None and len(res.pool.devices) == 1


def test_rule_compares_the_domain_exactly() -> None:
    path = "spec.devices[0].attributes"
    assert rules.driver_qualified_name(DRIVER, "model", path) == []
    assert rules.driver_qualified_name(DRIVER, "sub.gpu.example.com/model", path) == []
    [err] = rules.driver_qualified_name(DRIVER, f"{DRIVER}/model", path)
    assert err.field == path
