"""The state every part of a :class:`~drakit.plugin.testing.realnode.RealNode` shares: its
control plane, binaries, directories, sockets and child processes (set by
``RealNode.__init__``), and the component logs in its directory.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from drakit.plugin.testing.realcluster import RealAPIServer
    from drakit.plugin.testing.realcluster_process import ChildProcess

__all__ = ["NodeLayout"]


class NodeLayout:
    """Attributes of a node (see :class:`~drakit.plugin.testing.realnode.RealNode`)."""

    cp: RealAPIServer
    bin_dir: Path
    cni_bin_dir: Path
    workdir: Path
    node_name: str
    node_ip: str
    feature_gates: dict[str, bool]
    root_dir: Path
    pod_logs_dir: Path
    cdi_dir: Path
    containerd_dir: Path
    containerd_socket: Path
    _containerd: ChildProcess | None
    _kubelet: ChildProcess | None

    def logs(self, component: str = "kubelet", lines: int = 60) -> str:
        """The tail of ``kubelet``, ``containerd`` or ``kube-controller-manager``'s log."""
        path = self.workdir / f"{component}.log"
        try:
            return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""
