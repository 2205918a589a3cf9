"""What every part of a :class:`~drakit.plugin.testing.real.node.RealNode` shares: its control
plane, binaries, directories and sockets, and the component logs in its directory.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from drakit.plugin.testing.real.controlplane import RealAPIServer

__all__ = ["NodeLayout"]


class NodeLayout:
    """Where a node's parts live: its control plane ``cp``, binaries, directories under
    ``workdir`` and sockets (see :class:`~drakit.plugin.testing.real.node.RealNode`)."""

    def __init__(self, cp: RealAPIServer, bin_dir: Path, cni_bin_dir: Path, workdir: Path,
                 node_name: str, node_ip: str, feature_gates: dict[str, bool]) -> None:
        self.cp = cp
        self.bin_dir = bin_dir
        self.cni_bin_dir = cni_bin_dir
        self.workdir = workdir
        self.node_name = node_name
        self.node_ip = node_ip
        self.feature_gates = feature_gates
        self.root_dir = workdir / "kubelet"
        self.registrar_dir = self.root_dir / "plugins_registry"
        self.plugins_dir = self.root_dir / "plugins"
        self.pod_logs_dir = workdir / "pod-logs"
        self.cdi_dir = workdir / "cdi"
        self.containerd_dir = workdir / "containerd"
        self.containerd_socket = self.containerd_dir / "containerd.sock"

    def logs(self, component: str = "kubelet", lines: int = 60) -> str:
        """The tail of ``kubelet``, ``containerd`` or ``kube-controller-manager``'s log."""
        path = self.workdir / f"{component}.log"
        try:
            return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""
