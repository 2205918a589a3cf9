"""One policy for the agent's background work: publish, health, hot-plug, status, orphan
sweeps, re-discovery and the ResourceSlice watches are all guarded the same way.

An error of a round is logged (its traceback once per distinct error, later repeats on one
line) and reported as ``events.background_error(work, error, severity)``; the work goes on
with its next round (loops that schedule their own retries, e.g. with backoff, report through
:meth:`Supervisor.report`). An error of a *fatal* class (the agent's owner decides which: a
checkpoint that cannot be written, ``--strict`` validation), and any error that escapes a
loop's thread (the loop is gone), ends the work and calls ``on_fatal(work, error)`` once,
which stops the agent with a non-zero exit and a message naming the work and the error
(``drakit run``; the DaemonSet's pod then shows the restart and the message).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

from drakit.plugin.events import Events, Severity

log = logging.getLogger("drakit.plugin.background")

OnFatal = Callable[[str, BaseException], None]

#: The background work of ``drakit run``, by the name its errors are reported under.
WORKS = ("publish", "status", "health-refresh", "orphan-sweep", "rescan", "hot-plug",
         "slice-watch-local", "slice-watch-remote", "slice-watch-idle", "node-watch",
         "registration-watch")


class Supervisor:
    """Runs background work under the policy of the module docstring. ``fatal``: the error
    classes that stop the agent; ``on_fatal(work, error)``: called once, for the first."""

    def __init__(self, events: Events | None = None,
                 fatal: tuple[type[BaseException], ...] = (),
                 on_fatal: OnFatal | None = None) -> None:
        self.events = events if events is not None else Events()
        self.fatal = fatal
        self.on_fatal = on_fatal
        self._seen: dict[str, tuple[type[BaseException], str]] = {}
        self._lock = threading.Lock()
        #: (work, error) of the first fatal error; None while there was none
        self.failed: tuple[str, BaseException] | None = None

    def guard(self, work: str, step: Callable[[], Any]) -> bool:
        """Run one round of ``work``; False when it failed fatally (stop the work)."""
        try:
            step()
        except Exception as e:
            return self.report(work, e)
        self.succeeded(work)
        return True

    def succeeded(self, work: str) -> None:
        """A round of ``work`` went well: its next error is logged with its traceback."""
        with self._lock:
            self._seen.pop(work, None)

    def loop(self, work: str, step: Callable[[], Any], every: Callable[[], float],
             stop: threading.Event) -> Callable[[], None]:
        """A thread target: ``step`` every ``every()`` seconds until ``stop`` is set or a
        round fails fatally."""
        def run() -> None:
            while not stop.wait(every()):
                if not self.guard(work, step):
                    return
        return self.thread(work, run)

    def thread(self, work: str, target: Callable[[], Any]) -> Callable[[], None]:
        """``target`` (a loop that handles its rounds' errors itself) as a thread target:
        an error escaping it ends the loop, so it is fatal to the agent."""
        def run() -> None:
            try:
                target()
            except BaseException as e:  # the loop is gone: the agent cannot go on without it
                self._fatal(work, e, "its loop ended")
        return run

    def report(self, work: str, error: BaseException, *, retry_in: float | None = None,
               trace: bool = True) -> bool:
        """A round of ``work`` failed with ``error``: log and report it; False when it is
        fatal (``on_fatal`` has been called; stop the work). ``retry_in``: seconds until
        the work's own next attempt (said in the line); ``trace=False`` for errors whose
        message says all (API errors), never with a traceback."""
        if isinstance(error, self.fatal):
            self._fatal(work, error, "fatal")
            return False
        key = (type(error), str(error))
        with self._lock:
            repeated = self._seen.get(work) == key
            self._seen[work] = key
        again = f"; again in {retry_in:.1f}s" if retry_in is not None else ""
        if repeated:
            log.error("%s failed again: %s: %s%s", work, type(error).__name__, error, again)
        else:
            log.error("%s failed: %s: %s%s", work, type(error).__name__, error, again,
                      exc_info=error if trace else None)
        self.events.background_error(work, error, Severity.ERROR)
        return True

    def _fatal(self, work: str, error: BaseException, how: str) -> None:
        log.critical("%s: %s: %s: %s; the agent stops", work, how, type(error).__name__, error,
                     exc_info=error)
        self.events.background_error(work, error, Severity.FATAL)
        with self._lock:
            first = self.failed is None
            if first:
                self.failed = (work, error)
        if first and self.on_fatal is not None:
            self.on_fatal(work, error)
