"""Chaos on a real node: pods with claims come and go while every component of the node is
killed, paused or starved at random moments, and drakit must never hand a device out twice,
lose one or leave one behind.

A run starts a real control plane and node (:class:`~drakit.plugin.testing.real.node.RealNode`:
etcd, kube-apiserver, kube-scheduler, kube-controller-manager, kubelet, containerd, runc),
puts drakit's state directory (``<kubelet plugins dir>/<driver>``: checkpoint, DRA socket)
on a small tmpfs of its own so that filling it is safe, and runs drakit there as its
DaemonSet would (:mod:`fleet`). Then, for ``duration`` seconds, four threads:

- the workload (:mod:`workload`) creates and deletes pods with claims;
- the nemesis (:mod:`nemesis`) runs the faults planned from the seed;
- the fleet supervisor restarts drakit instances that died;
- the checker reads the independent views every few seconds and checks invariants (a) and
  (b) (:mod:`invariants`).

Then it quiesces: no more faults, no more pods created or deleted, every component up; it
waits (at most ``settle`` seconds) until invariants (c), (d) and (e) hold, and reports what
still breaks them.

Usage::

    PYTHONPATH=tests python -m chaos.driver --duration 1800 --seed 7 [--log FILE]
        [--artifacts DIR]

(``make chaos CHAOS_DURATION=1800 CHAOS_SEED=7``). It prints the seed first; at the end the
figures (pods started, faults per kind, prepares and unprepares, the longest waits: from
scheduled to Ready, the longest stretch a scheduled pod stayed not Ready while no fault
was on, and the longest a claim was refused because its device was still prepared for
another claim the kubelet had not unprepared yet) and the violations. A failure prints the
seed, the nemesis' schedule as it ran and each invariant that broke with its object. Exit
status 0 without violations, 1 with, 2 when the node could not run. Needs root and the
binaries of ``scripts/build-k8s.sh``.
"""

from __future__ import annotations

import argparse
import random
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

import yaml
from realnode.node_helpers import DRIVER

from drakit.plugin.claims.checkpoint import CheckpointError
from drakit.plugin.testing.apiserver.errors import ApiError
from drakit.plugin.testing.real.controlplane import RealAPIServer, start_real_apiserver
from drakit.plugin.testing.real.node import RealNode, node_unavailable_reason
from drakit.plugin.testing.real.process import RealClusterError, run_checked

from .fleet import DrakitFleet
from .invariants import (
    ContainerdView,
    Violation,
    cdi_devices,
    check_containers,
    check_exclusive,
    check_pods,
    check_quiet,
    container_reports,
    read_checkpoint,
)
from .nemesis import Nemesis, free_disk, plan
from .workload import Workload, inventory, setup_objects

STATE_FS_SIZE = "16m"
"""Size of the tmpfs under drakit's state directory (filled by the ``disk-full`` fault)."""
CHECK_EVERY = 3.0
SETTLE = 240.0
PREPARED = "prepared claim with"
UNPREPARED = "unprepared claim"
#: What drakit says when it refuses a prepare because a device of the claim is still
#: prepared for another claim (the kubelet has not unprepared that one yet).
HELD = "is still prepared for claim"


@dataclass
class Report:
    """The outcome of a run (times on its clock)."""

    seed: int
    duration: float
    violations: list[Violation] = field(default_factory=list)
    schedule: str = ""
    figures: dict[str, object] = field(default_factory=dict)

    def __bool__(self) -> bool:
        """True when an invariant broke."""
        return bool(self.violations)

    def summary(self) -> str:
        lines = [f"chaos run: seed {self.seed}, {self.duration:.0f}s of faults"]
        lines += [f"  {k}: {v}" for k, v in self.figures.items()]
        counts = Counter(v.invariant for v in self.violations)
        lines.append("violations: " + " / ".join(f"{k} {counts.get(k, 0)}" for k in "abcde")
                     + f" (total {len(self.violations)})")
        return "\n".join(lines)

    def failure(self) -> str:
        """The seed, the nemesis' schedule and every violation with its object."""
        if not self.violations:
            return ""
        shown = "\n".join(f"  {v.line()}" for v in self.violations[:40])
        more = f"\n  … {len(self.violations) - 40} more" if len(self.violations) > 40 else ""
        return (f"CHAOS FAILURE (seed {self.seed}; rerun: make chaos CHAOS_SEED={self.seed} "
                f"CHAOS_DURATION={self.duration:.0f})\nnemesis schedule:\n{self.schedule}\n"
                f"violations:\n{shown}{more}")


class ChaosRun:
    """One run with ``seed`` for ``duration`` seconds of faults."""

    def __init__(self, seed: int, duration: float, *, log_file: Path | None = None,
                 artifacts: Path | None = None, settle: float = SETTLE,
                 echo: bool = True) -> None:
        self.seed = seed
        self.duration = duration
        self.settle = settle
        self.artifacts = artifacts
        self.rng = random.Random(seed)
        self.faults = plan(random.Random(f"{seed}-nemesis"), duration)
        self.report = Report(seed, duration)
        self._log_file = open(log_file, "a") if log_file else None  # noqa: SIM115
        self._echo = echo
        self._log_lock = threading.Lock()
        self._t0 = time.monotonic()
        self._seen: set[str] = set()
        self._suspects: set[str] = set()
        self.checks = 0
        #: containers judged by (a) from containerd's view, and the devices checked in them
        self.containers_checked = 0
        self.devices_checked = 0
        self.checkpoint_errors: list[str] = []

    # ------------------------------------------------------------------ plumbing

    def clock(self) -> float:
        return time.monotonic() - self._t0

    def log(self, msg: str) -> None:
        line = f"[{self.clock():7.1f}s] {msg}"
        with self._log_lock:
            if self._echo:
                print(line, flush=True)
            if self._log_file is not None:
                self._log_file.write(line + "\n")
                self._log_file.flush()

    def _record(self, violations: list[Violation]) -> None:
        for v in violations:
            if v.what not in self._seen:
                self._seen.add(v.what)
                self.report.violations.append(v)
                self.log(f"VIOLATION {v.line()}")

    # ------------------------------------------------------------------ the run

    def run(self) -> Report:
        self.log(f"chaos run: seed {self.seed}, duration {self.duration:.0f}s")
        base = Path(tempfile.mkdtemp(prefix="drk-chaos-", dir="/tmp"))
        cp: RealAPIServer | None = None
        node: RealNode | None = None
        state_dir: Path | None = None
        try:
            cp = start_real_apiserver(base / "cp")
            node = RealNode(cp, base / "n", remove_workdir=False).start()
            state_dir = node.plugins_dir / DRIVER
            state_dir.mkdir(parents=True, exist_ok=True)
            run_checked(["mount", "-t", "tmpfs", "-o", f"size={STATE_FS_SIZE},mode=0750",
                         "drakit-chaos-state", str(state_dir)], what="mount tmpfs")
            self._run_on(node, state_dir)
        finally:
            if node is not None:
                self._keep_artifacts(node)
                node.stop()
            if state_dir is not None:
                subprocess.run(["umount", "-l", str(state_dir)], capture_output=True,
                               timeout=30, check=False)
            if cp is not None:
                cp.stop()
            shutil.rmtree(base, ignore_errors=True)
            self.log(self.report.summary())
            if self.report:
                self.log(self.report.failure())
            if self._log_file is not None:
                self._log_file.close()
        return self.report

    def _run_on(self, node: RealNode, state_dir: Path) -> None:
        setup_objects(node)
        config = node.workdir / "drakit-chaos.yaml"
        config.write_text(yaml.safe_dump({"discovery": {"example": inventory()}}))
        args = ["--discovery", "example", "--config", str(config), "--resync-seconds", "10",
                "-v", "2"]
        fleet = DrakitFleet(node, args, DRIVER, self.clock, self.log)
        fleet.start()
        workload = Workload(node, self.rng, self.clock, self.log)
        nemesis = Nemesis(node, fleet, state_dir, self.faults, self.clock, self.log)
        views = (ContainerdView(node), state_dir / "checkpoint.json", Path(node.cdi_dir))
        stop_faults, stop_rest = threading.Event(), threading.Event()
        threads = [
            threading.Thread(target=fleet.run, args=(stop_rest,), name="fleet", daemon=True),
            threading.Thread(target=workload.run, args=(stop_rest,), name="workload",
                             daemon=True),
            threading.Thread(target=self._checker, args=(node, workload, views, stop_rest),
                             name="checker", daemon=True),
        ]
        nemesis_thread = threading.Thread(target=nemesis.run,
                                          args=(self.clock() + self.duration, stop_faults),
                                          name="nemesis", daemon=True)
        started = self.clock()
        for t in threads:
            t.start()
        nemesis_thread.start()
        try:
            while self.clock() - started < self.duration and nemesis_thread.is_alive():
                time.sleep(1.0)
            stop_faults.set()
            nemesis_thread.join(timeout=300)
            self.log("quiesce: faults over; no more pods created or deleted")
            workload.creating = workload.deleting = False
            self._heal(node, fleet, nemesis, state_dir)
            self._settle(node, fleet, workload, views)
        finally:
            stop_rest.set()
            for t in threads:
                t.join(timeout=60)
            self.report.schedule = nemesis.schedule_text()
            self._figures(fleet, workload, nemesis)
            fleet.stop_all()

    # ------------------------------------------------------------------ checks

    def _check_running(self, node: RealNode, workload: Workload,
                       views: tuple[ContainerdView, Path, Path]) -> list[Violation]:
        """(a) and (b) now; (a) from containerd only when seen in two rounds in a row (a
        container and the API objects are read at different moments)."""
        containerd, checkpoint, cdi_dir = views
        now = self.clock()
        out: list[Violation] = []
        try:
            pods, claims = workload.snapshot()
        except (ApiError, OSError, ValueError):
            pods, claims = None, None
        if pods is not None and claims is not None:
            out += container_reports(pods, now)
            try:
                running = containerd.running()
            except (RealClusterError, subprocess.TimeoutExpired):
                running = None
            if running is not None:
                self.containers_checked += len(running)
                self.devices_checked += sum(
                    sum(1 for entry in c.env if entry.startswith("DRAKIT_DEVICE_"))
                    for c in running)
                found = check_containers(running, {p["metadata"]["name"]: p for p in pods},
                                         {c["metadata"]["name"]: c for c in claims}, DRIVER,
                                         now)
                out += [v for v in found if v.what in self._suspects]
                self._suspects = {v.what for v in found}
        try:
            state = read_checkpoint(checkpoint)
        except CheckpointError as e:
            self.checkpoint_errors.append(f"t={now:.1f}s {e}")
            self.log(f"checker: checkpoint unreadable: {e}")
            return out
        out += check_exclusive(state, cdi_devices(cdi_dir), now)
        return out

    def _checker(self, node: RealNode, workload: Workload,
                 views: tuple[ContainerdView, Path, Path], stop: threading.Event) -> None:
        while not stop.wait(CHECK_EVERY):
            self.checks += 1
            try:
                self._record(self._check_running(node, workload, views))
            except Exception as e:
                self.log(f"checker: error {type(e).__name__}: {e}")

    def _heal(self, node: RealNode, fleet: DrakitFleet, nemesis: Nemesis,
              state_dir: Path) -> None:
        """Every component up again (a fault that failed half-way may have left one down)."""
        free_disk(state_dir)
        for component in ("etcd", "kube-apiserver"):
            if not node.cp.component_alive(component):
                self.log(f"heal: {component} was down; started again")
                node.cp.restart_component(component, timeout=90)
        if node.containerd.process is None or not node.containerd.process.alive():
            self.log("heal: containerd was down; started again")
            node.containerd.start(time.monotonic() + 60)
        if not node.kubelet_alive:
            self.log("heal: kubelet was down; started again")
            node.start_kubelet()
        if not nemesis.wait_whole():
            self.log("heal: the node is not whole after the faults")

    def _settle(self, node: RealNode, fleet: DrakitFleet, workload: Workload,
                views: tuple[ContainerdView, Path, Path]) -> None:
        """Wait until (c), (d) and (e) hold or ``settle`` seconds pass; record what breaks
        them then, and (a), (b) once more."""
        _containerd, checkpoint, cdi_dir = views
        deadline = self.clock() + self.settle
        found: list[Violation] = []
        while True:
            now = self.clock()
            found = []
            try:
                pods, claims = workload.snapshot()
                state = read_checkpoint(checkpoint)
                by_name = {c["metadata"]["name"]: c for c in claims}
                found = check_quiet(pods, by_name, state, cdi_devices(cdi_dir), DRIVER, now)
                found += check_pods(node, pods, now)
            except (ApiError, OSError, ValueError, CheckpointError) as e:
                found = [Violation("e", now, f"views unreadable after the faults: {e}")]
            if not fleet.ready():
                newest = fleet.newest()
                found.append(Violation("e", now, f"drakit not ready {self.settle:.0f}s after "
                                                 f"the faults ended: "
                                                 f"{newest.readyz() if newest else 'none'}; "
                                                 f"{newest.log(20) if newest else ''}"))
            if not found or now >= deadline:
                break
            time.sleep(5.0)
        self.log(f"quiesce: settled after {self.clock() - deadline + self.settle:.0f}s"
                 if not found else "quiesce: did not settle")
        self._record(found)
        self._record(self._check_running(node, workload, views))
        self._record(self._check_running(node, workload, views))
        for at, loop in fleet.crash_loops:
            self._record([Violation("e", at, f"crash loop: {loop}")])
        for ex in fleet.self_exits:
            self._record([Violation("e", ex.at, f"{ex.name} exited by itself (rc "
                                                f"{ex.returncode}); log tail:\n"
                                                f"{ex.log_tail[-1500:]}")])

    # ------------------------------------------------------------------ figures

    def _figures(self, fleet: DrakitFleet, workload: Workload, nemesis: Nemesis) -> None:
        records = workload.records()
        kills: Counter[str] = Counter(f.kind for f in nemesis.done)
        kills["drakit-kill (with a component fault)"] = sum(f.compound for f in nemesis.done)
        lines = [line for path in {p.log_path for p in fleet.history}
                 for line in _read_lines(path)]
        prepares = sum(PREPARED in line for line in lines)
        unprepares = sum(UNPREPARED in line for line in lines)
        waits = []
        healthy = []
        windows = sorted((f.started, f.recovered if f.recovered is not None else float("inf"),
                          f.kind) for f in nemesis.done if f.started is not None)
        for rec in records:
            if rec.ready is None:
                continue
            base = rec.scheduled if rec.scheduled is not None else rec.created
            waits.append((rec.ready - base, rec.name))
            stretch = longest_quiet_stretch(base, rec.ready, windows)
            if stretch is not None:
                healthy.append((*stretch, rec.name, rec.ready - base))
        f = self.report.figures
        f["pods created"] = len(records)
        f["pods started (Ready)"] = sum(r.ready is not None for r in records)
        f["pods deleted"] = sum(r.deleted is not None for r in records)
        f["faults run"] = len(nemesis.done)
        f["faults per kind"] = dict(sorted(kills.items()))
        f["drakit starts"] = fleet.starts
        f["drakit exits of its own"] = len(fleet.self_exits)
        f["claims prepared (drakit's logs)"] = prepares
        f["claims unprepared (drakit's logs)"] = unprepares
        f["invariant checks during the run"] = self.checks
        f["containers checked from containerd (device env entries)"] = (
            f"{self.containers_checked} ({self.devices_checked})")
        f["checkpoint read errors"] = len(self.checkpoint_errors)
        f["API errors seen by the workload"] = workload.api_errors
        if waits:
            w, name = max(waits)
            f["longest scheduled -> Ready"] = f"{w:.1f}s (pod {name})"
        if healthy:
            w, kind, name, total = max(healthy)
            f["longest a scheduled pod stayed not Ready with the node whole"] = (
                f"{w:.1f}s (pod {name}, {'after ' + kind if kind else 'no fault before'}; "
                f"{total:.1f}s from scheduled to Ready)")
        held = held_device_waits(lines)
        if held:
            span, claim = max((span, claim) for claim, span in held.items())
            f["claims refused while a device was still prepared for another claim"] = (
                f"{len(held)}, the longest for {span:.1f}s (claim {claim})")

    def _keep_artifacts(self, node: RealNode) -> None:
        """Component and drakit logs into ``artifacts`` (when given)."""
        if self.artifacts is None:
            return
        self.artifacts.mkdir(parents=True, exist_ok=True)
        for path in node.workdir.glob("*.log"):
            shutil.copy2(path, self.artifacts / path.name)
        for path in Path(node.cp.workdir).glob("*.log"):
            shutil.copy2(path, self.artifacts / f"cp-{path.name}")
        self.log(f"logs kept in {self.artifacts}")


def _read_lines(path: Path) -> list[str]:
    """The lines of a drakit log (every run of that instance); none when it is unreadable."""
    try:
        return path.read_text(errors="replace").splitlines()
    except OSError:
        return []


def held_device_waits(lines: Iterable[str]) -> dict[str, float]:
    """Seconds from the first to the last prepare drakit refused for a claim because a device
    of it was still prepared for another claim (:data:`HELD`), by claim (``namespace/name``),
    from drakit's log lines (klog: the time first, then ``claim="ns/name"``)."""
    seen: dict[str, tuple[float, float]] = {}
    for line in lines:
        if HELD not in line:
            continue
        claim = re.search(r' claim="([^"]+)"', line)
        try:
            at = datetime.fromisoformat(line.split(" ", 1)[0]).timestamp()
        except ValueError:
            continue
        if claim is None:
            continue
        first, _ = seen.get(claim.group(1), (at, at))
        seen[claim.group(1)] = (min(first, at), at)
    return {claim: last - first for claim, (first, last) in seen.items()}


def longest_quiet_stretch(start: float, end: float,
                          windows: list[tuple[float, float, str]]) -> tuple[float, str] | None:
    """The longest part of ``[start, end]`` outside every fault window ``(started,
    recovered, kind)`` (sorted by start; ``recovered`` inf when it never did), with the kind
    of the fault that ended last before it ("" for none); None when faults cover it all."""
    best: tuple[float, str] | None = None
    at, before = start, ""
    for w_start, w_end, kind in windows:
        if w_start >= end:
            break
        if w_end > at:
            if w_start > at and (best is None or w_start - at > best[0]):
                best = (w_start - at, before)
            at = w_end
        before = kind
        if at >= end:
            return best
    if end > at and (best is None or end - at > best[0]):
        best = (end - at, before)
    return best


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--duration", type=float, default=180.0, help="seconds of faults")
    p.add_argument("--seed", type=int, default=None, help="default: from the clock")
    p.add_argument("--settle", type=float, default=SETTLE,
                   help="seconds the quiet period may take")
    p.add_argument("--log", type=Path, default=None, help="also append the run's lines here")
    p.add_argument("--artifacts", type=Path, default=None,
                   help="directory for the component logs when an invariant breaks")
    args = p.parse_args(argv)
    seed = args.seed if args.seed is not None else int(time.time())
    print(f"chaos seed: {seed}", flush=True)
    reason = node_unavailable_reason()
    if reason is not None:
        print(f"chaos: a real node cannot run here: {reason}", file=sys.stderr)
        return 2
    report = ChaosRun(seed, args.duration, log_file=args.log, artifacts=args.artifacts,
                      settle=args.settle).run()
    return 1 if report else 0


if __name__ == "__main__":
    sys.exit(main())
