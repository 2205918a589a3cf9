"""The node kit's own state, without a node: RealNode.kubelet_alive follows the kubelet's
process (it must not be the value it had when the node object was made)."""

from __future__ import annotations

import stat
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from drakit.plugin.testing.real.node import RealNode
from drakit.plugin.testing.real.process import ChildProcess


def test_kubelet_alive_follows_the_process(tmp_path: Path) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    kubelet = bin_dir / "kubelet"
    kubelet.write_text("#!/bin/sh\nexec sleep 60\n")
    kubelet.chmod(kubelet.stat().st_mode | stat.S_IXUSR)
    cp: Any = SimpleNamespace(feature_gates={})
    node = RealNode(cp, tmp_path / "node", bin_dir=bin_dir)
    assert node.kubelet_alive is False
    node.workdir.mkdir(parents=True)
    node.kubelet.process = ChildProcess("kubelet", [str(kubelet)], tmp_path / "kubelet.log")
    try:
        assert node.kubelet_alive is True
        node.kubelet.process.kill()
        assert node.kubelet_alive is False
    finally:
        node.kubelet.process.kill()
