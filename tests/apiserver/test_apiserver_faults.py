"""Fault injection seen through the kubernetes client, and the request log."""

from __future__ import annotations

import contextlib
import json
import time
from typing import Any

import pytest
import urllib3
from apiserver_helpers import DRIVER, NODE, make_slice
from kubernetes import client, watch

from drakit.plugin.testing.apiserver import AllocatedDevice, EmbeddedAPIServer, FaultPlan


def apply_status(custom_api: client.CustomObjectsApi) -> dict[str, Any]:
    body = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
            "metadata": {"name": "claim"},
            "status": {"devices": [{"driver": DRIVER, "pool": NODE, "device": "gpu-0"}]}}
    result: dict[str, Any] = custom_api.patch_namespaced_custom_object_status(
        "resource.k8s.io", "v1", "default", "resourceclaims", "claim", body,
        field_manager=DRIVER, _content_type="application/apply-patch+yaml")
    return result


def test_conflict_once_then_accept(server: EmbeddedAPIServer,
                                   custom_api: client.CustomObjectsApi) -> None:
    server.create_claim("default", "claim", [AllocatedDevice(DRIVER, NODE, "gpu-0")])
    server.set_faults(FaultPlan(conflict_rate=1.0, max_faults=1,
                                resources=frozenset({"resourceclaims/status"})))
    with pytest.raises(client.ApiException) as info:
        apply_status(custom_api)
    assert info.value.status == 409
    assert json.loads(info.value.body)["reason"] == "Conflict"
    assert apply_status(custom_api)["status"]["devices"][0]["device"] == "gpu-0"
    assert server.faults_injected == 1
    records = server.requests(resource="resourceclaims/status")
    assert [(r.status_code, r.fault) for r in records] == [(409, True), (200, False)]


def test_throttle_has_retry_after(server: EmbeddedAPIServer,
                                  resource_api: client.ResourceV1Api) -> None:
    server.set_faults(FaultPlan(throttle_rate=1.0, retry_after_seconds=7))
    with pytest.raises(client.ApiException) as info:
        resource_api.create_resource_slice(make_slice())  # POST: urllib3 does not retry it
    assert info.value.status == 429
    assert info.value.headers["Retry-After"] == "7"
    status = json.loads(info.value.body)
    assert status["reason"] == "TooManyRequests"
    assert status["details"]["retryAfterSeconds"] == 7


def test_throttled_get_is_retried_by_urllib3(server: EmbeddedAPIServer,
                                             resource_api: client.ResourceV1Api) -> None:
    # urllib3's default Retry honours Retry-After on 429 for idempotent methods.
    server.set_faults(FaultPlan(throttle_rate=1.0, retry_after_seconds=0, max_faults=1))
    assert resource_api.list_resource_slice().items == []
    assert [r.status_code for r in server.requests(verb="list")] == [429, 200]


def test_internal_errors_and_turning_faults_off(server: EmbeddedAPIServer,
                                                resource_api: client.ResourceV1Api) -> None:
    server.set_faults(FaultPlan(error_rate=1.0))
    with pytest.raises(client.ApiException) as info:
        resource_api.create_resource_slice(make_slice())
    assert info.value.status == 500
    assert json.loads(info.value.body)["reason"] == "InternalError"
    assert server.list_objects("resourceslices") == []
    server.set_faults(None)
    resource_api.create_resource_slice(make_slice())
    assert len(server.list_objects("resourceslices")) == 1


def test_dropped_connection(server: EmbeddedAPIServer,
                            resource_api: client.ResourceV1Api) -> None:
    server.set_faults(FaultPlan(drop_rate=1.0, verbs=frozenset({"create"})))
    with pytest.raises(urllib3.exceptions.HTTPError):
        resource_api.create_resource_slice(make_slice(), _request_timeout=10)
    (record,) = server.requests(verb="create")
    assert record.status_code == 0 and record.fault
    # Verbs outside the plan are untouched, and the client recovers.
    assert resource_api.list_resource_slice().items == []


def test_filter_by_verb_and_resource(server: EmbeddedAPIServer,
                                     resource_api: client.ResourceV1Api,
                                     core_api: client.CoreV1Api) -> None:
    server.create_node(NODE)
    server.set_faults(FaultPlan(error_rate=1.0, verbs=frozenset({"get"}),
                                resources=frozenset({"resourceslices"})))
    core_api.read_node(NODE)
    resource_api.create_resource_slice(make_slice())
    with pytest.raises(client.ApiException):
        resource_api.read_resource_slice("node-a-gpu")


def _outcomes(seed: int) -> list[int]:
    with EmbeddedAPIServer() as server:
        server.set_faults(FaultPlan(error_rate=0.2, throttle_rate=0.2, conflict_rate=0.2,
                                    seed=seed))
        api = server.api_client()
        try:
            for i in range(30):
                with contextlib.suppress(client.ApiException):
                    client.ResourceV1Api(api).create_resource_slice(make_slice(f"s{i}"))
        finally:
            api.close()
        return [r.status_code for r in server.requests()]


def test_faults_are_deterministic_per_seed() -> None:
    first, again, other = _outcomes(1), _outcomes(1), _outcomes(2)
    assert first == again
    assert first != other
    assert {500, 429, 409, 201} <= set(first)


def test_latency_delays_answers(server: EmbeddedAPIServer,
                                resource_api: client.ResourceV1Api) -> None:
    server.set_faults(FaultPlan(latency_seconds=0.2))
    started = time.monotonic()
    resource_api.list_resource_slice()
    assert time.monotonic() - started >= 0.2  # a lower bound only


def test_bad_plans_rejected() -> None:
    with pytest.raises(ValueError):
        FaultPlan(error_rate=0.7, conflict_rate=0.7)
    with pytest.raises(ValueError):
        FaultPlan(latency_seconds=-1)


def test_request_log_records_rbac_verbs(server: EmbeddedAPIServer,
                                        resource_api: client.ResourceV1Api,
                                        custom_api: client.CustomObjectsApi) -> None:
    created = resource_api.create_resource_slice(make_slice())
    resource_api.read_resource_slice("node-a-gpu")
    resource_api.list_resource_slice(field_selector="spec.nodeName=node-a")
    for _ in watch.Watch().stream(resource_api.list_resource_slice, timeout_seconds=1,
                                  resource_version=created.metadata.resource_version):
        pass
    resource_api.replace_resource_slice("node-a-gpu", created.to_dict(serialize=True))
    custom_api.patch_cluster_custom_object(
        "resource.k8s.io", "v1", "resourceslices", "node-a-gpu",
        {"metadata": {"labels": {"a": "b"}}}, _content_type="application/merge-patch+json")
    resource_api.delete_resource_slice("node-a-gpu")
    resource_api.delete_collection_resource_slice(field_selector="spec.nodeName=node-a")
    server.create_claim("ns1", "claim", [AllocatedDevice(DRIVER, NODE, "gpu-0")])
    resource_api.read_namespaced_resource_claim_status("claim", "ns1")

    records = server.requests()
    assert [r.verb for r in records] == ["create", "get", "list", "watch", "update", "patch",
                                         "delete", "deletecollection", "get"]
    claim_read = records[-1]
    assert (claim_read.resource, claim_read.subresource, claim_read.namespace,
            claim_read.name) == ("resourceclaims", "status", "ns1", "claim")
    assert claim_read.api_group == "resource.k8s.io" and claim_read.api_version == "v1"
    assert claim_read.user_agent.startswith("OpenAPI-Generator/")
    assert all(r.status_code in (200, 201) for r in records)
    assert server.write_counts() == {"resourceslices": 5}
    assert server.requests(verb="watch", resource="resourceslices")[0].path.endswith(
        "/resourceslices")
    server.clear_requests()
    assert server.requests() == []
