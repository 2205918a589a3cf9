"""The real DRA allocator on drakit's slices: kube-scheduler (and kube-controller-manager's
resourceclaim controller, which makes a Pod's claims from its ResourceClaimTemplates) 1.37
allocate from what a drakit node agent published, then the fake kubelet has drakit prepare
exactly that allocation. Pods are bound but never run (there is no kubelet); the Node is a
Ready, untainted object. Each test pins its pods to its own node (nodeSelector)."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from real_helpers import skip_or_fail

from drakit.plugin.testing.apiserver.errors import ApiError
from drakit.plugin.testing.harness import DriverHarness
from drakit.plugin.testing.real.controlplane import RealAPIServer
from drakit.plugin.testing.real.process import RealClusterError, wait_until

pytestmark = pytest.mark.slow

DRIVER = "drakit.example.com"
CLASS = "example.drakit.example.com"  # deploy/'s DeviceClass for the example discoverer

INVENTORY: dict[str, Any] = {
    "devices": [
        {"name": "plain-a", "attributes": {"model": "MODEL-A", "index": 0}},
        {"name": "plain-b", "attributes": {"model": "MODEL-B", "index": 1}},
        {"name": "shared-0", "allowMultipleAllocations": True,
         "attributes": {"model": "SHARED"},
         "capacity": {"memory": {"value": "40Gi", "requestPolicy": {
             "default": "1Gi", "validRange": {"min": "1Gi", "max": "40Gi", "step": "1Gi"}}}}},
        {"name": "tainted-0", "attributes": {"model": "TAINTED"},
         "taints": [{"key": "example.com/broken", "value": "fan", "effect": "NoSchedule"}]},
        {"name": "admin-0", "attributes": {"model": "ADMIN"}},
    ],
    "partitionable": [
        {"name": "mig-0", "attributes": {"model": "MIG"},
         "counters": {"memory": "40Gi"}, "whole": False,
         "partitions": [{"profile": "3g-30gb", "count": 2, "counters": {"memory": "30Gi"}}]},
    ],
}


@pytest.fixture(scope="module")
def scheduling(real: RealAPIServer) -> Iterator[RealAPIServer]:
    """The session's server with kube-scheduler and the resourceclaim controller running
    (for this module only: other modules' claims are not to be allocated by anyone)."""
    try:
        real.start_scheduler()
        real.start_controller_manager()
    except RealClusterError as e:
        real.stop_scheduler()
        if "not found" in str(e):
            skip_or_fail(str(e))
        raise
    try:
        yield real
    finally:
        real.stop_controller_manager()
        real.stop_scheduler()


@pytest.fixture
def node(scheduling: RealAPIServer, node_name: str,
         real_harness_factory: Callable[..., DriverHarness]) -> DriverHarness:
    return real_harness_factory(node_name, plugin_options={"example": {
        **INVENTORY, "pool": node_name}})


@pytest.fixture
def namespace(scheduling: RealAPIServer) -> str:
    name = f"sched-{uuid.uuid4().hex[:6]}"
    scheduling.ensure_namespace(name)
    return name


def _request(name: str, expression: str, **extra: Any) -> dict[str, Any]:
    return {"name": name, "exactly": {
        "deviceClassName": CLASS, "allocationMode": "ExactCount", "count": 1,
        "selectors": [{"cel": {"expression": expression}}], **extra}}


def _model(model: str) -> str:
    return f'device.attributes["{DRIVER}"].model == "{model}"'


def run_pod(server: RealAPIServer, h: DriverHarness, namespace: str, name: str,
            requests: list[dict[str, Any]], claim_name: str | None = None) -> None:
    """A ResourceClaimTemplate with ``requests`` and a Pod using it, pinned to the node
    (or, with ``claim_name``, a Pod using that existing claim)."""
    if claim_name is None:
        server.create_object("resourceclaimtemplates", {
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"spec": {"devices": {"requests": requests}}}})
        source = {"resourceClaimTemplateName": name}
    else:
        source = {"resourceClaimName": claim_name}
    server.create_object("pods", {
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"nodeSelector": {"kubernetes.io/hostname": h.node_name},
                 "automountServiceAccountToken": False,
                 "resourceClaims": [{"name": "devices", **source}],
                 "containers": [{"name": "app", "image": "drakit.invalid/app",
                                 "resources": {"claims": [{"name": "devices"}]}}]}})


def pod_claim(server: RealAPIServer, namespace: str, pod: str,
              timeout: float = 30.0) -> dict[str, Any]:
    """The pod's claim once the pod is bound to a node and the claim allocated."""
    def ready() -> dict[str, Any] | None:
        p = server.get_object("pods", pod, namespace) or {}
        if not p.get("spec", {}).get("nodeName"):
            return None
        statuses = p.get("status", {}).get("resourceClaimStatuses") or []
        claim_name = statuses[0].get("resourceClaimName") if statuses else None
        if not claim_name:
            spec_claims = p["spec"].get("resourceClaims") or []
            claim_name = spec_claims[0].get("resourceClaimName") if spec_claims else None
        claim = server.get_object("resourceclaims", claim_name, namespace) if claim_name else None
        return claim if claim and claim.get("status", {}).get("allocation") else None

    try:
        return wait_until(ready, timeout, f"pod {namespace}/{pod} to be scheduled", 0.25)
    except TimeoutError:
        p = server.get_object("pods", pod, namespace) or {}
        raise AssertionError(f"pod {pod} not scheduled: {p.get('status')}\n"
                             f"{server.logs('kube-scheduler', 15)}") from None


def unschedulable(server: RealAPIServer, namespace: str, pod: str,
                  timeout: float = 30.0) -> str:
    """The scheduler's message once it marked the pod unschedulable."""
    def message() -> str | None:
        p = server.get_object("pods", pod, namespace) or {}
        assert not p.get("spec", {}).get("nodeName"), f"pod {pod} was bound"
        for c in p.get("status", {}).get("conditions") or []:
            if c["type"] == "PodScheduled" and c["status"] == "False":
                return str(c.get("message", ""))
        return None

    return str(wait_until(message, timeout, f"pod {pod} to be unschedulable", 0.25))


def results(claim: dict[str, Any]) -> list[dict[str, Any]]:
    return list(claim["status"]["allocation"]["devices"]["results"])


def prepare(h: DriverHarness, claim: dict[str, Any]) -> list[str]:
    """Prepare through the fake kubelet; the CDI device IDs drakit answered."""
    meta = claim["metadata"]
    ref = (meta["namespace"], meta["name"], meta["uid"])
    result = h.prepare(ref)[meta["uid"]]
    assert result.error == "", result.error
    assert sorted(d.device_name for d in result.devices) == sorted(
        r["device"] for r in results(claim))
    assert {d.pool_name for d in result.devices} == {h.node_name}
    assert sorted(str(d.share_id) for d in result.devices) == sorted(
        str(r.get("shareID")) for r in results(claim))
    return list(result.cdi_device_ids)


def test_plain_device_by_cel_selector(scheduling: RealAPIServer, node: DriverHarness,
                                      namespace: str) -> None:
    run_pod(scheduling, node, namespace, "plain", [_request("gpu", _model("MODEL-B"))])
    claim = pod_claim(scheduling, namespace, "plain")
    assert [(r["driver"], r["pool"], r["device"]) for r in results(claim)] == [
        (DRIVER, node.node_name, "plain-b")]
    assert claim["status"]["reservedFor"][0]["name"] == "plain"
    ids = prepare(node, claim)
    assert len(ids) == 1 and ids[0].startswith(f"{DRIVER}/")


def test_partitions_that_exclude_each_other(scheduling: RealAPIServer, node: DriverHarness,
                                            namespace: str) -> None:
    """Two 3g-30gb partitions of one 40Gi device: the allocator gives out one, and the
    other cannot be had while it is allocated (shared counters)."""
    published = {d for _, d in node.devices()}
    assert {"mig-0-3g-30gb-0", "mig-0-3g-30gb-1"} <= published
    want = [_request("part", _model("MIG"))]
    run_pod(scheduling, node, namespace, "part-1", want)
    claim = pod_claim(scheduling, namespace, "part-1")
    [first] = results(claim)
    assert first["device"] in {"mig-0-3g-30gb-0", "mig-0-3g-30gb-1"}
    prepare(node, claim)
    run_pod(scheduling, node, namespace, "part-2", want)
    # the other 3g-30gb partition is published and free, but its counters are spent
    assert "1 cannot allocate all claims" in unschedulable(scheduling, namespace, "part-2")


def test_consumable_capacity_shared_by_two_claims(
    scheduling: RealAPIServer, node: DriverHarness, namespace: str,
) -> None:
    for i, memory in enumerate(("10Gi", "20Gi")):
        run_pod(scheduling, node, namespace, f"share-{i}", [_request(
            "mem", _model("SHARED"), capacity={"requests": {"memory": memory}})])
    claims = [pod_claim(scheduling, namespace, f"share-{i}") for i in range(2)]
    got = [results(c)[0] for c in claims]
    assert [r["device"] for r in got] == ["shared-0", "shared-0"]
    assert got[0]["shareID"] != got[1]["shareID"]
    assert [r["consumedCapacity"]["memory"] for r in got] == ["10Gi", "20Gi"]
    ids = [prepare(node, c) for c in claims]
    assert ids[0] != ids[1]  # one CDI device per share


def test_tainted_device_needs_a_toleration(scheduling: RealAPIServer, node: DriverHarness,
                                           namespace: str) -> None:
    run_pod(scheduling, node, namespace, "no-tol", [_request("t", _model("TAINTED"))])
    assert "1 cannot allocate all claims" in unschedulable(scheduling, namespace, "no-tol")
    toleration = {"key": "example.com/broken", "operator": "Equal", "value": "fan",
                  "effect": "NoSchedule"}
    run_pod(scheduling, node, namespace, "tol", [_request("t", _model("TAINTED"),
                                                          tolerations=[toleration])])
    claim = pod_claim(scheduling, namespace, "tol")
    assert [r["device"] for r in results(claim)] == ["tainted-0"]
    assert results(claim)[0]["tolerations"] == [toleration]
    prepare(node, claim)


def test_admin_access_request(scheduling: RealAPIServer, node: DriverHarness,
                              namespace: str) -> None:
    """adminAccess needs the namespace label resource.kubernetes.io/admin-access=true; the
    device stays available for ordinary claims."""
    with pytest.raises(ApiError) as refused:
        scheduling.create_object("resourceclaimtemplates", {
            "metadata": {"name": "refused", "namespace": namespace},
            "spec": {"spec": {"devices": {"requests": [
                _request("a", _model("ADMIN"), adminAccess=True)]}}}})
    assert refused.value.code in (403, 422)
    scheduling.ensure_namespace(namespace, {"resource.kubernetes.io/admin-access": "true"})
    run_pod(scheduling, node, namespace, "admin", [_request("a", _model("ADMIN"),
                                                            adminAccess=True)])
    claim = pod_claim(scheduling, namespace, "admin")
    [result] = results(claim)
    assert result["device"] == "admin-0" and result["adminAccess"] is True
    prepare(node, claim)
    run_pod(scheduling, node, namespace, "ordinary", [_request("a", _model("ADMIN"))])
    assert [r["device"] for r in results(pod_claim(scheduling, namespace, "ordinary"))] == [
        "admin-0"]
