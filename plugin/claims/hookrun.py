"""One claim's vendor hooks on a worker of their own, bounded by the kubelet call's deadline.

A call of several claims waits for each claim's hooks only until the call's deadline: a hook
that never returns fails its own claim (the error names the plugin, the hook and the device,
and says it is still running), never the other claims of the call. The claim stays in single
flight until its hook ends, so a retry gets the same answer; when the hook ends, its
``on_late`` continuation (run on the worker) records or rolls back what it did.

Workers are daemon threads kept for reuse: a hook stuck forever holds its worker, never the
process's exit (``drakit run`` ends within the gRPC grace and says which hooks were still
running).
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable
from typing import Any

#: Idle workers kept for the next claims (a busy node runs few claims at a time).
IDLE_WORKERS = 8


class HookProgress:
    """Which hook of a claim is running: ``plugin``, ``hook`` and ``device``, set by the
    code that calls the hooks just before each call."""

    __slots__ = ("device", "hook", "plugin", "since")

    def __init__(self) -> None:
        self.plugin = ""
        self.hook = ""
        self.device = ""
        self.since = time.monotonic()

    def now(self, plugin: str, hook: str, device: str) -> None:
        self.plugin, self.hook, self.device = plugin, hook, device
        self.since = time.monotonic()

    def clear(self) -> None:
        """No hook is running any more (the work goes on with its own steps)."""
        self.plugin = self.hook = self.device = ""

    def failed(self, claim: str, error: BaseException) -> str | None:
        """The claim's error when ``error`` came out of the running hook; None when no hook
        was running (the error is the claim's own)."""
        if not self.hook:
            return None
        return (f"{claim}: the {self.hook} hook of plugin {self.plugin} for device "
                f"{self.device} failed: {type(error).__name__}: {error}")

    def still_running(self, claim: str) -> str:
        """The claim's error while the hook runs past a call's deadline."""
        return f"{claim}: {self.describe()} is still running; retry"

    def describe(self) -> str:
        """``the <hook> hook of plugin <plugin> for device <pool>/<device> (<n>s)``; once
        the hooks are done, ``its prepare past the vendor hooks``."""
        if not self.hook:
            return "its prepare past the vendor hooks"
        return (f"the {self.hook} hook of plugin {self.plugin} for device {self.device} "
                f"({time.monotonic() - self.since:.0f}s)")


class HookRun:
    """One claim's work on a worker: :meth:`wait` until a deadline; a run not done by then
    is *late*: its result goes to ``on_late`` (on the worker) instead of the caller."""

    def __init__(self, work: Callable[[HookProgress], Any], claim: str = "") -> None:
        self.work = work
        self.claim = claim  # ``ResourceClaim <namespace>/<name>``, for messages
        self.progress = HookProgress()
        self.result: Any = None
        self.error: BaseException | None = None
        self._done = threading.Event()
        self._lock = threading.Lock()
        self._late: Callable[[HookRun], None] | None = None
        self._finished = False

    def run(self) -> None:
        try:
            self.result = self.work(self.progress)
        except BaseException as e:
            self.error = e
        with self._lock:
            self._finished = True
            late = self._late
        self._done.set()
        if late is not None:
            late(self)

    def wait(self, deadline: float, on_late: Callable[[HookRun], None],
             on_overdue: Callable[[], None] | None = None) -> bool:
        """True when the work finished by ``deadline`` (monotonic seconds); else False:
        ``on_overdue()`` is called at once (before ``on_late`` can run) and ``on_late(self)``
        runs on the worker once the work finishes."""
        if self._done.wait(max(0.0, deadline - time.monotonic())):
            return True
        with self._lock:
            if self._finished:
                return True
            if on_overdue is not None:
                on_overdue()
            self._late = on_late
        return False


class HookWorkers:
    """Daemon worker threads for :class:`HookRun`: an idle one takes a run, else a new one
    starts; at most :data:`IDLE_WORKERS` wait for work. :attr:`busy` counts runs in
    progress; :meth:`running` says which (hooks still running at shutdown)."""

    def __init__(self) -> None:
        self._queue: queue.SimpleQueue[HookRun] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._idle = 0
        self._busy = 0
        self._started = 0
        self._runs: set[HookRun] = set()

    @property
    def busy(self) -> int:
        with self._lock:
            return self._busy

    def running(self) -> list[str]:
        """Each run in progress: ``<claim>: the <hook> hook of plugin <p> for device
        <pool>/<device> (<n>s)``, longest-running first."""
        with self._lock:
            runs = sorted(self._runs, key=lambda r: r.progress.since)
        return [f"{r.claim}: {r.progress.describe()}" for r in runs]

    def submit(self, work: Callable[[HookProgress], Any], claim: str = "") -> HookRun:
        run = HookRun(work, claim)
        with self._lock:
            self._busy += 1
            self._runs.add(run)
            spawn = self._idle == 0
            if not spawn:
                self._idle -= 1
            else:
                self._started += 1
                name = f"claim-hooks-{self._started}"
        self._queue.put(run)
        if spawn:
            threading.Thread(target=self._worker, name=name, daemon=True).start()
        return run

    def _worker(self) -> None:
        while True:
            run = self._queue.get()
            run.run()  # never raises: the work's error is kept on the run
            with self._lock:
                self._busy -= 1
                self._runs.discard(run)
                if self._idle >= IDLE_WORKERS:
                    return
                self._idle += 1
