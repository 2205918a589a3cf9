"""``drakit explain --pod`` without ``--node`` on the embedded API server with 520 nodes (more
than one page of 500 when listing nodes and slices): one line per node, the nodes where the
pod fits first, then the closest, then those the filters rejected, and the scheduler's
summary; ``--node`` keeps the full answer of one node."""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from typing import Any

import pytest

from bench.explain import cluster_workload
from drakit.plugin.ops.cli import main
from drakit.plugin.testing.apiserver.server import EmbeddedAPIServer

NODES = 520


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, dict[str, Any]]]:
    w = cluster_workload(NODES)
    with EmbeddedAPIServer() as api:
        for n in w["nodes"]:
            api.create_object("nodes", n)
        for s in w["slices"]:
            api.create_object("resourceslices", s)
        for k in w["classes"]:
            api.create_object("deviceclasses", k)
        for c in w["claims"]:
            api.create_object("resourceclaims", c, "default")
        api.create_object("pods", {**w["pod"], "spec": {
            **w["pod"]["spec"], "containers": [{"name": "app", "image": "x"}]}}, "default")
        kc = api.write_kubeconfig(tmp_path_factory.mktemp("kc") / "kubeconfig")
        yield str(kc), w


def test_every_node_judged(cluster: tuple[str, dict[str, Any]],
                           capsys: pytest.CaptureFixture[str]) -> None:
    kc, _ = cluster
    assert main(["explain", "--kubeconfig", kc, "--pod", "default/train", "-o", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["allocatable"] is True and doc["error"] == ""
    nodes = doc["nodes"]
    assert len(nodes) == NODES
    assert [v["node"] for v in nodes[:2]] == [f"node-{NODES - 2}", f"node-{NODES - 1}"]
    assert all(v["fits"] for v in nodes[:2]) and not any(v["fits"] for v in nodes[2:])
    tainted = [v for v in nodes if v["plugin"] == "TaintToleration"]
    unlabelled = [v for v in nodes if v["plugin"] == "NodeAffinity"]
    short = [v for v in nodes if v["plugin"] == "DynamicResources"]
    assert len(tainted) == len(unlabelled) == NODES // 10
    assert len(short) == NODES - 2 - 2 * (NODES // 10)
    assert nodes.index(short[-1]) < nodes.index(tainted[0])  # closest before rejected
    assert {v["reason"] for v in short} == {"cannot allocate all claims"}
    assert short[0]["detail"] == "claim default/c: request g needs 2 device(s), 1 match"
    assert tainted[0]["detail"] == "taint maintenance:NoSchedule is not tolerated"


def test_text_and_summary_when_nothing_fits(cluster: tuple[str, dict[str, Any]],
                                           capsys: pytest.CaptureFixture[str]) -> None:
    kc, w = cluster
    api_claim = {**copy.deepcopy(w["claims"][0]),
                 "metadata": {"name": "three", "namespace": "default"}}
    api_claim["spec"]["devices"]["requests"][0]["exactly"]["count"] = 3
    from drakit.plugin.ops.explain import _Cluster

    api = _Cluster(kc).api
    api.http.json("POST", f"/apis/resource.k8s.io/{api.version}/namespaces/default/"
                  "resourceclaims", body=api_claim)
    api.http.json("POST", "/api/v1/namespaces/default/pods", body={
        "metadata": {"name": "three", "namespace": "default"},
        "spec": {**w["pod"]["spec"], "resourceClaims": [
            {"name": "gpus", "resourceClaimName": "three"}],
            "containers": [{"name": "app", "image": "x"}]}})
    assert main(["explain", "--kubeconfig", kc, "--pod", "default/three"]) == 1
    lines = capsys.readouterr().out.splitlines()
    short = NODES - 2 * (NODES // 10)
    assert lines[0] == "pod default/three: NOT ALLOCATABLE"
    assert lines[1] == (f"  0/{NODES} nodes are available: {short} cannot allocate all claims, "
                        f"{NODES // 10} node(s) didn't match Pod's node affinity/selector, "
                        f"{NODES // 10} node(s) had untolerated taint(s).")
    assert len(lines) == 2 + NODES
    width = len(f"node-{NODES - 1}")
    # closest first: two of the three devices on the last two nodes, then one, by name
    assert lines[2:5] == [
        f"  node-{NODES - 2}  cannot allocate all claims (0/1 requests, 2/3 devices): claim "
        "default/three: request g needs 3 device(s), 2 match",
        f"  node-{NODES - 1}  cannot allocate all claims (0/1 requests, 2/3 devices): claim "
        "default/three: request g needs 3 device(s), 2 match",
        f"  {'node-1'.ljust(width)}  cannot allocate all claims (0/1 requests, 1/3 devices): "
        "claim default/three: request g needs 3 device(s), 1 match"]
    assert lines[-1] == f"  {f'node-{NODES - 5}'.ljust(width)}  had untolerated " \
                        "taint(s): taint maintenance:NoSchedule is not tolerated"
    # --node: the full per-device answer of one node
    assert main(["explain", "--kubeconfig", kc, "--pod", "default/three", "--node",
                 "node-3"]) == 1
    out = capsys.readouterr().out
    assert out.startswith("pod default/three on node node-3: NOT ALLOCATABLE")
    assert "    match    gpu.example.com/node-3/gpu-0" in out
    assert "gpu.example.com/node-3/gpu-1: selector: request selector #0 is false" in out
