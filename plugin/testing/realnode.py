"""A whole real node for tests: kubelet + containerd + runc next to a real control plane.

Built on :mod:`drakit.plugin.testing.realcluster` (etcd + kube-apiserver): :class:`RealNode` adds
kube-scheduler, kube-controller-manager (garbage collector, ResourceClaim controller, node
lifecycle), containerd with runc and the CNI plugins, and a kubelet, all on loopback and
under one throwaway directory, so a DRA driver (drakit run, or a vendor's) registers with a
real kubelet and pods created through the API really get their devices. Vendors use it
from pytest through the ``real_node`` fixture (:func:`real_node`), or directly::

    with start_real_apiserver(tmp / "cp") as cp, RealNode(cp, tmp / "node") as node:
        drakit = node.start_drakit(["--discovery", "example"], driver="gpu.example.com")
        node.apply(pod_yaml)
        node.wait_pod_ready("default", "pod-0")
        print(node.container_log("default", "pod-0", "c"))

Binaries: kubelet, kube-controller-manager, kube-scheduler, containerd, ctr and
containerd-shim-runc-v2 from ``scripts/build-k8s.sh`` (bin directory of
:func:`~drakit.plugin.testing.realcluster.find_k8s_bin_dir`), the CNI plugins loopback, bridge and
host-local from ``../cni`` next to it, ``runc`` from the system (Debian's package). Images
are made without a registry: a static pause program (``go build``, CGO off) and
Debian's ``/bin/busybox`` (busybox-static), each ``FROM scratch`` with ``podman build`` in a
throwaway podman store, saved with ``podman save --format oci-archive`` (cached by content
under ``$DRAKIT_CACHE/images``) and imported with ``ctr images import``.

What this machine needs (facts: shared/reference/real-control-plane.md, "A whole real node")
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

Errors: :class:`~drakit.plugin.testing.realcluster.RealClusterError` (with the component's log tail)
when a binary is missing, a component exits during start-up or is not ready in time.
:func:`node_unavailable_reason` tells why a node cannot run here (for a skip).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import platform
import re
import shutil
import signal
import socket
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

import yaml

from drakit.plugin.testing.realcluster import (
    K8S_VERSION,
    ChildProcess,
    RealAPIServer,
    RealClusterError,
    find_k8s_bin_dir,
    start_real_apiserver,
    wait_until,
)

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
]

#: The binaries a node needs next to kube-apiserver and etcd (scripts/build-k8s.sh).
NODE_BINARIES = ("kube-scheduler", "kube-controller-manager", "kubelet", "containerd", "ctr",
                 "containerd-shim-runc-v2")
#: The CNI plugins (in ``<bin>/../cni``).
CNI_PLUGINS = ("loopback", "bridge", "host-local")
#: Kernel tunables the kubelet sets at start (pkg/kubelet/cm setupKernelTunables), under
#: /proc/sys: saved before the kubelet starts and written back at stop.
KERNEL_TUNABLES = ("vm/overcommit_memory", "vm/panic_on_oom", "kernel/panic",
                   "kernel/panic_on_oops", "kernel/keys/root_maxkeys",
                   "kernel/keys/root_maxbytes")
#: The images every node has (imported into containerd's ``k8s.io`` namespace).
PAUSE_IMAGE = "localhost/drakit-pause:1"
BUSYBOX_IMAGE = "localhost/drakit-busybox:1"
#: Kubelet feature gates added to the control plane's DRA gates (KEP-4680 device health in
#: the pod status).
KUBELET_FEATURE_GATES = {"ResourceHealthStatus": True}

_PAUSE_GO = """\
// The sandbox's pause process: waits for SIGINT/SIGTERM, reaps children meanwhile.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGINT, syscall.SIGTERM)
	child := make(chan os.Signal, 8)
	signal.Notify(child, syscall.SIGCHLD)
	for {
		select {
		case <-stop:
			os.Exit(0)
		case <-child:
			for {
				pid, err := syscall.Wait4(-1, nil, syscall.WNOHANG, nil)
				if pid <= 0 || err != nil {
					break
				}
			}
		}
	}
}
"""
_CGROUP_ROOT = Path("/sys/fs/cgroup")
_CGROUP_NAME = re.compile(r"k8s\.io|kubepods.*|[0-9a-f]{64}")
"""New cgroups with these names are the node's: containerd's namespace, the kubelet's pod
hierarchy, a container ID (runc's default path when the kubelet gives no parent)."""
_SHIM_SOCKETS = Path("/run/containerd/s")
_CONTAINER_LOG_LINKS = Path("/var/log/containers")


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
    if not _CGROUP_ROOT.is_dir():
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


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _run(cmd: Sequence[str], *, timeout: float = 120.0, cwd: Path | None = None,
         what: str | None = None) -> str:
    r = subprocess.run(list(cmd), capture_output=True, text=True, timeout=timeout, cwd=cwd,
                       check=False)
    if r.returncode != 0:
        raise RealClusterError(f"{what or cmd[0]} failed ({r.returncode}): "
                               f"{(r.stderr or r.stdout).strip()[-1500:]}")
    return r.stdout




# ---------------------------------------------------------------------------- host state


class HostState:
    """What a node changes on the host, saved before it starts and restored after it
    stopped (see the module docstring). ``workdir``: the node's directory (mounts below it
    are the node's)."""

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir.resolve()
        self.tunables: dict[str, str] = {}
        self.cgroups_before: set[Path] = set()
        self.foreign_cgroups: list[Path] = []
        self.iptables_before: set[str] = set()
        self.shim_dir_existed = _SHIM_SOCKETS.exists()
        self.run_containerd_existed = _SHIM_SOCKETS.parent.exists()
        self.log_links_existed = _CONTAINER_LOG_LINKS.exists()

    def save(self) -> HostState:
        for name in KERNEL_TUNABLES:
            with contextlib.suppress(OSError):
                self.tunables[name] = (Path("/proc/sys") / name).read_text().strip()
        self.cgroups_before = set(self._our_cgroups())
        self.iptables_before = _iptables_kube_chains()
        return self

    @staticmethod
    def _our_cgroups() -> Iterator[Path]:
        """Every cgroup directory down to depth 3 below each hierarchy."""
        with contextlib.suppress(OSError):
            for hierarchy in _CGROUP_ROOT.iterdir():
                if not hierarchy.is_dir() or hierarchy.is_symlink():
                    continue
                level = [hierarchy]
                for _depth in range(3):
                    nxt = []
                    for d in level:
                        with contextlib.suppress(OSError):
                            nxt += [c for c in d.iterdir() if c.is_dir()]
                    yield from nxt
                    level = nxt

    def changed_tunables(self) -> dict[str, tuple[str, str]]:
        """name → (saved, now) for every tunable that differs from what was saved."""
        out = {}
        for name, saved in self.tunables.items():
            with contextlib.suppress(OSError):
                now = (Path("/proc/sys") / name).read_text().strip()
                if now != saved:
                    out[name] = (saved, now)
        return out

    def mounts_below(self) -> list[str]:
        """Mount points below the node directory (deepest first)."""
        prefix = str(self.workdir) + "/"
        points = []
        with contextlib.suppress(OSError):
            for line in Path("/proc/self/mountinfo").read_text().splitlines():
                point = line.split()[4].replace("\\040", " ")
                if point.startswith(prefix) or point == str(self.workdir):
                    points.append(point)
        return sorted(set(points), key=lambda p: (-p.count("/"), p))

    def new_cgroups(self) -> list[Path]:
        """Cgroups made since :meth:`save` (outermost first)."""
        new = [p for p in self._our_cgroups() if p not in self.cgroups_before]
        return [p for p in new if p.parent not in new]

    def restore(self) -> list[str]:
        """Undo everything; returns what could not be undone (empty when all is back)."""
        problems: list[str] = []
        for cg in self.new_cgroups():
            if _CGROUP_NAME.fullmatch(cg.name):
                problems += _remove_cgroup(cg)
            else:
                self.foreign_cgroups.append(cg)     # another process's (podman…): kept
        for point in self.mounts_below():
            r = subprocess.run(["umount", "-l", point], capture_output=True, text=True,
                               timeout=30, check=False)
            if r.returncode != 0:
                problems.append(f"umount {point}: {r.stderr.strip()}")
        for name, (saved, _now) in self.changed_tunables().items():
            try:
                (Path("/proc/sys") / name).write_text(saved + "\n")
            except OSError as e:
                problems.append(f"sysctl {name}={saved}: {e}")
        if _CONTAINER_LOG_LINKS.is_dir():
            for link in _CONTAINER_LOG_LINKS.iterdir():
                with contextlib.suppress(OSError):
                    if link.is_symlink() and os.readlink(link).startswith(str(self.workdir)):
                        link.unlink()
            if not self.log_links_existed:
                with contextlib.suppress(OSError):
                    _CONTAINER_LOG_LINKS.rmdir()
        new_chains = _iptables_kube_chains() - self.iptables_before
        if new_chains:      # the kubelet runs with makeIPTablesUtilChains: false
            problems.append(f"new iptables chains: {sorted(new_chains)}")
        if not self.shim_dir_existed:
            shutil.rmtree(_SHIM_SOCKETS, ignore_errors=True)
        if not self.run_containerd_existed:
            with contextlib.suppress(OSError):
                _SHIM_SOCKETS.parent.rmdir()
        return problems


def _remove_cgroup(path: Path) -> list[str]:
    """Kill the processes in ``path`` and below, then remove the cgroups deepest first."""
    problems: list[str] = []
    dirs = sorted((d for d, _s, _f in os.walk(path)), key=lambda d: -d.count("/"))
    for d in dirs:
        with contextlib.suppress(OSError):
            for pid in Path(d, "cgroup.procs").read_text().split():
                with contextlib.suppress(ProcessLookupError, ValueError):
                    os.kill(int(pid), signal.SIGKILL)
    deadline = time.monotonic() + 10
    for d in dirs:
        while True:
            try:
                os.rmdir(d)
                break
            except FileNotFoundError:
                break
            except OSError as e:
                if time.monotonic() > deadline:
                    problems.append(f"rmdir {d}: {e}")
                    break
                time.sleep(0.05)
    return problems


# ---------------------------------------------------------------------------- images


def _go_arch() -> str:
    """This machine's architecture in Go's / OCI's terms (amd64, arm64, …)."""
    machine = platform.machine().lower()
    return {"x86_64": "amd64", "aarch64": "arm64", "armv7l": "arm"}.get(machine, machine)


def _iptables_kube_chains() -> set[str]:
    """``<family>:<table>:<chain>`` of every KUBE-* chain (iptables-save, both families)."""
    out: set[str] = set()
    for tool in ("iptables-save", "ip6tables-save"):
        if shutil.which(tool) is None:
            continue
        r = subprocess.run([tool], capture_output=True, text=True, timeout=30, check=False)
        table = ""
        for line in r.stdout.splitlines():
            if line.startswith("*"):
                table = line[1:]
            elif line.startswith(":KUBE-"):
                out.add(f"{tool}:{table}:{line[1:].split()[0]}")
    return out


def _images_cache() -> Path:
    cache = Path(os.environ.get("DRAKIT_CACHE") or Path.home() / ".cache" / "drakit")
    return cache.expanduser() / f"k8s-v{K8S_VERSION}" / "images"


def build_image_archives(workdir: Path) -> dict[str, Path]:
    """OCI archives of :data:`PAUSE_IMAGE` and :data:`BUSYBOX_IMAGE` (built ``FROM
    scratch`` with podman in a throwaway store under ``workdir``; cached by content).
    Returns ``{image: archive path}``."""
    cache = _images_cache()
    cache.mkdir(parents=True, exist_ok=True)
    busybox = Path("/bin/busybox").read_bytes()
    sources: dict[str, tuple[str, bytes, str]] = {
        PAUSE_IMAGE: ("pause", _PAUSE_GO.encode(), 'ENTRYPOINT ["/pause"]'),
        BUSYBOX_IMAGE: ("busybox", hashlib.sha256(busybox).hexdigest().encode(),
                        'ENTRYPOINT ["/bin/busybox"]'),
    }
    out: dict[str, Path] = {}
    store = workdir / "podman"
    for image, (name, content, entry) in sources.items():
        key = hashlib.sha256(content + entry.encode() + image.encode()).hexdigest()[:16]
        archive = cache / f"{name}-{key}.oci.tar"
        out[image] = archive
        if archive.exists():
            continue
        ctx = workdir / "image-build" / name
        ctx.mkdir(parents=True, exist_ok=True)
        if name == "pause":
            (ctx / "pause.go").write_text(_PAUSE_GO)
            env = {**os.environ, "CGO_ENABLED": "0", "GO111MODULE": "off"}
            r = subprocess.run(["go", "build", "-trimpath", "-ldflags", "-s -w", "-o",
                                str(ctx / "pause"), str(ctx / "pause.go")], cwd=ctx, env=env,
                               capture_output=True, text=True, timeout=300, check=False)
            if r.returncode != 0:
                raise RealClusterError(f"go build pause.go failed: {r.stderr.strip()[-800:]}")
            (ctx / "Containerfile").write_text(f"FROM scratch\nCOPY pause /pause\n{entry}\n")
        else:
            shutil.copy2("/bin/busybox", ctx / "busybox")
            (ctx / "Containerfile").write_text(
                f"FROM scratch\nCOPY busybox /bin/busybox\n{entry}\n")
        podman = ["podman", "--root", str(store / "root"), "--runroot", str(store / "run"),
                  "--storage-driver", "vfs"]
        _run([*podman, "build", "-q", "-t", image, str(ctx)], what=f"podman build {image}")
        tmp = archive.with_suffix(".tmp")
        tmp.unlink(missing_ok=True)
        _run([*podman, "save", "--format", "oci-archive", "-o", str(tmp), image],
             what=f"podman save {image}")
        os.replace(tmp, archive)
    shutil.rmtree(store, ignore_errors=True)
    return out


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
    """

    def __init__(self, cp: RealAPIServer, workdir: str | os.PathLike[str], *,
                 node_name: str = "drakit-node", bin_dir: Path | None = None,
                 kubelet_feature_gates: Mapping[str, bool] | None = None,
                 start_timeout: float = 120.0, remove_workdir: bool = True) -> None:
        found = bin_dir or find_node_bin_dir()
        if found is None:
            raise RealClusterError(node_unavailable_reason() or "node binaries not found")
        self.cp = cp
        self.bin_dir = found
        self.cni_bin_dir = cni_dir(found)
        # short: unix socket paths must stay under 108 bytes
        self.workdir = Path(workdir).resolve()
        self.node_name = node_name
        self.start_timeout = start_timeout
        self.remove_workdir = remove_workdir
        self.feature_gates = {**cp.feature_gates, **KUBELET_FEATURE_GATES,
                              **(kubelet_feature_gates or {})}
        self.root_dir = self.workdir / "kubelet"
        self.registrar_dir = self.root_dir / "plugins_registry"
        self.plugins_dir = self.root_dir / "plugins"
        self.pod_logs_dir = self.workdir / "pod-logs"
        self.cdi_dir = self.workdir / "cdi"
        self.containerd_dir = self.workdir / "containerd"
        self.containerd_socket = self.containerd_dir / "containerd.sock"
        self.node_ip = _node_ip() or ""
        self.host = HostState(self.workdir)
        self.timings: dict[str, float] = {}
        """Seconds measured during start (``containerd``, ``images``, ``kubelet_ready``)."""
        self._containerd: ChildProcess | None = None
        self._kubelet: ChildProcess | None = None
        self._kcm: ChildProcess | None = None
        self._started = False
        self._drakits: list[DrakitProcess] = []

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
            self._start_containerd(deadline)
            self.timings["containerd"] = time.monotonic() - t0
            t1 = time.monotonic()
            for archive in archives.values():
                self.ctr("images", "import", "--snapshotter", "native",
                         str(archive))
            have = self.ctr("images", "ls", "-q").split()
            missing = [i for i in archives if i not in have]
            if missing:
                raise RealClusterError(f"images not imported into containerd: {missing} "
                                       f"(have {have})")
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
        if self._kubelet is not None:
            self._kubelet.stop()
            self._kubelet = None
        if self._containerd is not None and self._containerd.alive():
            self._remove_containers()
        problems: list[str] = []
        if self._containerd is not None:
            self._containerd.stop()
            self._containerd = None
        self._kill_shims()
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

    # ------------------------------------------------------------------ containerd

    def _containerd_config(self) -> str:
        d = self.containerd_dir
        return f"""version = 3
root = "{d / 'root'}"
state = "{d / 'state'}"

[grpc]
  address = "{self.containerd_socket}"

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
  cdi_spec_dirs = ["{self.cdi_dir}"]
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
    bin_dirs = ["{self.cni_bin_dir}"]
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

    def _start_containerd(self, deadline: float) -> None:
        d = self.containerd_dir
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
        env = {**os.environ, "PATH": f"{self.bin_dir}:{os.environ.get('PATH', '')}"}
        self._containerd = ChildProcess("containerd", [str(self.bin_dir / "containerd"), "--config",
                                                str(d / "config.toml")],
                                 self.workdir / "containerd.log", env=env)
        while time.monotonic() < deadline:
            if not self._containerd.alive():
                break
            if self.containerd_socket.exists():
                r = subprocess.run(self._ctr_cmd("version"), capture_output=True, timeout=10,
                                   check=False)
                if r.returncode == 0:
                    return
            time.sleep(0.1)
        raise RealClusterError(f"containerd did not start:\n{self._containerd.tail()}")

    def _ctr_cmd(self, *args: str) -> list[str]:
        return [str(self.bin_dir / "ctr"), "--address", str(self.containerd_socket),
                "--namespace", "k8s.io", *args]

    def ctr(self, *args: str, timeout: float = 120.0) -> str:
        """Run ``ctr --namespace k8s.io ARGS`` against this node's containerd; its stdout."""
        return _run(self._ctr_cmd(*args), timeout=timeout, what=f"ctr {' '.join(args[:2])}")

    def _remove_containers(self) -> None:
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

    def _kill_shims(self) -> None:
        """SIGKILL the runc shims of this containerd (matched by their ``-address``)."""
        address = str(self.containerd_socket)
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

    # ------------------------------------------------------------------ kubelet

    def _kubelet_credentials(self) -> Path:
        pki = Path(self.cp.ca_file).parent
        out = self.workdir / "kubelet-pki"
        out.mkdir(exist_ok=True)
        kubeconfig = out / "kubeconfig.yaml"
        if kubeconfig.exists():
            return kubeconfig
        (out / "client.ext").write_text("extendedKeyUsage=clientAuth\n")
        _run(["openssl", "req", "-newkey", "rsa:2048", "-nodes",
              "-subj", f"/O=system:nodes/CN=system:node:{self.node_name}",
              "-keyout", "client.key", "-out", "client.csr"], cwd=out, what="openssl req")
        _run(["openssl", "x509", "-req", "-in", "client.csr", "-CA", str(self.cp.ca_file),
              "-CAkey", str(pki / "ca.key"), "-CAcreateserial", "-days", "2",
              "-extfile", "client.ext", "-out", "client.crt"], cwd=out, what="openssl x509")
        doc = {"apiVersion": "v1", "kind": "Config",
               "clusters": [{"name": "c", "cluster": {"server": self.cp.url,
                                                      "certificate-authority":
                                                          str(self.cp.ca_file)}}],
               "users": [{"name": "u", "user": {"client-certificate": str(out / "client.crt"),
                                                "client-key": str(out / "client.key")}}],
               "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}],
               "current-context": "c"}
        kubeconfig.write_text(yaml.safe_dump(doc))
        return kubeconfig

    def _kubelet_config(self) -> Path:
        self.kubelet_port = _free_port()
        self.kubelet_healthz_port = _free_port()
        config = {
            "apiVersion": "kubelet.config.k8s.io/v1beta1", "kind": "KubeletConfiguration",
            "address": "127.0.0.1", "port": self.kubelet_port, "readOnlyPort": 0,
            "healthzBindAddress": "127.0.0.1", "healthzPort": self.kubelet_healthz_port,
            "authentication": {"anonymous": {"enabled": False}, "webhook": {"enabled": False},
                               "x509": {"clientCAFile": str(self.cp.ca_file)}},
            "authorization": {"mode": "AlwaysAllow"},
            "containerRuntimeEndpoint": f"unix://{self.containerd_socket}",
            "cgroupDriver": "cgroupfs", "failCgroupV1": False, "failSwapOn": False,
            "cgroupsPerQOS": False, "enforceNodeAllocatable": [],
            "podLogsDir": str(self.pod_logs_dir),
            "featureGates": self.feature_gates,
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
        path = self.workdir / "kubelet-config.yaml"
        path.write_text(yaml.safe_dump(config))
        return path

    def start_kubelet(self) -> None:
        """Start the kubelet (again); returns at once (see :meth:`wait_node_ready`)."""
        if self._kubelet is not None and self._kubelet.alive():
            return
        cmd = [str(self.bin_dir / "kubelet"), "--config", str(self._kubelet_config()),
               "--kubeconfig", str(self._kubelet_credentials()),
               "--root-dir", str(self.root_dir), "--cert-dir", str(self.root_dir / "pki"),
               "--hostname-override", self.node_name, "--node-ip", self.node_ip, "--v", "2"]
        env = {**os.environ, "PATH": f"{self.bin_dir}:{os.environ.get('PATH', '')}"}
        self._kubelet = ChildProcess("kubelet", cmd, self.workdir / "kubelet.log", env=env)

    def stop_kubelet(self) -> None:
        """Stop the kubelet (SIGTERM); containers keep running in containerd."""
        if self._kubelet is not None:
            self._kubelet.stop()
            self._kubelet = None

    def restart_kubelet(self, timeout: float = 60.0) -> float:
        """Stop and start the kubelet; returns the seconds until the Node is Ready again."""
        self.stop_kubelet()
        t0 = time.monotonic()
        self.start_kubelet()
        self.wait_node_ready(timeout, since=time.time())
        return time.monotonic() - t0

    @property
    def kubelet_alive(self) -> bool:
        return self._kubelet is not None and self._kubelet.alive()

    def logs(self, component: str = "kubelet", lines: int = 60) -> str:
        """The tail of ``kubelet``, ``containerd`` or ``kube-controller-manager``'s log."""
        path = self.workdir / f"{component}.log"
        try:
            return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def wait_node_ready(self, timeout: float = 60.0, since: float | None = None) -> None:
        """Wait until the Node is Ready (a heartbeat after ``since``, time.time()) and has
        no ``node.kubernetes.io/not-ready`` taint."""
        def ready() -> bool:
            if self._kubelet is not None and not self._kubelet.alive():
                raise RealClusterError(f"kubelet exited:\n{self.logs()}")
            node = self.cp.get_object("nodes", self.node_name)
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
            wait_until(ready, timeout, f"Node {self.node_name} Ready", interval=0.2)
        except TimeoutError as e:
            raise RealClusterError(f"{e}\nkubelet:\n{self.logs()}") from None

    # ------------------------------------------------------------------ pods

    def apply(self, manifest: str | Sequence[Mapping[str, Any]]) -> None:
        """``kubectl apply`` a YAML string or documents (admin)."""
        text = manifest if isinstance(manifest, str) else yaml.safe_dump_all(list(manifest))
        self.cp.kubectl("apply", "-f", "-", input=text)

    def pod(self, namespace: str, name: str) -> dict[str, Any] | None:
        return self.cp.get_object("pods", name, namespace)

    def wait_pod_ready(self, namespace: str, name: str, timeout: float = 60.0) -> float:
        """Wait until the pod's Ready condition is True; returns the seconds waited (polled
        every 0.1 s). Raises RealClusterError with the pod and the kubelet's log tail after
        ``timeout`` seconds, or when the pod ended."""
        t0 = time.monotonic()

        def ready() -> bool:
            pod = self.pod(namespace, name)
            if pod is None:
                return False
            status = pod.get("status") or {}
            if status.get("phase") in ("Failed", "Succeeded"):
                raise RealClusterError(f"pod {namespace}/{name} ended: {status}")
            return any(c.get("type") == "Ready" and c.get("status") == "True"
                       for c in status.get("conditions") or [])
        try:
            wait_until(ready, timeout, f"pod {namespace}/{name} Ready", interval=0.1)
        except TimeoutError as e:
            raise RealClusterError(f"{e}\npod: {json.dumps(self.pod(namespace, name))[:3000]}"
                                   f"\nkubelet:\n{self.logs(lines=40)}") from None
        return time.monotonic() - t0

    def wait_pod_gone(self, namespace: str, name: str, timeout: float = 60.0) -> None:
        wait_until(lambda: self.pod(namespace, name) is None, timeout,
                   f"pod {namespace}/{name} deleted")

    def delete_pod(self, namespace: str, name: str, *, wait: bool = True,
                   timeout: float = 60.0) -> None:
        self.cp.kubectl("delete", "pod", "-n", namespace, name, "--wait=false",
                        "--ignore-not-found")
        if wait:
            self.wait_pod_gone(namespace, name, timeout)

    def container_log(self, namespace: str, pod: str, container: str) -> str:
        """What the container wrote (stdout and stderr, CRI log format stripped), read from
        the kubelet's podLogsDir (``<ns>_<pod>_<uid>/<container>/<n>.log``)."""
        obj = self.pod(namespace, pod)
        if obj is None:
            raise RealClusterError(f"pod {namespace}/{pod} not found")
        d = self.pod_logs_dir / f"{namespace}_{pod}_{obj['metadata']['uid']}" / container
        lines: list[str] = []
        for f in sorted(d.glob("*.log"), key=lambda p: int(p.stem) if p.stem.isdigit() else 0):
            for line in f.read_text(errors="replace").splitlines():
                parts = line.split(" ", 3)       # <time> <stream> <P|F> <text>
                lines.append(parts[3] if len(parts) == 4 else "")
        return "\n".join(lines)

    def wait_container_log(self, namespace: str, pod: str, container: str, marker: str,
                           timeout: float = 30.0) -> str:
        """Wait until the container's log holds ``marker``; returns the log."""
        def have() -> str:
            with contextlib.suppress(RealClusterError, OSError):
                text = self.container_log(namespace, pod, container)
                if marker in text:
                    return text
            return ""
        return str(wait_until(have, timeout, f"{marker!r} in {namespace}/{pod}/{container}"))

    def ensure_namespace(self, name: str, timeout: float = 30.0) -> None:
        """Create the namespace and wait for its ``default`` ServiceAccount (the pod
        admission needs it; kube-controller-manager creates it)."""
        self.cp.ensure_namespace(name)
        wait_until(lambda: self.cp.get_object("serviceaccounts", "default", name) is not None,
                   timeout, f"ServiceAccount {name}/default")

    # ------------------------------------------------------------------ drivers

    def start_drakit(self, args: Sequence[str], *, driver: str, name: str = "drakit",
                     pod_uid: str | None = None, env: Mapping[str, str] | None = None,
                     wait_registered: bool = True, timeout: float = 60.0) -> DrakitProcess:
        """Start ``drakit run`` as this node's driver ``driver`` (registrar and plugins dirs
        under the kubelet's root dir, CDI specs in :attr:`cdi_dir`, the admin kubeconfig,
        ``--http-endpoint`` on a free port); ``args`` are added (discovery, config…).
        Waits for /readyz (registered with the kubelet, slices published) unless
        ``wait_registered`` is False."""
        proc = DrakitProcess(self, args, driver=driver, name=name, pod_uid=pod_uid, env=env)
        self._drakits.append(proc)
        proc.start()
        if wait_registered:
            proc.wait_ready(timeout)
        return proc

    def forget_drakit(self, proc: DrakitProcess) -> None:
        with contextlib.suppress(ValueError):
            self._drakits.remove(proc)


class DrakitProcess:
    """``drakit run`` as a real process, driving a :class:`RealNode`'s kubelet."""

    def __init__(self, node: RealNode, args: Sequence[str], *, driver: str, name: str,
                 pod_uid: str | None, env: Mapping[str, str] | None) -> None:
        self.node = node
        self.driver = driver
        self.name = name
        self.pod_uid = pod_uid
        self.port = 0
        self.args = list(args)
        self.env = dict(env or {})
        self.log_path = node.workdir / f"{name}.log"
        self._proc: ChildProcess | None = None

    def command(self) -> list[str]:
        self.port = _free_port()
        drakit = Path(sys.executable).with_name("drakit")
        cmd = [str(drakit) if drakit.exists() else sys.executable, *(
            [] if drakit.exists() else ["-m", "drakit.plugin.cli"]), "run",
            "--driver-name", self.driver, "--node-name", self.node.node_name,
            "--kubeconfig", str(self.node.cp.kubeconfig()),
            "--kubelet-registrar-directory-path", str(self.node.registrar_dir),
            "--kubelet-plugins-directory-path", str(self.node.plugins_dir),
            "--cdi-root", str(self.node.cdi_dir),
            "--http-endpoint", f"127.0.0.1:{self.port}", *self.args]
        if self.pod_uid:
            cmd += ["--pod-uid", self.pod_uid]
        return cmd

    def start(self) -> None:
        env = {**os.environ, **self.env}
        self._proc = ChildProcess(self.name, self.command(), self.log_path, env=env)

    @property
    def pid(self) -> int:
        assert self._proc is not None
        return self._proc.pid

    def alive(self) -> bool:
        return self._proc is not None and self._proc.alive()

    def readyz(self) -> tuple[int, str]:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/readyz",
                                        timeout=2) as r:
                return r.status, r.read().decode(errors="replace")
        except urllib.error.HTTPError as e:
            return e.code, e.read().decode(errors="replace")
        except (OSError, urllib.error.URLError) as e:
            return 0, str(e)

    def wait_ready(self, timeout: float = 60.0) -> float:
        """Wait for /readyz 200 (registered with the kubelet, slices published); seconds."""
        t0 = time.monotonic()

        def ready() -> bool:
            if not self.alive():
                raise RealClusterError(f"drakit exited:\n{self.log()}")
            return self.readyz()[0] == 200
        try:
            wait_until(ready, timeout, f"{self.name} ready", interval=0.1)
        except TimeoutError as e:
            raise RealClusterError(f"{e}: {self.readyz()}\n{self.log()}") from None
        return time.monotonic() - t0

    def log(self, lines: int = 60) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def log_count(self, text: str) -> int:
        """How many lines of this process's log (every run of it) contain ``text``."""
        try:
            return sum(text in line for line in
                       self.log_path.read_text(errors="replace").splitlines())
        except OSError:
            return 0

    def metrics(self) -> str:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/metrics", timeout=5) as r:
            return r.read().decode()

    def stop(self) -> None:
        """SIGTERM (drakit removes its sockets), SIGKILL after 15 s."""
        if self._proc is not None:
            self._proc.stop()

    def kill(self) -> None:
        """SIGKILL: no clean-up (sockets stay, as after a crash)."""
        if self._proc is not None:
            self._proc.kill()

    def restart(self) -> None:
        self.stop()
        self.start()


# ---------------------------------------------------------------------------- pytest


def _fixture() -> Any:
    import pytest

    @pytest.fixture(scope="session")
    def real_node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RealNode]:
        """A running :class:`RealNode` on its own real control plane (session scope). Skips
        with the reason when the machine cannot run one (not root, binaries not built);
        under ``CI=true`` that is a failure instead."""
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


real_node = _fixture()
