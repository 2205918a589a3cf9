"""A whole real node for tests: kubelet + containerd + runc next to a real control plane.

Built on :mod:`drakit.plugin.testing.real.controlplane` (etcd + kube-apiserver):
:class:`RealNode` adds kube-scheduler, kube-controller-manager (garbage collector,
ResourceClaim controller, node lifecycle), containerd with runc and the CNI plugins, and a
kubelet, all on loopback and under one throwaway directory, so a DRA driver (drakit run, or
a vendor's) registers with a real kubelet and pods created through the API really get their
devices. Vendors use it from pytest through the ``real_node`` fixture (:func:`real_node`),
or directly::

    with start_real_apiserver(tmp / "cp") as cp, RealNode(cp, tmp / "node") as node:
        drakit = node.start_drakit(["--discovery", "example"], driver="gpu.example.com")
        node.apply(pod_yaml)
        node.wait_pod_ready("default", "pod-0")
        print(node.container_log("default", "pod-0", "c"))

Binaries: kubelet, kube-controller-manager, kube-scheduler, containerd, ctr and
containerd-shim-runc-v2 from ``scripts/build-k8s.sh`` (bin directory of
:func:`~drakit.plugin.testing.real.binaries.find_k8s_bin_dir`), the CNI plugins loopback,
bridge and host-local from ``../cni`` next to it, ``runc`` from the system (Debian's
package). Images are made without a registry: a static pause program (``go build``, CGO off) and
Debian's ``/bin/busybox`` (busybox-static), each ``FROM scratch`` with ``podman build`` in a
throwaway podman store, saved with ``podman save --format oci-archive`` (cached by content
under ``$DRAKIT_CACHE/images``) and imported with ``ctr images import``.

What this machine needs (kubelet 1.37 KubeletConfiguration, containerd 2)
    root; cgroup v1 works (kubelet ``failCgroupV1: false``, ``cgroupDriver: cgroupfs``,
    ``cgroupsPerQOS: false``, ``enforceNodeAllocatable: []``, ``failSwapOn: false``); root
    without CAP_SYS_RESOURCE needs containerd's ``restrict_oom_score_adj = true``; a CNI
    config for containerd's NetworkReady even though every test pod uses
    ``hostNetwork: true``; the kubelet's ``--node-ip`` must not be loopback (the first global
    IPv4 address is used); the kubelet authenticates with a client certificate of
    ``system:node:<name>`` in ``system:nodes`` (the API server runs ``Node,RBAC``).

What is changed on the host, and restored by :meth:`RealNode.stop`
    the kernel tunables the kubelet sets (:data:`KERNEL_TUNABLES`, written back when they
    differ); mounts under the node directory (containerd's sandbox ``/dev/shm``, kubelet
    volumes; unmounted deepest first); the cgroups containerd's runc creates (``k8s.io``
    under each v1 hierarchy, removed when they did not exist before; the processes in them
    are the node's containers, killed first); containerd's shim socket directory
    ``/run/containerd/s`` (removed when it did not exist) and the kubelet's container-log
    links in ``/var/log/containers`` that point into this node (no iptables chains: the
    kubelet runs with ``makeIPTablesUtilChains: false``). ``kubectl logs/exec`` do not
    work (the API server dials the node by name): read container output with
    :meth:`RealNode.container_log` from the kubelet's ``podLogsDir``.

Errors: :class:`~drakit.plugin.testing.real.process.RealClusterError` (with the component's
log tail) when a binary is missing, a component exits during start-up or is not ready in time.
:func:`node_unavailable_reason` tells why a node cannot run here (for a skip).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import ssl
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any

from drakit.plugin.testing.real.agent import DrakitProcess
from drakit.plugin.testing.real.binaries import find_k8s_bin_dir
from drakit.plugin.testing.real.containerd import NodeContainerd
from drakit.plugin.testing.real.controlplane import RealAPIServer, start_real_apiserver
from drakit.plugin.testing.real.host import CGROUP_ROOT, KERNEL_TUNABLES, HostState
from drakit.plugin.testing.real.images import (
    BUSYBOX_IMAGE,
    PAUSE_IMAGE,
    build_image_archives,
)
from drakit.plugin.testing.real.kubelet import NodeKubelet
from drakit.plugin.testing.real.layout import NodeLayout
from drakit.plugin.testing.real.pods import NodePods
from drakit.plugin.testing.real.process import ChildProcess, RealClusterError
from drakit.plugin.testing.real.process import free_port as _free_port

__all__ = [
    "BUSYBOX_IMAGE",
    "KERNEL_TUNABLES",
    "NODE_BINARIES",
    "PAUSE_IMAGE",
    "DrakitProcess",
    "HostState",
    "RealNode",
    "node_unavailable_reason",
    "real_node",
    "real_node_fixture",
]

#: The binaries a node needs next to kube-apiserver and etcd (scripts/build-k8s.sh).
NODE_BINARIES = ("kube-scheduler", "kube-controller-manager", "kubelet", "containerd", "ctr",
                 "containerd-shim-runc-v2")
#: The CNI plugins (in ``<bin>/../cni``).
CNI_PLUGINS = ("loopback", "bridge", "host-local")
#: Kubelet feature gates added to the control plane's DRA gates (KEP-4680 device health in
#: the pod status).
KUBELET_FEATURE_GATES = {"ResourceHealthStatus": True}


def find_node_bin_dir() -> Path | None:
    """The bin directory holding every :data:`NODE_BINARIES` (and kube-apiserver, etcd), or
    None."""
    return find_k8s_bin_dir(("kube-apiserver", "etcd", *NODE_BINARIES))


def cni_dir(bin_dir: Path) -> Path:
    """Where scripts/build-k8s.sh puts the CNI plugins: ``<bin>/../cni``."""
    return bin_dir.parent / "cni"


def node_unavailable_reason() -> str | None:
    """Why a real node cannot run on this machine (a skip reason), or None when it can."""
    if os.geteuid() != 0:
        return "a real node (kubelet, containerd, runc) needs root"
    bin_dir = find_node_bin_dir()
    if bin_dir is None:
        return (f"node binaries not built ({', '.join(NODE_BINARIES)}; run scripts/build-k8s.sh "
                f"kube-apiserver etcd kube-scheduler kube-controller-manager kubelet "
                f"containerd cni)")
    missing = [p for p in CNI_PLUGINS if not os.access(cni_dir(bin_dir) / p, os.X_OK)]
    if missing:
        return f"CNI plugins missing in {cni_dir(bin_dir)}: {', '.join(missing)}"
    for tool in ("runc", "podman", "go", "openssl", "umount", "ip"):
        if shutil.which(tool) is None:
            return f"{tool} is not installed (Debian: podman runc busybox-static iproute2)"
    if not os.access("/bin/busybox", os.X_OK):
        return "/bin/busybox is missing (Debian package busybox-static)"
    if not CGROUP_ROOT.is_dir():
        return "no cgroup file system at /sys/fs/cgroup"
    if _node_ip() is None:
        return "no global IPv4 address for the kubelet's --node-ip (loopback is refused)"
    return None


def _node_ip() -> str | None:
    """The first global-scope IPv4 address (the kubelet refuses a loopback --node-ip)."""
    r = subprocess.run(["ip", "-4", "-o", "addr", "show", "scope", "global"],
                       capture_output=True, text=True, timeout=10, check=False)
    for line in r.stdout.splitlines():
        parts = line.split()
        if "inet" in parts:
            return parts[parts.index("inet") + 1].split("/")[0]
    return None


# ---------------------------------------------------------------------------- the node


class RealNode:
    """A kubelet node ``node_name`` (with containerd, kube-controller-manager and
    kube-scheduler) on the control plane ``cp``, under ``workdir``.

    Paths for a DRA driver: :attr:`registrar_dir` (``<root-dir>/plugins_registry``),
    :attr:`plugins_dir` (``<root-dir>/plugins``), :attr:`cdi_dir` (containerd's
    ``cdi_spec_dirs``). ``kubelet_feature_gates`` are added to the control plane's gates and
    :data:`KUBELET_FEATURE_GATES`. :meth:`start` returns when the Node is Ready and
    untainted (node Ready takes ~1.5-2 s after containerd starts); :meth:`stop` stops
    everything and restores the host (:class:`HostState`).

    It runs the node's lifecycle (start order, kube-controller-manager, drakit processes,
    stop and host restore) and *has* its parts, one job each, on one
    :class:`~drakit.plugin.testing.real.layout.NodeLayout` (:attr:`layout`, whose paths
    are this node's attributes too): :attr:`containerd`
    (:class:`~drakit.plugin.testing.real.containerd.NodeContainerd`: containerd, ``ctr``,
    ``import_images``), :attr:`kubelet` (:class:`~drakit.plugin.testing.real.kubelet.NodeKubelet`:
    ``start_kubelet``, ``stop_kubelet``, ``restart_kubelet``, ``kubelet_alive``,
    ``wait_node_ready``), :attr:`pods` (:class:`~drakit.plugin.testing.real.pods.NodePods`:
    ``apply``, ``pod``, ``wait_pod_ready``, ``wait_pod_gone``, ``delete_pod``,
    ``container_log``, ``wait_container_log``, ``ensure_namespace``) and :attr:`host`
    (:class:`HostState`); images are made by :mod:`drakit.plugin.testing.real.images`.
    """

    def __init__(self, cp: RealAPIServer, workdir: str | os.PathLike[str], *,
                 node_name: str = "drakit-node", bin_dir: Path | None = None,
                 kubelet_feature_gates: Mapping[str, bool] | None = None,
                 start_timeout: float = 120.0, remove_workdir: bool = True) -> None:
        found = bin_dir or find_node_bin_dir()
        if found is None:
            raise RealClusterError(node_unavailable_reason() or "node binaries not found")
        # short: unix socket paths must stay under 108 bytes
        workdir_path = Path(workdir).resolve()
        gates = {**cp.feature_gates, **KUBELET_FEATURE_GATES, **(kubelet_feature_gates or {})}
        self.layout = layout = NodeLayout(cp, found, cni_dir(found), workdir_path, node_name,
                                          _node_ip() or "", gates)
        self.cp, self.bin_dir, self.cni_bin_dir = layout.cp, layout.bin_dir, layout.cni_bin_dir
        self.workdir, self.node_name, self.node_ip = layout.workdir, node_name, layout.node_ip
        self.feature_gates, self.root_dir = layout.feature_gates, layout.root_dir
        self.registrar_dir, self.plugins_dir = layout.registrar_dir, layout.plugins_dir
        self.pod_logs_dir, self.cdi_dir = layout.pod_logs_dir, layout.cdi_dir
        self.containerd_dir = layout.containerd_dir
        self.containerd_socket = layout.containerd_socket
        self.logs = layout.logs
        self.start_timeout = start_timeout
        self.remove_workdir = remove_workdir
        self.containerd = NodeContainerd(layout)
        self.ctr, self.import_images = self.containerd.ctr, self.containerd.import_images
        self.kubelet = kubelet = NodeKubelet(layout)
        self.start_kubelet, self.stop_kubelet = kubelet.start_kubelet, kubelet.stop_kubelet
        self.restart_kubelet = kubelet.restart_kubelet
        self.wait_node_ready = kubelet.wait_node_ready
        self.pods = pods = NodePods(layout)
        self.apply, self.pod, self.delete_pod = pods.apply, pods.pod, pods.delete_pod
        self.wait_pod_ready, self.wait_pod_gone = pods.wait_pod_ready, pods.wait_pod_gone
        self.container_log, self.wait_container_log = pods.container_log, pods.wait_container_log
        self.ensure_namespace = pods.ensure_namespace
        self.host = HostState(self.workdir)
        self.timings: dict[str, float] = {}
        """Seconds measured during start (``containerd``, ``images``, ``kubelet_ready``)."""
        self._kcm: ChildProcess | None = None
        self._started = False
        self._drakits: list[DrakitProcess] = []

    @property
    def kubelet_alive(self) -> bool:
        """Whether the kubelet runs now (its process, not the Node's condition)."""
        return self.kubelet.kubelet_alive

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> RealNode:
        if self._started:
            return self
        self._started = True
        try:
            self.workdir.mkdir(parents=True, exist_ok=True)
            for d in (self.root_dir, self.pod_logs_dir, self.cdi_dir, self.containerd_dir,
                      self.registrar_dir, self.plugins_dir):
                d.mkdir(parents=True, exist_ok=True)
            self.host.save()
            deadline = time.monotonic() + self.start_timeout
            t0 = time.monotonic()
            archives = build_image_archives(self.workdir)
            self.containerd.start(deadline)
            self.timings["containerd"] = time.monotonic() - t0
            t1 = time.monotonic()
            self.import_images(archives)
            self.timings["images"] = time.monotonic() - t1
            self.cp.start_scheduler()
            self._start_controller_manager(deadline)
            t2 = time.monotonic()
            self.start_kubelet()
            self.wait_node_ready(max(5.0, deadline - time.monotonic()))
            self.timings["kubelet_ready"] = time.monotonic() - t2
        except BaseException:
            self.stop()
            raise
        return self

    def __enter__(self) -> RealNode:
        return self.start()

    def __exit__(self, t: type[BaseException] | None, e: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()

    def stop(self) -> list[str]:
        """Stop drakit processes started here, the kubelet, every container, containerd and
        kube-controller-manager; restore the host. Returns what could not be restored
        (also printed to stderr)."""
        for d in self._drakits:
            d.stop()
        self._drakits.clear()
        if self.kubelet.process is not None:
            self.kubelet.process.stop()
            self.kubelet.process = None
        if self.containerd.process is not None and self.containerd.process.alive():
            self.containerd.remove_containers()
        problems: list[str] = []
        if self.containerd.process is not None:
            self.containerd.process.stop()
            self.containerd.process = None
        self.containerd.kill_shims()
        if self._kcm is not None:
            self._kcm.stop()
            self._kcm = None
        self.cp.stop_scheduler()
        if self._started:
            problems = self.host.restore()
        self._started = False
        if problems:
            print("real node: not restored: " + "; ".join(problems), file=sys.stderr)
        if self.remove_workdir and not self.host.mounts_below():
            shutil.rmtree(self.workdir, ignore_errors=True)
        return problems

    def reboot(self, timeout: float = 120.0) -> float:
        """What a reboot does to this node, the host left running: the kubelet and the drakit
        processes started here stop (SIGTERM), every container ends and containerd stops,
        the CDI dir is emptied (``/var/run/cdi`` is a tmpfs on a real node); then containerd,
        the same drakit processes and the kubelet start again. What a disk keeps stays: the
        kubelet's root dir (its DRA manager checkpoint included), drakit's state, containerd's
        images. Returns when every drakit is ready and the Node is Ready again, with the
        seconds from containerd's start; pods come back as the kubelet restarts them
        (k8s.io/dynamic-resource-allocation v0.38 documents that NodePrepareResources is
        called after a reboot before the kubelet restarts the pods).

        Raises :class:`RealClusterError` when a component does not come back in
        ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        self.stop_kubelet()
        drakits = [d for d in self._drakits if d.alive()]
        for d in drakits:
            d.stop()
        self.containerd.remove_containers()
        if self.containerd.process is not None:
            self.containerd.process.stop()
            self.containerd.process = None
        self.containerd.kill_shims()
        for f in Path(self.cdi_dir).iterdir():
            if f.is_file() or f.is_symlink():
                f.unlink()
        t0 = time.monotonic()
        self.containerd.start(deadline)
        for d in drakits:
            d.start()
        since = time.time()
        self.start_kubelet()
        for d in drakits:
            d.wait_ready(max(5.0, deadline - time.monotonic()))
        self.wait_node_ready(max(5.0, deadline - time.monotonic()), since=since)
        return time.monotonic() - t0

    # ------------------------------------------------------------------ controller manager

    def _start_controller_manager(self, deadline: float) -> None:
        """kube-controller-manager with every controller: the ResourceClaim controller
        (claims from templates), the garbage collector (slices of a gone Node), node
        lifecycle (the not-ready taint), service accounts (pod admission needs
        ``default``), the root CA publisher (``kube-root-ca.crt`` for in-pod clients, hence
        ``--root-ca-file``; RealAPIServer.start_controller_manager takes no such flags)."""
        pki = Path(self.cp.ca_file).parent
        kubeconfig = str(self.cp.kubeconfig())
        port = _free_port()
        gates = ",".join(f"{k}={str(v).lower()}" for k, v in self.cp.feature_gates.items())
        cmd = [str(self.bin_dir / "kube-controller-manager"), "--kubeconfig", kubeconfig,
               "--authentication-kubeconfig", kubeconfig,
               "--authorization-kubeconfig", kubeconfig,
               "--bind-address", "127.0.0.1", "--secure-port", str(port),
               "--cert-dir", str(self.workdir / "kcm-certs"), "--leader-elect=false",
               "--feature-gates", gates, "--controllers", "*",
               "--service-account-private-key-file", str(pki / "sa.key"),
               "--root-ca-file", str(self.cp.ca_file),
               "--use-service-account-credentials=false"]
        self._kcm = ChildProcess("kube-controller-manager", cmd,
                          self.workdir / "kube-controller-manager.log")
        insecure = ssl.create_default_context()
        insecure.check_hostname = False
        insecure.verify_mode = ssl.CERT_NONE
        while time.monotonic() < deadline and self._kcm.alive():
            try:
                with urllib.request.urlopen(f"https://127.0.0.1:{port}/healthz", timeout=2,
                                            context=insecure) as r:
                    if r.status == 200:
                        return
            except (OSError, urllib.error.URLError):
                pass
            time.sleep(0.2)
        raise RealClusterError(f"kube-controller-manager did not become healthy:\n"
                               f"{self._kcm.tail()}")

    # ------------------------------------------------------------------ drivers

    def start_drakit(self, args: Sequence[str], *, driver: str, name: str = "drakit",
                     pod_uid: str | None = None, env: Mapping[str, str] | None = None,
                     wait_registered: bool = True, timeout: float = 60.0) -> DrakitProcess:
        """Start ``drakit run`` as this node's driver ``driver`` (registrar and plugins dirs
        under the kubelet's root dir, CDI specs in :attr:`cdi_dir`, the admin kubeconfig,
        ``--http-endpoint`` on a free port); ``args`` are added (discovery, config…).
        Waits for /readyz (registered with the kubelet, slices published) unless
        ``wait_registered`` is False."""
        proc = DrakitProcess(self.layout, args, driver=driver, name=name, pod_uid=pod_uid,
                             env=env)
        self._drakits.append(proc)
        proc.start()
        if wait_registered:
            proc.wait_ready(timeout)
        return proc

    def forget_drakit(self, proc: DrakitProcess) -> None:
        with contextlib.suppress(ValueError):
            self._drakits.remove(proc)


# ---------------------------------------------------------------------------- pytest


def real_node_fixture(scope: str = "session") -> Any:
    """A pytest fixture ``real_node`` of ``scope`` (``"session"``, or ``"package"`` so that
    a test package's node is stopped before other packages start nodes of their own: one
    node per host at a time, as they share cgroups and kernel tunables). Bind it to the name
    ``real_node`` in a conftest: ``real_node = real_node_fixture("package")``."""
    import pytest

    @pytest.fixture(scope=scope)  # type: ignore[call-overload]
    def real_node() -> Iterator[RealNode]:
        """A running :class:`RealNode` on its own real control plane. Skips with the reason
        when the machine cannot run one (not root, binaries not built); under ``CI=true``
        that is a failure instead."""
        reason = node_unavailable_reason()
        if reason is not None:
            if os.environ.get("CI") == "true":
                pytest.fail(f"real node tier cannot run under CI: {reason}")
            pytest.skip(reason)
        base = Path(tempfile.mkdtemp(prefix="drk-node-", dir="/tmp"))
        cp = start_real_apiserver(base / "cp")
        try:
            node = RealNode(cp, base / "n").start()
            try:
                yield node
            finally:
                problems = node.stop()
                left = node.host.changed_tunables()
                if problems or left:
                    raise RealClusterError(f"the real node did not restore the host: "
                                           f"{problems} {left}")
        finally:
            cp.stop()
            shutil.rmtree(base, ignore_errors=True)

    return real_node


real_node = real_node_fixture()
