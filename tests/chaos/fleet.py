"""drakit on the chaos node run the way its DaemonSet runs it: one instance (a pod UID of
its own); a dead instance is started again in the same pod (same pod UID) after a delay, as
the kubelet restarts a container; a rolling update starts a new instance (a new pod UID)
next to the old one and stops the old one once the new one is ready (``maxSurge: 1``).

Every exit the fleet did not cause is recorded (:class:`SelfExit`, with the log tail); three
in a row with no ready instance between them is a crash loop.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from drakit.plugin.testing.real.node import DrakitProcess, RealNode

#: Seconds before an instance that exited by itself is started again, by exits in a row.
SELF_EXIT_BACKOFF = (1.0, 2.0, 4.0, 8.0, 10.0)
CRASH_LOOP = 3


@dataclass
class SelfExit:
    """An exit of drakit the fleet did not cause."""

    at: float
    name: str
    returncode: int | None
    log_tail: str


class DrakitFleet:
    """The drakit instances on ``node`` (driver ``driver``, command-line ``args``)."""

    def __init__(self, node: RealNode, args: Sequence[str], driver: str,
                 clock: Callable[[], float], log: Callable[[str], None]) -> None:
        self.node = node
        self.args = list(args)
        self.driver = driver
        self.clock = clock
        self.log = log
        self.instances: list[DrakitProcess] = []
        self.lock = threading.RLock()
        self.self_exits: list[SelfExit] = []
        #: (run clock, what) of each crash loop: CRASH_LOOP exits in a row, none ready between
        self.crash_loops: list[tuple[float, str]] = []
        self.starts = 0
        self._serial = 0
        self._expected: set[int] = set()     # pids the fleet killed or stopped
        self._restart_at: dict[str, float] = {}
        self._exits_in_row = 0
        self._stopped: set[int] = set()       # pids under SIGSTOP
        #: Every instance ever started (stopped ones too), for their logs.
        self.history: list[DrakitProcess] = []

    # ------------------------------------------------------------------ instances

    def _new(self) -> DrakitProcess:
        self._serial += 1
        proc = self.node.start_drakit(self.args, driver=self.driver,
                                      name=f"drakit-{self._serial}", pod_uid=str(uuid.uuid4()),
                                      wait_registered=False)
        self.instances.append(proc)
        self.history.append(proc)
        self.starts += 1
        self.log(f"fleet: started {proc.name} (pid {proc.pid})")
        return proc

    def start(self, timeout: float = 90.0) -> DrakitProcess:
        with self.lock:
            proc = self._new()
        proc.wait_ready(timeout)
        return proc

    def newest(self) -> DrakitProcess | None:
        with self.lock:
            return self.instances[-1] if self.instances else None

    # ------------------------------------------------------------------ faults

    def kill(self, delay: float) -> str:
        """SIGKILL the newest instance; :meth:`supervise` starts it again ``delay`` seconds
        later."""
        with self.lock:
            proc = self.newest()
            if proc is None or not proc.alive():
                return "no live instance"
            self._expected.add(proc.pid)
            self._stopped.discard(proc.pid)
            proc.kill()
            self._restart_at[proc.name] = self.clock() + delay
            return f"{proc.name} pid {proc.pid}"

    def rolling_update(self, timeout: float = 90.0) -> str:
        """A new instance (new pod UID) next to the old ones; once it is ready (or after
        ``timeout`` seconds), the old ones get SIGTERM."""
        with self.lock:
            old = [p for p in self.instances]
            new = self._new()
        ready = True
        try:
            new.wait_ready(timeout)
        except Exception as e:
            ready = False
            self.log(f"fleet: {new.name} not ready after {timeout:.0f}s: {str(e)[:300]}")
        with self.lock:
            for p in old:
                if p.alive():
                    self._expected.add(p.pid)
                    if p.pid in self._stopped:
                        os.kill(p.pid, signal.SIGCONT)
                        self._stopped.discard(p.pid)
                    p.stop()
                self._retire(p)
        return f"{new.name} replaced {', '.join(p.name for p in old)}" + (
            "" if ready else " (new instance not ready in time)")

    def pause(self) -> int | None:
        """SIGSTOP the newest live instance; its pid (for :meth:`resume`) or None."""
        with self.lock:
            proc = self.newest()
            if proc is None or not proc.alive():
                return None
            os.kill(proc.pid, signal.SIGSTOP)
            self._stopped.add(proc.pid)
            return proc.pid

    def resume(self, pid: int) -> None:
        with self.lock:
            if pid in self._stopped:
                self._stopped.discard(pid)
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGCONT)

    def _retire(self, proc: DrakitProcess) -> None:
        if proc in self.instances:
            self.instances.remove(proc)
        self.node.forget_drakit(proc)
        self._restart_at.pop(proc.name, None)

    # ------------------------------------------------------------------ supervision

    def supervise(self) -> None:
        """One round: record exits the fleet did not cause, start dead instances again when
        their delay has passed, and reset the crash-loop count once an instance is ready."""
        with self.lock:
            now = self.clock()
            for proc in list(self.instances):
                if proc.alive():
                    continue
                pid = proc.pid
                if pid not in self._expected and proc.name not in self._restart_at:
                    rc = proc.returncode
                    self.self_exits.append(SelfExit(now, proc.name, rc, proc.log(40)))
                    self._exits_in_row += 1
                    backoff = SELF_EXIT_BACKOFF[min(self._exits_in_row - 1,
                                                    len(SELF_EXIT_BACKOFF) - 1)]
                    self._restart_at[proc.name] = now + backoff
                    self.log(f"fleet: {proc.name} exited by itself (rc {rc}); restart in "
                             f"{backoff:.0f}s; log tail:\n{proc.log(15)}")
                    if self._exits_in_row >= CRASH_LOOP:
                        self.crash_loops.append((now, f"{proc.name}: {self._exits_in_row} "
                                                      f"exits in a row, last rc {rc}"))
                if now >= self._restart_at.get(proc.name, float("inf")):
                    self._restart_at.pop(proc.name, None)
                    self._expected.discard(pid)
                    proc.start()
                    self.starts += 1
                    self.log(f"fleet: restarted {proc.name} (pid {proc.pid})")
            if self._exits_in_row and any(p.alive() and p.readyz()[0] == 200
                                          for p in self.instances):
                self._exits_in_row = 0

    def run(self, stop: threading.Event) -> None:
        while not stop.is_set():
            self.supervise()
            stop.wait(0.5)

    def ready(self) -> bool:
        """True when every instance runs and answers /readyz 200."""
        with self.lock:
            return bool(self.instances) and all(
                p.alive() and p.pid not in self._stopped and p.readyz()[0] == 200
                for p in self.instances)

    def stop_all(self) -> None:
        with self.lock:
            for pid in list(self._stopped):
                self.resume(pid)
            for p in self.instances:
                if p.alive():
                    self._expected.add(p.pid)
                    p.stop()
