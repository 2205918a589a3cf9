"""drakit.allocator.cluster: a pod judged on every node as kube-scheduler 1.37 judges it (the
filters ahead of DynamicResources, then the allocation), the order of the answer and the
scheduler's summary line."""

from __future__ import annotations

from typing import Any

from drakit.allocator.cluster import ClusterExplanation, explain_cluster
from tests.allocator.alloc_helpers import DRIVER, claim, dclass, device, request, rslice

H100 = f'device.attributes["{DRIVER}"].model == "h100"'


def node(name: str, labels: dict[str, str] | None = None, **spec: Any) -> dict[str, Any]:
    return {"metadata": {"name": name, "labels": {"kubernetes.io/hostname": name,
                                                  **(labels or {})}}, "spec": spec}


def pod(**spec: Any) -> dict[str, Any]:
    return {"metadata": {"name": "p", "namespace": "default"},
            "spec": {"resourceClaims": [{"name": "c", "resourceClaimName": "c1"}], **spec}}


def gpus(n: str, h100: int, total: int = 2) -> dict[str, Any]:
    return rslice([device(f"gpu-{i}", {"model": "h100" if i < h100 else "a100"})
                   for i in range(total)], pool=n, node=n)


def by_node(e: ClusterExplanation) -> dict[str, Any]:
    return {v.node: v for v in e.nodes}


def test_summary_counts_every_reason_as_the_scheduler_does() -> None:
    nodes = [node(f"n{i}", {"gpu": "yes"}) for i in range(1, 8)] + \
        [node(f"plain{i}") for i in range(3)]
    nodes[1]["spec"]["taints"] = [{"key": "maint", "value": "x", "effect": "NoSchedule"}]
    nodes[2]["spec"]["taints"] = [{"key": "gone", "effect": "NoExecute"}]
    nodes[3]["spec"]["unschedulable"] = True
    slices = [gpus(f"n{i}", 1) for i in range(1, 7)]
    slices += [rslice([device("gpu-0")], pool="n7", node="n7", name="a", count=2),
               rslice([device("gpu-0")], pool="n7", node="n7", name="b", count=2)]
    e = explain_cluster(pod(nodeSelector={"gpu": "yes"}), [claim(request("g", DRIVER, H100,
                                                                         count=2))],
                        slices, [dclass()], nodes)
    assert not e.allocatable and e.error == ""
    assert e.summary == (
        "0/10 nodes are available: 1 invalid resource pools were encountered, 1 node(s) were "
        "unschedulable, 2 node(s) had untolerated taint(s), 3 cannot allocate all claims, 3 "
        "node(s) didn't match Pod's node affinity/selector.")
    v = by_node(e)
    assert v["n2"].detail == "taint maint=x:NoSchedule is not tolerated"
    assert v["n3"].detail == "taint gone:NoExecute is not tolerated"
    assert v["n4"].plugin == "NodeUnschedulable"
    assert v["plain0"].detail == "nodeSelector gpu=yes: the node has no label gpu"
    assert v["n1"].detail == "claim default/c1: request g needs 2 device(s), 1 match"
    assert (v["n1"].satisfied, v["n1"].requests, v["n1"].devices, v["n1"].wanted) == (0, 1, 1, 2)
    text = str(e)
    assert text.splitlines()[:2] == ["pod default/p: NOT ALLOCATABLE", "  " + e.summary]
    assert "  n1      cannot allocate all claims (0/1 requests, 1/2 devices): claim default/c1: " \
           "request g " \
           "needs 2 device(s), 1 match" in text


def test_fits_first_then_closest_then_rejected() -> None:
    nodes = [node(n) for n in ("a", "b", "c", "d", "node-10", "node-9")]
    nodes[0]["spec"]["taints"] = [{"key": "k", "effect": "NoSchedule"}]
    two = claim(request("g", DRIVER, H100, count=2), request("one", DRIVER, H100))
    slices = [gpus("a", 3, 3), gpus("b", 1), gpus("c", 2), gpus("d", 0), gpus("node-9", 3, 3),
              gpus("node-10", 3, 3)]
    e = explain_cluster(pod(), [two], slices, [dclass()], nodes)
    assert e.allocatable and e.summary == ""
    assert [v.node for v in e.nodes] == ["node-9", "node-10", "c", "b", "d", "a"]
    v = by_node(e)
    assert (v["c"].satisfied, v["b"].satisfied, v["d"].satisfied) == (2, 1, 0)
    assert v["c"].detail == ("claim default/c1: enough devices match each request, but "
                             "requests g, one need at least 3 devices together and only 2 "
                             "distinct devices match them (a device is allocated to one "
                             "request)")
    assert v["node-9"].detail == (f"would allocate g={DRIVER}/node-9/gpu-0, "
                                  f"g={DRIVER}/node-9/gpu-1, one={DRIVER}/node-9/gpu-2")
    assert str(e).startswith("pod default/p: ALLOCATABLE on 2 of 6 node(s)\n")


def test_tolerations_as_the_scheduler_applies_them() -> None:
    nodes = [node("a", taints=[{"key": "gpu", "value": "only", "effect": "NoSchedule"}]),
             node("b", taints=[{"key": "soft", "effect": "PreferNoSchedule"}]),
             node("c", unschedulable=True),
             node("d", taints=[{"key": "gone", "effect": "NoExecute"}])]
    slices = [gpus(n, 1, 1) for n in "abcd"]
    c = [claim(request())]
    e = explain_cluster(pod(), c, slices, [dclass()], nodes)
    assert [v.node for v in e.nodes if v.fits] == ["b"]
    tol = [{"key": "gpu", "operator": "Equal", "value": "only", "effect": "NoSchedule"},
           {"key": "node.kubernetes.io/unschedulable", "operator": "Exists"},
           {"operator": "Exists", "effect": "NoExecute"}]
    e = explain_cluster(pod(tolerations=tol), c, slices, [dclass()], nodes)
    assert [v.node for v in e.nodes if v.fits] == ["a", "b", "c", "d"]


def test_required_node_affinity_and_prefilter() -> None:
    nodes = [node("a", {"zone": "1"}), node("b", {"zone": "2"}), node("c", {"zone": "3"})]
    slices = [gpus(n, 1, 1) for n in "abc"]
    c = [claim(request())]
    expr = {"nodeSelectorTerms": [{"matchExpressions": [
        {"key": "zone", "operator": "In", "values": ["2", "3"]}]}]}
    e = explain_cluster(pod(affinity={"nodeAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": expr}}), c, slices, [dclass()], nodes)
    assert [v.node for v in e.nodes if v.fits] == ["b", "c"]
    assert by_node(e)["a"].detail == ("no nodeSelectorTerm of the required node affinity "
                                      "matches the node")
    names = {"nodeSelectorTerms": [{"matchFields": [
        {"key": "metadata.name", "operator": "In", "values": ["b"]}]}]}
    e = explain_cluster(pod(affinity={"nodeAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": names}}), [claim(request(count=2))],
        slices, [dclass()], nodes)
    assert e.summary == ("0/3 nodes are available: 1 cannot allocate all claims, 2 node(s) "
                         "didn't satisfy plugin(s) [NodeAffinity].")
    assert e.only_node is not None and e.only_node.node == "b"  # the one node left: its full answer
    assert "request gpu needs 2 device(s), 1 match" in str(e)
    e = explain_cluster(pod(nodeName="c", affinity={"nodeAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": names}}), c, slices, [dclass()],
        nodes)
    assert e.summary == ("0/3 nodes are available: node(s) didn't satisfy plugin(s) "
                         "[NodeAffinity NodeName] simultaneously.")


def test_slices_for_all_nodes_by_selector_and_per_device() -> None:
    nodes = [node("a", {"rack": "r1"}), node("b", {"rack": "r2"}), node("c")]
    shared = rslice([device("net-0")], pool="fabric", node="", name="fabric", allNodes=True)
    racked = rslice([device("r1-gpu")], pool="rack1", node="", name="rack1", nodeSelector={
        "nodeSelectorTerms": [{"matchExpressions": [
            {"key": "rack", "operator": "In", "values": ["r1"]}]}]})
    per_device = rslice([device("x", nodeName="c"), device("y", allNodes=True)], pool="pd",
                        node="", name="pd", perDeviceNodeSelection=True)
    e = explain_cluster(pod(), [claim(request(count=3))], [shared, racked, per_device],
                        [dclass()], nodes)
    v = by_node(e)
    assert v["a"].fits and v["c"].fits and not v["b"].fits
    assert v["a"].detail == (f"would allocate gpu={DRIVER}/fabric/net-0, "
                             f"gpu={DRIVER}/pd/y, gpu={DRIVER}/rack1/r1-gpu")
    assert v["b"].detail == "claim default/c1: request gpu needs 3 device(s), 2 match"


def test_allocated_claim_not_available_on_other_nodes() -> None:
    nodes = [node("a"), node("b")]
    held = claim(request(), name="c1")
    held["status"] = {"allocation": {
        "devices": {"results": [{"request": "gpu", "driver": DRIVER, "pool": "a",
                                 "device": "gpu-0"}]},
        "nodeSelector": {"nodeSelectorTerms": [{"matchFields": [
            {"key": "metadata.name", "operator": "In", "values": ["a"]}]}]}}}
    e = explain_cluster(pod(), [held], [gpus("a", 1), gpus("b", 1)], [dclass()], nodes)
    assert [v.node for v in e.nodes if v.fits] == ["a"]
    assert by_node(e)["b"].reason == "resourceclaim not available on the node"


def test_cel_error_and_missing_class() -> None:
    nodes = [node("a"), node("b")]
    bad = claim(request("g", DRIVER, f'device.attributes["{DRIVER}"].nosuch == 1'))
    e = explain_cluster(pod(), [bad], [gpus("a", 1), gpus("b", 1)], [dclass()], nodes)
    assert not e.allocatable
    assert "CEL runtime error: no such key: nosuch" in e.error
    assert "error (the scheduler fails the pod with it)" in str(e)
    e = explain_cluster(pod(), [claim(request("g", "nosuch.example.com"))], [gpus("a", 1)],
                        [dclass()], nodes)
    assert e.summary == ("0/2 nodes are available: request g: device class "
                         "nosuch.example.com does not exist.")
