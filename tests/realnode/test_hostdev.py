"""Pods on a real node (kubelet + containerd) use host devices offered by hostdev rules:
/dev/kvm answers KVM_GET_API_VERSION 12, three pods share /dev/fuse, a loop device
attached during the test is published within a second and a pod reads its backing file's
pattern, a pod without a claim sees none of these nodes, and nothing is left afterwards.

drakit runs here as a second driver, ``hostdev.drakit.dev``, beside the tier's shared one.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from drakit.discovery.testing import LoopDevice
from drakit.plugin.testing.real.node import BUSYBOX_IMAGE, DrakitProcess, RealNode

from .node_helpers import new_namespace, record

DRIVER = "hostdev.drakit.dev"
DATA = Path(__file__).resolve().parents[1] / "integration" / "data"
DONE = "END-OF-HOSTDEV-REPORT"
RULES: list[dict[str, Any]] = [
    {"name": "kvm", "match": 'KERNEL=="kvm", SUBSYSTEM=="misc"', "sharing": "shared",
     "env": "KVM_DEVICE"},
    {"name": "fuse", "match": "/dev/fuse", "sharing": "shared", "env": "FUSE_DEVICE"},
    {"name": "loop", "match": 'SUBSYSTEM=="block", KERNEL=="loop[0-9]*", ATTR{size}!="0"',
     "permissions": "r", "containerPath": "/dev/disk0", "env": "DISK"},
]


def device_class(rule: str) -> dict[str, Any]:
    return {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass",
            "metadata": {"name": f"{rule}.{DRIVER}"},
            "spec": {"selectors": [{"cel": {"expression":
                f'device.driver == "{DRIVER}" && device.attributes["{DRIVER}"].rule == "{rule}"'
            }}]}}


@pytest.fixture(scope="module")
def hostdev(node: RealNode, tmp_path_factory: pytest.TempPathFactory) -> Iterator[DrakitProcess]:
    config = tmp_path_factory.mktemp("hostdev") / "hostdev.yaml"
    config.write_text(yaml.safe_dump({"discovery": {"hostdev": {"rules": RULES}}}))
    node.apply([device_class(r["name"]) for r in RULES])
    proc = node.start_drakit(["--discovery", "hostdev", "--config", str(config), "-v", "5"],
                             driver=DRIVER, name="hostdev")
    yield proc
    proc.stop()
    node.forget_drakit(proc)


def template(ns: str, rule: str) -> dict[str, Any]:
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
            "metadata": {"name": rule, "namespace": ns},
            "spec": {"spec": {"devices": {"requests": [
                {"name": "dev", "exactly": {"deviceClassName": f"{rule}.{DRIVER}"}}]}}}}


def pod(node: RealNode, ns: str, name: str, script: str, rule: str | None = None,
        mounts: dict[str, str] | None = None) -> dict[str, Any]:
    """A busybox pod running ``script``, then printing DONE; with a claim from the
    template of ``rule``; ``mounts``: host file → path in the container."""
    container: dict[str, Any] = {
        "name": "c", "image": BUSYBOX_IMAGE, "imagePullPolicy": "Never",
        "command": ["/bin/busybox", "sh", "-c",
                    f"{script}; echo exit=$?; echo {DONE}; exec /bin/busybox sleep 3600"]}
    spec: dict[str, Any] = {
        "nodeSelector": {"kubernetes.io/hostname": node.node_name}, "hostNetwork": True,
        "automountServiceAccountToken": False, "enableServiceLinks": False,
        "terminationGracePeriodSeconds": 1, "containers": [container]}
    if rule is not None:
        container["resources"] = {"claims": [{"name": "dev"}]}
        spec["resourceClaims"] = [{"name": "dev", "resourceClaimTemplateName": rule}]
    if mounts:
        spec["volumes"] = [{"name": f"m{i}", "hostPath": {"path": host, "type": "File"}}
                           for i, host in enumerate(mounts)]
        container["volumeMounts"] = [{"name": f"m{i}", "mountPath": path, "readOnly": True}
                                     for i, path in enumerate(mounts.values())]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": ns},
            "spec": spec}


def run_pods(node: RealNode, ns: str, docs: list[dict[str, Any]]) -> dict[str, str]:
    """Apply ``docs``, wait for each pod's report; pod name → its log."""
    node.apply(docs)
    names = [d["metadata"]["name"] for d in docs if d["kind"] == "Pod"]
    out = {}
    for name in names:
        node.wait_pod_ready(ns, name, 90)
        out[name] = node.wait_container_log(ns, name, "c", DONE)
    return out


def hostdev_specs(node: RealNode) -> list[str]:
    return sorted(p.name for p in Path(node.cdi_dir).glob(f"{DRIVER}-*.json"))


def finish(node: RealNode, ns: str, names: list[str]) -> None:
    for name in names:
        node.delete_pod(ns, name, wait=False)
    for name in names:
        node.wait_pod_gone(ns, name, 60)
    deadline = time.monotonic() + 60
    while hostdev_specs(node) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert hostdev_specs(node) == []


def test_a_pod_gets_kvm_api_version_12(node: RealNode, hostdev: DrakitProcess,
                                       tmp_path: Path) -> None:
    if not os.path.exists("/dev/kvm"):
        pytest.skip("/dev/kvm does not exist on this machine (no KVM: no hardware "
                    "virtualisation or the kvm module is not loaded)")
    gcc = shutil.which("gcc")
    if gcc is None:
        pytest.skip("gcc is not installed: the KVM ioctl needs a static binary")
    binary = tmp_path / "kvm_api_version"
    subprocess.run([gcc, "-static", "-O2", "-o", str(binary),
                    str(DATA / "kvm_api_version.c")], check=True, timeout=120)
    ns = new_namespace(node, "kvm")
    logs = run_pods(node, ns, [template(ns, "kvm"), pod(
        node, ns, "vm", '/opt/kvm_api_version "$KVM_DEVICE"', "kvm",
        {str(binary): "/opt/kvm_api_version"})])
    assert "KVM_GET_API_VERSION=12" in logs["vm"] and "exit=0" in logs["vm"], logs["vm"]
    finish(node, ns, ["vm"])


def test_three_pods_share_fuse_and_a_pod_without_a_claim_sees_nothing(
        node: RealNode, hostdev: DrakitProcess) -> None:
    ns = new_namespace(node, "fuse")
    docs = [template(ns, "fuse")]
    docs += [pod(node, ns, f"f{i}", 'exec 3<>"$FUSE_DEVICE" && echo opened "$FUSE_DEVICE"',
                 "fuse") for i in range(3)]
    docs.append(pod(node, ns, "bare", "ls /dev/kvm /dev/fuse /dev/net/tun /dev/disk0"))
    logs = run_pods(node, ns, docs)
    for i in range(3):
        assert "opened /dev/fuse" in logs[f"f{i}"], logs[f"f{i}"]
    assert "exit=0" not in logs["bare"]
    for missing in ("/dev/kvm", "/dev/fuse", "/dev/net/tun", "/dev/disk0"):
        assert missing in logs["bare"]
    finish(node, ns, ["f0", "f1", "f2", "bare"])


def test_a_loop_device_attached_now_reaches_a_pod(node: RealNode, hostdev: DrakitProcess,
                                                  tmp_path: Path) -> None:
    pattern = b"drakit-realnode-loop"
    with LoopDevice(tmp_path / "disk.img", pattern) as loop:
        name = "loop-" + loop.name
        started = time.monotonic()
        while time.monotonic() - started < 5:
            slices = node.cp.list_objects("resourceslices")
            if any(d["name"] == name for s in slices if s["spec"]["driver"] == DRIVER
                   for d in s["spec"].get("devices", [])):
                break
            time.sleep(0.01)
        took = time.monotonic() - started
        record("hostdev: loop attached -> published", took)
        assert took < 1.0, f"{name} published after {took:.2f} s"
        ns = new_namespace(node, "loop")
        logs = run_pods(node, ns, [template(ns, "loop"),
                                   pod(node, ns, "reader", 'head -c 20 "$DISK"; echo', "loop")])
        assert pattern.decode() in logs["reader"], logs["reader"]
        finish(node, ns, ["reader"])
