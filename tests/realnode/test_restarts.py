"""Restarts on a real node: the kubelet restarted while pods run, drakit restarted while pods
run, drakit killed -9 during a burst of pod starts, and a rolling update of drakit (a second
instance with another pod UID next to the first, then the first stopped)."""

from __future__ import annotations

import os
import time
import uuid
from pathlib import Path
from typing import Any

from drakit.plugin.testing.real.node import DrakitProcess, RealNode
from drakit.plugin.testing.real.process import wait_until

from .node_helpers import (
    Drivers,
    allocated,
    apply_and_wait_ready,
    attr,
    cdi_specs,
    claim_template,
    device_status,
    new_namespace,
    pod,
    pod_claim,
    record,
    request,
    spec_claim_uids,
    wait_no_specs,
)

REGISTERED = "registered with the kubelet"
PREPARED = "prepared claim with"
"""drakit's log line for a claim prepared (not for one answered from the checkpoint)."""


def container(node: RealNode, ns: str, name: str) -> dict[str, Any]:
    p = node.pod(ns, name)
    assert p is not None
    [status] = p["status"]["containerStatuses"]
    return dict(status)


def spec_files(node: RealNode) -> dict[str, tuple[int, int]]:
    """CDI spec file → (inode, mtime_ns)."""
    out = {}
    for name in cdi_specs(node):
        st = os.stat(Path(node.cdi_dir) / name)
        out[name] = (st.st_ino, st.st_mtime_ns)
    return out


def cleanup(node: RealNode, ns: str, names: list[str]) -> None:
    for name in names:
        node.delete_pod(ns, name, wait=False)
    for name in names:
        node.wait_pod_gone(ns, name, 90)
    wait_no_specs(node, 60)


def test_kubelet_restart_while_pods_run(node: RealNode, drakit: DrakitProcess) -> None:
    ns = new_namespace(node, "kubelet")
    docs = [claim_template(ns, "gpu0", request("gpu", f'{attr("index")} == 0')),
            claim_template(ns, "gpu1", request("gpu", f'{attr("index")} == 1')),
            pod(node, ns, "before", template="gpu0")]
    apply_and_wait_ready(node, docs, [(ns, "before")])
    running = container(node, ns, "before")
    specs = spec_files(node)
    registrations = drakit.log_count(REGISTERED)

    node.stop_kubelet()
    t0 = time.monotonic()
    node.start_kubelet()
    wait_until(lambda: drakit.log_count(REGISTERED) > registrations, 60,
               "drakit registered again with the restarted kubelet")
    record("kubelet restart: drakit re-registered after kubelet start", time.monotonic() - t0)
    node.wait_node_ready(60)
    record("kubelet restart: Node Ready after kubelet start", time.monotonic() - t0)

    # the running pod keeps its container and its device
    after = container(node, ns, "before")
    assert after["containerID"] == running["containerID"]
    assert after["restartCount"] == 0 and after.get("ready") is True
    assert spec_files(node) == specs
    # and new pods start
    times = apply_and_wait_ready(node, [pod(node, ns, "after", template="gpu1")],
                                 [(ns, "after")])
    record("kubelet restart: new pod Ready after apply", times["after"])
    [result] = allocated(pod_claim(node, ns, "after"))
    assert result["device"] == "gpu-1"
    cleanup(node, ns, ["before", "after"])


def test_drakit_restart_while_pods_run(node: RealNode, drivers: Drivers,
                                       drakit: DrakitProcess) -> None:
    ns = new_namespace(node, "restart")
    docs = [claim_template(ns, "gpu0", request("gpu", f'{attr("index")} == 0')),
            claim_template(ns, "gpu1", request("gpu", f'{attr("index")} == 1')),
            pod(node, ns, "before", template="gpu0")]
    apply_and_wait_ready(node, docs, [(ns, "before")])
    running = container(node, ns, "before")
    c = pod_claim(node, ns, "before")
    specs = spec_files(node)
    prepares = drakit.log_count(PREPARED)

    drivers.stop_shared()
    t0 = time.monotonic()
    again = drivers.shared()
    record("drakit restart: ready (registered, slices published) after start",
           time.monotonic() - t0)
    time.sleep(3)                     # the restarted drakit's start-up writes, if any
    # prepared claims come from the checkpoint: no spec rewritten, no status written again
    assert spec_files(node) == specs
    c2 = pod_claim(node, ns, "before")
    assert c2["metadata"]["resourceVersion"] == c["metadata"]["resourceVersion"]
    assert device_status(c2) == device_status(c)
    after = container(node, ns, "before")
    assert after["containerID"] == running["containerID"] and after["restartCount"] == 0
    assert again.log_count(PREPARED) == prepares      # nothing prepared a second time
    # the new instance serves new pods (one new prepare) and unprepares the old one's claims
    times = apply_and_wait_ready(node, [pod(node, ns, "after", template="gpu1")],
                                 [(ns, "after")])
    record("drakit restart: new pod Ready after apply", times["after"])
    assert again.log_count(PREPARED) == prepares + 1
    cleanup(node, ns, ["before", "after"])


def test_drakit_killed_during_burst_of_pod_starts(node: RealNode, drivers: Drivers,
                                                  drakit: DrakitProcess) -> None:
    """Four pods, each a 1g-10gb partition (the four fill mig-gpu-0's counters exactly);
    drakit is killed -9 while the kubelet prepares them and started again a second later."""
    ns = new_namespace(node, "burst")
    names = [f"p{i}" for i in range(4)]
    docs = [claim_template(ns, "slice", request("mig", f'{attr("profile")} == "1g-10gb"')),
            *[pod(node, ns, n, template="slice") for n in names]]
    t0 = time.monotonic()
    node.apply(docs)
    # kill it once the kubelet has started preparing (or after 5 s at the latest)
    wait_until(lambda: any((node.pod(ns, n) or {}).get("spec", {}).get("nodeName")
                           for n in names), 30, "a burst pod scheduled")
    time.sleep(0.3)
    drakit.kill()
    time.sleep(1.0)
    drivers.shared()                  # started again
    for n in names:
        node.wait_pod_ready(ns, n, 120)
    record("kill -9 during burst: 4 pods Ready after apply", time.monotonic() - t0)
    claims = [pod_claim(node, ns, n) for n in names]
    devices = [r["device"] for c in claims for r in allocated(c)]
    assert len(devices) == 4 and len(set(devices)) == 4, devices
    assert spec_claim_uids(node) == {c["metadata"]["uid"] for c in claims}
    for c in claims:
        assert {s["device"] for s in device_status(c)} == {r["device"] for r in allocated(c)}
    cleanup(node, ns, names)


def test_rolling_update(node: RealNode, drivers: Drivers) -> None:
    """drakit-a (pod UID A) serves; drakit-b (pod UID B) starts next to it; pods start
    while both run; drakit-a stops; pods start and stop with drakit-b alone."""
    drivers.stop_shared()
    ns = new_namespace(node, "rolling")
    a = drivers.start("drakit-a", pod_uid=str(uuid.uuid4()))
    tmpl = claim_template(ns, "slice", request("mig", f'{attr("profile")} == "1g-10gb"'))
    apply_and_wait_ready(node, [tmpl, pod(node, ns, "p1", template="slice")], [(ns, "p1")])
    t0 = time.monotonic()
    b = drivers.start("drakit-b", pod_uid=str(uuid.uuid4()))
    record("rolling update: second instance ready after start", time.monotonic() - t0)
    times = apply_and_wait_ready(node, [pod(node, ns, "p2", template="slice")], [(ns, "p2")])
    record("rolling update: pod Ready after apply, both instances running", times["p2"])
    a.stop()
    node.forget_drakit(a)
    times = apply_and_wait_ready(node, [pod(node, ns, "p3", template="slice")], [(ns, "p3")])
    record("rolling update: pod Ready after apply, new instance alone", times["p3"])
    # p1 was prepared by drakit-a: drakit-b unprepares it
    p1_claim = pod_claim(node, ns, "p1")["metadata"]["uid"]
    node.delete_pod(ns, "p1")
    wait_until(lambda: p1_claim not in spec_claim_uids(node), 60,
               "p1's CDI spec removed by the new instance")
    devices = [r["device"] for n in ("p2", "p3") for r in allocated(pod_claim(node, ns, n))]
    assert len(set(devices)) == 2
    cleanup(node, ns, ["p2", "p3"])
    b.stop()
    node.forget_drakit(b)
