"""The image built here without a registry (deploy/image/build.sh) runs the way the DaemonSet
runs its container: host /sys read-only, the kubelet registrar directory, the plugin data
directory and the CDI directory mounted at their host paths, the DaemonSet's user, a
read-only root filesystem with only the in-memory /tmp, every capability dropped, no
privilege escalation; its environment and mounts are taken from deploy/kustomize/base's
DaemonSet. The API server (embedded) and the fake kubelet run on the host, on the host's
directories; the container reaches the API server through the host network.

Needs root, podman and runc (CI has them: there these tests fail instead of skipping). The
first build (debootstrap, PyPI downloads) takes a few minutes; build.sh caches the root
filesystem and the image by content hash, so reruns take seconds.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import time
import urllib.error
import urllib.request
import uuid
from pathlib import Path
from typing import Any

import pytest
from deploy_helpers import BASE, CONTAINER, DAEMONSET, REPO, load_docs

from drakit.plugin.testing.harness import DriverHarness

pytestmark = [pytest.mark.podman, pytest.mark.root, pytest.mark.slow]

BUILD = REPO / "deploy" / "image" / "build.sh"
# podman on these machines: runc (crun fails on the hybrid cgroup layout) and explicit
# ulimits (podman cannot raise RLIMIT_NOFILE here)(podman 4.3, Debian bookworm)
PODMAN_RUN = ["podman", "--runtime", "runc", "run", "--pull=never",
              "--ulimit", "nofile=20000:20000", "--ulimit", "nproc=4000:4000"]


def _unavailable() -> str | None:
    if os.geteuid() != 0:
        return "needs root (debootstrap, rootful podman)"
    for tool in ("podman", "runc"):
        if shutil.which(tool) is None:
            return f"{tool} not installed (apt-get install podman runc)"
    return None


@pytest.fixture(scope="module")
def image() -> str:
    reason = _unavailable()
    if reason:
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI must run the image tests: {reason}")
        pytest.skip(reason)
    started = time.monotonic()
    r = subprocess.run([str(BUILD)], capture_output=True, text=True, timeout=3600)
    assert r.returncode == 0, f"build.sh failed:\n{r.stderr[-3000:]}"
    ref = r.stdout.strip().splitlines()[-1]
    print(f"\nimage {ref} ready in {time.monotonic() - started:.0f} s")
    return ref


def podman(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["podman", *args], capture_output=True, text=True, timeout=timeout)


def in_image(image: str, script: str, user: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*PODMAN_RUN, "--rm", "--network", "none", *(["--user", user] if user else []),
         "--entrypoint", "/bin/sh", image, "-c", script],
        capture_output=True, text=True, timeout=120)


def daemonset() -> dict[str, Any]:
    return next(d for d in load_docs(BASE / "daemonset.yaml")
                if d["kind"] == "DaemonSet" and d["metadata"]["name"] == DAEMONSET)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_image_config_is_the_containerfiles(image: str) -> None:
    """The image carries the final stage's settings (user, entrypoint, command, PATH)."""
    config = podman("image", "inspect", "--format",
                    "{{.Config.User}}|{{json .Config.Entrypoint}}|{{json .Config.Cmd}}|"
                    "{{json .Config.Env}}", image).stdout.strip()
    user, entrypoint, cmd, env = config.split("|")
    assert user == "65532:65532"
    assert entrypoint == '["drakit"]' and cmd == '["run"]'
    assert "PATH=/opt/drakit/bin:" in env and "PYTHONDONTWRITEBYTECODE=1" in env


def test_image_is_lean_and_starts_as_its_default_user(image: str) -> None:
    r = subprocess.run([*PODMAN_RUN, "--rm", "--network", "none", "--read-only", image,
                        "--version"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == f"drakit {_version()}"
    # nothing that installs or builds packages, no documentation, no apt lists
    r = in_image(image, """
        for f in /opt/drakit/bin/pip /usr/bin/pip3 /usr/bin/gcc /usr/bin/cc /usr/bin/make; do
          [ -e "$f" ] && echo "present: $f"; done
        ls /opt/drakit/lib/python3.11/site-packages | grep -iE '^(pip|setuptools|wheel)([-_.]|$)' \
          | sed 's/^/present: /'
        [ -z "$(ls -A /var/lib/apt/lists 2>/dev/null)" ] || echo "present: apt lists"
        [ -z "$(ls -A /usr/share/doc 2>/dev/null)" ] || echo "present: /usr/share/doc"
        [ -z "$(ls -A /usr/share/man 2>/dev/null)" ] || echo "present: /usr/share/man"
        python3 -c 'import sys; print("python", sys.version_info[:2])'
        true""")
    assert r.returncode == 0, r.stderr
    assert "present:" not in r.stdout, r.stdout
    assert "python (3, 11)" in r.stdout
    size = int(podman("image", "inspect", "--format", "{{.Size}}", image).stdout)
    print(f"\nimage size: {size / 1e6:.0f} MB")


def _version() -> str:
    from importlib.metadata import version

    return version("drakit")


class PodmanHarness(DriverHarness):
    """The harness with ``drakit run`` in the image, started from the DaemonSet's spec."""

    def __init__(self, root: Path, image: str) -> None:
        super().__init__(root, subprocess=True)
        self.image = image
        self.container = f"drakit-test-{uuid.uuid4().hex[:8]}"
        self.http_port = free_port()
        self.started_at = 0.0

    def host_path(self, path: str) -> str:
        """A DaemonSet path → this harness's directory (same path inside and outside)."""
        for prefix, mine in (("/var/lib/kubelet/plugins_registry", self.registrar_dir),
                             ("/var/lib/kubelet/plugins", self.plugins_dir),
                             ("/var/run/cdi", self.cdi_dir)):
            if path == prefix or path.startswith(prefix + "/"):
                return str(mine) + path[len(prefix):]
        return path

    def podman_args(self) -> list[str]:
        ds = daemonset()
        pod = ds["spec"]["template"]["spec"]
        c = next(c for c in pod["containers"] if c["name"] == CONTAINER)
        sc = c["securityContext"]
        args = ["--name", self.container, "--rm", "--network", "host",
                "--user", f"{sc['runAsUser']}:{sc['runAsGroup']}"]
        if sc.get("readOnlyRootFilesystem"):
            args += ["--read-only", "--read-only-tmpfs=false"]
        args += [f"--cap-drop={cap}" for cap in sc["capabilities"]["drop"]]
        if sc.get("allowPrivilegeEscalation") is False:
            args += ["--security-opt", "no-new-privileges"]
        assert sc.get("privileged") is False
        volumes = {v["name"]: v for v in pod["volumes"]}
        config_dir = self.root / "etc-drakit"
        config_dir.mkdir(exist_ok=True)
        for m in c["volumeMounts"]:
            v = volumes[m["name"]]
            ro = ":ro" if m.get("readOnly") else ""
            if "hostPath" in v:
                src = self.host_path(v["hostPath"]["path"])
                Path(src).mkdir(parents=True, exist_ok=True)
                args += ["-v", f"{src}:{self.host_path(m['mountPath'])}{ro}"]
            elif "configMap" in v:
                cm = next(d for d in load_docs(BASE / "configmap.yaml")
                          if d["metadata"]["name"] == v["configMap"]["name"])
                for key, text in cm["data"].items():
                    (config_dir / key).write_text(text)
                args += ["-v", f"{config_dir}:{m['mountPath']}{ro}"]
            elif "emptyDir" in v:
                size = v["emptyDir"].get("sizeLimit", "16Mi").replace("Mi", "m")
                args += ["--tmpfs", f"{m['mountPath']}:size={size}"]
            else:
                raise AssertionError(f"volume {m['name']}: kind not handled")
        field_values = {"spec.nodeName": self.node_name, "metadata.uid": str(uuid.uuid4()),
                        "status.podIP": "127.0.0.1"}
        env: dict[str, str] = {}
        for e in c["env"]:
            if "valueFrom" in e:
                value = field_values[e["valueFrom"]["fieldRef"]["fieldPath"]]
            else:  # $(VAR) references, expanded the way the kubelet does
                value = re.sub(r"\$\((\w+)\)", lambda m: env.get(m[1], m[0]), e["value"])
            env[e["name"]] = self.host_path(value)
        # test-only differences: a free port on the host network, the embedded API server
        host, _, _ = env["HTTP_ENDPOINT"].rpartition(":")
        env["HTTP_ENDPOINT"] = f"{host}:{self.http_port}"
        env["KUBECONFIG"] = str(self.kubeconfig)
        env["RESYNC_SECONDS"] = "5"
        args += ["-v", f"{self.kubeconfig}:{self.kubeconfig}:ro"]
        for k, val in env.items():
            args += ["-e", f"{k}={val}"]
        assert env["DRIVER_NAME"] == self.driver_name
        return [*args, self.image, *c["args"]]

    def _start_subprocess(self) -> None:
        log = open(self.log_path, "ab")  # noqa: SIM115 - handed to the child
        try:
            self.started_at = time.monotonic()
            self.process = subprocess.Popen([*PODMAN_RUN, *self.podman_args()], stdout=log,
                                            stderr=subprocess.STDOUT, start_new_session=True)
        finally:
            log.close()

    def stop(self) -> None:
        try:
            super().stop()
        finally:
            podman("rm", "--force", "--time", "5", self.container)


def test_image_registers_publishes_and_prepares_like_the_daemonset(
    image: str, tmp_path: Path
) -> None:
    h = PodmanHarness(tmp_path, image)
    try:
        for d in (h.registrar_dir, h.plugins_dir, h.cdi_dir):
            d.mkdir(parents=True, exist_ok=True)
        h.apiserver.start()
        h.apiserver.write_kubeconfig(h.kubeconfig)
        h.apiserver.create_node(h.node_name)
        h.kubelet.start()
        h._start_subprocess()
        h.wait_for(lambda: h._alive() and h.kubelet.registration_count(h.driver_name) > 0,
                   90, "the kubelet to register the plugin in the container")
        registered = time.monotonic() - h.started_at
        h.wait_for(lambda: h._alive() and h.pools_complete(), 60, "the ResourceSlices")
        published = time.monotonic() - h.started_at
        print(f"\npodman start to registered: {registered:.2f} s, to published: "
              f"{published:.2f} s")
        # the sockets the kubelet dials are where the DaemonSet's paths say, on the host
        assert list(h.registrar_dir.glob(f"{h.driver_name}-*-reg.sock"))
        assert list(h.data_dir.glob("dra-*.sock"))
        # the readiness probe, on the endpoint the DaemonSet configures. The kubelet counts
        # the registration before its NotifyRegistrationStatus reaches the plugin, and the
        # slices are visible before the publisher records them, so /readyz may answer 503 for
        # a moment after both: wait for it as the kubelet's probe would (CI saw 503 once).
        answers: list[tuple[int, str]] = []

        def ready() -> bool:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{h.http_port}/readyz",
                                            timeout=5) as r:
                    answers.append((r.status, r.read().decode()))
            except urllib.error.HTTPError as e:
                answers.append((e.code, e.read().decode()))
            return answers[-1][0] == 200

        try:
            h.wait_for(ready, 30, "/readyz to answer 200", interval=0.2)
        except TimeoutError as e:
            raise AssertionError(f"{e}; last answers: {answers[-3:]}") from None
        pool, device = h.devices()[0]
        claim = h.allocate("c1", [(pool, device)])
        uid = claim["metadata"]["uid"]
        result = h.prepare(claim)[uid]
        assert result.error == "", result.error
        assert result.cdi_device_ids
        specs = h.cdi_files()
        assert len(specs) == 1 and uid in specs[0].name
        assert specs[0].stat().st_uid == 0  # written by the container's UID 0, on the host
        assert h.unprepare(claim)[uid] == ""
        assert h.cdi_files() == []
    finally:
        h.stop()
        log = h.log_path.read_text(errors="replace") if h.log_path.exists() else ""
        print(log[-2000:])


def test_explain_runs_in_the_image_against_the_api_server(image: str, tmp_path: Path) -> None:
    """``drakit explain`` (its CEL runtime, the explain extra, is in the image) answers in the
    DaemonSet's container: its user, a read-only root, no capabilities, ``NODE_NAME`` from
    the DaemonSet's env as the default node, the API server through the host network. One
    claim that fits (exit 0, the allocation) and one that does not (exit 1, the reason names
    the selector and the taint)."""
    from drakit.plugin.testing.apiserver import EmbeddedAPIServer

    driver = "gpu.example.com"
    memory = f'device.capacity["{driver}"].memory.compareTo(quantity("40Gi")) >= 0'
    container = next(c for c in daemonset()["spec"]["template"]["spec"]["containers"]
                     if c["name"] == CONTAINER)
    sc = container["securityContext"]
    assert any(e["name"] == "NODE_NAME" for e in container["env"])
    with EmbeddedAPIServer() as server:
        server.start()
        server.create_node("node-1")
        server.create_object("deviceclasses", {
            "metadata": {"name": driver},
            "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{driver}"'}}]}})
        server.create_object("resourceslices", {
            "metadata": {"name": "node-1-pool-a"},
            "spec": {"driver": driver, "nodeName": "node-1",
                     "pool": {"name": "pool-a", "generation": 1, "resourceSliceCount": 1},
                     "devices": [
                         {"name": "gpu-0", "capacity": {"memory": {"value": "80Gi"}}},
                         {"name": "gpu-1", "capacity": {"memory": {"value": "80Gi"}},
                          "taints": [{"key": "k", "value": "v", "effect": "NoExecute"}]},
                         {"name": "gpu-2", "capacity": {"memory": {"value": "16Gi"}}}]}})
        for name, count in (("one", 1), ("two", 2)):
            server.create_object("resourceclaims", {
                "metadata": {"name": name, "namespace": "default"},
                "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {
                    "deviceClassName": driver, "count": count,
                    "selectors": [{"cel": {"expression": memory}}]}}]}}})
        kubeconfig = server.write_kubeconfig(tmp_path / "kubeconfig")

        def explain(*args: str) -> subprocess.CompletedProcess[str]:
            return subprocess.run(
                [*PODMAN_RUN, "--rm", "--network", "host", "--read-only",
                 "--user", f"{sc['runAsUser']}:{sc['runAsGroup']}", "--cap-drop=ALL",
                 "--security-opt", "no-new-privileges", "-e", "NODE_NAME=node-1",
                 "-v", f"{kubeconfig}:/run/kubeconfig:ro", image,
                 "explain", "--kubeconfig", "/run/kubeconfig", *args],
                capture_output=True, text=True, timeout=120)

        help_ = explain("--help")
        assert help_.returncode == 0, help_.stderr
        assert "--slices-file" in help_.stdout
        fits = explain("default/one", "-o", "json")
        assert fits.returncode == 0, fits.stderr
        doc = json.loads(fits.stdout)
        assert doc["node"] == "node-1" and doc["allocatable"] is True
        assert doc["allocation"]["devices"]["results"] == [
            {"request": "gpu", "driver": driver, "pool": "pool-a", "device": "gpu-0"}]
        refused = explain("default/two")
        print(f"\n{refused.stdout}")
        assert refused.returncode == 1, refused.stderr
        assert "claim default/two on node node-1: NOT ALLOCATABLE" in refused.stdout
        assert "reason: request gpu needs 2 device(s), 1 match" in refused.stdout
        assert "gpu-1: taint: taint k=v:NoExecute is not tolerated" in refused.stdout
        assert f"gpu-2: selector: request selector #0 is false: {memory}" in refused.stdout
