"""Crash-consistency driver: many prepare/unprepare cycles through the fake kubelet
against a ``drakit run`` subprocess (crash_agent.py) that is killed with SIGKILL at random
moments and at the injected points inside prepare (``DRAKIT_CRASH_POINT``), restarted, and
retried like the kubelet retries. At every quiet point (agent alive, every pending call
retried) it checks:

a. every claim the kubelet believes prepared is completed in the checkpoint with its CDI file;
b. every checkpoint entry has its CDI file;
c. no CDI file of this driver without a checkpoint entry (after the start-up sweep);
d. no device recorded for two claims.

With ``--status-fault-rate`` the API server answers that share of the AllocatedDeviceStatus
PATCHes with 500 for the whole run, kills included; at the end the faults stop and one more
invariant is checked (e): every claim prepared has its status entry on the server within
:data:`STATUS_SETTLE_SECONDS` (every :data:`STATUS_CHECK_EVERY` cycles the faults stop for
the check, then go on), and once all are unprepared at the end, no claim keeps one. With
``--hang-rate`` that share of the prepare hooks hangs past the call's deadline
(crash_agent.py, ``DRAKIT_CRASH_HANG``), the calls get a shorter deadline
(:data:`HANG_CALL_TIMEOUT`), and half the random kills land anywhere in a call (so some find
a hook hanging) instead of in its first 60 ms.

Usage::

    python tests/contract/crash_driver.py --cycles 500 [--seed N] [--time-limit SECONDS]

prints progress and finally ``violations: a / b / c / d, status e`` (goal 0 / 0 / 0 / 0, 0) with
the number of kills. Exit status 0 when there was no violation, 1 otherwise.
"""

from __future__ import annotations

import argparse
import functools
import os
import random
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from contract_helpers import DRIVER, Violations, check_invariants
from crash_agent import HANG_ENV, ONE_WRITE_ENV

from drakit.plugin.claims.node import CRASH_POINTS
from drakit.plugin.testing.apiserver import FaultPlan
from drakit.plugin.testing.harness import DriverHarness
from drakit.plugin.testing.kubelet import KubeletCallError, KubeletCheckError

POINTS = CRASH_POINTS
CALL_TIMEOUT = 10.0
#: The kubelet call's timeout when hooks hang (each hang costs a call this long).
HANG_CALL_TIMEOUT = 2.5
HANG_SECONDS = 3.5
#: How long the status of every claim may take to settle once the API server heals: longer
#: than the status writer's longest wait between attempts (StatusWriter max_retry_seconds
#: 30 s, jitter ±50 %: 45 s).
STATUS_SETTLE_SECONDS = 60.0
#: Cycles between the checks of invariant e (the API healed for the check, then faulty again).
STATUS_CHECK_EVERY = 25
POOL = "node-1"


def crash_agent_command() -> list[str]:
    """The agent command with crash points (:mod:`crash_agent`) for DriverHarness."""
    return [sys.executable, str(Path(__file__).resolve().parent / "crash_agent.py")]


@dataclass
class Claim:
    obj: dict[str, Any]
    device: str
    state: str = "pending-prepare"  # → prepared → pending-unprepare → done

    @property
    def uid(self) -> str:
        return str(self.obj["metadata"]["uid"])

    @property
    def ref(self) -> tuple[str, str, str]:
        m = self.obj["metadata"]
        return (m["namespace"], m["name"], m["uid"])


@dataclass
class Report:
    cycles: int = 0
    checks: int = 0
    random_kills: int = 0
    injected_crashes: dict[str, int] = field(default_factory=dict)
    restarts: int = 0
    prepared: int = 0
    unprepared: int = 0
    refusals: int = 0
    violations: Violations = field(default_factory=Violations)
    #: claims whose AllocatedDeviceStatus did not settle once the API healed (invariant e)
    status_violations: list[str] = field(default_factory=list)
    still_running: int = 0
    status_faults: int = 0
    temp_files_left: int = 0
    seconds: float = 0.0

    def __bool__(self) -> bool:
        """True when an invariant was violated."""
        return bool(self.violations) or bool(self.status_violations)

    def line(self) -> str:
        a, b, c, d = self.violations.counts()
        return f"violations: {a} / {b} / {c} / {d}, status {len(self.status_violations)}"

    def summary(self) -> str:
        return (
            f"{self.line()}  (a kubelet-prepared claim missing / entry without CDI file / "
            f"CDI file without entry / device prepared for two claims, status not settled)\n"
            f"cycles {self.cycles}, invariant checks {self.checks}, restarts {self.restarts}, "
            f"random SIGKILLs {self.random_kills}, injected crashes "
            f"{sum(self.injected_crashes.values())} {dict(sorted(self.injected_crashes.items()))}, "
            f"claims prepared {self.prepared}, unprepared {self.unprepared}, "
            f"retryable refusals {self.refusals} ({self.still_running} hooks still running), "
            f"status PATCHes answered 500 {self.status_faults}, temp files left at the end "
            f"{self.temp_files_left}, {self.seconds:.0f}s"
        )


class CrashDriver:
    """One run; ``root`` is a scratch directory (removed by the caller)."""

    def __init__(self, root: Path, seed: int, devices: int = 6, kill_rate: float = 0.2,
                 arm_rate: float = 0.6, log: Callable[[str], None] = print,
                 kill_first_cycle: bool = False, one_write: bool = False,
                 hang_rate: float = 0.0, status_fault_rate: float = 0.0) -> None:
        self.rng = random.Random(seed)
        self.seed = seed
        self.hang_rate = hang_rate
        self.status_fault_rate = status_fault_rate
        self.call_timeout = HANG_CALL_TIMEOUT if hang_rate else CALL_TIMEOUT
        self.kill_rate = kill_rate
        self.arm_rate = arm_rate
        self.kill_first_cycle = kill_first_cycle
        self.log = log
        self.devices = [f"dev-{i}" for i in range(devices)]
        self.h = DriverHarness(
            root, subprocess=True,
            plugin_options={"example": {"generate": {"count": devices, "prefix": "dev"}}},
        )
        self.h.agent_command = crash_agent_command()
        if one_write:
            self.h.env[ONE_WRITE_ENV] = "1"
        if hang_rate:
            self.h.env[HANG_ENV] = f"{hang_rate}:{HANG_SECONDS}"
        self.claims: dict[str, Claim] = {}
        self.report = Report()
        self._killed_by_us = False
        self._serial = 0

    # -- agent lifecycle -------------------------------------------------------------------

    def _arm(self) -> None:
        """Pick this start's injected crash point (or none)."""
        if self.rng.random() < self.arm_rate:
            point = self.rng.choice(POINTS)
            self.h.env["DRAKIT_CRASH_POINT"] = f"{point}:{self.rng.choice((0.1, 0.25, 0.5))}"
        else:
            self.h.env.pop("DRAKIT_CRASH_POINT", None)

    def _dead(self) -> bool:
        return self.h.process is None or self.h.process.poll() is not None

    def _restart(self) -> None:
        proc = self.h.process
        if proc is not None and proc.poll() is not None and not self._killed_by_us:
            point = self.h.env.get("DRAKIT_CRASH_POINT", "?").split(":")[0]
            self.report.injected_crashes[point] = self.report.injected_crashes.get(point, 0) + 1
        self.h.stop_plugin(kill=True)
        self._killed_by_us = False
        self._arm()
        self.h.start_plugin(wait=60)
        self.report.restarts += 1

    def _random_kill_timer(self) -> threading.Timer | None:
        # forced from the first cycle until one random kill has landed (a crash point the
        # agent hit first leaves the timer nothing to kill)
        forced = self.kill_first_cycle and self.report.random_kills == 0
        if self.rng.random() >= self.kill_rate and not forced:
            return None
        proc = self.h.process

        def kill() -> None:
            if proc is not None and proc.poll() is None:
                self._killed_by_us = True
                self.report.random_kills += 1
                os.kill(proc.pid, signal.SIGKILL)

        late = self.hang_rate > 0 and self.rng.random() < 0.5
        timer = threading.Timer(self.rng.uniform(0.0, self.call_timeout if late else 0.06), kill)
        timer.start()
        return timer

    # -- the kubelet's side ------------------------------------------------------------------

    def _free_devices(self) -> list[str]:
        """Devices the scheduler may allocate: those of claims being unprepared count as free
        (their claims were deallocated once the pod was gone)."""
        held = {c.device for c in self.claims.values()
                if c.state in ("pending-prepare", "prepared")}
        return [d for d in self.devices if d not in held]

    def _new_claim(self) -> None:
        free = self._free_devices()
        if not free:
            return
        self._serial += 1
        dev = self.rng.choice(free)
        obj = self.h.allocate(f"c{self._serial}", [(POOL, dev)])
        self.claims[str(obj["metadata"]["uid"])] = Claim(obj, dev)

    def _calls(self) -> bool:
        """One round of the kubelet's pending calls; False when a call failed at the RPC
        level (agent gone)."""
        unprep = [c for c in self.claims.values() if c.state == "pending-unprepare"]
        prep = [c for c in self.claims.values() if c.state == "pending-prepare"]
        self.rng.shuffle(prep)
        # Pods are independent: a new pod's prepare may come before the old pod's
        # unprepare of the same device (then: busy, retried next round).
        steps: list[Callable[[], None]] = [functools.partial(self._unprepare, unprep)]
        steps += [functools.partial(self._prepare, batch) for batch in (prep[:2], prep[2:])]
        if self.rng.random() < 0.5:
            steps.reverse()
        try:
            for step in steps:
                step()
        except (KubeletCallError, KubeletCheckError):
            return False
        return True

    def _unprepare(self, claims: list[Claim]) -> None:
        if not claims:
            return
        res = self.h.kubelet.node_unprepare_resources(
            DRIVER, [c.ref for c in claims], timeout=self.call_timeout)
        for c in claims:
            if res.get(c.uid) == "":
                c.state = "done"
                self.report.unprepared += 1

    def _prepare(self, claims: list[Claim]) -> None:
        if not claims:
            return
        res = self.h.kubelet.node_prepare_resources(
            DRIVER, [c.ref for c in claims], timeout=self.call_timeout)
        for c in claims:
            r = res.get(c.uid)
            if r is not None and not r.error:
                c.state = "prepared"
                self.report.prepared += 1
            elif r is not None:
                self.report.refusals += 1
                self.report.still_running += "still running" in r.error

    def _quiesce(self) -> None:
        """Restart the agent if needed and retry until every call went through."""
        for _ in range(80 if self.hang_rate else 50):
            if self._dead():
                self._restart()
            if self._calls():
                pending = [c for c in self.claims.values()
                           if c.state in ("pending-prepare", "pending-unprepare")]
                if not pending and not self._dead():
                    return
            elif self.h.process is not None:
                # An RPC failed: the agent is dying (SIGKILL takes a moment) or the
                # channel is reconnecting. Wait for either.
                try:
                    self.h.process.wait(timeout=5)
                except subprocess.TimeoutExpired:
                    time.sleep(0.2)
        raise RuntimeError("pending calls did not settle")

    def _check(self) -> None:
        believed = {c.uid for c in self.claims.values() if c.state == "prepared"}
        v = check_invariants(self.h.checkpoint_path, self.h.cdi_dir, believed)
        self.report.checks += 1
        if v:
            self.log(f"cycle {self.report.cycles}: VIOLATION {v}")
            self.report.violations.add(v)

    def _status_faults_on(self) -> None:
        if self.status_fault_rate:
            self.h.apiserver.set_faults(FaultPlan(
                error_rate=self.status_fault_rate, seed=self.seed + self.report.cycles,
                verbs=frozenset({"patch"}), resources=frozenset({"resourceclaims/status"})))

    def _status_faults_off(self) -> None:
        self.report.status_faults += self.h.apiserver.faults_injected
        self.h.apiserver.set_faults(None)

    def _status_entries(self) -> dict[str, set[str]]:
        """claim UID → the devices of this driver in its ``status.devices`` (the claims that
        still exist on the server)."""
        out: dict[str, set[str]] = {}
        for c in self.claims.values():
            m = c.obj["metadata"]
            got = self.h.apiserver.get_object("resourceclaims", m["name"], m["namespace"])
            if got is not None:
                out[c.uid] = {d.get("device", "") for d in
                              (got.get("status") or {}).get("devices") or []
                              if d.get("driver") == DRIVER}
        return out

    def _check_status(self, prepared: bool) -> None:
        """Invariant e, with the API healed: within :data:`STATUS_SETTLE_SECONDS` every
        existing claim has its device's entry (``prepared``) or none (not ``prepared``)."""
        def wrong() -> list[str]:
            return sorted(uid for uid, devices in self._status_entries().items()
                          if devices != ({self.claims[uid].device} if prepared else set()))

        deadline = time.monotonic() + STATUS_SETTLE_SECONDS
        while (bad := wrong()) and time.monotonic() < deadline:
            if self._dead():
                # A hook that hung past its call ended after the calls and hit an armed crash
                # point: the agent is gone, as a DaemonSet's pod would be until its restart.
                # Status settles by a running agent; the window starts again with it.
                self.log("agent not running during the status check; restarted")
                self._restart()
                deadline = time.monotonic() + STATUS_SETTLE_SECONDS
            time.sleep(0.2)
        if bad:
            self.log(f"status not settled ({'applied' if prepared else 'removed'}): {bad}; "
                     f"{self._status_story(bad)}")
            self.report.status_violations += bad

    def _status_story(self, uids: list[str]) -> str:
        """What the checkpoint owes for ``uids`` and the agent's log lines about them."""
        from drakit.plugin.claims.checkpoint import Checkpoint

        state = Checkpoint(self.h.checkpoint_path).state()
        owed = {u: (state.claims[u].status_owed if u in state.claims else
                    state.unprepared[u].status_owed if u in state.unprepared else None)
                for u in uids}
        log = self.h.log_path.read_text(errors="replace").splitlines()
        lines = [ln[:300] for ln in log if any(u in ln for u in uids)][-12:]
        status = [ln[:300] for ln in log if "AllocatedDeviceStatus" in ln
                  or " ERROR " in ln or " WARNING " in ln][-12:]
        alive = "alive" if not self._dead() else "not running"
        return (f"status_owed {owed}; agent {alive}; agent log: " + " | ".join(lines)
                + "; its last status, warning and error lines: " + " | ".join(status))

    def cycle(self) -> None:
        prepared = [c for c in self.claims.values() if c.state == "prepared"]
        for c in self.rng.sample(prepared, k=min(len(prepared), self.rng.randint(0, 2))):
            c.state = "pending-unprepare"
            if self.rng.random() < 0.3:  # the claim is gone already: unprepare from checkpoint
                m = c.obj["metadata"]
                self.h.apiserver.delete_object("resourceclaims", m["name"], m["namespace"])
        for _ in range(self.rng.randint(1, 2)):
            self._new_claim()
        timer = self._random_kill_timer()
        try:
            self._calls()
        finally:
            if timer is not None:
                timer.join()  # a kill after the calls returned is a random point too
        self._quiesce()
        self._check()
        for uid in [u for u, c in self.claims.items() if c.state == "done"]:
            del self.claims[uid]
        self.report.cycles += 1

    def run(self, cycles: int, time_limit: float | None = None) -> Report:
        started = time.monotonic()
        self._arm()
        self.h.start(wait=60)
        self._status_faults_on()
        try:
            for i in range(cycles):
                if time_limit is not None and time.monotonic() - started > time_limit:
                    self.log(f"time limit reached after {i} cycles")
                    break
                self.cycle()
                if self.status_fault_rate and (i + 1) % STATUS_CHECK_EVERY == 0:
                    self._status_faults_off()
                    self._check_status(prepared=True)
                    self._status_faults_on()
                if (i + 1) % 50 == 0:
                    self.log(f"{i + 1} cycles, {self.report.line()}, "
                             f"restarts {self.report.restarts}")
            # Finally unprepare everything and check the node is clean.
            if self.status_fault_rate:
                self._status_faults_off()
                self._check_status(prepared=True)
            for c in self.claims.values():
                if c.state == "prepared":
                    c.state = "pending-unprepare"
            self.h.env.pop("DRAKIT_CRASH_POINT", None)
            self.h.env.pop(HANG_ENV, None)
            self._quiesce()
            self._check()
            if self.status_fault_rate:
                self._check_status(prepared=False)
            self.report.temp_files_left = sum(
                len(list(d.glob(".*.tmp"))) for d in (self.h.cdi_dir, self.h.data_dir))
        finally:
            self.h.stop()
            self.report.seconds = time.monotonic() - started
        return self.report


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--cycles", type=int, default=500)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--devices", type=int, default=6)
    p.add_argument("--kill-rate", type=float, default=0.2,
                   help="chance per cycle of a SIGKILL at a random moment of its calls")
    p.add_argument("--arm-rate", type=float, default=0.6,
                   help="chance per agent start of arming one injected crash point")
    p.add_argument("--time-limit", type=float, default=None, help="stop after SECONDS")
    p.add_argument("--one-write", action="store_true",
                   help="the example plugin as it declares itself: a prepare that changes "
                        "nothing on the node (one checkpoint write per claim)")
    p.add_argument("--hang-rate", type=float, default=0.0,
                   help=f"share of prepare hooks that hang {HANG_SECONDS}s, past the call's "
                        f"deadline ({HANG_CALL_TIMEOUT}s then)")
    p.add_argument("--status-fault-rate", type=float, default=0.0,
                   help="share of AllocatedDeviceStatus PATCHes answered 500")
    args = p.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="drakit-crash-") as root:
        driver = CrashDriver(Path(root), args.seed, args.devices, args.kill_rate, args.arm_rate,
                             one_write=args.one_write,
                             hang_rate=args.hang_rate,
                             status_fault_rate=args.status_fault_rate)
        report = driver.run(args.cycles, args.time_limit)
    print(report.summary(), flush=True)
    return 1 if report else 0


if __name__ == "__main__":
    sys.exit(main())
