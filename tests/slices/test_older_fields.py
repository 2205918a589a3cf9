"""Fields resource.k8s.io gained after Kubernetes 1.32 (counters, taints, binding conditions,
consumable capacity) are not sent to a server whose schema lacks them: there they would be
dropped without an error, and a device consuming shared counters would be published as an
independent whole device. A device that depends on such a field is left out, a field that is
only an extra is removed; each with a message naming the server version and the field."""

from __future__ import annotations

from typing import Any

from drakit.plugin.api import convert

SERVER = "Kubernetes v1.32.13 (resource.k8s.io/v1beta1)"

SLICE: dict[str, Any] = {"metadata": {"name": "s"}, "spec": {
    "driver": "gpu.example.com", "nodeName": "n", "pool": {"name": "p", "generation": 1,
                                                           "resourceSliceCount": 1},
    "sharedCounters": [{"name": "gpu-0", "counters": {"memory": {"value": "40Gi"}}}],
    "devices": [
        {"name": "plain", "attributes": {"model": {"string": "A"}}},
        {"name": "part", "consumesCounters": [{"counterSet": "gpu-0",
                                               "counters": {"memory": {"value": "20Gi"}}}]},
        {"name": "tainted", "taints": [{"key": "k", "effect": "NoSchedule"}]},
        {"name": "bound", "bindingConditions": ["ready"], "bindsToNode": True},
        {"name": "shared", "allowMultipleAllocations": True, "capacity": {"memory": {
            "value": "8Gi", "requestPolicy": {"default": "1Gi"}}}},
    ]}}


def _doc(version: str, device: list[str], spec: list[str],
         capacity: list[str]) -> dict[str, Any]:
    dev = "BasicDevice" if version == "v1beta1" else "Device"
    prefix = f"io.k8s.api.resource.{version}."

    def props(*names: str) -> dict[str, Any]:
        return {"properties": {n: {} for n in names}}

    return {"components": {"schemas": {
        prefix + dev: props("attributes", "capacity", *device),
        prefix + "ResourceSliceSpec": props("driver", "pool", "devices", *spec),
        prefix + "DeviceCapacity": props("value", *capacity),
    }}}


def test_132_schema_serves_none_of_them() -> None:
    assert convert.served_older_fields(_doc("v1beta1", [], [], []), "v1beta1") == frozenset()


def test_133_by_schema_and_nothing_known_without_one() -> None:
    doc = _doc("v1beta2", ["consumesCounters", "taints"], ["sharedCounters"], [])
    names = {"spec.sharedCounters", "spec.devices[].consumesCounters", "spec.devices[].taints"}
    assert convert.served_older_fields(doc, "v1beta2") == names
    every = {f.name for f in convert.OLDER_SLICE_FIELDS}
    assert convert.served_older_fields(None, "v1beta1") == every  # sent as before


def test_devices_that_depend_on_a_missing_field_are_left_out() -> None:
    out, messages = convert.drop_older_unserved_fields(SLICE, frozenset(), SERVER)
    spec = out["spec"]
    assert "sharedCounters" not in spec
    assert [d["name"] for d in spec["devices"]] == ["plain", "shared"]
    assert spec["devices"][1] == {"name": "shared", "capacity": {"memory": {"value": "8Gi"}}}
    assert messages == [
        f"spec.sharedCounters: not served by {SERVER} (Kubernetes 1.33+, feature gate "
        "DRAPartitionableDevices); left out",
        f"spec.devices[1].consumesCounters: not served by {SERVER} (Kubernetes 1.33+, feature "
        "gate DRAPartitionableDevices); device 'part' left out",
        f"spec.devices[2].taints: not served by {SERVER} (Kubernetes 1.33+, feature gate "
        "DRADeviceTaints); device 'tainted' left out",
        f"spec.devices[3].bindingConditions: not served by {SERVER} (Kubernetes 1.34+, "
        "feature gate DRADeviceBindingConditions); device 'bound' left out",
        f"spec.devices[4].allowMultipleAllocations: not served by {SERVER} (Kubernetes 1.34+, "
        "feature gate DRAConsumableCapacity); left out (the device is allocated whole)",
        f"spec.devices[4].capacity[memory].requestPolicy: not served by {SERVER} (Kubernetes "
        "1.34+, feature gate DRAConsumableCapacity); left out",
    ]
    assert SLICE["spec"]["sharedCounters"]  # the input is not changed
    assert convert.unserved_field_key(messages[1]) == "spec.devices[].consumesCounters"


def test_everything_served_is_sent_as_is() -> None:
    every = frozenset(f.name for f in convert.OLDER_SLICE_FIELDS)
    out, messages = convert.drop_older_unserved_fields(SLICE, every, SERVER)
    assert out is SLICE and messages == []
