"""Pool validation policy: what is dropped, what is kept, and how each issue is named."""

from __future__ import annotations

from dataclasses import replace

import pytest

from drakit.discovery.model import CounterSet, Device, DeviceAttribute, Pool
from drakit.plugin.slices import formats
from drakit.plugin.slices.rules import DRAKIT_DEFAULT, SERVER_PARITY, validate_attribute
from drakit.plugin.slices.validate import SliceValidationError, validate_pool, validate_pools

DRIVER = "gpu.example.com"
NODE = "node-a"


def dev(name: str, **kw: object) -> Device:
    return Device(name=name, **kw)  # type: ignore[arg-type]


def test_valid_pool_keeps_everything() -> None:
    pool = Pool(name="p", devices=[dev("a", attributes={"model": "x"}), dev("b")])
    res = validate_pool(pool, DRIVER, NODE)
    assert res.issues == []
    assert res.pool is not None
    assert [d["name"] for d in res.pool.devices] == ["a", "b"]
    assert res.pool.node_local


def test_bad_device_dropped_rest_kept_with_named_issue() -> None:
    pool = Pool(name="p", devices=[dev("ok-0"), dev("Bad_Name"), dev("ok-2")])
    res = validate_pool(pool, DRIVER, NODE)
    assert res.pool is not None
    assert [d["name"] for d in res.pool.devices] == ["ok-0", "ok-2"]
    [issue] = res.issues
    assert issue.pool == "p" and issue.device == "Bad_Name"
    assert issue.field == "spec.devices[1].name"
    assert issue.action == "device dropped"
    assert formats.DNS_LABEL_MSG in issue.rule
    assert "spec.devices[1].name" in str(issue)


def test_bad_attribute_dropped_device_kept() -> None:
    pool = Pool(name="p", devices=[dev("a", attributes={
        "model": "x", "serial": "s" * 65, "bad key": "v"})])
    res = validate_pool(pool, DRIVER, NODE)
    assert res.pool is not None
    [device] = res.pool.devices
    assert device["attributes"] == {"model": {"string": "x"}}
    fields = sorted((i.field, i.attribute, i.action) for i in res.issues)
    assert fields == [
        ("spec.devices[0].attributes", "bad key", "attribute dropped"),
        ("spec.devices[0].attributes[serial].string", "serial", "attribute dropped"),
    ]


def test_attribute_bare_and_qualified_drops_bare_without_the_138_rule() -> None:
    pool = Pool(name="p", devices=[dev("a", attributes={"model": "x",
                                                        f"{DRIVER}/model": "y"})])
    res = validate_pool(pool, DRIVER, NODE,
                        replace(DRAKIT_DEFAULT, reject_driver_qualified_names=False))
    assert res.pool is not None
    assert list(res.pool.devices[0]["attributes"]) == [f"{DRIVER}/model"]
    [issue] = res.issues
    assert issue.attribute == "model" and issue.field == "spec.devices[0].attributes"


def test_bad_version_attribute_and_list_attribute() -> None:
    pool = Pool(name="p", devices=[dev("a", attributes={
        "v": DeviceAttribute(version="v1.0"), "l": DeviceAttribute(ints=[]),
        "ok": DeviceAttribute(version="1.0.0-rc.1+build.5")})])
    res = validate_pool(pool, DRIVER, NODE)
    assert res.pool is not None
    assert list(res.pool.devices[0]["attributes"]) == ["ok"]
    assert {i.field for i in res.issues} == {"spec.devices[0].attributes[v].version",
                                             "spec.devices[0].attributes[l].ints",
                                             # the 1.37 union error for the empty list
                                             "spec.devices[0].attributes[l]"}


def test_too_many_attributes_drops_device() -> None:
    attrs = {f"a{i}": i for i in range(33)}
    res = validate_pool(Pool(name="p", devices=[dev("a", attributes=attrs)]), DRIVER, NODE)
    assert res.pool is not None and res.pool.devices == []
    [issue] = res.issues
    assert str(issue.error) == ("spec.devices[0]: Invalid value: 33: the total number of "
                                "attributes and capacities must not exceed 32")


def test_negative_capacity_is_a_drakit_rule() -> None:
    pool = Pool(name="p", devices=[dev("a", capacity={"memory": "-1Gi"})])
    assert validate_pool(pool, DRIVER, NODE).issues
    assert not validate_pool(pool, DRIVER, NODE, SERVER_PARITY).issues


def test_unparsable_quantity_drops_device() -> None:
    res = validate_pool(Pool(name="p", devices=[dev("a", capacity={"memory": "1 GB"})]),
                        DRIVER, NODE)
    [issue] = res.issues
    assert issue.field == "spec.devices[0].capacity[memory].value"
    assert "quantities must match" in issue.rule


def test_counter_references() -> None:
    sets = [CounterSet(name="gpu-0", counters={"memory": "80Gi", "compute": "100"})]
    devices = [
        dev("p-ok", consumes_counters=[{"counter_set": "gpu-0", "counters": {"memory": "10Gi"}}]),
        dev("p-noset", consumes_counters=[{"counter_set": "gpu-9",
                                           "counters": {"memory": "1"}}]),
        dev("p-nocounter", consumes_counters=[{"counter_set": "gpu-0",
                                               "counters": {"sm": "1"}}]),
    ]
    res = validate_pool(Pool(name="p", devices=devices, counter_sets=sets), DRIVER, NODE)
    assert res.pool is not None
    assert [d["name"] for d in res.pool.devices] == ["p-ok"]
    assert {(i.device, i.field) for i in res.issues} == {
        ("p-noset", "spec.devices[1].consumesCounters[0].counterSet"),
        ("p-nocounter", "spec.devices[2].consumesCounters[0].counters"),
    }


def test_bad_counter_set_dropped_with_its_consumers() -> None:
    sets = [CounterSet(name="gpu-0", counters={f"c{i}": "1" for i in range(33)})]
    devices = [dev("p0", consumes_counters=[{"counter_set": "gpu-0", "counters": {"c1": "1"}}])]
    res = validate_pool(Pool(name="p", devices=devices, counter_sets=sets), DRIVER, NODE)
    assert res.pool is not None
    assert res.pool.counter_sets == [] and res.pool.devices == []
    actions = sorted(i.action for i in res.issues)
    assert actions == ["counter set dropped", "device dropped"]
    cs_issue = next(i for i in res.issues if i.action == "counter set dropped")
    assert str(cs_issue.error) == ("spec.sharedCounters[0].counters: Too many: 33: must have at "
                                   "most 32 items")


def test_duplicate_device_names_drop_the_later() -> None:
    res = validate_pool(Pool(name="p", devices=[dev("a"), dev("a")]), DRIVER, NODE)
    assert res.pool is not None and len(res.pool.devices) == 1
    assert str(res.issues[0].error) == 'spec.devices[1]: Duplicate value: "a"'


@pytest.mark.parametrize(("pool", "field"), [
    (Pool(name="Bad/Pool"), "spec.pool.name"),
    (Pool(name="p", all_nodes=True, node_selector={"nodeSelectorTerms": [{}]}), "spec"),
    (Pool(name="p", all_nodes=False), "spec.allNodes"),
    (Pool(name="p", node_selector={"nodeSelectorTerms": []}),
     "spec.nodeSelector.nodeSelectorTerms"),
])
def test_invalid_pool_is_skipped(pool: Pool, field: str) -> None:
    res = validate_pool(pool, DRIVER, NODE)
    assert res.pool is None
    assert field in {i.field for i in res.issues}
    assert {i.action for i in res.issues} == {"pool skipped"}


def test_not_node_local_pools() -> None:
    sel = {"nodeSelectorTerms": [{"matchExpressions": [
        {"key": "example.com/rack", "operator": "In", "values": ["r1"]}]}]}
    res = validate_pool(Pool(name="rack", node_selector=sel, devices=[dev("a")]), DRIVER, NODE)
    assert res.pool is not None and not res.pool.node_local and res.issues == []
    per = Pool(name="pd", per_device_node_selection=True, devices=[
        dev("a", node_name="n1"), dev("b", all_nodes=True), dev("c")])
    res = validate_pool(per, DRIVER, NODE)
    assert res.pool is not None
    assert [d["name"] for d in res.pool.devices] == ["a", "b"]
    assert [i.field for i in res.issues] == ["spec.devices[2]"]
    # device-level node fields are refused in a node-local pool
    res = validate_pool(Pool(name="p", devices=[dev("a", node_name="n1")]), DRIVER, NODE)
    assert res.pool is not None and res.pool.devices == []


def test_duplicate_pool_names() -> None:
    results = validate_pools([Pool(name="p"), Pool(name="p")], DRIVER, NODE)
    assert results[0].pool is not None and results[1].pool is None


def test_taints_and_binding_conditions() -> None:
    good = dev("a", taints=[{"key": "example.com/unhealthy", "effect": "NoSchedule"}],
               binding_conditions=["example.com/ready"],
               binding_failure_conditions=["example.com/failed"])
    bad = dev("b", taints=[{"key": "k", "effect": "PreferNoSchedule"}])
    res = validate_pool(Pool(name="p", devices=[good, bad]), DRIVER, NODE)
    assert res.pool is not None and [d["name"] for d in res.pool.devices] == ["a"]
    assert [i.field for i in res.issues] == ["spec.devices[1].taints[0].effect"]


def test_strict_error_lists_every_issue() -> None:
    res = validate_pool(Pool(name="p", devices=[dev("A"), dev("B")]), DRIVER, NODE)
    err = SliceValidationError(res.issues)
    assert len(err.issues) == 2
    assert "spec.devices[0].name" in str(err) and "spec.devices[1].name" in str(err)


def test_per_device_attribute_values_checked_on_every_device() -> None:
    """Many devices with per-device values (the memo only knows keys and versions): every
    bad value is still found, with the same error as the full check gives."""
    values: list[dict[str, object]] = [
        {"int": 7}, {"int": 2**63}, {"int": -(2**63) - 1}, {"bool": True}, {"string": "ok"},
        {"string": "é" * 33}, {"string": "é" * 32}, {"version": "1.2.3"}, {"version": "1.2"},
        {"version": "1." * 40}, {"ints": [1]}, {}, {"int": 1, "string": "x"}]
    devices = [dev(f"d-{i}", attributes={"value": DeviceAttribute.model_validate(v),
                                         "bad key": i, "index": i})
               for i, v in enumerate(values * 3)]
    res = validate_pool(Pool(name="p", devices=devices), DRIVER, NODE)
    assert res.pool is not None
    got: dict[str, list[str]] = {}
    for issue in res.issues:
        got.setdefault(issue.device or "", []).append(f"{issue.field}: {issue.rule}")
    for i, d in enumerate(devices):
        api = d.to_api()
        path = f"spec.devices[{i}].attributes"
        want = [f"{e.field}: {e.type}: {e.detail}" if e.detail else f"{e.field}: {e.type}"
                for key in sorted(api["attributes"])
                for e in validate_attribute(key, api["attributes"][key], path)]
        assert got.get(d.name, []) == want, d.name
        assert set(res.pool.devices[i]["attributes"]) == \
            {"index"} | ({"value"} if not any("[value]" in w for w in want) else set())
