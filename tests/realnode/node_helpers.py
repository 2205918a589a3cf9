"""Manifests and checks shared by the real-node tests (imported by conftest and the tests)."""

from __future__ import annotations

import json
import subprocess
import time
import uuid
from pathlib import Path
from typing import Any

import yaml

from drakit.plugin.testing.real.node import BUSYBOX_IMAGE, DrakitProcess, RealNode

HERE = Path(__file__).resolve().parent

DRIVER = "drakit.example.com"
"""The driver drakit runs as on the real node (DeviceClass of the same name)."""
DOMAIN = DRIVER
REPORT_END = "END-OF-DEVICE-REPORT"
"""The container prints its environment and /dev, then this line, then sleeps."""


def attr(name: str) -> str:
    """CEL for ``device.attributes[DOMAIN].<name>`` guarded against devices without it."""
    return f'"{name}" in device.attributes["{DOMAIN}"] && device.attributes["{DOMAIN}"].{name}'


def device_class() -> dict[str, Any]:
    return {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass",
            "metadata": {"name": DRIVER},
            "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{DRIVER}"'}}]}}


def request(name: str, cel: str, capacity: dict[str, str] | None = None) -> dict[str, Any]:
    exactly: dict[str, Any] = {"deviceClassName": DRIVER,
                               "selectors": [{"cel": {"expression": cel}}]}
    if capacity:
        exactly["capacity"] = {"requests": capacity}
    return {"name": name, "exactly": exactly}


def claim_template(namespace: str, name: str, *requests: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"spec": {"devices": {"requests": list(requests)}}}}


def claim(namespace: str, name: str, *requests: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"devices": {"requests": list(requests)}}}


def pod(node: RealNode, namespace: str, name: str, *, template: str | None = None,
        claim_name: str | None = None, sleep: int = 3600) -> dict[str, Any]:
    """A busybox pod on ``node`` (hostNetwork) with one pod claim ``dev`` from ``template``
    or the named claim ``claim_name``; the container prints its env and /dev."""
    source = ({"resourceClaimTemplateName": template} if template
              else {"resourceClaimName": claim_name})
    script = (f"env | sort; echo ---; ls -l /dev; echo {REPORT_END}; "
              f"exec /bin/busybox sleep {sleep}")
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "nodeSelector": {"kubernetes.io/hostname": node.node_name},
            "hostNetwork": True, "automountServiceAccountToken": False,
            "enableServiceLinks": False, "terminationGracePeriodSeconds": 1,
            "containers": [{"name": "c", "image": BUSYBOX_IMAGE, "imagePullPolicy": "Never",
                            "command": ["/bin/busybox", "sh", "-c", script],
                            "resources": {"claims": [{"name": "dev"}]}}],
            "resourceClaims": [{"name": "dev", **source}],
        },
    }


def new_namespace(node: RealNode, prefix: str) -> str:
    name = f"{prefix}-{uuid.uuid4().hex[:6]}"
    node.ensure_namespace(name)
    return name


def pod_claim(node: RealNode, namespace: str, pod_name: str) -> dict[str, Any]:
    """The ResourceClaim of the pod's claim ``dev`` (named, or made from the template)."""
    p = node.pod(namespace, pod_name)
    assert p is not None, f"pod {namespace}/{pod_name} gone"
    source = p["spec"]["resourceClaims"][0]
    name = source.get("resourceClaimName")
    if not name:
        statuses = p.get("status", {}).get("resourceClaimStatuses") or []
        name = next(s["resourceClaimName"] for s in statuses if s["name"] == "dev")
    got = node.cp.get_object("resourceclaims", name, namespace)
    assert got is not None, f"claim {namespace}/{name} not found"
    return got


def allocated(c: dict[str, Any]) -> list[dict[str, Any]]:
    return list(((c.get("status") or {}).get("allocation") or {}).get("devices", {})
                .get("results") or [])


def cdi_specs(node: RealNode) -> dict[str, dict[str, Any]]:
    """drakit's CDI specs in the node's CDI dir: file name → content."""
    out = {}
    for f in sorted(Path(node.cdi_dir).glob("*.json")):
        try:
            out[f.name] = json.loads(f.read_text())
        except (OSError, ValueError):
            continue
    return out


def spec_claim_uids(node: RealNode) -> set[str]:
    """Claim UIDs that have a CDI spec (``<vendor>-<class>_<claimUID>.json``)."""
    return {name.rsplit("_", 1)[-1].removesuffix(".json") for name in cdi_specs(node)}


def wait_no_specs(node: RealNode, timeout: float = 60.0) -> float:
    """Wait until drakit's CDI dir holds no spec; seconds it took."""
    t0 = time.monotonic()
    deadline = t0 + timeout
    while cdi_specs(node):
        if time.monotonic() > deadline:
            raise AssertionError(f"CDI specs left: {sorted(cdi_specs(node))}")
        time.sleep(0.2)
    return time.monotonic() - t0


def apply_and_wait_ready(node: RealNode, docs: list[dict[str, Any]], pods: list[tuple[str, str]],
                         timeout: float = 90.0) -> dict[str, float]:
    """Apply ``docs`` and wait for each (namespace, pod) to be Ready; returns pod → seconds
    from the apply to Ready as observed here (polled every 0.1 s)."""
    t0 = time.monotonic()
    node.apply(docs)
    out = {}
    for ns, name in pods:
        node.wait_pod_ready(ns, name, timeout)
        out[name] = time.monotonic() - t0
    return out


def device_status(c: dict[str, Any]) -> list[dict[str, Any]]:
    return list((c.get("status") or {}).get("devices") or [])


TIMINGS: dict[str, list[float]] = {}


def record(name: str, seconds: float) -> None:
    """Note a measured time (printed in the terminal summary)."""
    TIMINGS.setdefault(name, []).append(seconds)



class Veth:
    """A veth pair made for the session (``name`` has an address, ``peer`` none)."""

    def __init__(self) -> None:
        tag = uuid.uuid4().hex[:5]
        self.name, self.peer = f"drkn{tag}a", f"drkn{tag}b"
        self.address = "10.232.7.1/24"

    def __enter__(self) -> Veth:
        subprocess.run(["ip", "link", "add", self.name, "type", "veth", "peer", "name",
                        self.peer], check=True, timeout=10)
        subprocess.run(["ip", "addr", "add", self.address, "dev", self.name], check=True,
                       timeout=10)
        subprocess.run(["ip", "link", "set", self.name, "up"], check=True, timeout=10)
        return self

    def __exit__(self, *exc: object) -> None:
        subprocess.run(["ip", "link", "del", self.name], check=False, timeout=10,
                       capture_output=True)


class Drivers:
    """drakit on the node: :meth:`shared` is the one most tests use (started on demand, again
    after a test stopped or killed it); :meth:`start` starts another instance."""

    def __init__(self, node: RealNode, workdir: Path, veth: Veth) -> None:
        self.node = node
        self.state_file = workdir / "health-state"
        self.state_file.write_text("Healthy")
        self.config = workdir / "drakit.yaml"
        self.config.write_text(yaml.safe_dump({"discovery": {
            "example": {},
            "net": {"pool": "net", "include": [veth.name]},
            "healthflip": {"stateFile": str(self.state_file)},
        }}))
        self._shared: DrakitProcess | None = None

    def args(self) -> list[str]:
        return ["--discovery", "example,net,healthplugin:HealthFlip", "--config",
                str(self.config), "--resync-seconds", "10", "-v", "5"]

    def start(self, name: str, pod_uid: str | None = None,
              wait_registered: bool = True) -> DrakitProcess:
        return self.node.start_drakit(self.args(), driver=DRIVER, name=name, pod_uid=pod_uid,
                                      env={"PYTHONPATH": str(HERE)},
                                      wait_registered=wait_registered)

    def shared(self) -> DrakitProcess:
        if self._shared is None or not self._shared.alive():
            if self._shared is not None:
                self.node.forget_drakit(self._shared)
            self._shared = self.start("drakit")
        return self._shared

    def stop_shared(self) -> None:
        if self._shared is not None:
            self._shared.stop()
            self.node.forget_drakit(self._shared)
            self._shared = None


