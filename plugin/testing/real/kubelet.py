"""The kubelet of a :class:`~drakit.plugin.testing.real.node.RealNode`: its client
certificate (``system:node:<name>`` in ``system:nodes``), its KubeletConfiguration, start,
stop and restart, and the wait for the Node to be Ready.

Errors: :class:`~drakit.plugin.testing.real.process.RealClusterError` when openssl
fails, the kubelet exits or the Node is not Ready in time (with the kubelet's log tail).
"""

from __future__ import annotations

import contextlib
import os
import time
from pathlib import Path

import yaml

from drakit.plugin.testing.real.layout import NodeLayout
from drakit.plugin.testing.real.process import (
    ChildProcess,
    RealClusterError,
    free_port,
    run_checked,
    wait_until,
)

__all__ = ["NodeKubelet"]


class NodeKubelet:
    """The kubelet (root dir :attr:`root_dir`, container runtime: this node's containerd,
    authentication by the control plane's CA, the ports picked free at each start)."""

    def __init__(self, layout: NodeLayout) -> None:
        self.layout = layout
        self.process: ChildProcess | None = None
        self.kubelet_port = 0
        self.kubelet_healthz_port = 0

    def _kubelet_credentials(self) -> Path:
        pki = Path(self.layout.cp.ca_file).parent
        out = self.layout.workdir / "kubelet-pki"
        out.mkdir(exist_ok=True)
        kubeconfig = out / "kubeconfig.yaml"
        if kubeconfig.exists():
            return kubeconfig
        (out / "client.ext").write_text("extendedKeyUsage=clientAuth\n")
        run_checked(["openssl", "req", "-newkey", "rsa:2048", "-nodes",
              "-subj", f"/O=system:nodes/CN=system:node:{self.layout.node_name}",
              "-keyout", "client.key", "-out", "client.csr"], cwd=out, what="openssl req")
        ca_file = str(self.layout.cp.ca_file)
        run_checked(["openssl", "x509", "-req", "-in", "client.csr", "-CA", ca_file,
              "-CAkey", str(pki / "ca.key"), "-CAcreateserial", "-days", "2",
              "-extfile", "client.ext", "-out", "client.crt"], cwd=out, what="openssl x509")
        doc = {"apiVersion": "v1", "kind": "Config",
               "clusters": [{"name": "c", "cluster": {"server": self.layout.cp.url,
                                                      "certificate-authority":
                                                          str(self.layout.cp.ca_file)}}],
               "users": [{"name": "u", "user": {"client-certificate": str(out / "client.crt"),
                                                "client-key": str(out / "client.key")}}],
               "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}],
               "current-context": "c"}
        kubeconfig.write_text(yaml.safe_dump(doc))
        return kubeconfig

    def _kubelet_config(self) -> Path:
        self.kubelet_port = free_port()
        self.kubelet_healthz_port = free_port()
        config = {
            "apiVersion": "kubelet.config.k8s.io/v1beta1", "kind": "KubeletConfiguration",
            "address": "127.0.0.1", "port": self.kubelet_port, "readOnlyPort": 0,
            "healthzBindAddress": "127.0.0.1", "healthzPort": self.kubelet_healthz_port,
            "authentication": {"anonymous": {"enabled": False}, "webhook": {"enabled": False},
                               "x509": {"clientCAFile": str(self.layout.cp.ca_file)}},
            "authorization": {"mode": "AlwaysAllow"},
            "containerRuntimeEndpoint": f"unix://{self.layout.containerd_socket}",
            "cgroupDriver": "cgroupfs", "failCgroupV1": False, "failSwapOn": False,
            "cgroupsPerQOS": False, "enforceNodeAllocatable": [],
            "podLogsDir": str(self.layout.pod_logs_dir),
            "featureGates": self.layout.feature_gates,
            "serializeImagePulls": False,
            "evictionHard": {"memory.available": "1Mi", "nodefs.available": "0%",
                             "nodefs.inodesFree": "0%", "imagefs.available": "0%"},
            "imageGCHighThresholdPercent": 100, "imageGCLowThresholdPercent": 99,
            "kernelMemcgNotification": False,
            # no KUBE-FIREWALL / KUBE-KUBELET-CANARY / KUBE-IPTABLES-HINT chains on the host
            "makeIPTablesUtilChains": False,
            "nodeStatusUpdateFrequency": "2s", "nodeStatusReportFrequency": "10s",
            "syncFrequency": "5s", "fileCheckFrequency": "5s",
            "volumeStatsAggPeriod": "0s",
            "shutdownGracePeriod": "0s",
        }
        path = self.layout.workdir / "kubelet-config.yaml"
        path.write_text(yaml.safe_dump(config))
        return path

    def start_kubelet(self) -> None:
        """Start the kubelet (again); returns at once (see :meth:`wait_node_ready`)."""
        if self.process is not None and self.process.alive():
            return
        layout = self.layout
        cmd = [str(layout.bin_dir / "kubelet"), "--config", str(self._kubelet_config()),
               "--kubeconfig", str(self._kubelet_credentials()),
               "--root-dir", str(layout.root_dir), "--cert-dir", str(layout.root_dir / "pki"),
               "--hostname-override", layout.node_name, "--node-ip", layout.node_ip, "--v", "2"]
        env = {**os.environ, "PATH": f"{self.layout.bin_dir}:{os.environ.get('PATH', '')}"}
        self.process = ChildProcess("kubelet", cmd, self.layout.workdir / "kubelet.log", env=env)

    def stop_kubelet(self) -> None:
        """Stop the kubelet (SIGTERM); containers keep running in containerd."""
        if self.process is not None:
            self.process.stop()
            self.process = None

    def restart_kubelet(self, timeout: float = 60.0) -> float:
        """Stop and start the kubelet; returns the seconds until the Node is Ready again."""
        self.stop_kubelet()
        t0 = time.monotonic()
        self.start_kubelet()
        self.wait_node_ready(timeout, since=time.time())
        return time.monotonic() - t0

    @property
    def kubelet_alive(self) -> bool:
        return self.process is not None and self.process.alive()

    def wait_node_ready(self, timeout: float = 60.0, since: float | None = None) -> None:
        """Wait until the Node is Ready (a heartbeat after ``since``, time.time()) and has
        no ``node.kubernetes.io/not-ready`` taint."""
        def ready() -> bool:
            if self.process is not None and not self.process.alive():
                raise RealClusterError(f"kubelet exited:\n{self.layout.logs()}")
            node = self.layout.cp.get_object("nodes", self.layout.node_name)
            if node is None:
                return False
            taints = [t.get("key") for t in node.get("spec", {}).get("taints") or []]
            if any(k and k.startswith("node.kubernetes.io/") for k in taints):
                return False
            for c in node.get("status", {}).get("conditions") or []:
                if c.get("type") == "Ready" and c.get("status") == "True":
                    if since is None:
                        return True
                    beat = c.get("lastHeartbeatTime") or ""
                    with contextlib.suppress(ValueError):
                        stamp = time.mktime(time.strptime(beat, "%Y-%m-%dT%H:%M:%SZ"))
                        return stamp - time.timezone >= since - 1
            return False
        try:
            wait_until(ready, timeout, f"Node {self.layout.node_name} Ready", interval=0.2)
        except TimeoutError as e:
            raise RealClusterError(f"{e}\nkubelet:\n{self.layout.logs()}") from None
