"""drakit deployed as the DaemonSet on a real node: the image (deploy/image/build.sh, built
without a registry) imported into containerd, the kustomize base rendered with kubectl and
applied, the agent registering with this kubelet from inside its pod and serving a pod's
claim.

The rendering is changed only where this node differs from a default kubelet: the kubelet
root dir (registrar and plugins dirs, CDI dir: same path on the host and in the container,
as the base's comment asks), the image (local, never pulled), and the API server address
(loopback: hostNetwork, ``KUBERNETES_SERVICE_HOST``/``PORT``, the HTTP endpoint and probes
on a free loopback port)."""

from __future__ import annotations

import socket
import subprocess
import time
from pathlib import Path
from typing import Any

import yaml

from drakit.plugin.testing.real.node import RealNode
from drakit.plugin.testing.real.process import wait_until

from .node_helpers import (
    DRIVER,
    REPORT_END,
    Drivers,
    allocated,
    apply_and_wait_ready,
    attr,
    claim_template,
    device_status,
    new_namespace,
    pod,
    pod_claim,
    record,
    request,
    wait_no_specs,
)

REPO = Path(__file__).resolve().parents[2]
BUILD = REPO / "deploy" / "image" / "build.sh"
BASE = REPO / "deploy" / "kustomize" / "base"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def build_image() -> str:
    r = subprocess.run(["bash", str(BUILD)], capture_output=True, text=True, timeout=1800,
                       check=False)
    assert r.returncode == 0, f"deploy/image/build.sh failed:\n{r.stderr[-3000:]}"
    return r.stdout.strip().splitlines()[-1]


def docs_daemonset(docs: list[dict[str, Any]]) -> dict[str, Any]:
    [ds] = [d for d in docs if d["kind"] == "DaemonSet"]
    return ds


def render(node: RealNode, image: str, port: int) -> list[dict[str, Any]]:
    docs = [d for d in yaml.safe_load_all(node.cp.kubectl("kustomize", str(BASE)).stdout) if d]
    spec = docs_daemonset(docs)["spec"]["template"]["spec"]
    spec["hostNetwork"] = True
    spec["dnsPolicy"] = "ClusterFirstWithHostNet"
    [c] = spec["containers"]
    c["image"], c["imagePullPolicy"] = image, "Never"
    paths = {"KUBELET_REGISTRAR_DIRECTORY_PATH": str(node.registrar_dir),
             "KUBELET_PLUGINS_DIRECTORY_PATH": str(node.plugins_dir),
             "CDI_ROOT": str(node.cdi_dir), "HTTP_ENDPOINT": f"127.0.0.1:{port}",
             "KUBERNETES_SERVICE_HOST": "127.0.0.1",
             "KUBERNETES_SERVICE_PORT": str(node.cp.port)}
    env = [e for e in c["env"] if e["name"] not in paths]
    c["env"] = env + [{"name": k, "value": v} for k, v in paths.items()]
    c["ports"] = [{"name": "http", "containerPort": port, "protocol": "TCP"}]
    for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
        c[probe]["httpGet"]["host"] = "127.0.0.1"
    host = {"plugins-registry": node.registrar_dir,
            "plugin-data": node.plugins_dir / DRIVER, "cdi": node.cdi_dir}
    for v in spec["volumes"]:
        if v["name"] in host:
            v["hostPath"]["path"] = str(host[v["name"]])
    for m in c["volumeMounts"]:
        if m["name"] in host:
            m["mountPath"] = str(host[m["name"]])
    return docs


def agent_pods(node: RealNode) -> list[dict[str, Any]]:
    return [p for p in node.cp.list_objects("pods", "drakit")
            if p["metadata"].get("labels", {}).get("app.kubernetes.io/component")
            == "kubelet-plugin"]


def test_drakit_as_daemonset(node: RealNode, drivers: Drivers, tmp_path: Path) -> None:
    assert BUILD.is_file(), BUILD
    t0 = time.monotonic()
    image = build_image()
    archive = tmp_path / "drakit.oci.tar"
    subprocess.run(["podman", "save", "--format", "oci-archive", "-o", str(archive), image],
                   check=True, capture_output=True, timeout=600)
    node.ctr("images", "import", "--snapshotter", "native", str(archive), timeout=600)
    archive.unlink()
    record("daemonset: image built (cached) + imported", time.monotonic() - t0)
    docs = render(node, image, free_port())
    drivers.stop_shared()
    (node.workdir / "drakit-daemonset.yaml").write_text(yaml.safe_dump_all(docs))
    # the DaemonSet's nodeSelector: nodes labelled for the example's fake devices
    selector = docs_daemonset(docs)["spec"]["template"]["spec"].get("nodeSelector") or {}
    labels = [f"{k}={v}" for k, v in selector.items() if k != "kubernetes.io/os"]
    if labels:
        node.cp.kubectl("label", "node", node.node_name, "--overwrite", *labels)
    t1 = time.monotonic()
    node.apply(docs)
    try:
        def agent_ready() -> bool:
            return any(c.get("type") == "Ready" and c.get("status") == "True"
                       for p in agent_pods(node)
                       for c in (p.get("status") or {}).get("conditions") or [])
        try:
            wait_until(agent_ready, 120, "the DaemonSet's pod Ready (registered, published)")
        except TimeoutError:
            raise AssertionError(f"agent pods: {agent_pods(node)}\n{node.logs()}") from None
        record("daemonset: agent pod Ready (registered, slices published) after apply",
               time.monotonic() - t1)
        ns = new_namespace(node, "ds")
        times = apply_and_wait_ready(
            node, [claim_template(ns, "gpu", request("gpu", f'{attr("index")} == 1')),
                   pod(node, ns, "p", template="gpu")], [(ns, "p")])
        record("daemonset: claim pod Ready after apply", times["p"])
        c = pod_claim(node, ns, "p")
        [result] = allocated(c)
        assert result["device"] == "gpu-1"
        assert any(s["device"] == "gpu-1" for s in device_status(c))
        text = node.wait_container_log(ns, "p", "c", REPORT_END)
        assert f"DRAKIT_DEVICE_GPU_1={result['pool']}/gpu-1" in text
        node.delete_pod(ns, "p")
        wait_no_specs(node)
    finally:
        node.cp.kubectl("delete", "-f", str(node.workdir / "drakit-daemonset.yaml"),
                        "--ignore-not-found", "--wait=false", check=False)
        wait_until(lambda: not agent_pods(node), 90, "the agent pod gone")
        if labels:
            node.cp.kubectl("label", "node", node.node_name,
                            *[label.split("=")[0] + "-" for label in labels], check=False)
