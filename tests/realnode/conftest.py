"""Fixtures of the real-node tier: one real node for the session (kube-apiserver, etcd,
kube-scheduler, kube-controller-manager, kubelet, containerd + runc; plugin.testing.realnode)
and drakit running on it as a real process.

drakit's inventory: the ``example`` discoverer's demo devices (plain GPUs, a consumable
``shared-gpu-0``, a partitionable ``mig-gpu-0``), the ``net`` discoverer on a veth pair made
for the session (pool ``net``), and the ``healthflip`` test plugin (healthplugin.py, pool
``health``) whose health a file decides.

The timings the tests measure are printed at the end of the run ("real node timings").
"""

from __future__ import annotations

import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from node_helpers import DRIVER, device_class

from plugin.testing.realnode import DrakitProcess, RealNode
from plugin.testing.realnode import real_node as real_node

HERE = Path(__file__).resolve().parent
TIMINGS: dict[str, list[float]] = {}


def record(name: str, seconds: float) -> None:
    """Note a measured time (printed in the terminal summary)."""
    TIMINGS.setdefault(name, []).append(seconds)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if not TIMINGS:
        return
    terminalreporter.section("real node timings (seconds)")
    for name, values in TIMINGS.items():
        shown = ", ".join(f"{v:.2f}" for v in values)
        terminalreporter.write_line(f"{name}: {shown}")


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


@pytest.fixture(scope="session")
def node(real_node: RealNode) -> RealNode:
    """The session's real node with drakit's DeviceClass."""
    real_node.apply([device_class()])
    record("node start: containerd up", real_node.timings.get("containerd", 0.0))
    record("node start: kubelet started -> Node Ready", real_node.timings.get("kubelet_ready",
                                                                               0.0))
    return real_node


@pytest.fixture(scope="session")
def veth(node: RealNode) -> Iterator[Veth]:
    with Veth() as v:
        yield v


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
                str(self.config), "--resync-seconds", "10", "-v", "1"]

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


@pytest.fixture(scope="session")
def drivers(node: RealNode, veth: Veth, tmp_path_factory: pytest.TempPathFactory) -> Drivers:
    return Drivers(node, tmp_path_factory.mktemp("drakit"), veth)


@pytest.fixture
def drakit(drivers: Drivers) -> DrakitProcess:
    """The shared drakit, running and registered with the kubelet."""
    return drivers.shared()
