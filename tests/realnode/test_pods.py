"""Pods that really get drakit's devices on a real node: the scheduler allocates from
drakit's ResourceSlices, the kubelet calls drakit's NodePrepareResources, containerd applies
the CDI edits (seen in the container's own output), drakit writes the claim status; deleting
the pods unprepares and leaves no CDI spec."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from drakit.plugin.testing.real.node import DrakitProcess, RealNode
from drakit.plugin.testing.real.process import wait_until

from .node_helpers import (
    DRIVER,
    REPORT_END,
    Veth,
    allocated,
    apply_and_wait_ready,
    attr,
    cdi_specs,
    claim,
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


def report(node: RealNode, ns: str, name: str) -> tuple[dict[str, str], str]:
    """The container's environment (as a dict) and its ``ls -l /dev`` output."""
    text = node.wait_container_log(ns, name, "c", REPORT_END)
    env_part, _, dev_part = text.partition("\n---\n")
    env = dict(line.split("=", 1) for line in env_part.splitlines() if "=" in line)
    return env, dev_part


def check_status(c: dict[str, Any]) -> None:
    """drakit's AllocatedDeviceStatus: one entry per allocated device, Ready."""
    results = allocated(c)
    assert results, c.get("status")
    by_device = {(s["driver"], s["pool"], s["device"]): s for s in device_status(c)}
    for r in results:
        entry = by_device.get((r["driver"], r["pool"], r["device"]))
        assert entry is not None, f"no status.devices entry for {r}: {device_status(c)}"
        conditions = {x["type"]: x["status"] for x in entry.get("conditions") or []}
        assert conditions.get("Ready") == "True", entry


def delete_and_check_unprepared(node: RealNode, ns: str, names: list[str]) -> float:
    for name in names:
        node.delete_pod(ns, name, wait=False)
    for name in names:
        node.wait_pod_gone(ns, name, 60)
    return wait_no_specs(node)


def test_template_with_cel_selector(node: RealNode, drakit: DrakitProcess) -> None:
    ns = new_namespace(node, "tmpl")
    docs = [claim_template(ns, "gpu-index-1",
                           request("gpu", f'{attr("index")} == 1 && '
                                          f'{attr("model")} == "LATEST-GPU-MODEL"')),
            pod(node, ns, "p", template="gpu-index-1")]
    times = apply_and_wait_ready(node, docs, [(ns, "p")])
    record("template+CEL: pod Ready after apply", times["p"])
    c = pod_claim(node, ns, "p")
    [result] = allocated(c)
    assert (result["driver"], result["device"]) == (DRIVER, "gpu-1")
    check_status(c)
    env, dev = report(node, ns, "p")
    assert env.get("DRAKIT_DEVICE_GPU_1") == f"{result['pool']}/gpu-1"
    assert env.get("EXAMPLE_GPU_INDEX") == "1"
    assert "example-gpu1" in dev and "example-gpu0" not in dev
    assert spec_claim_uids(node) == {c["metadata"]["uid"]}
    record("template+CEL: CDI spec gone after pod delete",
           delete_and_check_unprepared(node, ns, ["p"]))
    # the claim made from the template goes with its pod (owner reference, garbage collector)
    wait_until(lambda: node.cp.get_object("resourceclaims", c["metadata"]["name"], ns) is None,
               60, "the template's claim deleted with its pod")


def test_named_claim_shared_by_two_pods(node: RealNode, drakit: DrakitProcess) -> None:
    ns = new_namespace(node, "shared")
    docs = [claim(ns, "gpu-0", request("gpu", f'{attr("index")} == 0')),
            pod(node, ns, "p1", claim_name="gpu-0"), pod(node, ns, "p2", claim_name="gpu-0")]
    times = apply_and_wait_ready(node, docs, [(ns, "p1"), (ns, "p2")])
    record("named claim, 2 pods: both Ready after apply", max(times.values()))
    c = pod_claim(node, ns, "p1")
    [result] = allocated(c)
    assert result["device"] == "gpu-0"
    reserved = {r["name"] for r in c["status"].get("reservedFor") or []}
    assert reserved == {"p1", "p2"}
    check_status(c)
    for name in ("p1", "p2"):
        env, dev = report(node, ns, name)
        assert env.get("DRAKIT_DEVICE_GPU_0") == f"{result['pool']}/gpu-0"
        assert "example-gpu0" in dev
    assert spec_claim_uids(node) == {c["metadata"]["uid"]}
    node.delete_pod(ns, "p1")
    # still in use by p2: prepared until the last pod is gone
    assert spec_claim_uids(node) == {c["metadata"]["uid"]}
    delete_and_check_unprepared(node, ns, ["p2"])


def test_partition_of_partitionable_device(node: RealNode, drakit: DrakitProcess) -> None:
    ns = new_namespace(node, "part")
    docs = [claim_template(ns, "half", request("mig", f'{attr("profile")} == "2g-20gb"')),
            pod(node, ns, "p", template="half")]
    times = apply_and_wait_ready(node, docs, [(ns, "p")])
    record("partition: pod Ready after apply", times["p"])
    c = pod_claim(node, ns, "p")
    [result] = allocated(c)
    assert re.fullmatch(r"mig-gpu-0-2g-20gb-\d", result["device"]), result
    check_status(c)
    env, dev = report(node, ns, "p")
    key = "DRAKIT_DEVICE_" + result["device"].upper().replace("-", "_")
    assert env.get(key) == f"{result['pool']}/{result['device']}"
    assert "example-mig0" in dev
    delete_and_check_unprepared(node, ns, ["p"])


def test_consumable_capacity_share(node: RealNode, drakit: DrakitProcess) -> None:
    ns = new_namespace(node, "share")
    req = request("share", f"{attr('shared')} == true", capacity={"memory": "4Gi"})
    docs = [claim_template(ns, "share", req),
            pod(node, ns, "p1", template="share"), pod(node, ns, "p2", template="share")]
    times = apply_and_wait_ready(node, docs, [(ns, "p1"), (ns, "p2")])
    record("consumable capacity, 2 shares: both Ready after apply", max(times.values()))
    shares = set()
    for name in ("p1", "p2"):
        c = pod_claim(node, ns, name)
        [result] = allocated(c)
        assert result["device"] == "shared-gpu-0"
        assert result.get("shareID"), result
        assert result.get("consumedCapacity", {}).get("memory") == "4Gi", result
        shares.add(result["shareID"])
        check_status(c)
        env, dev = report(node, ns, name)
        assert env.get("DRAKIT_DEVICE_SHARED_GPU_0") == f"{result['pool']}/shared-gpu-0"
        assert "example-shared0" in dev
    assert len(shares) == 2
    assert len(cdi_specs(node)) == 2
    delete_and_check_unprepared(node, ns, ["p1", "p2"])


def test_net_device_network_data_in_claim_status(node: RealNode, drakit: DrakitProcess,
                                                 veth: Veth) -> None:
    ns = new_namespace(node, "net")
    docs = [claim_template(ns, "nic", request("nic", f'{attr("interfaceName")} == '
                                                     f'"{veth.name}"')),
            pod(node, ns, "p", template="nic")]
    times = apply_and_wait_ready(node, docs, [(ns, "p")])
    record("net device: pod Ready after apply", times["p"])
    c = pod_claim(node, ns, "p")
    [result] = allocated(c)
    assert result["pool"] == "net"
    check_status(c)
    [entry] = [s for s in device_status(c) if s["device"] == result["device"]]
    mac = Path(f"/sys/class/net/{veth.name}/address").read_text().strip()
    assert entry["networkData"]["interfaceName"] == veth.name
    assert entry["networkData"]["hardwareAddress"].lower() == mac.lower()
    assert veth.address in entry["networkData"]["ips"]
    env, _dev = report(node, ns, "p")
    assert env.get("DRAKIT_NET_IFNAME_" + result["device"].upper().replace("-", "_")) == \
        veth.name
    delete_and_check_unprepared(node, ns, ["p"])
