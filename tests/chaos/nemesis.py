"""The chaos run's nemesis: faults of every component of the node at random moments.

The schedule (:func:`plan`) is drawn from the run's seed before the run: every kind once in
a shuffled order, then kinds drawn by weight, each with the quiet gap before it and how long
it holds. Faults run one after another; after each, the nemesis waits until the node is
whole again (API server ready, Node Ready, every drakit instance ready; at most
:data:`RECOVERY_TIMEOUT` seconds) and notes when. A component fault (kubelet, containerd,
kube-apiserver, etcd) takes drakit down too in :data:`COMPOUND_SHARE` of the cases, while
the component is away.

Kinds: ``drakit-kill`` (SIGKILL; started again after the hold, as the kubelet restarts a
container), ``drakit-rolling`` (a second instance, then the first stopped),
``drakit-pause`` (SIGSTOP past the kubelet's 45 s call deadline, then SIGCONT),
``kubelet-kill``, ``containerd-kill`` (its runc shims and containers stay),
``apiserver-kill``, ``etcd-kill`` (each SIGKILL, started again after the hold with the same
command line), ``reboot`` (:meth:`RealNode.reboot`: every container ends, the CDI dir is
emptied, components start again), ``disk-full`` (the file system of drakit's state filled
for the hold, then freed).
"""

from __future__ import annotations

import errno
import os
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from drakit.plugin.testing.apiserver.errors import ApiError
from drakit.plugin.testing.real.node import RealNode
from drakit.plugin.testing.real.process import RealClusterError

from .fleet import DrakitFleet

#: kind → (weight, hold range in seconds)
KINDS: dict[str, tuple[int, tuple[float, float]]] = {
    "drakit-kill": (3, (0.5, 3.0)),
    "drakit-rolling": (2, (0.0, 0.0)),
    "drakit-pause": (1, (46.0, 52.0)),
    "kubelet-kill": (2, (0.5, 5.0)),
    "containerd-kill": (2, (0.5, 5.0)),
    "apiserver-kill": (1, (0.5, 8.0)),
    "etcd-kill": (1, (0.5, 5.0)),
    "reboot": (1, (0.0, 0.0)),
    "disk-full": (1, (8.0, 25.0)),
}
COMPONENT_KINDS = ("kubelet-kill", "containerd-kill", "apiserver-kill", "etcd-kill")
COMPOUND_SHARE = 0.3
GAP = (3.0, 10.0)
RECOVERY_TIMEOUT = 150.0
FILL_NAME = "chaos-fill"


@dataclass
class Fault:
    """One planned fault and, once run, what happened (times on the run's clock)."""

    kind: str
    gap: float
    hold: float
    compound: bool = False
    started: float | None = None
    recovered: float | None = None
    detail: str = ""

    def line(self) -> str:
        when = f"t={self.started:7.1f}s" if self.started is not None else "not run   "
        back = (f" recovered after {self.recovered - self.started:5.1f}s"
                if self.recovered is not None and self.started is not None else
                " not recovered" if self.started is not None else "")
        plus = " +drakit-kill" if self.compound else ""
        return f"{when} {self.kind}{plus} hold {self.hold:4.1f}s{back} {self.detail}".rstrip()


def plan(rng: random.Random, duration: float) -> list[Fault]:
    """Faults enough for ``duration`` seconds (the nemesis stops at the end of the run)."""
    kinds = list(KINDS)
    rng.shuffle(kinds)
    weights = [w for w, _ in KINDS.values()]
    out: list[Fault] = []
    total = 0.0
    while total < duration * 1.5 or len(out) < len(KINDS):
        kind = kinds[len(out)] if len(out) < len(kinds) else rng.choices(
            list(KINDS), weights)[0]
        lo, hi = KINDS[kind][1]
        fault = Fault(kind, rng.uniform(*GAP), rng.uniform(lo, hi),
                      kind in COMPONENT_KINDS and rng.random() < COMPOUND_SHARE)
        out.append(fault)
        total += fault.gap + fault.hold + 5.0
    return out


def fill_disk(directory: Path) -> int:
    """Write :data:`FILL_NAME` in ``directory`` until its file system is full; bytes written."""
    fd = os.open(directory / FILL_NAME, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    written = 0
    try:
        for size in (1 << 20, 4096, 1):
            chunk = b"\0" * size
            while True:
                try:
                    written += os.write(fd, chunk)
                except OSError as e:
                    if e.errno != errno.ENOSPC:
                        raise
                    break
    finally:
        os.close(fd)
    return written


def free_disk(directory: Path) -> None:
    (directory / FILL_NAME).unlink(missing_ok=True)


class Nemesis:
    """Runs ``faults`` on ``node`` and ``fleet`` until :meth:`run`'s end time."""

    def __init__(self, node: RealNode, fleet: DrakitFleet, state_dir: Path,
                 faults: list[Fault], clock: Callable[[], float],
                 log: Callable[[str], None]) -> None:
        self.node = node
        self.fleet = fleet
        self.state_dir = state_dir
        self.faults = faults
        self.clock = clock
        self.log = log
        self.done: list[Fault] = []

    # ------------------------------------------------------------------ health

    def apiserver_ready(self) -> bool:
        try:
            return self.node.cp.request_text("/readyz").strip() == "ok"
        except (ApiError, OSError):
            return False

    def node_ready(self) -> bool:
        try:
            node = self.node.cp.get_object("nodes", self.node.node_name)
        except (ApiError, OSError):
            return False
        if node is None or not self.node.kubelet_alive:
            return False
        taints = [t.get("key", "") for t in node.get("spec", {}).get("taints") or []]
        return not any(k.startswith("node.kubernetes.io/") for k in taints) and any(
            c.get("type") == "Ready" and c.get("status") == "True"
            for c in node.get("status", {}).get("conditions") or [])

    def whole(self) -> bool:
        """API server ready, Node Ready, containerd and every drakit instance running."""
        containerd = self.node.containerd.process
        return (containerd is not None and containerd.alive() and self.apiserver_ready()
                and self.node_ready() and self.fleet.ready())

    def wait_whole(self, timeout: float = RECOVERY_TIMEOUT) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.whole():
                return True
            time.sleep(0.5)
        return False

    # ------------------------------------------------------------------ faults

    def _hold(self, fault: Fault) -> None:
        if fault.compound:
            fault.detail += f" drakit killed: {self.fleet.kill(fault.hold)};"
        time.sleep(fault.hold)

    def _run(self, fault: Fault) -> None:
        kind, node, cp = fault.kind, self.node, self.node.cp
        if kind == "drakit-kill":
            fault.detail = self.fleet.kill(fault.hold)
        elif kind == "drakit-rolling":
            fault.detail = self.fleet.rolling_update()
        elif kind == "drakit-pause":
            pid = self.fleet.pause()
            fault.detail = f"pid {pid}"
            time.sleep(fault.hold)
            if pid is not None:
                self.fleet.resume(pid)
        elif kind == "kubelet-kill":
            proc = node.kubelet.process
            if proc is not None:
                proc.kill()
            self._hold(fault)
            node.start_kubelet()
        elif kind == "containerd-kill":
            proc = node.containerd.process
            if proc is not None:
                proc.kill()
            self._hold(fault)
            node.containerd.start(time.monotonic() + 60)
        elif kind in ("apiserver-kill", "etcd-kill"):
            component = "kube-apiserver" if kind == "apiserver-kill" else "etcd"
            cp.kill_component(component)
            self._hold(fault)
            cp.restart_component(component, timeout=90)
        elif kind == "reboot":
            with self.fleet.lock:
                fault.detail = f"up again after {node.reboot(timeout=150):.1f}s"
        elif kind == "disk-full":
            fault.detail = f"{fill_disk(self.state_dir)} bytes written"
            try:
                time.sleep(fault.hold)
            finally:
                free_disk(self.state_dir)
        else:
            raise ValueError(f"unknown fault kind {kind!r}")

    def run(self, end: float, stop: threading.Event) -> None:
        """Run the faults until the run's clock reaches ``end`` (or ``stop``)."""
        for fault in self.faults:
            if stop.wait(fault.gap) or self.clock() + fault.hold > end:
                break
            fault.started = self.clock()
            self.done.append(fault)
            self.log(f"nemesis: {fault.kind}{' +drakit-kill' if fault.compound else ''} "
                     f"(hold {fault.hold:.1f}s)")
            try:
                self._run(fault)
            except (RealClusterError, ApiError, OSError) as e:
                fault.detail += f" error: {str(e)[:300]}"
                self.log(f"nemesis: {fault.kind} failed: {str(e)[:1000]}")
            if self.wait_whole():
                fault.recovered = self.clock()
            self.log(f"nemesis: {fault.line()}")
            if fault.recovered is None:
                self.log("nemesis: the node did not recover; no more faults")
                break

    def schedule_text(self) -> str:
        return "\n".join(f"  {f.line()}" for f in self.done) or "  (no fault ran)"
