"""Served versions and the conversion between v1 and the older resource.k8s.io shapes."""

from __future__ import annotations

from typing import Any

import pytest
from apiserver_helpers import DRIVER, NODE, make_slice
from kubernetes import client

from drakit.plugin.testing.apiserver import EmbeddedAPIServer
from drakit.plugin.testing.apiserver.convert import (
    claim_request_from_v1beta1,
    claim_request_to_v1beta1,
    from_internal,
    slice_device_from_v1beta1,
    slice_device_to_v1beta1,
    to_internal,
)
from drakit.plugin.testing.apiserver.resources import RESOURCE_CLAIMS, RESOURCE_SLICES

V1_DEVICE = {
    "name": "gpu-0",
    "attributes": {"model": {"string": "x100"}},
    "capacity": {"memory": {"value": "16Gi"}},
    "taints": [{"key": "example.com/t", "effect": "NoSchedule"}],
}
V1BETA1_DEVICE = {
    "name": "gpu-0",
    "basic": {
        "attributes": {"model": {"string": "x100"}},
        "capacity": {"memory": {"value": "16Gi"}},
        "taints": [{"key": "example.com/t", "effect": "NoSchedule"}],
    },
}


def test_slice_device_conversion_both_ways() -> None:
    assert slice_device_to_v1beta1(V1_DEVICE) == V1BETA1_DEVICE
    assert slice_device_from_v1beta1(V1BETA1_DEVICE) == V1_DEVICE
    assert slice_device_to_v1beta1({"name": "bare"}) == {"name": "bare"}
    assert slice_device_from_v1beta1({"name": "bare"}) == {"name": "bare"}


def test_claim_request_conversion_both_ways() -> None:
    v1 = {"name": "gpu", "exactly": {"deviceClassName": "gpu.example.com", "count": 2,
                                     "allocationMode": "ExactCount"}}
    v1beta1 = {"name": "gpu", "deviceClassName": "gpu.example.com", "count": 2,
               "allocationMode": "ExactCount"}
    assert claim_request_to_v1beta1(v1) == v1beta1
    assert claim_request_from_v1beta1(v1beta1) == v1
    first = {"name": "gpu", "firstAvailable": [{"name": "big", "deviceClassName": "a"}]}
    assert claim_request_from_v1beta1(first) == first
    assert claim_request_to_v1beta1(first) == first


def test_objects_convert_and_v1beta2_is_v1_shaped() -> None:
    stored = {"metadata": {"name": "s"}, "spec": {"driver": DRIVER, "devices": [V1_DEVICE]}}
    beta1 = from_internal(RESOURCE_SLICES, "v1beta1", stored)
    assert beta1["apiVersion"] == "resource.k8s.io/v1beta1"
    assert beta1["spec"]["devices"] == [V1BETA1_DEVICE]
    assert to_internal(RESOURCE_SLICES, "v1beta1", beta1) == {"kind": "ResourceSlice", **stored}
    beta2 = from_internal(RESOURCE_SLICES, "v1beta2", stored)
    assert beta2["spec"]["devices"] == [V1_DEVICE]
    claim = {"metadata": {"name": "c"}, "spec": {"devices": {"requests": [
        {"name": "r", "exactly": {"deviceClassName": "d"}}]}}}
    assert from_internal(RESOURCE_CLAIMS, "v1beta1", claim)["spec"]["devices"]["requests"] == [
        {"name": "r", "deviceClassName": "d"}]
    assert stored["spec"]["devices"] == [V1_DEVICE]  # inputs untouched


@pytest.fixture
def beta1_server(embedded_apiserver_factory: Any) -> EmbeddedAPIServer:
    server: EmbeddedAPIServer = embedded_apiserver_factory(served_versions=("v1beta1",))
    return server


def test_v1beta1_only_server(beta1_server: EmbeddedAPIServer) -> None:
    api = beta1_server.api_client()
    try:
        beta = client.ResourceV1beta1Api(api)
        body = make_slice(api_version="resource.k8s.io/v1beta1")
        body["spec"]["devices"] = [V1BETA1_DEVICE]
        created = beta.create_resource_slice(body)
        assert created.spec.devices[0].basic.attributes["model"].string == "x100"
        # Stored in v1 shape.
        stored = beta1_server.get_object("resourceslices", "node-a-gpu")
        assert stored is not None
        # (the server defaults the taint's timeAdded, as kube-apiserver does)
        stamp = stored["spec"]["devices"][0]["taints"][0].pop("timeAdded")
        assert isinstance(stamp, str) and stamp.endswith("Z")
        assert stored["spec"]["devices"] == [V1_DEVICE]

        # Objects written in-process in v1 shape come back wrapped in `basic`.
        beta1_server.create_object("resourceslices", make_slice("from-v1"))
        listed = beta.list_resource_slice(field_selector=f"spec.nodeName={NODE}")
        assert {s.metadata.name for s in listed.items} == {"node-a-gpu", "from-v1"}
        from_v1 = next(s for s in listed.items if s.metadata.name == "from-v1")
        assert from_v1.spec.devices[0].basic.capacity["memory"].value == "16Gi"

        with pytest.raises(client.ApiException) as info:
            client.ResourceV1Api(api).list_resource_slice()
        assert info.value.status == 404
        # Serving only v1beta1 limits the versions, not the release (like --runtime-config).
        assert client.VersionApi(api).get_code().minor == "37"
        group = client.ResourceApi(api).get_api_group()
        assert [v.version for v in group.versions] == ["v1beta1"]
    finally:
        api.close()


def test_v1beta1_claim_status_apply_and_merge_patch(beta1_server: EmbeddedAPIServer) -> None:
    beta1_server.create_claim("default", "c", [{"request": "r", "driver": DRIVER,
                                                "pool": NODE, "device": "gpu-0"}])
    api = beta1_server.api_client()
    try:
        custom = client.CustomObjectsApi(api)
        claim = custom.get_namespaced_custom_object("resource.k8s.io", "v1beta1", "default",
                                                    "resourceclaims", "c")
        assert claim["spec"]["devices"]["requests"][0]["deviceClassName"] == "drakit.example.com"
        patched = custom.patch_namespaced_custom_object(
            "resource.k8s.io", "v1beta1", "default", "resourceclaims", "c",
            {"spec": {"devices": {"requests": [{"name": "r", "deviceClassName": "other",
                                                 "allocationMode": "ExactCount"}]}}},
            _content_type="application/merge-patch+json",
        )
        assert patched["spec"]["devices"]["requests"][0]["deviceClassName"] == "other"
        stored = beta1_server.get_object("resourceclaims", "c", "default")
        assert stored is not None
        assert stored["spec"]["devices"]["requests"][0]["exactly"]["deviceClassName"] == "other"
        applied = custom.patch_namespaced_custom_object_status(
            "resource.k8s.io", "v1beta1", "default", "resourceclaims", "c",
            {"apiVersion": "resource.k8s.io/v1beta1", "kind": "ResourceClaim",
             "metadata": {"name": "c"},
             "status": {"devices": [{"driver": DRIVER, "pool": NODE, "device": "gpu-0"}]}},
            field_manager=DRIVER, _content_type="application/apply-patch+yaml",
        )
        assert applied["status"]["devices"] == [
            {"driver": DRIVER, "pool": NODE, "device": "gpu-0"}]
    finally:
        api.close()


def test_two_versions_served(embedded_apiserver_factory: Any) -> None:
    server: EmbeddedAPIServer = embedded_apiserver_factory(served_versions=("v1beta2",
                                                                            "v1beta1"))
    server.create_object("resourceslices", make_slice())
    api = server.api_client()
    try:
        beta2 = client.ResourceV1beta2Api(api).read_resource_slice("node-a-gpu")
        assert beta2.spec.devices[0].attributes["model"].string == "x100"
        assert client.VersionApi(api).get_code().minor == "37"
    finally:
        api.close()


def test_release_named_by_kubernetes_minor(embedded_apiserver_factory: Any) -> None:
    server: EmbeddedAPIServer = embedded_apiserver_factory(served_versions=("v1beta2",
                                                                            "v1beta1"),
                                                           kubernetes_minor=33)
    api = server.api_client()
    try:
        code = client.VersionApi(api).get_code()
        assert (code.major, code.minor) == ("1", "33")
        assert code.git_version.startswith("v1.33.")
    finally:
        api.close()


def test_bad_served_versions_rejected() -> None:
    with pytest.raises(ValueError, match="served_versions"):
        EmbeddedAPIServer(served_versions=("v2",))
    with pytest.raises(ValueError, match="served_versions"):
        EmbeddedAPIServer(served_versions=())
