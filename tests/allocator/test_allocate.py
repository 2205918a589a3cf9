"""drakit.allocator.allocate: the scheduler's rules on one node's devices."""

from __future__ import annotations

from typing import Any

import pytest

from drakit.allocator import AllocationFailed, allocate
from tests.allocator.alloc_helpers import DRIVER, claim, dclass, device, request, rslice

GPUS = [device(f"gpu-{i}", {"model": "a100" if i < 2 else "h100", "numa": i % 2})
        for i in range(4)]


def _devs(result: dict[str, Any]) -> list[str]:
    return [r["device"] for r in result["devices"]["results"]]


def test_exact_count_in_scheduler_order() -> None:
    [res] = allocate([claim(request(count=2))], [rslice(GPUS)], [dclass()], "node-1")
    assert _devs(res) == ["gpu-0", "gpu-1"]
    assert res["nodeSelector"]["nodeSelectorTerms"][0]["matchFields"][0]["values"] == ["node-1"]
    assert res["devices"]["results"][0] == {"request": "gpu", "driver": DRIVER,
                                            "pool": "pool-a", "device": "gpu-0"}


def test_request_selector_and_all_mode() -> None:
    sel = 'device.attributes["gpu.example.com"].model == "h100"'
    [res] = allocate([claim(request("g", DRIVER, sel, allocationMode="All"))],
                     [rslice(GPUS)], [dclass()], "node-1")
    assert _devs(res) == ["gpu-2", "gpu-3"]


def test_other_node_and_too_few() -> None:
    with pytest.raises(AllocationFailed) as e:
        allocate([claim(request(count=5))], [rslice(GPUS)], [dclass()], "node-1")
    assert "needs 5 device(s), 4 match" in str(e.value)
    with pytest.raises(AllocationFailed, match="no ResourceSlice publishes devices"):
        allocate([claim(request())], [rslice(GPUS)], [dclass()], "node-2")


def test_first_available_falls_back() -> None:
    req = {"name": "g", "firstAvailable": [
        {"name": "big", "deviceClassName": DRIVER, "count": 8},
        {"name": "small", "deviceClassName": DRIVER, "count": 1}]}
    [res] = allocate([claim(req)], [rslice(GPUS)], [dclass()], "node-1")
    assert res["devices"]["results"][0]["request"] == "g/small"
    with pytest.raises(AllocationFailed) as e:  # g/small fits alone, not with a second g
        allocate([claim(req, request("w", count=4))], [rslice(GPUS)], [dclass()], "node-1")
    assert e.value.explanation.reasons == [
        "enough devices match each request, but requests g, w need at least 5 devices "
        "together and only 4 distinct devices match them (a device is allocated to one "
        "request)"]


def test_match_and_distinct_attribute() -> None:
    cons = [{"matchAttribute": f"{DRIVER}/numa"}]
    [res] = allocate([claim(request(count=2), constraints=cons)], [rslice(GPUS)], [dclass()],
                     "node-1")
    assert _devs(res) == ["gpu-0", "gpu-2"]
    cons = [{"distinctAttribute": f"{DRIVER}/model"}]
    [res] = allocate([claim(request(count=2), constraints=cons)], [rslice(GPUS)], [dclass()],
                     "node-1")
    assert _devs(res) == ["gpu-0", "gpu-2"]
    with pytest.raises(AllocationFailed) as e:
        allocate([claim(request(count=3), constraints=cons)], [rslice(GPUS)], [dclass()],
                 "node-1")
    assert e.value.explanation.reasons == [
        f"enough devices match each request, but no choice of them satisfies "
        f"distinctAttribute {DRIVER}/model"]


def test_the_constraints_that_stop_a_claim_are_named() -> None:
    gen = [device(f"gpu-{i}", {"gen": "x", "numa": i % 2, "model": "a100" if i < 2 else
                               "h100"}) for i in range(4)]
    cons = [{"matchAttribute": f"{DRIVER}/gen"}, {"distinctAttribute": f"{DRIVER}/numa"}]
    with pytest.raises(AllocationFailed) as e:  # three distinct numa values: only two exist
        allocate([claim(request(count=3), constraints=cons)], [rslice(gen)], [dclass()],
                 "node-1")
    assert e.value.explanation.reasons == [
        "enough devices match each request, but no choice of them satisfies "
        f"distinctAttribute {DRIVER}/numa"]
    cons = [{"matchAttribute": f"{DRIVER}/model", "requests": ["a", "b"]},
            {"matchAttribute": f"{DRIVER}/numa"}]
    with pytest.raises(AllocationFailed) as e:  # each alone is satisfiable, not both
        allocate([claim(request("a"), request("b"), constraints=cons)], [rslice(gen)],
                 [dclass()], "node-1")
    assert e.value.explanation.reasons == [
        "enough devices match each request, but no choice of them satisfies "
        f"matchAttribute {DRIVER}/model over requests a, b; matchAttribute {DRIVER}/numa"]


def test_devices_of_other_claims_are_taken_out() -> None:
    other = claim(request(), name="other")
    other["status"] = {"allocation": {"devices": {"results": [
        {"request": "gpu", "driver": DRIVER, "pool": "pool-a", "device": "gpu-0"}]}}}
    [res] = allocate([claim(request())], [rslice(GPUS)], [dclass()], "node-1", [other])
    assert _devs(res) == ["gpu-1"]


def test_shared_counters() -> None:
    counters = rslice([], name="counters", count=2, sharedCounters=[
        {"name": "mem", "counters": {"memory": {"value": "40Gi"}}}])
    parts = [device(f"p{i}", consumesCounters=[{"counterSet": "mem", "counters": {
        "memory": {"value": "20Gi"}}}]) for i in range(3)]
    slices = [counters, rslice(parts, name="parts", count=2)]
    [res] = allocate([claim(request(count=2))], slices, [dclass()], "node-1")
    assert _devs(res) == ["p0", "p1"]
    with pytest.raises(AllocationFailed) as e:
        allocate([claim(request(count=3))], slices, [dclass()], "node-1")
    assert e.value.explanation.reasons == [
        f"enough devices match each request, but their shared counters cannot hold them "
        f"together: {DRIVER}/pool-a/p0, {DRIVER}/pool-a/p1, {DRIVER}/pool-a/p2 (the first "
        "choice when counters are not counted) need counter memory of counter set mem: 60Gi "
        "needed, 40Gi available"]
    other = claim(request(), name="other")  # holds p2: 20Gi of the 40Gi are left
    other["status"] = {"allocation": {"devices": {"results": [
        {"request": "gpu", "driver": DRIVER, "pool": "pool-a", "device": "p2"}]}}}
    with pytest.raises(AllocationFailed) as e:
        allocate([claim(request(count=2))], slices, [dclass()], "node-1", [other])
    assert e.value.explanation.reasons[0].endswith(
        "need counter memory of counter set mem: 40Gi needed, 20Gi available")


def test_incomplete_pool_is_not_used() -> None:
    with pytest.raises(AllocationFailed):
        allocate([claim(request())], [rslice(GPUS, count=2)], [dclass()], "node-1")


def test_invalid_pool_is_a_reason() -> None:
    slices = [rslice(GPUS[:1], name="s1", count=2), rslice(GPUS[:1], name="s2", count=2)]
    with pytest.raises(AllocationFailed) as e:
        allocate([claim(request())], slices, [dclass()], "node-1")
    assert e.value.explanation.error == ""
    assert e.value.explanation.reasons[0] == (
        "invalid resource pools were encountered: gpu.example.com/pool-a: duplicate device "
        "name gpu-0")


def test_consumable_capacity_with_policy() -> None:
    nic = device("nic-0", caps={"bandwidth": {"value": "10G", "requestPolicy": {
        "default": "1G", "validRange": {"min": "1G", "step": "1G"}}}},
        allowMultipleAllocations=True)
    req = request(capacity={"requests": {"bandwidth": "2500M"}})
    [res] = allocate([claim(req)], [rslice([nic])], [dclass()], "node-1")
    r = res["devices"]["results"][0]
    assert r["consumedCapacity"] == {"bandwidth": "3G"}
    assert len(r["shareID"]) == 36
    other = claim(request(), name="other")
    other["status"] = {"allocation": {"devices": {"results": [
        {"request": "gpu", "driver": DRIVER, "pool": "pool-a", "device": "nic-0",
         "shareID": "0b8c3e1c-0000-4000-8000-000000000001",
         "consumedCapacity": {"bandwidth": "8G"}}]}}}
    with pytest.raises(AllocationFailed) as e:
        allocate([claim(req)], [rslice([nic])], [dclass()], "node-1", [other])
    assert e.value.explanation.requests[0].unmatched[0].reason == "capacity"


def test_taints_and_tolerations() -> None:
    tainted = [device("gpu-0", taints=[{"key": "broken", "effect": "NoSchedule"}])]
    with pytest.raises(AllocationFailed) as e:
        allocate([claim(request())], [rslice(tainted)], [dclass()], "node-1")
    assert e.value.explanation.requests[0].unmatched[0].reason == "taint"
    tol = [{"key": "broken", "operator": "Exists"}]
    [res] = allocate([claim(request(tolerations=tol))], [rslice(tainted)], [dclass()],
                     "node-1")
    assert res["devices"]["results"][0]["tolerations"] == tol
    info = [device("gpu-0", taints=[{"key": "note", "effect": "None"}])]
    assert allocate([claim(request())], [rslice(info)], [dclass()], "node-1")


def test_admin_access_ignores_allocations() -> None:
    other = claim(request(), name="other")
    other["status"] = {"allocation": {"devices": {"results": [
        {"request": "gpu", "driver": DRIVER, "pool": "pool-a", "device": "gpu-0"}]}}}
    [res] = allocate([claim(request(adminAccess=True))], [rslice(GPUS[:1])], [dclass()],
                     "node-1", [other])
    assert res["devices"]["results"][0]["adminAccess"] is True


def test_binding_conditions_pools_last() -> None:
    late = rslice([device("b0", bindingConditions=["ready"],
                          bindingFailureConditions=["failed"])], pool="aaa", name="b")
    [res] = allocate([claim(request())], [late, rslice(GPUS[:1], pool="zzz")], [dclass()],
                     "node-1")
    assert _devs(res) == ["gpu-0"]
    [res] = allocate([claim(request())], [late], [dclass()], "node-1")
    assert res["devices"]["results"][0]["bindingConditions"] == ["ready"]


def test_cel_runtime_error_is_a_scheduler_error() -> None:
    cls = dclass(DRIVER, 'device.attributes["gpu.example.com"].nosuch == 1')
    with pytest.raises(AllocationFailed) as e:
        allocate([claim(request())], [rslice(GPUS)], [cls], "node-1")
    assert (f"class {DRIVER}: selector #0 on device {DRIVER}/pool-a/gpu-0: CEL runtime "
            "error: no such key: nosuch") in str(e.value)


def test_v1beta1_shapes() -> None:
    s = rslice([{"name": "gpu-0", "basic": {"attributes": {"model": {"string": "a100"}}}}])
    s["apiVersion"] = "resource.k8s.io/v1beta1"
    c = claim({"name": "gpu", "deviceClassName": DRIVER, "selectors": [{"cel": {
        "expression": 'device.attributes["gpu.example.com"].model == "a100"'}}]})
    [res] = allocate([c], [s], [dclass()], "node-1")
    assert _devs(res) == ["gpu-0"]


def test_class_and_claim_config() -> None:
    cfg = {"opaque": {"driver": DRIVER, "parameters": {"a": 1}}}
    cls = dclass(DRIVER, f'device.driver == "{DRIVER}"', config=[cfg])
    [res] = allocate([claim(request(), config=[{"requests": ["gpu"], **cfg}])],
                     [rslice(GPUS)], [cls], "node-1")
    assert res["devices"]["config"] == [{"source": "FromClass", **cfg},
                                        {"source": "FromClaim", **cfg}]


def test_bad_values_name_device_and_field() -> None:
    bad = [device("gpu-0", {"v": {"version": "1.0"}}), device("gpu-1")]
    with pytest.raises(AllocationFailed) as e:
        allocate([claim(request())], [rslice(bad)], [dclass()], "node-1")
    assert (f"selector #0 on device {DRIVER}/pool-a/gpu-0: CEL runtime error: attribute v: "
            "'1.0' is not a semantic version") in str(e.value)
    c = claim(request(capacity={"requests": {"memory": "lots"}}))
    with pytest.raises(AllocationFailed, match="claim default/c1: 'lots' is not a quantity"):
        allocate([c], [rslice([device("gpu-0", caps={"memory": "1Gi"})])], [dclass()],
                 "node-1")


def test_claims_that_fit_alone_name_the_counter_they_share() -> None:
    """Two claims of a pod, each fitting alone on partitions of one GPU, overdraw its memory
    counter together: the pod's reason names the counter."""
    from drakit.allocator.explanation import explain_pod

    counters = rslice([], name="counters", count=2, sharedCounters=[
        {"name": "gpu-0", "counters": {"memory": {"value": "40Gi"}}}])
    parts = [device(f"half-{i}", consumesCounters=[{"counterSet": "gpu-0", "counters": {
        "memory": {"value": "20Gi"}}}]) for i in range(4)]
    slices = [counters, rslice(parts, name="parts", count=2)]
    e = explain_pod("default/p", [claim(request(count=2), name="a"),
                                  claim(request(count=1), name="b")], slices, [dclass()],
                    "node-1")
    assert [c.allocatable for c in e.claims] == [True, True] and not e.allocatable
    assert e.reasons == [
        "each claim can be allocated alone, but not all of them together: their shared "
        f"counters cannot hold them together: {DRIVER}/pool-a/half-0, {DRIVER}/pool-a/half-1, "
        f"{DRIVER}/pool-a/half-2 (the first choice when counters are not counted) need "
        "counter memory of counter set gpu-0: 60Gi needed, 40Gi available"]
