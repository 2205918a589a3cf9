"""Kubernetes 1.37's ResourceSlice fields: nodeAllocatableResources,
partitionTypeAttribute, skipNodeOperations, counter compatibilityGroups and list-typed
attributes, through the model, the client-side rules (the server's wording, as
tests/real/test_real_differential.py checks against kube-apiserver 1.37.2), the pool
validation and splitting, the dropping on a server that does not serve them, and the
example discoverer publishing them."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest

from drakit.discovery.builtin.example import DEMO_FILE_K8S_137
from drakit.discovery.model import (
    CounterSet,
    Device,
    DeviceCounterConsumption,
    Pool,
    list_attribute,
    versions,
)
from drakit.plugin.api import convert
from drakit.plugin.api.resourceapi import ResourceAPI
from drakit.plugin.slices import rules
from drakit.plugin.slices.split import split_pool
from drakit.plugin.slices.validate import validate_pool
from drakit.plugin.testing.apiserver import EmbeddedAPIServer
from drakit.plugin.testing.harness import DriverHarness

DRIVER = "gpu.example.com"


def _slice(devices: list[dict[str, Any]], **spec: Any) -> dict[str, Any]:
    return {"metadata": {"name": "s"}, "spec": {
        "driver": DRIVER, "nodeName": "n", "pool": {"name": "p", "generation": 0,
                                                    "resourceSliceCount": 1},
        "devices": devices, **spec}}


def _errors(obj: dict[str, Any]) -> list[str]:
    return sorted(str(e) for e in rules.validate_slice(obj))


def test_model_to_api() -> None:
    dev = Device(
        name="part-0", capacity={"memory": "8Gi"},
        attributes={"numa": list_attribute([0, 1]), "fw": versions("12.4.0"),
                    "links": list_attribute(["cxl"]), "flags": list_attribute([True])},
        consumes_counters=[DeviceCounterConsumption(
            counter_set="gpu-0", counters={"memory": "8Gi"}, compatibility_groups=["half"])],
        node_allocatable_resources={"memory": {
            "mapping": {"capacity_key": "memory", "capacity_multiplier": 1},
            "overhead": {"per_pod": "64Mi", "per_container": "1Mi"}},
            "cpu": {"mapping": {"deviceMultiplier": "2"}}})
    assert dev.to_api() == {
        "name": "part-0",
        "attributes": {"numa": {"ints": [0, 1]}, "fw": {"versions": ["12.4.0"]},
                       "links": {"strings": ["cxl"]}, "flags": {"bools": [True]}},
        "capacity": {"memory": {"value": "8Gi"}},
        "consumesCounters": [{"counterSet": "gpu-0", "counters": {"memory": {"value": "8Gi"}},
                              "compatibilityGroups": ["half"]}],
        "nodeAllocatableResources": {
            "memory": {"mapping": {"capacityKey": "memory", "capacityMultiplier": "1"},
                       "overhead": {"perPod": "64Mi", "perContainer": "1Mi"}},
            "cpu": {"mapping": {"deviceMultiplier": "2"}}}}
    with pytest.raises(ValueError):
        list_attribute([])
    with pytest.raises(TypeError):
        list_attribute([1, "a"])  # type: ignore[list-item]


@pytest.mark.parametrize(("body", "expected"), [
    (_slice([{"name": "d", "capacity": {"memory": {"value": "1Gi"}},
              "nodeAllocatableResources": {
                  "ephemeral-storage": {"overhead": {"perPod": "1Gi"}},
                  "memory": {"mapping": {"capacityKey": "nope", "capacityMultiplier": "1"}},
                  "cpu": {"overhead": {}},
                  "hugepages-2Mi": {"mapping": {"deviceMultiplier": "0"},
                                    "overhead": {"perContainer": "-1"}},
                  "hugepages-1Gi": {}}}]),
     ['spec.devices[0].nodeAllocatableResources[cpu].overhead: Invalid value: "": at least '
      "one of perPod or perContainer must be set",
      'spec.devices[0].nodeAllocatableResources[ephemeral-storage]: Invalid value: '
      '"ephemeral-storage": must be a node allocatable resource name',
      "spec.devices[0].nodeAllocatableResources[hugepages-1Gi]: Required value: at least one "
      "of mapping or overhead must be set",
      'spec.devices[0].nodeAllocatableResources[hugepages-2Mi].mapping.deviceMultiplier: '
      'Invalid value: "0": must be positive',
      'spec.devices[0].nodeAllocatableResources[hugepages-2Mi].overhead.perContainer: '
      'Invalid value: "-1": must be non-negative',
      'spec.devices[0].nodeAllocatableResources[memory].mapping.capacityKey: Not found: '
      '"nope"']),
    (_slice([{"name": "d", "capacity": {"m": {"value": "1"}}, "nodeAllocatableResources": {
        "cpu": {"mapping": {"capacityKey": "m"}},
        "memory": {"mapping": {"capacityMultiplier": "2"}}}}]),
     ["spec.devices[0].nodeAllocatableResources[cpu].mapping.capacityMultiplier: Required "
      "value: capacityMultiplier is required when capacityKey is set",
      "spec.devices[0].nodeAllocatableResources[memory].mapping.capacityKey: Required value: "
      "capacityKey is required when capacityMultiplier is set"]),
    (_slice([{"name": "d"}], partitionTypeAttribute=f"{DRIVER}/profile"),
     ['spec.partitionTypeAttribute: Invalid value: "gpu.example.com/profile": may only be set '
      "on a slice which declares devices that consume counters"]),
    (_slice([{"name": "a", "consumesCounters": [{"counterSet": "c", "counters": {
        "m": {"value": "1"}}}]},
             {"name": "b", "attributes": {"profile": {"int": 1}}, "consumesCounters": [
                 {"counterSet": "c", "counters": {"m": {"value": "1"}}}]},
             {"name": "c", "attributes": {"profile": {"string": "half"}}, "consumesCounters": [
                 {"counterSet": "c", "counters": {"m": {"value": "1"}}}]},
             {"name": "plain"}],
            partitionTypeAttribute=f"{DRIVER}/profile"),
     ["spec.devices[0].attributes[gpu.example.com/profile]: Required value: device consumes "
      "counters and `partitionTypeAttribute` names this attribute, so it must be set",
      'spec.devices[1].attributes[gpu.example.com/profile]: Invalid value: {"int":1}: must be '
      "a string value because `partitionTypeAttribute` names this attribute"]),
    (_slice([{"name": "d"}], skipNodeOperations=["NodePrepareResources"]),
     ['spec.skipNodeOperations: Invalid value: ["NodePrepareResources"]: NodePrepareResources '
      "cannot be skipped unless NodeUnprepareResources is also skipped"]),
    (_slice([{"name": "d"}], skipNodeOperations=["*", "NodePrepareResources"]), []),
    (_slice([{"name": "d"}], skipNodeOperations=["Later"]),
     ['spec.skipNodeOperations[0]: Unsupported value: "Later": supported values: "*", '
      '"NodePrepareResources", "NodeUnprepareResources"']),
    (_slice([{"name": "d", "consumesCounters": [{"counterSet": "c", "counters": {
        "m": {"value": "1"}}, "compatibilityGroups": ["a", "b", "c"]}]}]),
     ["spec.devices[0].consumesCounters[0].compatibilityGroups: Too many: 3: must have at "
      "most 2 items"]),
    (_slice([{"name": "d", "consumesCounters": [{"counterSet": "c", "counters": {
        "m": {"value": "1"}}, "compatibilityGroups": ["a", "a"]}]}]),
     ['spec.devices[0].consumesCounters[0].compatibilityGroups[1]: Duplicate value: "a"']),
    (_slice([{"name": "d", "attributes": {"x": {"ints": []}}}]),
     ['spec.devices[0].attributes[x]: Invalid value: "": must specify one of: `int`, `bool`, '
      "`string`, `version`, `ints`, `bools`, `strings`, `versions`",
      "spec.devices[0].attributes[x].ints: Invalid value: []: must not be empty if specified"]),
    (_slice([{"name": "d", "attributes": {"x": {"versions": ["1.2.3", "v2"]}}}]),
     ['spec.devices[0].attributes[x].versions[1]: Invalid value: "v2": must be a string '
      "compatible with semver.org spec 2.0.0"]),
])
def test_rules_use_the_servers_wording(body: dict[str, Any], expected: list[str]) -> None:
    assert _errors(body) == sorted(expected)


def test_validate_pool_and_split() -> None:
    consuming = Device(name="half-0", attributes={"profile": "half"},
                       consumes_counters=[DeviceCounterConsumption(
                           counter_set="gpu-0", counters={"memory": "20Gi"},
                           compatibility_groups=["half"])])
    missing = Device(name="half-1", consumes_counters=[DeviceCounterConsumption(
        counter_set="gpu-0", counters={"memory": "20Gi"})])
    pool = Pool(name="p", devices=[consuming, missing, Device(name="plain")],
                counter_sets=[CounterSet(name="gpu-0", counters={"memory": "40Gi"})],
                partition_type_attribute=f"{DRIVER}/profile",
                skip_node_operations=["NodeUnprepareResources"])
    result = validate_pool(pool, DRIVER, "node-1")
    assert [str(i) for i in result.issues] == [
        "pool 'p' device 'half-1': spec.devices[1].attributes[gpu.example.com/profile]: "
        "Required value: device consumes counters and `partitionTypeAttribute` names this "
        "attribute, so it must be set (device dropped)"]
    assert result.pool is not None
    specs = split_pool(result.pool, DRIVER, "node-1")
    counters_slice, devices_slice = specs
    assert "partitionTypeAttribute" not in counters_slice      # no device there
    assert devices_slice["partitionTypeAttribute"] == f"{DRIVER}/profile"
    assert all(s["skipNodeOperations"] == ["NodeUnprepareResources"] for s in specs)
    assert [d["name"] for d in devices_slice["devices"]] == ["half-0", "plain"]
    for spec in specs:
        assert rules.validate_spec(spec) == []


def test_validate_pool_refuses_bad_pool_fields() -> None:
    bad_skip = validate_pool(Pool(name="p", skip_node_operations=["NodePrepareResources"]),
                             DRIVER, "n")
    assert bad_skip.pool is None and bad_skip.issues[0].action == "pool skipped"
    assert bad_skip.issues[0].field == "spec.skipNodeOperations"
    bad_name = validate_pool(Pool(name="p", partition_type_attribute="profile"), DRIVER, "n")
    assert bad_name.pool is None
    assert "a fully qualified name must be a domain and a name separated by a slash" in str(
        bad_name.issues[0])
    unused = validate_pool(Pool(name="p", devices=[Device(name="d")],
                                partition_type_attribute=f"{DRIVER}/profile"), DRIVER, "n")
    assert unused.pool is not None and unused.pool.partition_type_attribute is None
    assert unused.issues[0].action == "field dropped"


SLICE_137 = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
             "metadata": {"generateName": "n-"},
             "spec": {"driver": DRIVER, "nodeName": "node-1",
                      "pool": {"name": "p", "generation": 0, "resourceSliceCount": 1},
                      "partitionTypeAttribute": f"{DRIVER}/profile",
                      "skipNodeOperations": ["*"],
                      "devices": [{"name": "d", "attributes": {
                          "profile": {"string": "half"}, "numa": {"ints": [0]}},
                          "capacity": {"memory": {"value": "1Gi"}},
                          "consumesCounters": [{"counterSet": "c",
                                                "counters": {"m": {"value": "1"}},
                                                "compatibilityGroups": ["g"]}],
                          "nodeAllocatableResources": {"memory": {
                              "overhead": {"perPod": "1Mi"}}}}]}}


def test_drop_unserved_fields() -> None:
    same, none = convert.drop_unserved_fields(
        SLICE_137, frozenset(f.name for f in convert.NEW_SLICE_FIELDS))
    assert same is SLICE_137 and none == []
    out, dropped = convert.drop_unserved_fields(SLICE_137, frozenset())
    assert out["spec"]["devices"][0] == {
        "name": "d", "attributes": {"profile": {"string": "half"}},
        "capacity": {"memory": {"value": "1Gi"}},
        "consumesCounters": [{"counterSet": "c", "counters": {"m": {"value": "1"}}}]}
    assert "partitionTypeAttribute" not in out["spec"]
    assert "skipNodeOperations" not in out["spec"]
    assert dropped == [
        "spec.partitionTypeAttribute: not served by this API server (Kubernetes 1.37+, "
        "feature gate DRAPartitionableDevicesType); left out",
        "spec.skipNodeOperations: not served by this API server (Kubernetes 1.37+, feature "
        "gate DRAOptionalNodeOperations); left out",
        "spec.devices[0].nodeAllocatableResources: not served by this API server (Kubernetes "
        "1.37+, feature gate DRANodeAllocatableResources); left out",
        "spec.devices[0].consumesCounters[0].compatibilityGroups: not served by this API "
        "server (Kubernetes 1.37+, feature gate DRADeviceCompatibilityGroups); left out",
        "spec.devices[0].attributes[numa]: not served by this API server (Kubernetes 1.36+, "
        "feature gate DRAListTypeAttributes); left out"]
    assert SLICE_137["spec"]["devices"][0]["nodeAllocatableResources"]  # input unchanged
    assert convert.served_new_fields(None, "v1") == frozenset(
        f.name for f in convert.NEW_SLICE_FIELDS)
    assert convert.served_new_fields(None, "v1beta2") == frozenset()


@pytest.mark.parametrize(("server_kwargs", "kept"), [
    ({}, {"partitionTypeAttribute", "skipNodeOperations", "nodeAllocatableResources",
          "compatibilityGroups", "numa"}),
    # a 1.36 schema: list attributes only (1.36 had nodeAllocatableResourceMappings, since
    # replaced; compatibilityGroups, partitionTypeAttribute, skipNodeOperations are 1.37)
    ({"kubernetes_minor": 36}, {"numa"}),
    # a v1beta2-only (1.33-like) server: no OpenAPI, none of them
    ({"served_versions": ("v1beta2",)}, set()),
])
def test_resource_api_leaves_out_what_the_server_does_not_serve(
        server_kwargs: dict[str, Any], kept: set[str],
        caplog: pytest.LogCaptureFixture) -> None:
    with EmbeddedAPIServer(**server_kwargs) as server:
        server.create_node("node-1")
        api_client = server.api_client()
        try:
            api = ResourceAPI(api_client)
            with caplog.at_level(logging.WARNING, logger="drakit.plugin.api.resourceapi"):
                created = api.create_slice(SLICE_137)
                api.create_slice(SLICE_137)        # warned once per field, not per write
        finally:
            api_client.close()
    spec = created["spec"]
    device = spec["devices"][0]
    present = {k for k in ("partitionTypeAttribute", "skipNodeOperations") if k in spec}
    present |= {"nodeAllocatableResources"} & set(device)
    present |= {"compatibilityGroups"} & set(device["consumesCounters"][0])
    present |= {"numa"} & set(device.get("attributes") or {})
    assert present == kept
    warned = [r.getMessage() for r in caplog.records if "not served by this API server" in
              r.getMessage()]
    assert len(warned) == 5 - len(kept)


def test_example_discoverer_publishes_the_137_fields(tmp_path: Path) -> None:
    """The example discoverer's k8s137 demo file, through the agent (validation, split,
    publisher) to the embedded server: every field arrives, nothing is dropped."""
    h = DriverHarness(tmp_path / "h",
                      plugin_options={"example": {"file": str(DEMO_FILE_K8S_137)}})
    h.start()           # waits until every pool's slices are published
    try:
        slices = h.slices()
        issues = [str(i) for i in h.app.publisher.issues]
    finally:
        h.stop()
    assert issues == []
    specs = [s["spec"] for s in slices]
    assert all(s.get("skipNodeOperations") == ["NodeUnprepareResources"] for s in specs)
    with_devices = [s for s in specs if s.get("devices")]
    assert [s.get("partitionTypeAttribute") for s in with_devices] == [
        "drakit.example.com/profile"]
    devices = {d["name"]: d for s in with_devices for d in s["devices"]}
    assert devices["cxl-mem-0"]["nodeAllocatableResources"]["memory"] == {
        "mapping": {"capacityKey": "memory", "capacityMultiplier": "1"},
        "overhead": {"perPod": "64Mi"}}
    assert devices["cxl-mem-0"]["attributes"]["numaNodes"] == {"ints": [0, 1]}
    assert devices["mig-gpu-0"]["attributes"]["profile"] == {"string": "whole"}
    assert devices["mig-gpu-0-1g-10gb-0"]["consumesCounters"][0]["compatibilityGroups"] == [
        "small"]
