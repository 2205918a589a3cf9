"""Kubernetes 1.37's ResourceSlice fields on real kube-apiservers 1.37.2:
drakit's ResourceAPI sends them where the server's OpenAPI declares them (v1, and the
v1beta2 of a server without v1), and a server with the alpha gates off stores the slice
without them (what the publisher then reports as a field the server changed)."""

from __future__ import annotations

import json
import uuid
from typing import Any

import pytest
from kubernetes.client import ApiException

from drakit.plugin.api import convert
from drakit.plugin.api.resourceapi import ResourceAPI
from drakit.plugin.testing.pytest_plugin import RealAPIServerFactory
from drakit.plugin.testing.real.controlplane import RealAPIServer, resource_versions_config

DRIVER = "k137.example.com"
ALPHA_GATES_OFF = {g: False for g in (
    "DRAPartitionableDevicesType", "DRAListTypeAttributes", "DRADeviceCompatibilityGroups",
    "DRANodeAllocatableResources", "DRAOptionalNodeOperations")}


def _slice(node: str) -> dict[str, Any]:
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
            "metadata": {"generateName": f"{node}-"},
            "spec": {"driver": DRIVER, "nodeName": node,
                     "pool": {"name": node, "generation": 0, "resourceSliceCount": 1},
                     "partitionTypeAttribute": f"{DRIVER}/profile",
                     "skipNodeOperations": ["NodeUnprepareResources"],
                     "devices": [{
                         "name": "part-0",
                         "attributes": {"profile": {"string": "half"},
                                        "numa": {"ints": [0, 1]}},
                         "capacity": {"memory": {"value": "8Gi"}},
                         "consumesCounters": [{"counterSet": "gpu-0",
                                               "counters": {"memory": {"value": "8Gi"}},
                                               "compatibilityGroups": ["half"]}],
                         "nodeAllocatableResources": {"memory": {
                             "overhead": {"perPod": "64Mi"}}}}]}}


def _node(server: RealAPIServer) -> str:
    name = f"k137-{uuid.uuid4().hex[:8]}"
    server.request("POST", "/api/v1/nodes", {
        "apiVersion": "v1", "kind": "Node", "metadata": {"name": name},
        "status": {"declaredFeatures": ["DRANodeAllocatableResources"]}})
    return name


def _create(server: RealAPIServer) -> tuple[dict[str, Any], ResourceAPI]:
    node = _node(server)
    client = server.api_client()
    api = ResourceAPI(client)
    created = api.create_slice(_slice(node))
    api.delete_slice(created["metadata"]["name"])
    client.close()
    return created, api


def _fields(created: dict[str, Any]) -> dict[str, Any]:
    spec = created["spec"]
    device = spec["devices"][0]
    return {"partitionTypeAttribute": spec.get("partitionTypeAttribute"),
            "skipNodeOperations": spec.get("skipNodeOperations"),
            "numa": (device.get("attributes") or {}).get("numa"),
            "compatibilityGroups": device["consumesCounters"][0].get("compatibilityGroups"),
            "nodeAllocatableResources": device.get("nodeAllocatableResources")}


EXPECTED = {"partitionTypeAttribute": f"{DRIVER}/profile",
            "skipNodeOperations": ["NodeUnprepareResources"], "numa": {"ints": [0, 1]},
            "compatibilityGroups": ["half"],
            "nodeAllocatableResources": {"memory": {"overhead": {"perPod": "64Mi"}}}}


def test_v1_with_gates_on_keeps_every_field(real_apiserver: RealAPIServer) -> None:
    created, api = _create(real_apiserver)
    assert api.served_new_fields() == frozenset(f.name for f in convert.NEW_SLICE_FIELDS)
    assert _fields(created) == EXPECTED


def test_v1beta2_only_server_serves_them_too(
        real_apiserver_factory: RealAPIServerFactory) -> None:
    """A 1.37 server without v1 (``resource.k8s.io/v1=false``): its v1beta2 schema has the
    fields, so drakit sends them (converted) and they come back."""
    server = real_apiserver_factory(runtime_config=resource_versions_config(["v1beta2"]))
    created, api = _create(server)
    assert api.version == "v1beta2"
    assert api.served_new_fields() == frozenset(f.name for f in convert.NEW_SLICE_FIELDS)
    assert _fields(created) == EXPECTED


def test_alpha_gates_off_the_server_drops_them(
        real_apiserver_factory: RealAPIServerFactory) -> None:
    """The fields are in the schema whatever the gates (generated from the Go types), so
    drakit sends them; with the gates off kube-apiserver drops them silently on write, and a
    list-typed attribute, dropped, leaves an attribute with no value: the slice is refused
    (422, the declarative union error), which drakit cannot see coming."""
    server = real_apiserver_factory(feature_gates=ALPHA_GATES_OFF)
    body = _slice(_node(server))
    lists = body["spec"]["devices"][0]["attributes"].pop("numa")
    client = server.api_client()
    try:
        api = ResourceAPI(client)
        created = api.create_slice(body)
        api.delete_slice(created["metadata"]["name"])
        assert _fields(created) == dict.fromkeys(EXPECTED)
        body["spec"]["devices"][0]["attributes"]["numa"] = lists
        with pytest.raises(ApiException) as info:
            api.create_slice(body)
    finally:
        client.close()
    assert info.value.status == 422
    status = json.loads(info.value.body)
    assert [c["field"] for c in status["details"]["causes"]] == [
        "spec.devices[0].attributes[numa]"]
    assert status["details"]["causes"][0]["message"].startswith(
        'Invalid value: "": must specify one of: `int`')
