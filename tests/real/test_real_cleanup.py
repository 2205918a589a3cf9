"""``drakit cleanup`` on a real kube-apiserver 1.37 with a node agent's identity: its own
node's slices are deleted; another node's are refused by deploy/'s admission policy, and
the command says so in one line (slice and reason), exits non-zero, prints no traceback."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from real_helpers import DRIVER

from drakit.plugin.testing.harness import DriverHarness
from drakit.plugin.testing.real.controlplane import RealAPIServer

pytestmark = pytest.mark.slow


def _cleanup(kubeconfig: Path, node: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "drakit.plugin.ops.cli", "cleanup", "--driver-name", DRIVER,
         "--node-name", node, "--kubeconfig", str(kubeconfig)],
        capture_output=True, text=True, timeout=60)


def test_cleanup_of_another_node_is_denied_in_one_line(
    real: RealAPIServer, node_name: str, real_harness_factory: Callable[..., DriverHarness],
) -> None:
    victim = real_harness_factory(f"{node_name}-v", as_node_agent=True)
    victim.stop_plugin()
    names = sorted(s["metadata"]["name"] for s in victim.slices())
    assert names
    kubeconfig = real.kubeconfig(real.node_agent_token(node_name))
    r = _cleanup(kubeconfig, victim.node_name)
    assert r.returncode == 1, r
    assert "Traceback" not in r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    [line] = lines
    assert line.startswith("drakit cleanup: ")
    assert "403" in line
    assert names[0] in line  # the slice it could not delete
    assert f"may write only ResourceSlices with spec.nodeName {node_name}" in line
    assert sorted(s["metadata"]["name"] for s in victim.slices()) == names


def test_cleanup_of_its_own_node_deletes_its_slices(
    real: RealAPIServer, node_name: str, real_harness_factory: Callable[..., DriverHarness],
) -> None:
    h = real_harness_factory(node_name)
    h.stop_plugin()
    count = len(h.slices())
    assert count
    r = _cleanup(real.kubeconfig(real.node_agent_token(node_name)), node_name)
    assert r.returncode == 0, r.stderr
    assert f"deleted {count} ResourceSlice(s)" in r.stdout
    assert h.slices() == []
