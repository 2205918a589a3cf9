"""The Node deleted and registered again by the kubelet with a new UID: drakit's
ResourceSlices follow the new owner within 5 s and stop churning (with the
UID read once, the garbage collector deleted every re-created slice within milliseconds,
425 pool generations in 7.5 minutes, and pods could not be scheduled)."""

from __future__ import annotations

import time
from typing import Any

from drakit.plugin.testing.real.node import DrakitProcess, RealNode
from drakit.plugin.testing.real.process import wait_until

from .node_helpers import (
    DRIVER,
    apply_and_wait_ready,
    attr,
    claim_template,
    new_namespace,
    record,
    request,
    wait_no_specs,
)
from .node_helpers import pod as make_pod


def slices(node: RealNode) -> list[dict[str, Any]]:
    return [s for s in node.cp.list_objects("resourceslices")
            if s["spec"]["driver"] == DRIVER and s["spec"].get("nodeName") == node.node_name]


def owners(node: RealNode) -> set[str | None]:
    out: set[str | None] = set()
    for s in slices(node):
        refs = [r["uid"] for r in s["metadata"].get("ownerReferences") or []
                if r.get("kind") == "Node"]
        out.add(refs[0] if refs else None)
    return out


def snapshot(node: RealNode) -> set[tuple[str, str, int]]:
    """(slice name, pool, generation) of drakit's slices."""
    return {(s["metadata"]["name"], s["spec"]["pool"]["name"], s["spec"]["pool"]["generation"])
            for s in slices(node)}


def node_uid(node: RealNode) -> str | None:
    obj = node.cp.get_object("nodes", node.node_name)
    return None if obj is None else str(obj["metadata"]["uid"])


def test_node_reregistered_with_new_uid(node: RealNode, drakit: DrakitProcess) -> None:
    old = node_uid(node)
    assert old is not None
    wait_until(lambda: owners(node) == {old} and len(slices(node)) >= 3, 60,
               "drakit's slices owned by the Node")
    node.stop_kubelet()
    assert node.cp.delete_object("nodes", node.node_name)
    wait_until(lambda: node_uid(node) is None, 30, "Node deleted")
    # the garbage collector removes the slices of the gone owner; drakit publishes again
    # without an owner reference (never with the gone UID)
    wait_until(lambda: slices(node) and old not in owners(node), 60,
               "slices without the gone owner")
    t0 = time.monotonic()
    node.start_kubelet()
    new = wait_until(lambda: (u := node_uid(node)) not in (None, old) and u, 60,
                     "the kubelet registers the Node again")
    record("node re-registration: Node back after kubelet start", time.monotonic() - t0)
    t1 = time.monotonic()
    # the watch on the node's own Node object tells drakit the new UID
    wait_until(lambda: owners(node) == {new}, 5, "slices owned by the new Node within 5 s")
    took = time.monotonic() - t1
    record("node re-registration: slices owned by the new Node after it came back", took)
    assert took <= 5.0, f"{took:.1f}s"
    node.wait_node_ready(60)
    # no churn: the same slices at the same generation for 10 s
    stable = snapshot(node)
    time.sleep(10)
    assert snapshot(node) == stable
    assert owners(node) == {new}
    # and a pod gets a device from them
    ns = new_namespace(node, "rereg")
    times = apply_and_wait_ready(
        node, [claim_template(ns, "gpu", request("gpu", f'{attr("index")} == 0')),
               make_pod(node, ns, "p", template="gpu")], [(ns, "p")])
    record("node re-registration: pod Ready after apply", times["p"])
    node.delete_pod(ns, "p")
    wait_no_specs(node)
