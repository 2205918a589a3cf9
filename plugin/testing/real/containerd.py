"""containerd (with runc, the CNI plugins and CDI) for a
:class:`~drakit.plugin.testing.real.node.RealNode`: its configuration, start-up, ``ctr``, the
import of the node's images, and the clean-up of its containers and runc shims.

Errors: :class:`~drakit.plugin.testing.real.process.RealClusterError` when containerd
does not start (with its log tail), ``ctr`` fails or an image is not imported.
"""

from __future__ import annotations

import contextlib
import json
import os
import platform
import shutil
import signal
import subprocess
import time
from collections.abc import Mapping
from pathlib import Path

from drakit.plugin.testing.real.images import PAUSE_IMAGE
from drakit.plugin.testing.real.layout import NodeLayout
from drakit.plugin.testing.real.process import ChildProcess, RealClusterError, run_checked

__all__ = ["NodeContainerd"]


def _go_arch() -> str:
    """This machine's architecture in Go's / OCI's terms (amd64, arm64, …)."""
    machine = platform.machine().lower()
    return {"x86_64": "amd64", "aarch64": "arm64", "armv7l": "arm"}.get(machine, machine)


class NodeContainerd:
    """containerd under ``containerd_dir`` (socket :attr:`containerd_socket`, CRI namespace
    ``k8s.io``, snapshotter ``native``, CDI specs from :attr:`cdi_dir`)."""

    def __init__(self, layout: NodeLayout) -> None:
        self.layout = layout
        self.process: ChildProcess | None = None

    def _containerd_config(self) -> str:
        d = self.layout.containerd_dir
        return f"""version = 3
root = "{d / 'root'}"
state = "{d / 'state'}"

[grpc]
  address = "{self.layout.containerd_socket}"

[ttrpc]
  address = "{d / 'containerd.sock.ttrpc'}"

[debug]
  address = ""

[plugins."io.containerd.internal.v1.opt"]
  path = "{d / 'opt'}"

[plugins."io.containerd.transfer.v1.local"]
  [[plugins."io.containerd.transfer.v1.local".unpack_config]]
    platform = "linux/{_go_arch()}"
    snapshotter = "native"

[plugins."io.containerd.nri.v1.nri"]
  disable = true

[plugins."io.containerd.cri.v1.runtime"]
  cdi_spec_dirs = ["{self.layout.cdi_dir}"]
  enable_selinux = false
  restrict_oom_score_adj = true
  [plugins."io.containerd.cri.v1.runtime".containerd]
    default_runtime_name = "runc"
    [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc.options]
        BinaryName = "{shutil.which('runc') or 'runc'}"
        Root = "{d / 'runc'}"
        SystemdCgroup = false
  [plugins."io.containerd.cri.v1.runtime".cni]
    bin_dirs = ["{self.layout.cni_bin_dir}"]
    conf_dir = "{d / 'net.d'}"

[plugins."io.containerd.cri.v1.images"]
  snapshotter = "native"
  [plugins."io.containerd.cri.v1.images".pinned_images]
    sandbox = "{PAUSE_IMAGE}"

[plugins."io.containerd.grpc.v1.cri"]
  disable_tcp_service = true
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
"""

    def start(self, deadline: float) -> None:
        d = self.layout.containerd_dir
        (d / "net.d").mkdir(parents=True, exist_ok=True)
        # containerd reports NetworkReady only with a CNI config; test pods use hostNetwork
        (d / "net.d" / "10-drakit.conflist").write_text(json.dumps({
            "cniVersion": "1.0.0", "name": "drakit-test",
            "plugins": [{"type": "bridge", "bridge": "drkcni0", "isGateway": False,
                         "ipam": {"type": "host-local", "ranges": [[{"subnet":
                                                                     "10.231.0.0/24"}]],
                                  "dataDir": str(d / "ipam")}},
                        {"type": "loopback"}]}))
        (d / "config.toml").write_text(self._containerd_config())
        env = {**os.environ, "PATH": f"{self.layout.bin_dir}:{os.environ.get('PATH', '')}"}
        binary = str(self.layout.bin_dir / "containerd")
        self.process = ChildProcess("containerd", [binary, "--config", str(d / "config.toml")],
                                 self.layout.workdir / "containerd.log", env=env)
        while time.monotonic() < deadline:
            if not self.process.alive():
                break
            if self.layout.containerd_socket.exists():
                r = subprocess.run(self._ctr_cmd("version"), capture_output=True, timeout=10,
                                   check=False)
                if r.returncode == 0:
                    return
            time.sleep(0.1)
        raise RealClusterError(f"containerd did not start:\n{self.process.tail()}")

    def _ctr_cmd(self, *args: str) -> list[str]:
        return [str(self.layout.bin_dir / "ctr"), "--address", str(self.layout.containerd_socket),
                "--namespace", "k8s.io", *args]

    def ctr(self, *args: str, timeout: float = 120.0) -> str:
        """Run ``ctr --namespace k8s.io ARGS`` against this node's containerd; its stdout."""
        return run_checked(self._ctr_cmd(*args), timeout=timeout, what=f"ctr {' '.join(args[:2])}")

    def import_images(self, archives: Mapping[str, Path]) -> None:
        """``ctr images import`` every OCI archive of ``archives`` (image name → archive,
        as :func:`~drakit.plugin.testing.real.images.build_image_archives` returns);
        RealClusterError naming the images containerd does not list afterwards."""
        for archive in archives.values():
            self.ctr("images", "import", "--snapshotter", "native",
                     str(archive))
        have = self.ctr("images", "ls", "-q").split()
        missing = [i for i in archives if i not in have]
        if missing:
            raise RealClusterError(f"images not imported into containerd: {missing} "
                                   f"(have {have})")

    def remove_containers(self) -> None:
        with contextlib.suppress(RealClusterError, subprocess.TimeoutExpired):
            for task in self.ctr("tasks", "ls", "-q", timeout=30).split():
                subprocess.run(self._ctr_cmd("tasks", "kill", "-s", "SIGKILL", task),
                               capture_output=True, timeout=30, check=False)
            for task in self.ctr("tasks", "ls", "-q", timeout=30).split():
                subprocess.run(self._ctr_cmd("tasks", "delete", "-f", task),
                               capture_output=True, timeout=30, check=False)
            for c in self.ctr("containers", "ls", "-q", timeout=30).split():
                subprocess.run(self._ctr_cmd("containers", "delete", c), capture_output=True,
                               timeout=30, check=False)

    def kill_shims(self) -> None:
        """SIGKILL the runc shims of this containerd (matched by their ``-address``)."""
        address = str(self.layout.containerd_socket)
        for proc in Path("/proc").iterdir():
            if not proc.name.isdigit():
                continue
            try:
                argv = (proc / "cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if (argv and argv[0].endswith(b"containerd-shim-runc-v2")
                    and address.encode() in argv):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(int(proc.name), signal.SIGKILL)
