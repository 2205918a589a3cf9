"""Server-side apply of ResourceClaim status.devices through the kubernetes client, plus
unit tests of the apply model."""

from __future__ import annotations

import json
from typing import Any

import pytest
from apiserver_helpers import DRIVER, NODE, make_slice
from kubernetes import client

from drakit.plugin.testing.apiserver import AllocatedDevice, EmbeddedAPIServer
from drakit.plugin.testing.apiserver.apply import CLAIM_LIST_MAPS, apply, field_set

NIC = "nic.example.com"
APPLY = "application/apply-patch+yaml"


@pytest.fixture
def claim(server: EmbeddedAPIServer) -> dict[str, Any]:
    return server.create_claim("default", "claim", [
        AllocatedDevice(DRIVER, NODE, "gpu-0", request="gpu"),
        AllocatedDevice(DRIVER, NODE, "gpu-1", request="gpu"),
        AllocatedDevice(NIC, NODE, "eth1", request="nic"),
    ], node_name=NODE)


def entry(driver: str, device: str, **extra: Any) -> dict[str, Any]:
    return {"driver": driver, "pool": NODE, "device": device, **extra}


def apply_status(api: client.CustomObjectsApi, manager: str, devices: list[dict[str, Any]],
                 force: bool | None = None) -> dict[str, Any]:
    body = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
            "metadata": {"name": "claim", "namespace": "default"},
            "status": {"devices": devices}}
    result: dict[str, Any] = api.patch_namespaced_custom_object_status(
        "resource.k8s.io", "v1", "default", "resourceclaims", "claim", body,
        field_manager=manager, force=force, _content_type=APPLY,
    )
    return result


def keys(obj: dict[str, Any]) -> list[tuple[str, str]]:
    return [(d["driver"], d["device"]) for d in obj["status"].get("devices", [])]


def test_two_managers_entries_survive(claim: dict[str, Any],
                                      custom_api: client.CustomObjectsApi) -> None:
    apply_status(custom_api, DRIVER, [entry(DRIVER, "gpu-0", data={"slot": 0})])
    result = apply_status(custom_api, NIC, [entry(NIC, "eth1", networkData={
        "interfaceName": "eth1", "ips": ["10.9.8.7/24"]})])
    assert keys(result) == [(DRIVER, "gpu-0"), (NIC, "eth1")]
    assert result["status"]["allocation"] == claim["status"]["allocation"]
    assert result["status"]["reservedFor"] == claim["status"]["reservedFor"]


def test_reapply_without_entry_removes_only_own(claim: dict[str, Any], server: EmbeddedAPIServer,
                                                custom_api: client.CustomObjectsApi) -> None:
    apply_status(custom_api, DRIVER, [entry(DRIVER, "gpu-0"), entry(DRIVER, "gpu-1")])
    apply_status(custom_api, NIC, [entry(NIC, "eth1")])
    result = apply_status(custom_api, DRIVER, [entry(DRIVER, "gpu-1")])
    assert keys(result) == [(DRIVER, "gpu-1"), (NIC, "eth1")]
    result = apply_status(custom_api, DRIVER, [])
    assert keys(result) == [(NIC, "eth1")]
    managers = server.field_managers("resourceclaims", "claim", "default")
    # The driver now owns only the (empty) list it applied, no entry of it.
    assert managers[f"{DRIVER}/status"] == [".status.devices"]
    assert all(NIC in p for p in managers[f"{NIC}/status"])


def test_reapply_changes_fields_and_drops_omitted_ones(
    claim: dict[str, Any], custom_api: client.CustomObjectsApi
) -> None:
    cond = {"type": "Ready", "status": "True", "reason": "Prepared",
            "lastTransitionTime": "2025-01-01T00:00:00Z"}
    apply_status(custom_api, DRIVER, [entry(DRIVER, "gpu-0", data={"a": 1}, conditions=[cond])])
    result = apply_status(custom_api, DRIVER, [entry(DRIVER, "gpu-0", conditions=[
        {**cond, "status": "False"}])])
    (device,) = result["status"]["devices"]
    assert "data" not in device
    assert device["conditions"][0]["status"] == "False"


def test_conflict_without_force_then_force(claim: dict[str, Any], server: EmbeddedAPIServer,
                                           custom_api: client.CustomObjectsApi) -> None:
    apply_status(custom_api, DRIVER, [entry(DRIVER, "gpu-0", data={"owner": "driver"})])
    with pytest.raises(client.ApiException) as info:
        apply_status(custom_api, "intruder", [entry(DRIVER, "gpu-0", data={"owner": "x"})])
    status = json.loads(info.value.body)
    assert info.value.status == 409 and status["reason"] == "Conflict"
    assert status["details"]["causes"][0]["reason"] == "FieldManagerConflict"
    result = apply_status(custom_api, "intruder",
                          [entry(DRIVER, "gpu-0", data={"owner": "x"})], force=True)
    assert result["status"]["devices"][0]["data"] == {"owner": "x"}
    # Same value applied by a second manager is shared ownership, not a conflict.
    apply_status(custom_api, DRIVER, [entry(DRIVER, "gpu-0", data={"owner": "x"})])


def test_apply_validates_and_checks_allocation(claim: dict[str, Any],
                                               custom_api: client.CustomObjectsApi) -> None:
    with pytest.raises(client.ApiException) as info:
        apply_status(custom_api, DRIVER, [entry(DRIVER, "gpu-7")])
    assert info.value.status == 422
    causes = json.loads(info.value.body)["details"]["causes"]
    assert causes[0]["field"] == "status.devices[0]"
    with pytest.raises(client.ApiException) as info:
        custom_api.patch_namespaced_custom_object_status(
            "resource.k8s.io", "v1", "default", "resourceclaims", "claim",
            {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
             "metadata": {"name": "claim"}, "status": {}},
            _content_type=APPLY,
        )
    # fieldManager is required for apply: kube-apiserver 1.37.2 answers 422 (PatchOptions
    # validation), as the differential test (tests/real/test_real_differential.py) shows
    assert info.value.status == 422
    assert "fieldManager: Required value: is required for apply patch" in info.value.body


def test_apply_on_missing_claim_status_is_404(server: EmbeddedAPIServer,
                                               custom_api: client.CustomObjectsApi) -> None:
    with pytest.raises(client.ApiException) as info:
        apply_status(custom_api, DRIVER, [entry(DRIVER, "gpu-0")])
    assert info.value.status == 404


def test_apply_creates_and_updates_slice(server: EmbeddedAPIServer,
                                         custom_api: client.CustomObjectsApi) -> None:
    body = make_slice()
    custom_api.patch_cluster_custom_object(
        "resource.k8s.io", "v1", "resourceslices", "node-a-gpu", body,
        field_manager=DRIVER, _content_type=APPLY)
    # Created by apply: answered 201 (which this client version turns into None).
    assert server.requests(verb="patch")[-1].status_code == 201
    created = server.get_object("resourceslices", "node-a-gpu")
    assert created is not None and created["metadata"]["generation"] == 1
    body["spec"]["pool"]["generation"] = 2
    updated = custom_api.patch_cluster_custom_object(
        "resource.k8s.io", "v1", "resourceslices", "node-a-gpu", body,
        field_manager=DRIVER, _content_type=APPLY)
    assert updated["spec"]["pool"]["generation"] == 2
    assert updated["metadata"]["generation"] == 2
    again = custom_api.patch_cluster_custom_object(
        "resource.k8s.io", "v1", "resourceslices", "node-a-gpu", body,
        field_manager=DRIVER, _content_type=APPLY)
    assert again["metadata"]["resourceVersion"] == updated["metadata"]["resourceVersion"]


def test_status_change_of_allocation_drops_stale_entries(
    claim: dict[str, Any], server: EmbeddedAPIServer, custom_api: client.CustomObjectsApi
) -> None:
    apply_status(custom_api, DRIVER, [entry(DRIVER, "gpu-0")])
    stored = server.get_object("resourceclaims", "claim", "default")
    assert stored is not None
    del stored["status"]["allocation"]  # deallocation
    del stored["metadata"]["resourceVersion"]
    result = server.update_object("resourceclaims", stored, subresource="status")
    assert "devices" not in result["status"]


# ---------------------------------------------------------------------- the model itself


def test_field_set_keys_list_map_items() -> None:
    paths = field_set({"status": {"devices": [entry(DRIVER, "gpu-0", data={"x": 1})]}},
                      CLAIM_LIST_MAPS)
    rendered = sorted(str(p[-1]) if not isinstance(p[-1], str) else p[-1] for p in paths)
    assert "{driver=gpu.example.com,pool=node-a,device=gpu-0}" in rendered
    assert "x" in rendered


def test_apply_model_share_id_is_part_of_the_key() -> None:
    share_a = "11111111-1111-4111-8111-111111111111"
    share_b = "22222222-2222-4222-8222-222222222222"
    live: dict[str, Any] = {"status": {}}
    first = apply(live, {"status": {"devices": [entry(DRIVER, "gpu-0", shareID=share_a)]}},
                  manager="a", subresource="status", owners={}, list_maps=CLAIM_LIST_MAPS,
                  force=False)
    second = apply(first.obj, {"status": {"devices": [entry(DRIVER, "gpu-0", shareID=share_b)]}},
                   manager="b", subresource="status", owners=first.owners,
                   list_maps=CLAIM_LIST_MAPS, force=False)
    assert [d["shareID"] for d in second.obj["status"]["devices"]] == [share_a, share_b]
    third = apply(second.obj, {"status": {"devices": []}}, manager="a", subresource="status",
                  owners=second.owners, list_maps=CLAIM_LIST_MAPS, force=False)
    assert [d["shareID"] for d in third.obj["status"]["devices"]] == [share_b]
