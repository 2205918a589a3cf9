"""Built-in example discovery: demo YAML, partitionable devices, 10,000 generated."""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable
from pathlib import Path

import pydantic
import pytest
import yaml

from drakit.discovery import ClaimRef, DeviceRequest, DiscoveryContext, Pool
from drakit.discovery.builtin.example import (
    _UUID_NAMESPACE,
    DEMO_FILE,
    ExampleConfig,
    ExampleDiscovery,
    device_uuid,
)

Ctx = Callable[..., DiscoveryContext]


def request(dev: object, **kw: object) -> DeviceRequest:
    return DeviceRequest(claim=ClaimRef(namespace="ns", name="c", uid="u"), request="gpu",
                         pool="node-1", device=dev, **kw)


def test_demo_inventory(make_ctx: Ctx, api_valid: Callable[[list[Pool]], None]) -> None:
    plugin = ExampleDiscovery(make_ctx())
    assert plugin.file == DEMO_FILE
    pools = plugin.discover()
    api_valid(pools)
    [pool] = pools
    devs = {d.name: d for d in pool.devices}
    assert {"gpu-0", "gpu-1", "shared-gpu-0", "mig-gpu-0"} <= set(devs)
    # partitionable: one counter set, whole device + partitions consume from it
    [cs] = pool.counter_sets
    assert cs.name == "mig-gpu-0-counters"
    assert {k: c.value for k, c in cs.counters.items()} == {"memory": "40Gi", "compute": "98"}
    parts = [d for d in pool.devices if d.name.startswith("mig-gpu-0-")]
    assert len(parts) == 4 + 2 + 1
    for d in [devs["mig-gpu-0"], *parts]:
        [cc] = d.consumes_counters or []
        assert cc.counter_set == cs.name
        assert set(cc.counters) <= set(cs.counters)
    assert devs["mig-gpu-0-1g-10gb-3"].consumes_counters[0].counters["memory"].value == "10Gi"
    assert devs["mig-gpu-0-1g-10gb-0"].attributes["parentDevice"].string == "mig-gpu-0"
    # consumable capacity
    shared = devs["shared-gpu-0"].to_api()
    assert shared["allowMultipleAllocations"] is True
    assert shared["capacity"]["memory"]["requestPolicy"]["validRange"]["step"] == "1Gi"
    assert shared["capacity"]["compute"]["requestPolicy"]["validValues"] == ["10", "25", "50",
                                                                             "100"]
    assert devs["gpu-0"].to_api()["attributes"]["driverVersion"] == {"version": "1.0.0"}
    # device nodes (mapped to /dev/null) and env never reach the API
    assert "deviceNodes" not in devs["gpu-0"].to_api() and "env" not in devs["gpu-0"].to_api()


def test_prepare_maps_device_nodes_and_config(make_ctx: Ctx) -> None:
    plugin = ExampleDiscovery(make_ctx())
    devs = {d.name: d for d in plugin.discover()[0].devices}
    out = plugin.prepare(request(devs["gpu-0"]))
    [node] = out.edits.device_nodes or []
    assert (node.path, node.host_path) == ("/dev/example-gpu0", "/dev/null")
    env = out.edits.env or []
    assert "EXAMPLE_GPU_INDEX=0" in env
    assert "DRAKIT_DEVICE_GPU_0=node-1/gpu-0" in env
    cfg = ExampleConfig.model_validate(
        {"sharing": {"strategy": "TimeSlicing", "timeSlicing": {"interval": "Long"}}})
    out = plugin.prepare(request(devs["shared-gpu-0"], config=cfg,
                                 share_id="9a1b0f8e-2c4d-4e6f-8a0b-1c2d3e4f5a6b",
                                 consumed_capacity={"memory": "4Gi"}))
    env = out.edits.env or []
    assert "DRAKIT_EXAMPLE_SHARED_GPU_0_SHARING=TimeSlicing" in env
    assert "DRAKIT_EXAMPLE_SHARED_GPU_0_TIMESLICE=Long" in env
    assert "DRAKIT_EXAMPLE_SHARED_GPU_0_SHARE_ID=9a1b0f8e-2c4d-4e6f-8a0b-1c2d3e4f5a6b" in env
    assert "DRAKIT_EXAMPLE_SHARED_GPU_0_CAPACITY_MEMORY=4Gi" in env


def test_config_model_is_strict() -> None:
    assert ExampleDiscovery.config_api_version == "drakit.example.com/v1alpha1"
    assert ExampleDiscovery.config_kind == "ExampleDeviceConfig"
    with pytest.raises(pydantic.ValidationError, match="unknown"):
        ExampleConfig.model_validate({"sharing": {"strategy": "Exclusive", "unknown": 1}})
    with pytest.raises(pydantic.ValidationError, match="timeSlicing is only allowed"):
        ExampleConfig.model_validate(
            {"sharing": {"strategy": "Exclusive", "timeSlicing": {"interval": "Short"}}})
    with pytest.raises(pydantic.ValidationError):
        ExampleConfig.model_validate({"sharing": {"strategy": "Nope"}})


def test_generate_10000(make_ctx: Ctx, api_valid: Callable[[list[Pool]], None]) -> None:
    plugin = ExampleDiscovery(make_ctx(generate={"count": 10_000, "prefix": "fake",
                                                 "capacity": {"memory": "16Gi"},
                                                 "attributes": {"model": "FAKE"},
                                                 "deviceNodes": ["/dev/null"]}))
    pools = plugin.discover()
    api_valid(pools)
    devices = pools[0].devices
    assert len(devices) == 10_000
    assert devices[0].name == "fake-0" and devices[-1].name == "fake-9999"
    assert devices[9999].attributes["index"].int_ == 9999
    uuids = {d.attributes["uuid"].string for d in devices}
    assert len(uuids) == 10_000
    # deterministic identity: a second plugin (a restart) gives the same uuids
    again = ExampleDiscovery(make_ctx(generate={"count": 3, "prefix": "fake"})).discover()
    assert [d.attributes["uuid"].string for d in again[0].devices] == \
        [d.attributes["uuid"].string for d in devices[:3]]


@pytest.mark.parametrize("name", ["node-1/fake-0", "bench-node/dev-9999", "", "nœud/é-1",
                                  "x" * 300])
def test_device_uuid_is_uuid5(name: str) -> None:
    assert device_uuid(name) == str(uuid.uuid5(_UUID_NAMESPACE, name))


def test_generated_uuids_are_uuid5_of_node_and_name(make_ctx: Ctx) -> None:
    [pool] = ExampleDiscovery(make_ctx(generate={"count": 3, "prefix": "fake"})).discover()
    node = make_ctx().node_name
    assert [d.attributes["uuid"].string for d in pool.devices] == \
        [str(uuid.uuid5(_UUID_NAMESPACE, f"{node}/fake-{i}")) for i in range(3)]


def test_bad_keys_mapped_and_warned_for_every_device(
        make_ctx: Ctx, caplog: pytest.LogCaptureFixture) -> None:
    plugin = ExampleDiscovery(make_ctx(generate={"count": 3, "prefix": "g",
                                                 "attributes": {"bad key": 1}}))
    with caplog.at_level("WARNING"):
        [pool] = plugin.discover()
        plugin.discover()
    assert all(set(d.attributes) == {"bad_key", "index", "uuid"} for d in pool.devices)
    assert caplog.text.count('"bad key" is not a qualified name; using bad_key') == 6


def test_file_option_reload_and_errors(tmp_path: Path, make_ctx: Ctx) -> None:
    f = tmp_path / "inv.yaml"
    f.write_text(yaml.safe_dump({"pool": "demo", "devices": [{"name": "a-0"}, {"name": "B_1"}]}))
    plugin = ExampleDiscovery(make_ctx(file=str(f)))
    [pool] = plugin.discover()
    assert pool.name == "demo"
    names = [d.name for d in pool.devices]
    assert names[0] == "a-0" and names[1].startswith("b-1-")
    assert pool.devices[1].attributes["name"].string == "B_1"  # original kept
    f.write_text(yaml.safe_dump({"devices": [{"name": "c-0"}]}))
    os.utime(f, (1, 1))  # a different mtime, whatever the clock granularity
    assert [d.name for d in plugin.discover()[0].devices] == ["c-0"]
    f.write_text("devices: [{name: x, bogus: 1}]\n")
    os.utime(f, (2, 2))
    assert [d.name for d in plugin.discover()[0].devices] == ["c-0"]  # previous kept
    with pytest.raises(ValueError, match=r"inv\.yaml: devices\.0\.bogus"):
        ExampleDiscovery(make_ctx(file=str(f)))
    with pytest.raises(ValueError, match=r"discovery\.example\.generate\.count"):
        ExampleDiscovery(make_ctx(generate={"count": -1}))


def test_one_bad_entry_does_not_stop_others(make_ctx: Ctx) -> None:
    plugin = ExampleDiscovery(make_ctx(
        devices=[{"name": "ok-0"}, {"name": "ok-0"}],
        partitionable=[
            {"name": "bad", "counters": {"memory": "1Gi"},
             "partitions": [{"profile": "p", "counters": {"nope": 1}}]},
            {"name": "good", "counters": {"memory": "2Gi"}, "whole": False,
             "partitions": [{"profile": "half", "count": 2, "counters": {"memory": "1Gi"}}]},
        ],
    ))
    [pool] = plugin.discover()
    names = [d.name for d in pool.devices]
    assert names.count("ok-0") == 1
    assert "good-half-0" in names and "good-half-1" in names and "good" not in names
    assert [cs.name for cs in pool.counter_sets] == ["good-counters"]
    assert not any(n.startswith("bad") for n in names)  # all or nothing
