"""``drakit explain`` on the whole real node: a pod left pending on purpose (its
claim asks for a partition profile drakit's example devices do not have) stays Pending with
the scheduler's "cannot allocate all claims"; explain, against the real control plane and the
slices the running drakit published, exits 1 and names the selector that rules each device
out, and ``--pod`` alone prints the scheduler's "0/N nodes are available" line. A claim that
fits is explained as allocatable, with the devices the scheduler then really allocates to its
pod."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from drakit.plugin.ops.cli import main
from drakit.plugin.testing.real.node import DrakitProcess, RealNode
from drakit.plugin.testing.real.process import wait_until

from .node_helpers import (
    DRIVER,
    allocated,
    apply_and_wait_ready,
    attr,
    claim,
    new_namespace,
    pod,
    pod_claim,
    request,
)


def test_pending_pod_explained(node: RealNode, drakit: DrakitProcess, tmp_path: Path,
                               capsys: pytest.CaptureFixture[str]) -> None:
    ns = new_namespace(node, "explain")
    node.apply([claim(ns, "huge", request(
                    "mig", f'device.attributes["{DRIVER}"].?profile.orValue("") == "7g-80gb"')),
                pod(node, ns, "pending", claim_name="huge")])

    def unschedulable() -> str | None:
        p = node.pod(ns, "pending") or {}
        for c in (p.get("status") or {}).get("conditions") or []:
            if c.get("type") == "PodScheduled" and c.get("reason") == "Unschedulable":
                return str(c.get("message"))
        return None

    message = wait_until(unschedulable, 60, "the pod to be reported unschedulable")
    assert "cannot allocate all claims" in message
    kc = str(node.cp.write_kubeconfig(tmp_path / "kc"))
    assert main(["explain", "--kubeconfig", kc, "--node", node.node_name, f"{ns}/huge"]) == 1
    out = capsys.readouterr().out
    assert "NOT ALLOCATABLE" in out
    assert "request mig needs 1 device(s), 0 match" in out
    assert "/mig-gpu-0-4g-40gb-0: selector: request selector #0 is false" in out
    # the pod across the cluster: the scheduler's own line, then the node's full answer
    assert main(["explain", "--kubeconfig", kc, "--pod", f"{ns}/pending", "-o", "json"]) == 1
    doc = json.loads(capsys.readouterr().out)
    assert message.split(" preemption:")[0] == doc["summary"], (message, doc["summary"])
    assert doc["only_node"]["node"] == node.node_name
    node.delete_pod(ns, "pending")

    # a claim that fits: explain's choice is the scheduler's
    node.apply([claim(ns, "one", request("gpu", f'{attr("index")} == 1'))])
    assert main(["explain", "--kubeconfig", kc, "--node", node.node_name, f"{ns}/one",
                 "-o", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    predicted = [r["device"] for r in doc["allocation"]["devices"]["results"]]
    apply_and_wait_ready(node, [pod(node, ns, "p", claim_name="one")], [(ns, "p")])
    assert [r["device"] for r in allocated(pod_claim(node, ns, "p"))] == predicted
    node.delete_pod(ns, "p")
