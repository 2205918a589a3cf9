"""What a :class:`~drakit.plugin.testing.real.node.RealNode` changes on the host, saved before
it starts and restored after it stopped (:class:`HostState`): the kernel tunables the kubelet
sets, mounts below the node directory, the cgroups containerd's runc creates, containerd's
shim socket directory and the kubelet's container-log links (see the module docstring of
:mod:`drakit.plugin.testing.real.node`).
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

__all__ = ["CGROUP_ROOT", "KERNEL_TUNABLES", "HostState"]

#: Kernel tunables the kubelet sets at start (pkg/kubelet/cm setupKernelTunables), under
#: /proc/sys: saved before the kubelet starts and written back at stop.
KERNEL_TUNABLES = ("vm/overcommit_memory", "vm/panic_on_oom", "kernel/panic",
                   "kernel/panic_on_oops", "kernel/keys/root_maxkeys",
                   "kernel/keys/root_maxbytes")

CGROUP_ROOT = Path("/sys/fs/cgroup")
_CGROUP_NAME = re.compile(r"k8s\.io|kubepods.*|[0-9a-f]{64}")
"""New cgroups with these names are the node's: containerd's namespace, the kubelet's pod
hierarchy, a container ID (runc's default path when the kubelet gives no parent)."""
_SHIM_SOCKETS = Path("/run/containerd/s")
_CONTAINER_LOG_LINKS = Path("/var/log/containers")


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
            for hierarchy in CGROUP_ROOT.iterdir():
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
