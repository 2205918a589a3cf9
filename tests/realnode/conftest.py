"""Fixtures of the real-node tier: one real node for the tier (kube-apiserver, etcd,
kube-scheduler, kube-controller-manager, kubelet, containerd + runc;
drakit.plugin.testing.real.node) and drakit running on it as a real process.

drakit's inventory: the ``example`` discoverer's demo devices (plain GPUs, a consumable
``shared-gpu-0``, a partitionable ``mig-gpu-0``), the ``net`` discoverer on a veth pair made
for the session (pool ``net``), and the ``healthflip`` test plugin (healthplugin.py, pool
``health``) whose health a file decides.

The timings the tests measure are printed at the end of the run ("real node timings").
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from drakit.plugin.testing.real.node import DrakitProcess, RealNode, real_node_fixture

from .node_helpers import TIMINGS, Drivers, Veth, device_class, record

# Package scope: the node stops when this tier ends, before tests/versions starts the nodes
# of other kubelet releases (one node per host at a time).
real_node = real_node_fixture("package")


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if not TIMINGS:
        return
    terminalreporter.section("real node timings (seconds)")
    for name, values in TIMINGS.items():
        shown = ", ".join(f"{v:.2f}" for v in values)
        terminalreporter.write_line(f"{name}: {shown}")


@pytest.fixture(scope="package")
def node(real_node: RealNode) -> RealNode:
    """The session's real node with drakit's DeviceClass."""
    real_node.apply([device_class()])
    record("node start: containerd up", real_node.timings.get("containerd", 0.0))
    record("node start: kubelet started -> Node Ready", real_node.timings.get("kubelet_ready",
                                                                               0.0))
    return real_node


@pytest.fixture(scope="package")
def veth(node: RealNode) -> Iterator[Veth]:
    with Veth() as v:
        yield v


@pytest.fixture(scope="package")
def drivers(node: RealNode, veth: Veth, tmp_path_factory: pytest.TempPathFactory) -> Drivers:
    return Drivers(node, tmp_path_factory.mktemp("drakit"), veth)


@pytest.fixture
def drakit(drivers: Drivers) -> DrakitProcess:
    """The shared drakit, running and registered with the kubelet."""
    return drivers.shared()
