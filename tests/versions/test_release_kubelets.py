"""Real kubelets of the oldest, the current and the newest release (1.32, 1.37, 1.38 beta), each
on a real node (drakit.plugin.testing.real.node) next to the control plane of its own release
(kube-apiserver, etcd, kube-scheduler and kube-controller-manager of that release; containerd,
runc and the CNI plugins are the 1.37 tier's, as the kubelet talks CRI v1 to any of them).

On each: drakit registers with that kubelet, which calls the DRA gRPC version it has (the
newest of ``pkg/apis/dra/<version>`` of the release's k8s.io/kubelet module that drakit
serves); a pod gets its device through the CDI edits; dra-health reaches the pod status where
the kubelet has it (``pkg/apis/dra-health``) and is never asked for where it does not; a kubelet
restart and a node reboot (containers gone, ``/var/run/cdi`` cleared) bring the pods back with
their devices. What each kubelet did is written to the matrix facts (``kubelet``), the "real
kubelet" column of docs/compatibility.md.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from version_helpers import (
    DRIVER,
    REPO,
    Release,
    ReleaseServer,
    api_module_dir,
    bin_dir,
    wanted_versions,
)

from drakit.plugin.testing.real.node import (
    BUSYBOX_IMAGE,
    DrakitProcess,
    RealNode,
    node_unavailable_reason,
)
from drakit.plugin.testing.real.process import RealClusterError, wait_until

#: The releases whose kubelet runs here (when ``$DRAKIT_VERSIONS`` names them).
KUBELET_RELEASES = ("1.32.13", "1.37.2", "1.38.0-beta.0")
#: From the release itself: the control plane and the kubelet.
FROM_RELEASE = ("kube-apiserver", "etcd", "kube-scheduler", "kube-controller-manager", "kubelet")
#: The container runtime (any release: CRI v1), from this tier's runtime release.
RUNTIME_RELEASE = "1.37.2"
RUNTIME = ("containerd", "ctr", "containerd-shim-runc-v2")
#: The DRA gRPC versions drakit serves, newest first (k8s.io/kubelet pkg/apis/dra/<version>).
DRA_GRPC = ("v1", "v1beta1")
HEALTH_PLUGIN_DIR = REPO / "tests" / "realnode"
REGISTERED = "registered with the kubelet"
REPORT_END = "END-OF-DEVICE-REPORT"

_runs = [v for v in KUBELET_RELEASES if v in wanted_versions()]
pytestmark = pytest.mark.parametrize(
    "release",
    _runs or [pytest.param("none", marks=pytest.mark.skip(
        reason=f"$DRAKIT_VERSIONS names none of the kubelet releases {list(KUBELET_RELEASES)}"))],
    indirect=True, scope="module", ids=lambda v: f"kubelet-{v}")


def kubelet_module_dir(release: Release) -> Path:
    """k8s.io/kubelet of the release in the Go module cache (beside k8s.io/api)."""
    api = api_module_dir(release.version)
    assert api is not None, f"k8s.io/api of {release.version} not in the Go module cache"
    return api.parent / api.name.replace("api@", "kubelet@")


def expected_dra_grpc(release: Release) -> str:
    """``v1.DRAPlugin`` or ``v1beta1.DRAPlugin``: what the release's kubelet has, newest."""
    have = {p.name for p in (kubelet_module_dir(release) / "pkg" / "apis" / "dra").iterdir()}
    return next(f"{v}.DRAPlugin" for v in DRA_GRPC if v in have)


def kubelet_has_health(release: Release) -> bool:
    """The release's kubelet has the dra-health client (KEP-4680, k8s.io/kubelet
    pkg/apis/dra-health)."""
    return (kubelet_module_dir(release) / "pkg" / "apis" / "dra-health").is_dir()


# ---------------------------------------------------------------------------- manifests


def claim(release: Release, namespace: str, name: str, cel: str) -> dict[str, Any]:
    """A ResourceClaim in the release's newest resource.k8s.io version (v1beta1 puts the
    request's fields at its top level; v1beta2 and v1 under ``exactly``)."""
    version = release.resource_versions[0]
    fields = {"deviceClassName": DRIVER, "selectors": [{"cel": {"expression": cel}}]}
    req = {"name": "dev", **fields} if version == "v1beta1" else {"name": "dev",
                                                                   "exactly": fields}
    return {"apiVersion": f"resource.k8s.io/{version}", "kind": "ResourceClaim",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"devices": {"requests": [req]}}}


def pod(node: RealNode, namespace: str, name: str, claim_name: str) -> dict[str, Any]:
    """A busybox pod printing its environment and /dev, with the named claim ``dev``."""
    script = f"env | sort; echo ---; ls -l /dev; echo {REPORT_END}; exec /bin/busybox sleep 3600"
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"nodeSelector": {"kubernetes.io/hostname": node.node_name},
                     "hostNetwork": True, "automountServiceAccountToken": False,
                     "enableServiceLinks": False, "terminationGracePeriodSeconds": 1,
                     "containers": [{"name": "c", "image": BUSYBOX_IMAGE,
                                     "imagePullPolicy": "Never",
                                     "command": ["/bin/busybox", "sh", "-c", script],
                                     "resources": {"claims": [{"name": "dev"}]}}],
                     "resourceClaims": [{"name": "dev", "resourceClaimName": claim_name}]}}


def attr(name: str) -> str:
    return (f'"{name}" in device.attributes["{DRIVER}"] && '
            f'device.attributes["{DRIVER}"].{name}')


def allocated_devices(node: RealNode, namespace: str, name: str) -> list[str]:
    c = node.cp.get_object("resourceclaims", name, namespace) or {}
    results = ((c.get("status") or {}).get("allocation") or {}).get("devices", {})
    return [r["device"] for r in results.get("results") or []]


def container_env(node: RealNode, namespace: str, name: str, run: int = 1) -> dict[str, str]:
    """The environment the container's ``run``-th start printed (1: the first)."""
    def printed() -> str:
        with contextlib.suppress(RealClusterError, OSError):
            runs = node.container_log(namespace, name, "c").split(REPORT_END)
            if len(runs) > run:
                return runs[run - 1]
        return ""
    text = str(wait_until(printed, 60, f"run {run} of {namespace}/{name} printed its env"))
    env_part = text.rsplit("\n---\n", 1)[0]
    return dict(line.split("=", 1) for line in env_part.splitlines() if "=" in line)


def device_env(device: str) -> str:
    """The variable drakit's CDI spec sets for a device (``DRAKIT_DEVICE_<NAME>``)."""
    return "DRAKIT_DEVICE_" + device.upper().replace("-", "_")


def container_id(node: RealNode, namespace: str, name: str) -> str:
    p = node.pod(namespace, name) or {}
    [status] = (p.get("status") or {}).get("containerStatuses") or [{}]
    return str(status.get("containerID") or "")


def health_of(node: RealNode, namespace: str, name: str) -> set[str]:
    """The healths in the pod's ``status.containerStatuses[].allocatedResourcesStatus``."""
    p = node.pod(namespace, name) or {}
    return {res.get("health", "")
            for status in (p.get("status") or {}).get("containerStatuses") or []
            for entry in status.get("allocatedResourcesStatus") or []
            for res in entry.get("resources") or []}


def wait_ready(node: RealNode, namespace: str, name: str, timeout: float = 90.0) -> None:
    """Wait for the pod to be Ready; on a timeout the error names every claim of the
    namespace with its allocated devices and deletion state."""
    try:
        node.wait_pod_ready(namespace, name, timeout)
    except RealClusterError as e:
        claims = [(c["metadata"]["name"], c["metadata"].get("deletionTimestamp"),
                   [r["device"] for r in ((c.get("status") or {}).get("allocation") or {})
                    .get("devices", {}).get("results") or []])
                  for c in node.cp.list_objects("resourceclaims", namespace)]
        raise RealClusterError(f"claims (name, deleted, devices): {claims}\n{e}") from None


# ---------------------------------------------------------------------------- fixtures


class KubeletNode:
    """The release's node with drakit on it (``example`` devices and the ``healthflip``
    test plugin of tests/realnode, whose health a file decides)."""

    def __init__(self, node: RealNode, drakit: DrakitProcess, state_file: Path,
                 release: Release) -> None:
        self.node, self.drakit, self.state_file, self.release = node, drakit, state_file, release
        self.namespace = f"k{release.minor.replace('.', '')}-{uuid.uuid4().hex[:5]}"
        node.ensure_namespace(self.namespace)


def _bin_dir(release: Release, workdir: Path) -> Path:
    """One bin directory for the node: the release's binaries, the runtime release's
    containerd, and ``../cni`` beside it (RealNode's layout)."""
    mixed = workdir / "bin"
    mixed.mkdir(parents=True)
    for name in FROM_RELEASE:
        (mixed / name).symlink_to(bin_dir(release.version) / name)
    for name in RUNTIME:
        (mixed / name).symlink_to(bin_dir(RUNTIME_RELEASE) / name)
    (workdir / "cni").symlink_to(bin_dir(RUNTIME_RELEASE).parent / "cni")
    return mixed


@pytest.fixture(scope="module")
def kubelet_node(release: Release, control_plane: ReleaseServer,
                 facts: dict[str, Any]) -> Iterator[KubeletNode]:
    missing = [f"{release.version}/{n}" for n in FROM_RELEASE
               if not os.access(bin_dir(release.version) / n, os.X_OK)]
    missing += [f"{RUNTIME_RELEASE}/{n}" for n in RUNTIME
                if not os.access(bin_dir(RUNTIME_RELEASE) / n, os.X_OK)]
    reason = (f"not built: {', '.join(missing)} (scripts/build-k8s.sh with K8S_VERSION)"
              if missing else node_unavailable_reason())
    if reason is not None:
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI=true and the kubelet of {release.version} cannot run: {reason}")
        pytest.skip(reason)
    workdir = Path(tempfile.mkdtemp(prefix=f"drk-kl{release.minor.split('.')[1]}-", dir="/tmp"))
    version = release.resource_versions[0]
    control_plane.apply_manifests([{
        "apiVersion": f"resource.k8s.io/{version}", "kind": "DeviceClass",
        "metadata": {"name": DRIVER},
        "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{DRIVER}"'}}]}}])
    node = RealNode(control_plane, workdir / "n", bin_dir=_bin_dir(release, workdir),
                    node_name=f"kubelet-{release.minor.replace('.', '-')}")
    facts["kubelet"] = got = {"version": release.version}
    try:
        node.start()
        state = workdir / "health-state"
        state.write_text("Healthy")
        config = workdir / "drakit.yaml"
        config.write_text(yaml.safe_dump({"discovery": {
            "example": {}, "healthflip": {"stateFile": str(state)}}}))
        drakit = node.start_drakit(
            ["--discovery", "example,healthplugin:HealthFlip", "--config", str(config),
             "--resync-seconds", "10", "-v", "5"],
            driver=DRIVER, env={"PYTHONPATH": str(HEALTH_PLUGIN_DIR)})
        got["registered"] = drakit.log_count(REGISTERED) > 0
        yield KubeletNode(node, drakit, state, release)
    finally:
        node.stop()
        shutil.rmtree(workdir, ignore_errors=True)


# ---------------------------------------------------------------------------- tests


def test_pod_gets_its_device_over_the_kubelets_dra_version(
        kubelet_node: KubeletNode, facts: dict[str, Any]) -> None:
    k, node, ns = kubelet_node, kubelet_node.node, kubelet_node.namespace
    node.cp.apply_manifests([claim(k.release, ns, "gpu1", f'{attr("index")} == 1'),
                             pod(node, ns, "p", "gpu1")])
    wait_ready(node, ns, "p")
    assert allocated_devices(node, ns, "gpu1") == ["gpu-1"]
    env = container_env(node, ns, "p")
    assert env.get("EXAMPLE_GPU_INDEX") == "1", env
    assert env.get("DRAKIT_DEVICE_GPU_1", "").endswith("/gpu-1"), env

    want = expected_dra_grpc(k.release)
    called = {v for v in ("v1.DRAPlugin", "v1beta1.DRAPlugin")
              if k.drakit.log_count(f"{v} NodePrepareResources") > 0}
    assert called == {want}, f"kubelet {k.release.version} called {called}, has {want}"
    facts["kubelet"].update(dra_grpc=want.removesuffix(".DRAPlugin"), pods_ready=True)
    node.delete_pod(ns, "p")
    node.cp.delete_object("resourceclaims", "gpu1", ns)


def test_dra_health_where_the_kubelet_has_it(kubelet_node: KubeletNode,
                                             facts: dict[str, Any]) -> None:
    k, node, ns = kubelet_node, kubelet_node.node, kubelet_node.namespace
    node.cp.apply_manifests([claim(k.release, ns, "flaky", f"{attr('flaky')} == true"),
                             pod(node, ns, "h", "flaky")])
    wait_ready(node, ns, "h")
    if not kubelet_has_health(k.release):
        # the kubelet never opens the stream drakit offers; nothing shows in the pod
        time.sleep(3)
        assert k.drakit.log_count("NodeWatchResources") == 0
        assert health_of(node, ns, "h") == set()
        facts["kubelet"]["health"] = "not in this kubelet"
        return
    try:
        wait_until(lambda: health_of(node, ns, "h") == {"Healthy"}, 60, "Healthy in pod status")
        k.state_file.write_text("Unhealthy")
        wait_until(lambda: health_of(node, ns, "h") == {"Unhealthy"}, 60,
                   "Unhealthy in pod status")
    finally:
        k.state_file.write_text("Healthy")
    wait_until(lambda: health_of(node, ns, "h") == {"Healthy"}, 60, "Healthy again")
    facts["kubelet"]["health"] = "in the pod status"


def test_kubelet_restart(kubelet_node: KubeletNode, facts: dict[str, Any]) -> None:
    k, node, ns = kubelet_node, kubelet_node.node, kubelet_node.namespace
    node.cp.apply_manifests([claim(k.release, ns, "gpu0", f'{attr("index")} == 0'),
                             pod(node, ns, "r", "gpu0")])
    wait_ready(node, ns, "r")
    running = container_id(node, ns, "r")
    registrations = k.drakit.log_count(REGISTERED)
    node.restart_kubelet(60)
    wait_until(lambda: k.drakit.log_count(REGISTERED) > registrations, 60,
               "drakit registered again with the restarted kubelet")
    assert container_id(node, ns, "r") == running
    node.cp.apply_manifests([claim(k.release, ns, "gpu1b", f'{attr("index")} == 1'),
                             pod(node, ns, "r2", "gpu1b")])
    wait_ready(node, ns, "r2")
    assert container_env(node, ns, "r2").get("EXAMPLE_GPU_INDEX") == "1"
    facts["kubelet"]["restart"] = True


def test_reboot_brings_pods_back_with_their_devices(kubelet_node: KubeletNode,
                                                    facts: dict[str, Any]) -> None:
    k, node, ns = kubelet_node, kubelet_node.node, kubelet_node.namespace
    node.cp.apply_manifests([claim(k.release, ns, "any", "true"), pod(node, ns, "b", "any")])
    wait_ready(node, ns, "b")
    [device] = allocated_devices(node, ns, "any")
    before = container_id(node, ns, "b")
    uid = (node.cp.get_object("resourceclaims", "any", ns) or {})["metadata"]["uid"]
    node.reboot()

    def back() -> bool:
        p = node.pod(ns, "b") or {}
        ready = any(c.get("type") == "Ready" and c.get("status") == "True"
                    for c in (p.get("status") or {}).get("conditions") or [])
        return ready and container_id(node, ns, "b") not in ("", before)
    wait_until(back, 120, "pod b running again in a new container after the reboot")
    assert device_env(device) in container_env(node, ns, "b", run=2)
    # the new container resolved its CDI devices: the claim's spec is back in the emptied dir
    assert any(uid in f.name for f in Path(node.cdi_dir).iterdir()), sorted(
        f.name for f in Path(node.cdi_dir).iterdir())
    facts["kubelet"]["reboot"] = True
